// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"fmt"
	"strconv"
	"strings"
)

// dataDirLockName is the file in --data-dir whose lock says which bridge
// uses the directory; it holds that bridge's PID.
const dataDirLockName = "v2bridge.lock"

// dataDirInUse is the error for a --data-dir another process holds; pid is
// the holder's as its lock file says, if it says one.
func dataDirInUse(dir, pid string) error {
	who := "another process"
	if n, err := strconv.Atoi(strings.TrimSpace(pid)); err == nil && n > 0 {
		who = fmt.Sprintf("another process (pid %d)", n)
	}
	return fmt.Errorf("--data-dir %s is in use by %s: stop it or give another --data-dir", dir, who)
}
