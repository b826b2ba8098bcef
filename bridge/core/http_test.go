// SPDX-License-Identifier: Apache-2.0

package core

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// serveLimited serves h within l on a free loopback port until the test ends.
func serveLimited(t *testing.T, h http.Handler, l HTTPLimits) string {
	t.Helper()
	srv, dl := NewHTTPServer(listenLoopback(t), h, l, nil)
	serveUntilCleanup(t, srv, dl, func(ctx context.Context) { _ = dl.Wait(ctx) })
	return dl.Addr().String()
}

// listenLoopback listens on a free loopback port.
func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// serveUntilCleanup serves srv on ln until the test ends, then shuts it
// down and runs after (if any) within the shutdown's deadline.
func serveUntilCleanup(t *testing.T, srv *http.Server, ln net.Listener, after func(context.Context)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		if after != nil {
			after(ctx)
		}
	})
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedWithin reports whether the server closes c (a read returns EOF or
// a reset) within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	ne, timeout := err.(net.Error)
	return !timeout || !ne.Timeout()
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	_, _ = fmt.Fprintln(w, "ok")
})

func TestIdleKeepAliveConnectionsAreClosed(t *testing.T) {
	if !closedWhenIdle(t, serveLimited(t, ok, HTTPLimits{IdleTimeout: 200 * time.Millisecond}), "/") {
		t.Fatal("an idle keep-alive connection was kept past the idle timeout")
	}
}

// closedWhenIdle GETs path on a new connection to the server at addr, which
// has a short idle timeout, sends nothing more, and reports whether the
// server closes the connection within 5 s.
func closedWhenIdle(t *testing.T, addr, path string) bool {
	t.Helper()
	c := dial(t, addr)
	_, _ = fmt.Fprint(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %v %v", path, resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return closedWithin(c, 5*time.Second)
}

// trickle writes n bytes to c, one every 100 ms, until the function it
// returns is called (which waits for the writer to stop).
func trickle(c net.Conn, n int) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for range n {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := c.Write([]byte("v")); err != nil {
				return
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

func TestSlowBodyIsCutOff(t *testing.T) {
	addr := serveLimited(t, ok, HTTPLimits{BodyReadTimeout: 300 * time.Millisecond})
	c := dial(t, addr)
	_, _ = fmt.Fprint(c, "PUT /v2/keys/a HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n")
	defer trickle(c, 100)()
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a slow body: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("status %d, want 408", resp.StatusCode)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cut off after %v", d)
	}
	if !closedWithin(c, 5*time.Second) {
		t.Error("the connection of a cut-off body stayed open")
	}
}

func TestOversizedBodyIsCutAtTheCap(t *testing.T) {
	var got int
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = len(b)
		http.Error(w, "too large", http.StatusBadRequest)
	})
	addr := serveLimited(t, h, HTTPLimits{MaxBodyBytes: 10})
	resp, err := http.Post("http://"+addr+"/v2/keys/a", "application/x-www-form-urlencoded",
		strings.NewReader("value="+strings.Repeat("x", 100)))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got != 10 || resp.StatusCode != http.StatusBadRequest || !resp.Close {
		t.Errorf("handler read %d bytes, answered %d, close %v; want 10, the handler's 400, and the connection closed",
			got, resp.StatusCode, resp.Close)
	}
}

// A parked watch (a long-poll that outlives every timeout) is never cut,
// whether its request had a body or not.
func TestParkedRequestOutlivesEveryTimeout(t *testing.T) {
	l := HTTPLimits{ReadHeaderTimeout: 100 * time.Millisecond, BodyReadTimeout: 100 * time.Millisecond,
		IdleTimeout: 100 * time.Millisecond}
	parked := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(200)
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
			return // cut: the client sees no body
		case <-time.After(600 * time.Millisecond):
		}
		_, _ = fmt.Fprintln(w, "event")
	})
	addr := serveLimited(t, parked, l)
	for _, body := range []string{"", "wait=true"} {
		method := "GET"
		if body != "" {
			method = "POST"
		}
		req, _ := http.NewRequest(method, "http://"+addr+"/v2/keys/a?wait=true", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || string(b) != "event\n" {
			t.Errorf("%s parked request: %q %v; want the event after every timeout passed", method, b, err)
		}
	}
}

func TestConnectionsBeyondTheCapWait(t *testing.T) {
	beyondTheCapWaits(t, serveLimited(t, ok, HTTPLimits{MaxConnections: 1, IdleTimeout: time.Minute}), "/")
}

// beyondTheCapWaits checks, on a server at addr that serves one connection
// at a time, that a second connection's GET of path waits until the first
// connection closes, and is served then.
func beyondTheCapWaits(t *testing.T, addr, path string) {
	t.Helper()
	get := "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n"
	first := dial(t, addr)
	_, _ = fmt.Fprint(first, get)
	if resp, err := http.ReadResponse(bufio.NewReader(first), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first: %v %v", resp, err)
	}
	second := dial(t, addr) // accepted by the kernel, not served
	_, _ = fmt.Fprint(second, get)
	_ = second.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	br := bufio.NewReader(second)
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("a connection beyond the cap was served")
	}
	_ = first.Close()
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the waiting connection was not served once the first closed: %v %v", resp, err)
	}
}

// Idle connections are closed and their goroutines (and buffers) go away.
func TestIdleConnectionsGiveBackTheirGoroutines(t *testing.T) {
	addr := serveLimited(t, ok, HTTPLimits{IdleTimeout: 300 * time.Millisecond})
	before := runtime.NumGoroutine()
	const n = 200
	for i := 0; i < n; i++ {
		c := dial(t, addr)
		_, _ = fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %v", i, resp, err)
		}
	}
	if held := runtime.NumGoroutine() - before; held < n/2 {
		t.Fatalf("only %d goroutines for %d open connections: the test does not see them", held, n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine()-before > 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still held %v after the idle timeout", runtime.NumGoroutine()-before, 10*time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A request head that ends in a bare LF gets net/http's answer at once, not
// after the header timeout.
func TestHeadEndingInABareLFIsAnsweredAtOnce(t *testing.T) {
	addr := serveLimited(t, ok, HTTPLimits{ReadHeaderTimeout: 10 * time.Second})
	c := dial(t, addr)
	start := time.Now()
	_, _ = fmt.Fprint(c, "GET /v2/keys/a HTTP/1.1\r\nHost: x\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within 5 s (the header timeout is 10 s): %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "ok\n" {
		t.Fatalf("answer %d %q after %v; want net/http's 200 from the handler", resp.StatusCode, b, time.Since(start))
	}
}
