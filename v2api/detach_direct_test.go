// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/netutil"
)

// A detached connection on a plain socket is read directly and has its
// waiting watches' heads held back; one behind a wrapper that hides the
// socket (as netutil's connection limit does) is read through the
// connection, and its heads go out at once. Both answer alike.
func detachListeners(t *testing.T) map[string]func() net.Listener {
	return map[string]func() net.Listener{
		"plain socket":  func() net.Listener { return listen(t) },
		"hidden socket": func() net.Listener { return netutil.LimitListener(listen(t), 100) },
	}
}

// wireHead reads a head off br as it is on the wire: the status line and
// the header lines but Date, sorted.
func wireHead(t *testing.T, br *bufio.Reader) (status string, hdr []string) {
	t.Helper()
	status, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
		if !strings.HasPrefix(line, "Date: ") {
			hdr = append(hdr, line)
		}
	}
	slices.Sort(hdr)
	return status, hdr
}

// wireBody reads a chunked body off br as it is on the wire.
func wireBody(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var b strings.Builder
	for !strings.HasSuffix(b.String(), "0\r\n\r\n") {
		c, err := br.ReadByte()
		if err != nil {
			t.Fatalf("body %q: %v", b.String(), err)
		}
		b.WriteByte(c)
	}
	return b.String()
}

// The bytes of a watch's answer are the same whether its event comes before
// the head went out (both in one write) or after, detached or in net/http.
func TestWatchAnswerBytesAreTheSameHoweverTheyAreWritten(t *testing.T) {
	ev := encoded(watchEvent("set", "/dir/a", "1", 7))
	line := eventLine(t, watchEvent("set", "/dir/a", "1", 7))
	wantBody := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(line), line)
	watch := "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"
	var wantHdr []string
	for _, tc := range []struct {
		name      string
		keep      bool // in net/http
		afterHead bool // the event comes once the client has the head
	}{
		{"in net/http", true, true},
		{"detached, event with the head", false, false},
		{"detached, event after the head", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			registered := make(chan *fakeWatch, 2)
			base, home := homeServer(t, &fakeStore{newWatch: func() *fakeWatch {
				w := newFakeWatch(5, 1)
				registered <- w
				return w
			}}, tc.keep)
			c, br := rawConn(t, base)
			for i := range 2 { // the watch that detaches, then one served by the detached reader
				if _, err := io.WriteString(c, watch); err != nil {
					t.Fatal(err)
				}
				var status string
				var hdr []string
				if tc.afterHead {
					status, hdr = wireHead(t, br) // comes without the event
				} else if !tc.keep {
					waitDetached(t, home, 1)
				}
				select {
				case w := <-registered:
					w.events <- ev
				case <-time.After(3 * time.Second):
					t.Fatalf("watch %d did not register", i)
				}
				if !tc.afterHead {
					status, hdr = wireHead(t, br)
				}
				body := wireBody(t, br)
				if status != "HTTP/1.1 200 OK\r\n" || body != wantBody {
					t.Fatalf("watch %d: %q … %q, want 200 and %q", i, status, body, wantBody)
				}
				if !slices.Contains(hdr, "Transfer-Encoding: chunked\r\n") || !slices.Contains(hdr, "X-Etcd-Index: 5\r\n") {
					t.Fatalf("watch %d: head %q, want it chunked with X-Etcd-Index 5", i, hdr)
				}
				if wantHdr == nil {
					wantHdr = hdr
				} else if !slices.Equal(hdr, wantHdr) {
					t.Fatalf("watch %d: head %q, want %q", i, hdr, wantHdr)
				}
			}
		})
	}
}

// A waiting watch's head reaches its client without its event, within the
// time a head is held back.
func TestWaitingWatchHeadComesWithoutItsEvent(t *testing.T) {
	for name, ln := range detachListeners(t) {
		t.Run(name, func(t *testing.T) {
			var watches []*fakeWatch
			base, home := homeServerOn(t, ln(), &fakeStore{newWatch: func() *fakeWatch {
				w := newFakeWatch(5, 1)
				watches = append(watches, w)
				return w
			}})
			c, br := rawConn(t, base)
			watch := "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"
			for i := range 2 {
				if _, err := io.WriteString(c, watch); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil) // returns with the head
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != 200 || resp.Header.Get("X-Etcd-Index") != "5" || home.Detached() != 1 {
					t.Fatalf("watch %d: %d %v, %d detached", i, resp.StatusCode, resp.Header, home.Detached())
				}
				watches[i].events <- encoded(watchEvent("set", "/dir/a", "1", 7))
				if b, err := io.ReadAll(resp.Body); err != nil || !strings.Contains(string(b), `"modifiedIndex":7`) {
					t.Fatalf("watch %d: body %q, %v", i, b, err)
				}
			}
		})
	}
}

