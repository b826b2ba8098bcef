// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package detach

import (
	"errors"
	"os"
	"syscall"
)

// Elsewhere than on Linux (which tells a client that left from one that
// sent more, POLLRDHUP) nothing is parked, and Gone watches nothing.
const canPeek = false

func peek(syscall.RawConn, bool) readiness { return woken }

func dupFile(syscall.RawConn) (*os.File, error) {
	return nil, errors.New("not supported on this system")
}
