// SPDX-License-Identifier: Apache-2.0

//go:build unix && !linux

package v2bridgetest

import "syscall"

// memberSysProcAttr: without Linux's parent-death signal, a member process
// goes away when it sees its stdin close (unless it is frozen then).
func memberSysProcAttr() *syscall.SysProcAttr { return nil }