// A re-watch whose head does not come in one read (sent in pieces, or
// larger than a direct read takes) is read on and still served detached.
func TestReWatchReadInPiecesIsServedDetached(t *testing.T) {
	head := "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"
	large := "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", 2000) + "\r\n\r\n"
	for _, tc := range []struct {
		name   string
		pieces []string
	}{
		{"in two writes", []string{head[:20], head[20:]}},
		{"a head larger than a direct read", []string{large}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var watches []*fakeWatch
			base, home := homeServer(t, &fakeStore{newWatch: func() *fakeWatch {
				w := newFakeWatch(5, 1)
				watches = append(watches, w)
				return w
			}}, false)
			c, br := rawConn(t, base)
			if _, err := io.WriteString(c, head); err != nil {
				t.Fatal(err)
			}
			waitDetached(t, home, 1)
			watches[0].end()
			if code, _, _ := readAnswer(t, br); code != 200 {
				t.Fatalf("first watch: %d", code)
			}
			waitDetached(t, home, 0)
			for i, p := range tc.pieces {
				if i > 0 {
					time.Sleep(20 * time.Millisecond) // the reader sees the first piece alone
				}
				if _, err := io.WriteString(c, p); err != nil {
					t.Fatal(err)
				}
			}
			waitDetached(t, home, 1) // the re-watch waits, detached
			watches[1].events <- encoded(watchEvent("set", "/dir/a", "1", 7))
			if code, _, body := readAnswer(t, br); code != 200 || !strings.Contains(body, `"modifiedIndex":7`) {
				t.Fatalf("re-watch: %d %q", code, body)
			}
		})
	}
}

