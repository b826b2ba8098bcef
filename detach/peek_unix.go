// SPDX-License-Identifier: Apache-2.0

//go:build unix

package detach

import (
	"os"
	"syscall"
)

const canPeek = true

// peek waits until rc's socket is readable and says why, leaving what came
// unread; it returns woken when rc's deadline goes off or it is closed.
func peek(rc syscall.RawConn) readiness {
	saw := woken
	var b [1]byte
	err := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		switch {
		case err == syscall.EAGAIN || err == syscall.EINTR:
			return false // nothing yet: wait for readiness
		case n > 0:
			saw = sent
		default: // 0: the client closed its side; or the connection failed
			saw = left
		}
		return true
	})
	if err != nil {
		return woken
	}
	return saw
}

// dupFile is a duplicate of rc's descriptor as a file of its own: it shares
// the socket, is non-blocking (so pollable, with deadlines) and closes on
// exec.
func dupFile(rc syscall.RawConn) (*os.File, error) {
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) {
		syscall.ForkLock.RLock()
		fd, derr = syscall.Dup(int(s))
		if derr == nil {
			syscall.CloseOnExec(fd)
		}
		syscall.ForkLock.RUnlock()
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(fd), "detach-peek"), nil
}
