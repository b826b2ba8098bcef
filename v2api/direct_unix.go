// SPDX-License-Identifier: Apache-2.0

//go:build unix

package v2api

import (
	"net"
	"syscall"
)

// directIO reads and writes a plain socket's descriptor directly. Its
// callbacks are made once per connection: one made per call would be an
// allocation per request.
type directIO struct {
	rc syscall.RawConn

	// The reader's: readFn reads into rbuf (taken from rawBufs only once
	// there is something to read), rn and rerr are what it got.
	readFn func(fd uintptr) bool
	rbuf   *[]byte
	rn     int
	rerr   error

	// writeFn writes wb without waiting; wn and werr are what it did.
	// Writes never overlap: the reader writes only the answers it serves
	// itself, while no watch waits; a waiting watch's waiter and the head
	// flusher write under detachedConn.mu.
	writeFn func(fd uintptr) bool
	wb      []byte
	wn      int
	werr    error
}

// newDirectIO returns c's direct reader and writer when c is a plain socket
// (TCP, Unix), not TLS or a wrapper that hides it; nil otherwise.
func newDirectIO(c net.Conn) *directIO {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	d := &directIO{rc: rc}
	d.readFn = d.read
	d.writeFn = d.write
	return d
}

func (d *directIO) read(fd uintptr) bool {
	d.rbuf = rawBufs.Get().(*[]byte)
	for {
		d.rn, d.rerr = syscall.Read(int(fd), *d.rbuf)
		if d.rerr != syscall.EINTR {
			break
		}
	}
	if d.rerr == syscall.EAGAIN { // nothing yet: wait, holding no buffer
		rawBufs.Put(d.rbuf)
		d.rbuf = nil
		return false
	}
	return true
}

func (d *directIO) write(fd uintptr) bool {
	for {
		d.wn, d.werr = syscall.Write(int(fd), d.wb)
		if d.werr != syscall.EINTR {
			return true
		}
	}
}

// readReady waits until the connection has something to read and reads what
// has come (nothing, with the client gone) into a buffer from rawBufs, taken
// only once there is something to read: a waiting reader holds no buffer.
func (d *directIO) readReady() (*[]byte, []byte, error) {
	err := d.rc.Read(d.readFn)
	if err == nil {
		err = d.rerr
	}
	buf, n := d.rbuf, d.rn
	d.rbuf, d.rerr = nil, nil
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
func (d *directIO) writeNow(b []byte) (int, error) {
	d.wb = b
	err := d.rc.Write(d.writeFn)
	if err == nil {
		err = d.werr
	}
	n := d.wn
	d.wb, d.wn, d.werr = nil, 0, nil
	return max(n, 0), err
}