// A head that stops coming on a detached connection is cut off at the
// header timeout, as net/http cuts one off.
func TestSlowHeadOnADetachedConnectionIsCutOff(t *testing.T) {
	for name, ln := range detachListeners(t) {
		t.Run(name, func(t *testing.T) {
			first := newFakeWatch(5, 1)
			f := startHome(t, ln(), &fakeStore{newWatch: func() *fakeWatch { return first }},
				func(hc *HomeConfig, _ *Config) { hc.ReadHeaderTimeout = 100 * time.Millisecond })
			c, br := rawConn(t, f.url)
			if _, err := io.WriteString(c, "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			waitDetached(t, f.home, 1)
			first.end()
			if code, _, _ := readAnswer(t, br); code != 200 {
				t.Fatalf("watch: %d", code)
			}
			if _, err := io.WriteString(c, "GET /v2/keys/dir?wait=true HTTP/1.1\r\n"); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("after a head cut short: %v, want the connection closed", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("closed after %v, want about the header timeout", d)
			}
		})
	}
}

// A watch whose head is still held back when the Home closes gets it with
// the empty end.
func TestClosingTheHomeAnswersAWatchWhoseHeadIsHeldBack(t *testing.T) {
	w := newFakeWatch(5, 1)
	f := startHome(t, listen(t), &fakeStore{watch: w})
	c, br := rawConn(t, f.url)
	if _, err := io.WriteString(c, "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, f.home, 1)
	if err := f.shutdown(); err != nil {
		t.Fatal(err)
	}
	if code, hdr, body := readAnswer(t, br); code != 200 || body != "" || hdr.Get("X-Etcd-Index") != "5" {
		t.Fatalf("answer %d %v %q, want the empty end of a watch", code, hdr, body)
	}
	w.waitCancelled(t)
}

// An answer larger than the socket takes at once is written whole, to a
// client that reads it only later: what the write that does not wait
// leaves goes out under the write deadline.
func TestLargeAnswerToASlowReaderIsWrittenWhole(t *testing.T) {
	big := strings.Repeat("v", 8<<20)
	for _, ready := range []bool{false, true} { // answered by the waiter, or at once by the reader
		t.Run(fmt.Sprintf("event there at once %v", ready), func(t *testing.T) {
			var watches []*fakeWatch
			base, home := homeServer(t, &fakeStore{newWatch: func() *fakeWatch {
				w := newFakeWatch(5, 1)
				if ready && len(watches) > 0 {
					w.events <- encoded(watchEvent("set", "/dir/a", big, 7))
				}
				watches = append(watches, w)
				return w
			}}, false)
			c, br := rawConn(t, base)
			watch := "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"
			if _, err := io.WriteString(c, watch); err != nil {
				t.Fatal(err)
			}
			waitDetached(t, home, 1)
			if !ready {
				watches[0].events <- encoded(watchEvent("set", "/dir/a", big, 7))
			} else {
				watches[0].end()
				if code, _, _ := readAnswer(t, br); code != 200 {
					t.Fatalf("first watch: %d", code)
				}
				if _, err := io.WriteString(c, watch); err != nil { // read by the detached reader
					t.Fatal(err)
				}
			}
			time.Sleep(50 * time.Millisecond) // the socket's buffers fill up
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if code, _, body := readAnswer(t, br); code != 200 || !strings.Contains(body, big) {
				t.Fatalf("answer %d, %d bytes", code, len(body))
			}
		})
	}
}

// A detached connection is idle from its last answer: it closes the idle
// timeout after that answer, never sooner, however long the watch before it
// waited.
func TestIdleTimeoutCountsFromTheLastAnswer(t *testing.T) {
	const idle = 200 * time.Millisecond
	for name, ln := range detachListeners(t) {
		t.Run(name, func(t *testing.T) {
			var watches []*fakeWatch
			f := startHome(t, ln(), &fakeStore{newWatch: func() *fakeWatch {
				w := newFakeWatch(5, 1)
				watches = append(watches, w)
				return w
			}}, func(hc *HomeConfig, _ *Config) { hc.IdleTimeout = idle })
			c, br := rawConn(t, f.url)
			watch := "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"
			for i := range 2 { // the watch that detaches, then one served by the detached reader
				if _, err := io.WriteString(c, watch); err != nil {
					t.Fatal(err)
				}
				waitDetached(t, f.home, 1)
				time.Sleep(3 * idle / 4) // most of the idle timeout, waiting: not idle
				ended := time.Now()
				watches[i].end()
				if code, _, _ := readAnswer(t, br); code != 200 {
					t.Fatalf("watch %d: %d", i, code)
				}
				if i == 0 {
					continue
				}
				if _, err := br.ReadByte(); err != io.EOF {
					t.Fatalf("idle after the answer: %v, want the connection closed", err)
				}
				if d := time.Since(ended); d < idle {
					t.Fatalf("closed %v after the last answer, want the idle timeout (%v) at least", d, idle)
				}
			}
		})
	}
}

// A connection whose waiter holds it (writing a large answer to a client
// that takes it slowly) holds up no other connection's head: the flusher
// writes the others' and comes back to it.
func TestHeadFlusherPassesAConnectionBusyWriting(t *testing.T) {
	h := NewHome(listen(t), HomeConfig{})
	t.Cleanup(func() {
		_ = h.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := h.Wait(ctx); err != nil {
			t.Error(err)
		}
	})
	const head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	pending := func() (*detachedConn, net.Conn) {
		ln := listen(t)
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		t.Cleanup(func() { client.Close(); server.Close() })
		dc := &detachedConn{h: h, c: server, direct: newDirectIO(server), gone: make(chan struct{})}
		b := answerBufs.Get().(*[]byte)
		*b = append((*b)[:0], head...)
		dc.head = b
		return dc, client
	}
	readHead := func(c net.Conn, within time.Duration) error {
		_ = c.SetReadDeadline(time.Now().Add(within))
		got := make([]byte, len(head))
		_, err := io.ReadFull(c, got)
		if err == nil && string(got) != head {
			err = fmt.Errorf("read %q", got)
		}
		return err
	}
	busy, busyClient := pending()
	other, otherClient := pending()
	busy.mu.Lock() // its waiter, writing
	h.deferHead(busy)
	h.deferHead(other)
	if err := readHead(otherClient, 2*time.Second); err != nil {
		busy.mu.Unlock()
		t.Fatalf("the other connection's head, while one is busy: %v", err)
	}
	busy.mu.Unlock()
	if err := readHead(busyClient, 2*time.Second); err != nil {
		t.Fatalf("the busy connection's head, once it is free: %v", err)
	}
}
