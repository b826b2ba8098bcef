// SPDX-License-Identifier: Apache-2.0

package server

import (
	"net"
	"sync"
	"syscall"
)

// limitListener caps the connections open at once from a listener, as
// netutil.LimitListener does: a connection counts from Accept until it is
// closed, and further ones wait in the accept queue. Unlike netutil's, its
// connections keep the descriptor of a plain socket (syscall.Conn), which a
// detached watch's reader reads directly (v2api). Nothing else of the
// connection shows through: CloseWrite stays hidden, as with netutil, so
// net/http closes these connections as it always has.
type limitListener struct {
	net.Listener
	sem  chan struct{} // one value per connection counted
	done chan struct{} // closed by Close
	once sync.Once
}

func newLimitListener(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		// Closed: the Accept below fails at once; anything a faulty
		// listener still returns is closed unserved.
		for {
			c, err := l.Listener.Accept()
			if err != nil {
				return nil, err
			}
			_ = c.Close()
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	lc := &limitConn{Conn: c, l: l}
	if sc, ok := c.(syscall.Conn); ok {
		return &limitSysConn{limitConn: lc, sc: sc}, nil
	}
	return lc, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.done) })
	return err
}

// limitConn is a counted connection: its Close frees its place.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.l.sem })
	return err
}

// limitSysConn is a counted plain socket.
type limitSysConn struct {
	*limitConn
	sc syscall.Conn
}

func (c *limitSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }
