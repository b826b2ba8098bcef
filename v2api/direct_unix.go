// SPDX-License-Identifier: Apache-2.0

//go:build unix

package v2api

import (
	"net"
	"syscall"
)

// directReader is c's descriptor when the reader may read it directly: c is
// a plain socket (TCP, Unix), not TLS or a wrapper that hides it.
func directReader(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// readReady waits until the connection has something to read and reads what
// has come (nothing, with the client gone) into a buffer from rawBufs, taken
// only once there is something to read: a waiting reader holds no buffer.
func (dc *detachedConn) readReady() (*[]byte, []byte, error) {
	var buf *[]byte
	var n int
	var rerr error
	err := dc.rc.Read(func(fd uintptr) bool {
		buf = rawBufs.Get().(*[]byte)
		for {
			n, rerr = syscall.Read(int(fd), *buf)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN { // nothing yet: wait, holding no buffer
			rawBufs.Put(buf)
			buf = nil
			return false
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	if err != nil || n < 0 {
		n = 0
	}
	if buf == nil {
		return nil, nil, err
	}
	return buf, (*buf)[:n], err
}

// writeNow writes what of b the connection takes without waiting, and
// returns how much that was.
func (dc *detachedConn) writeNow(b []byte) (int, error) {
	var n int
	var werr error
	err := dc.rc.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), b)
			if werr != syscall.EINTR {
				return true
			}
		}
	})
	if err == nil {
		err = werr
	}
	return max(n, 0), err
}
