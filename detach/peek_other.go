// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package detach

import (
	"errors"
	"os"
	"syscall"
)

// Elsewhere than on Unix nothing is parked, and Gone watches nothing.
const canPeek = false

func peek(syscall.RawConn) readiness { return woken }

func dupFile(syscall.RawConn) (*os.File, error) {
	return nil, errors.New("not supported on this system")
}
