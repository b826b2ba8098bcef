// SPDX-License-Identifier: Apache-2.0

package detach

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

const canPeek = true

// peek waits until rc's socket is readable and says why, leaving what came
// unread; it returns woken when rc's deadline goes off or it is closed.
// With untilLeft, bytes the client sends (a pipelined request) do not end
// the wait: only the client closing its side or the connection failing
// does, seen through the bytes waiting unread (POLLRDHUP).
func peek(rc syscall.RawConn, untilLeft bool) readiness {
	saw := woken
	var b [1]byte
	err := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		switch {
		case err == syscall.EAGAIN || err == syscall.EINTR:
			return false // nothing yet: wait for readiness
		case n > 0:
			if !untilLeft {
				saw = sent
				return true
			}
			if peerClosed(fd) {
				saw = left
				return true
			}
			// Wait for the next change: more bytes, the client's FIN
			// or a reset each wake the poller again.
			return false
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

// peerClosed reports whether the client closed its side of fd's socket (or
// it failed), whatever bytes still wait to be read.
func peerClosed(fd uintptr) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	n, err := unix.Poll(pfd, 0)
	return err == nil && n > 0 && pfd[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
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
