// SPDX-License-Identifier: Apache-2.0

package soak

import "syscall"

// childSysProcAttr has the kernel kill the bridge when the test process
// dies (a watchdog exit included).
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
