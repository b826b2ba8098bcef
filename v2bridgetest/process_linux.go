// SPDX-License-Identifier: Apache-2.0

package v2bridgetest

import "syscall"

// memberSysProcAttr has the kernel kill a member process when the test
// process dies, even while the member is frozen.
func memberSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
