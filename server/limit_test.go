// SPDX-License-Identifier: Apache-2.0

package server

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// hidingListener hands out connections that hide their socket, as a TLS
// listener's do.
type hidingListener struct{ net.Listener }

func (l hidingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return struct{ net.Conn }{c}, nil
}

// The connection limit shows a plain socket's descriptor through (the v2
// API reads detached watches' connections directly), and nothing the
// connection hides.
func TestConnectionLimitKeepsWhatTheConnectionShows(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wrap    func(net.Listener) net.Listener
		wantRaw bool
	}{
		{"plain socket", func(l net.Listener) net.Listener { return l }, true},
		{"hidden socket", func(l net.Listener) net.Listener { return hidingListener{l} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l := newLimitListener(tc.wrap(ln), 1)
			defer l.Close()
			_ = dial(t, ln.Addr().String())
			c, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			sc, ok := c.(syscall.Conn)
			if ok != tc.wantRaw {
				t.Fatalf("syscall.Conn %v, want %v", ok, tc.wantRaw)
			}
			if ok {
				if _, err := sc.SyscallConn(); err != nil {
					t.Fatal(err)
				}
			}
			if _, ok := c.(interface{ CloseWrite() error }); ok {
				t.Fatal("CloseWrite shows through, unlike netutil's limit")
			}
		})
	}
}

// A connection frees its place when it closes (once, however often it is
// closed), and a closed limit accepts no more.
func TestConnectionLimitFreesAPlaceOnClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(ln, 1)
	accepted := make(chan net.Conn, 3)
	errc := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				errc <- err
				return
			}
			accepted <- c
		}
	}()
	next := func() net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(3 * time.Second):
			t.Fatal("no connection accepted")
			return nil
		}
	}
	addr := ln.Addr().String()
	_, _ = dial(t, addr), dial(t, addr)
	first := next()
	select {
	case <-accepted:
		t.Fatal("a connection beyond the limit was accepted")
	case <-time.After(100 * time.Millisecond):
	}
	_ = first.Close()
	_ = first.Close()
	second := next()
	_ = second.Close()
	_ = l.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
}
