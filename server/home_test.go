// SPDX-License-Identifier: Apache-2.0

package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// serveHome serves h as Bridge.Serve does (the Home's reader taking key
// requests) within l, and counts in onReader the requests it served that
// did not come through net/http.
func serveHome(t *testing.T, h http.Handler, l HTTPLimits, onReader *atomic.Int64) string {
	t.Helper()
	return serveHomeWith(t, h, Config{HTTP: l}, onReader)
}

// serveHomeWith is serveHome with the whole server configuration.
func serveHomeWith(t *testing.T, h http.Handler, cfg Config, onReader *atomic.Int64) string {
	t.Helper()
	ln := listenLoopback(t)
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(http.ServerContextKey) == nil { // not from net/http
			onReader.Add(1)
		}
		h.ServeHTTP(w, r)
	})
	srv, home := newServer(ln, counted, cfg, nil)
	serveUntilCleanup(t, srv, home, func(ctx context.Context) {
		if err := home.Wait(ctx); err != nil {
			t.Errorf("the Home's connections outlived the server: %v", err)
		}
	})
	return ln.Addr().String()
}

const formHead = "PUT /v2/keys/a HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"

// The reader serves a plain PUT itself, and keeps the listener's limits: a
// body too slow for the body-read timeout, or as large as the cap, goes to
// net/http, which answers it as it answers such a body; a connection idle
// for the idle timeout closes; connections beyond the cap wait.
func TestKeyRequestsOnTheReaderKeepTheLimits(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		onReader int64
	}{
		{"two plain PUTs", Config{}, 2},
		{"two plain PUTs with KeepKeysInHTTPServer (--keys-detach=false): net/http's", Config{KeepKeysInHTTPServer: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var onReader atomic.Int64
			addr := serveHomeWith(t, ok, tc.cfg, &onReader)
			c := dial(t, addr)
			br := bufio.NewReader(c)
			for range 2 {
				fmt.Fprint(c, formHead+"Content-Length: 7\r\n\r\nvalue=v")
				resp, err := http.ReadResponse(br, nil)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("PUT: %v %v", resp, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
			}
			if n := onReader.Load(); n != tc.onReader {
				t.Fatalf("%d served by the reader, want %d", n, tc.onReader)
			}
		})
	}
	t.Run("a slow body", func(t *testing.T) {
		var onReader atomic.Int64
		addr := serveHome(t, ok, HTTPLimits{BodyReadTimeout: 300 * time.Millisecond}, &onReader)
		c := dial(t, addr)
		fmt.Fprint(c, formHead+"Content-Length: 100\r\n\r\nvalue=")
		defer trickle(c, 100)()
		start := time.Now()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("a slow body: %v %v, want net/http's 408", resp, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("cut off after %v", d)
		}
		if !closedWithin(c, 5*time.Second) || onReader.Load() != 0 {
			t.Errorf("the connection of a cut-off body stayed open, or the reader served it")
		}
	})
	t.Run("a body of the cap", func(t *testing.T) {
		var onReader atomic.Int64
		var got atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got.Store(int64(len(b)))
			http.Error(w, "too large", http.StatusBadRequest)
		})
		addr := serveHome(t, h, HTTPLimits{MaxBodyBytes: 10}, &onReader)
		c := dial(t, addr)
		fmt.Fprint(c, formHead+"Content-Length: 10\r\n\r\nvalue=vvvv")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Load() != 10 || resp.StatusCode != http.StatusBadRequest || !resp.Close || onReader.Load() != 0 {
			t.Errorf("handler read %d bytes, answered %d, close %v, on the reader %d; want 10, its 400, closed, by net/http",
				got.Load(), resp.StatusCode, resp.Close, onReader.Load())
		}
	})
	t.Run("the idle timeout", func(t *testing.T) {
		var onReader atomic.Int64
		addr := serveHome(t, ok, HTTPLimits{IdleTimeout: 200 * time.Millisecond}, &onReader)
		if !closedWhenIdle(t, addr, "/v2/keys/a") || onReader.Load() != 1 {
			t.Fatal("an idle connection on the reader was kept past the idle timeout")
		}
	})
	t.Run("the connection cap", func(t *testing.T) {
		var onReader atomic.Int64
		addr := serveHome(t, ok, HTTPLimits{MaxConnections: 1, IdleTimeout: time.Minute}, &onReader)
		beyondTheCapWaits(t, addr, "/v2/keys/a")
		if onReader.Load() != 2 {
			t.Fatalf("%d served by the reader, want 2", onReader.Load())
		}
	})
}
