// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package soak

import "syscall"

func childSysProcAttr() *syscall.SysProcAttr { return nil }
