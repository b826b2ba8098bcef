// SPDX-License-Identifier: Apache-2.0

package detach

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// failingListener fails its first fails Accepts as a process out of file
// descriptors does (EMFILE, which net/http waits out and retries), then
// accepts.
type failingListener struct {
	net.Listener
	fails atomic.Int32 // failures left to give
	calls atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.calls.Add(1)
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestFailedAcceptsGiveBackTheirPlace: an Accept that fails holds no place
// under the connection cap. After more failures than the cap, connections
// up to the cap are served at once, side by side, and the cap still holds
// for the next one.
func TestFailedAcceptsGiveBackTheirPlace(t *testing.T) {
	const maxConns, fails = 2, 5
	h := newWaiter(true)
	var inner *failingListener
	l := serveOn(t, h, maxConns, func(ln net.Listener) net.Listener {
		inner = &failingListener{Listener: ln}
		inner.fails.Store(fails)
		return inner
	})
	// The failures come first: net/http retries after each.
	deadline := time.Now().Add(10 * time.Second)
	for inner.calls.Load() <= fails {
		if time.Now().After(deadline) {
			t.Fatalf("%d Accepts within 10 s, want more than the %d that fail", inner.calls.Load(), fails)
		}
		time.Sleep(time.Millisecond)
	}
	// Both places: one held by a parked wait, the other serving.
	first := dial(t, l)
	first.send(t, waitReq)
	checkHead(t, first.head(t), false)
	waitParked(t, l, 1)
	second := dial(t, l)
	second.send(t, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := second.answer(t); resp.StatusCode != 200 || body != "next /x" {
		t.Fatalf("the second connection: %d %q", resp.StatusCode, body)
	}
	// The cap holds: a third waits until a place is free.
	third := dial(t, l)
	third.send(t, "GET /y HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = third.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := third.r.ReadByte(); err == nil {
		t.Fatal("a connection beyond the cap was served")
	}
	_ = third.SetReadDeadline(time.Now().Add(10 * time.Second))
	_ = second.Close()
	if resp, body := third.answer(t); resp.StatusCode != 200 || body != "next /y" {
		t.Fatalf("the third connection: %d %q", resp.StatusCode, body)
	}
	h.answers <- []byte(`{"action":"set"}`)
	if e := recv(t, h.ends, "end"); e.gone || e.bytes != len(`{"action":"set"}`) {
		t.Fatalf("the parked wait ended %+v", e)
	}
}

// serveOn is serve with the loopback listener wrapped by wrap.
func serveOn(t *testing.T, h http.Handler, maxConns int, wrap func(net.Listener) net.Listener) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(wrap(ln), maxConns)
	srv := &http.Server{Handler: h, ConnContext: l.ConnContext, ConnState: l.ConnState,
		ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		if err := l.Wait(ctx); err != nil {
			t.Errorf("parked requests still running after the listener closed: %v", err)
		}
	})
	return l
}
