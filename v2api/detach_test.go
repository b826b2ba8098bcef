// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"bufio"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/netutil"
)

// homeServer serves st over a real listener wrapped in a Home (watches
// detaching unless keep), and returns the base URL and the Home.
func homeServer(t testing.TB, st *fakeStore, keep bool) (string, *Home) {
	t.Helper()
	f := startHome(t, listen(t), st, func(_ *HomeConfig, c *Config) { c.DetachWatches = !keep })
	return f.url, f.home
}

// homeServerOn is homeServer on ln, watches detaching.
func homeServerOn(t testing.TB, ln net.Listener, st *fakeStore) (string, *Home) {
	t.Helper()
	f := startHome(t, ln, st)
	return f.url, f.home
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// homeFixture is an http.Server serving the v2 API on a Home.
type homeFixture struct {
	url    string
	home   *Home
	srv    *http.Server
	served chan struct{} // closed when Serve returns
}

// startHome serves st on ln wrapped in a Home: watches detach, heads are
// read within 5 s, idle connections close after a minute, unless opts say
// otherwise. The test's end shuts it down and checks that every detached
// connection was done with.
func startHome(t testing.TB, ln net.Listener, st *fakeStore, opts ...func(*HomeConfig, *Config)) *homeFixture {
	t.Helper()
	hc := HomeConfig{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	cfg := func(c *Config) {
		c.DetachWatches = true
		for _, o := range opts {
			o(&hc, c)
		}
	}
	hc.Handler = newTestServer(t, st, cfg)
	return serveOnHome(t, ln, hc)
}

// serveOnHome serves hc.Handler with an http.Server on a Home of ln (hc)
// until the test ends, which shuts it down and checks that every detached
// connection was done with.
func serveOnHome(t testing.TB, ln net.Listener, hc HomeConfig) *homeFixture {
	t.Helper()
	f := &homeFixture{url: "http://" + ln.Addr().String(), home: NewHome(ln, hc), served: make(chan struct{})}
	f.srv = &http.Server{Handler: hc.Handler, ConnContext: f.home.Context}
	go func() {
		defer close(f.served)
		_ = f.srv.Serve(f.home)
	}()
	t.Cleanup(func() {
		if err := f.shutdown(); err != nil {
			t.Errorf("the Home's connections still served after the server closed: %v", err)
		}
	})
	return f
}

// shutdown shuts the server down (closing its Home) and waits for every
// detached connection, for at most 5 s.
func (f *homeFixture) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.srv.Shutdown(ctx)
	<-f.served
	return f.home.Wait(ctx)
}

// waitDetached waits until n watches are detached.
func waitDetached(t *testing.T, h *Home, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for h.Detached() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d watches detached, want %d", h.Detached(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// getReused sends GET url on c and reports the body and whether the
// connection was one used before.
func getReused(t *testing.T, c *http.Client, url string) (status int, body string, reused bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), reused
}

func TestDetachedWatchAnswersAndItsConnectionServesTheNextRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(w *fakeWatch)
		want string
	}{
		{"event", func(w *fakeWatch) { w.events <- encoded(watchEvent("set", "/dir/a", "1", 7)) }, ""},
		{"event not encoded by the store", func(w *fakeWatch) { w.events <- watchEvent("set", "/dir/a", "1", 7) }, ""},
		{"ended without an event", func(w *fakeWatch) { w.end() }, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWatch(5, 1)
			st := &fakeStore{watch: w, getEv: watchEvent("get", "/dir/a", "0", 3)}
			base, home := homeServer(t, st, false)
			c := &http.Client{Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			type answer struct {
				status int
				body   string
				hdr    http.Header
			}
			got := make(chan answer, 1)
			go func() {
				resp, err := c.Get(base + "/v2/keys/dir?wait=true&recursive=true")
				if err != nil {
					got <- answer{body: err.Error()}
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				got <- answer{resp.StatusCode, string(b), resp.Header}
			}()
			waitDetached(t, home, 1)
			tc.end(w)
			a := <-got
			want := eventLine(t, watchEvent("set", "/dir/a", "1", 7))
			if tc.want == "empty" {
				want = ""
			}
			if a.status != 200 || a.body != want {
				t.Fatalf("answer %d %q, want 200 %q", a.status, a.body, want)
			}
			for k, v := range map[string]string{"X-Etcd-Index": "5", "Content-Type": "application/json", "X-Raft-Term": "0"} {
				if a.hdr.Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, a.hdr.Get(k), v)
				}
			}
			w.waitCancelled(t)
			waitDetached(t, home, 0)
			status, _, reused := getReused(t, c, base+"/v2/keys/dir/a")
			if status != 200 || !reused {
				t.Fatalf("next request: %d, reused connection %v; want 200 on the same connection", status, reused)
			}
		})
	}
}

func TestDetachedWatchOfAClientThatLeavesIsCancelled(t *testing.T) {
	w := newFakeWatch(5, 1)
	base, home := homeServer(t, &fakeStore{watch: w}, false)
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, home, 1)
	_ = c.Close()
	w.waitCancelled(t)
	waitDetached(t, home, 0)
}

func TestDetachedWatchWithAPipelinedRequestEndsAndClosesTheConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit bool
	}{
		{"plain listener", false},
		// The bridge counts its connections (--max-connections): the
		// connection is not a *net.TCPConn, and still must not be reset
		// before the client reads the answer.
		{"connection-limited listener", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			if tc.limit {
				ln = netutil.LimitListener(ln, 100)
			}
			testPipelinedRequestEndsTheWatch(t, ln)
		})
	}
}

func testPipelinedRequestEndsTheWatch(t *testing.T, ln net.Listener) {
	w := newFakeWatch(5, 1)
	base, home := homeServerOn(t, ln, &fakeStore{watch: w})
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, home, 1)
	if _, err := io.WriteString(c, "GET /version HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || len(b) != 0 {
		t.Fatalf("answer %d %q, want the empty end of a watch", resp.StatusCode, b)
	}
	w.waitCancelled(t)
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want the connection closed (EOF)", err)
	}
}

func TestClosingTheHomeEndsDetachedWatches(t *testing.T) {
	w := newFakeWatch(5, 1)
	f := startHome(t, listen(t), &fakeStore{watch: w})
	home := f.home
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get(f.url + "/v2/keys/dir?wait=true")
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- "200 " + string(b)
	}()
	waitDetached(t, home, 1)
	if err := f.shutdown(); err != nil {
		t.Fatalf("detached watch still running: %v", err)
	}
	if a := <-got; a != "200 " {
		t.Fatalf("client got %q, want the empty end of a watch", a)
	}
	w.waitCancelled(t)
}

func TestWatchesDetachOnlyWhenTheyMay(t *testing.T) {
	for _, tc := range []struct {
		name, query, proto string
	}{
		{"stream", "wait=true&stream=true", "HTTP/1.1"},
		{"HTTP/1.0", "wait=true", "HTTP/1.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWatch(5, 1)
			base, home := homeServer(t, &fakeStore{watch: w}, false)
			c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "GET /v2/keys/dir?"+tc.query+" "+tc.proto+"\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // a detach would take microseconds
			if n := home.Detached(); n != 0 {
				t.Fatalf("%d detached, want none", n)
			}
			w.end()
		})
	}
}

// BenchmarkWatchCycle is one watch answered by an event that comes after
// the watch registered, as a busy watcher sees it, by 32 clients on a
// keep-alive connection each; cpu-µs/op is the whole process's (the clients'
// included, the same in both cases).
func BenchmarkWatchCycle(b *testing.B) {
	for _, bc := range []struct {
		name string
		keep bool
	}{{"in-net-http", true}, {"detached", false}} {
		b.Run(bc.name, func(b *testing.B) {
			ev := encoded(watchEvent("set", "/dir/a", "1", 7))
			st := &fakeStore{newWatch: func() *fakeWatch {
				w := newFakeWatch(5, 1)
				time.AfterFunc(200*time.Microsecond, func() { w.events <- ev })
				return w
			}}
			base, _ := homeServer(b, st, bc.keep)
			url := base + "/v2/keys/dir?wait=true"
			var before, after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.ResetTimer()
			b.SetParallelism(16) // 32 clients on 2 CPUs
			b.RunParallel(func(pb *testing.PB) {
				c := &http.Client{Transport: &http.Transport{}}
				defer c.CloseIdleConnections()
				for pb.Next() {
					resp, err := c.Get(url)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			})
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// rawConn opens a connection to base with a deadline on everything.
func rawConn(t *testing.T, base string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	return c, bufio.NewReader(c)
}

func readAnswer(t *testing.T, br *bufio.Reader) (int, http.Header, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// TestDetachedConnectionServesWhatItsClientSendsNext: after its first watch
// detached a connection, whatever the client sends next on it is answered
// as net/http would answer it: watches by the detached reader (waiting,
// ready, refused), anything else by net/http once handed back.
func TestDetachedConnectionServesWhatItsClientSendsNext(t *testing.T) {
	ready := encoded(watchEvent("set", "/dir/a", "2", 9))
	var watches []*fakeWatch
	st := &fakeStore{getEv: watchEvent("get", "/dir/a", "0", 3), newWatch: func() *fakeWatch {
		w := newFakeWatch(5, 1)
		if len(watches) == 2 { // the third watch finds its event waiting
			w.events <- ready
		}
		watches = append(watches, w)
		return w
	}}
	base, home := homeServer(t, st, false)
	c, br := rawConn(t, base)
	send := func(req string) {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	watch := "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"
	send(watch) // detaches the connection
	waitDetached(t, home, 1)
	watches[0].events <- encoded(watchEvent("set", "/dir/a", "1", 7))
	if code, _, body := readAnswer(t, br); code != 200 || body != eventLine(t, watchEvent("set", "/dir/a", "1", 7)) {
		t.Fatalf("first watch: %d %q", code, body)
	}
	send(watch) // served by the detached reader, and waits there
	waitDetached(t, home, 1)
	watches[1].end()
	if code, _, body := readAnswer(t, br); code != 200 || body != "" {
		t.Fatalf("second watch: %d %q, want the empty end", code, body)
	}
	send(watch) // its event is there: answered at once, with a length
	code, hdr, body := readAnswer(t, br)
	if code != 200 || body != eventLine(t, ready) || hdr.Get("Content-Length") == "" || hdr.Get("X-Etcd-Index") != "5" {
		t.Fatalf("ready watch: %d %v %q", code, hdr, body)
	}
	send("GET /v2/keys/dir?wait=true&waitIndex=x HTTP/1.1\r\nHost: x\r\n\r\n") // refused before any watch
	if code, _, body := readAnswer(t, br); code != 400 || !strings.Contains(body, `"errorCode":203`) {
		t.Fatalf("bad waitIndex: %d %q", code, body)
	}
	send("GET /v2/keys/dir/a HTTP/1.1\r\nHost: x\r\n\r\n") // not a watch: net/http's
	if code, _, body := readAnswer(t, br); code != 200 || !strings.Contains(body, `"action":"get"`) {
		t.Fatalf("GET after the watches: %d %q", code, body)
	}
	send(watch) // and a watch after that detaches again
	waitDetached(t, home, 1)
	if n := len(st.recorded()); n != 5 { // the refused watch never reached the store
		t.Fatalf("%d store calls, want 5", n)
	}
}

func TestDetachedConnectionHandsBackWhatItCannotTakeWhole(t *testing.T) {
	watch := "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		name, next string
		answers    int
	}{
		{"two watches in one write", watch + watch, 2},
		{"a head larger than the reader's buffer", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nX-Pad: " +
			strings.Repeat("p", 2*detachedHeadMax) + "\r\n\r\n", 1},
		{"a watch that closes its connection", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 1},
		{"a stream", "GET /v2/keys/dir?wait=true&stream=true HTTP/1.1\r\nHost: x\r\n\r\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var watches []*fakeWatch
			st := &fakeStore{newWatch: func() *fakeWatch {
				w := newFakeWatch(5, 1)
				if len(watches) > 0 { // every later watch is answered at once
					w.events <- encoded(watchEvent("set", "/dir/a", "1", 7))
				}
				watches = append(watches, w)
				return w
			}}
			base, home := homeServer(t, st, false)
			c, br := rawConn(t, base)
			if _, err := io.WriteString(c, watch); err != nil {
				t.Fatal(err)
			}
			waitDetached(t, home, 1)
			watches[0].end()
			if code, _, _ := readAnswer(t, br); code != 200 {
				t.Fatalf("first watch: %d", code)
			}
			if _, err := io.WriteString(c, tc.next); err != nil {
				t.Fatal(err)
			}
			for i := range tc.answers {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				line, _ := bufio.NewReader(resp.Body).ReadString('\n') // a stream does not end
				if resp.StatusCode != 200 || !strings.Contains(line, `"modifiedIndex":7`) {
					t.Fatalf("answer %d: %d %q", i, resp.StatusCode, line)
				}
				if i < tc.answers-1 {
					_, _ = io.ReadAll(resp.Body)
				}
			}
		})
	}
}

func TestIdleDetachedConnectionIsClosed(t *testing.T) {
	w := newFakeWatch(5, 1)
	f := startHome(t, listen(t), &fakeStore{watch: w}, func(hc *HomeConfig, _ *Config) { hc.IdleTimeout = 50 * time.Millisecond })
	home := f.home
	c, br := rawConn(t, f.url)
	if _, err := io.WriteString(c, "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, home, 1)
	time.Sleep(100 * time.Millisecond) // twice the idle timeout: a waiting watch is not idle
	w.end()
	if code, _, _ := readAnswer(t, br); code != 200 {
		t.Fatalf("watch: %d", code)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle after the answer: %v, want the connection closed", err)
	}
}

func TestPanicOnADetachedConnectionClosesItOnly(t *testing.T) {
	var first *fakeWatch
	calls := 0
	st := &fakeStore{newWatch: func() *fakeWatch {
		calls++
		switch calls {
		case 1:
			first = newFakeWatch(5, 1)
			return first
		case 2:
			panic("store bug")
		}
		w := newFakeWatch(5, 1)
		w.events <- encoded(watchEvent("set", "/dir/a", "1", 7))
		return w
	}}
	var logged syncBuffer
	f := startHome(t, listen(t), st, func(hc *HomeConfig, _ *Config) { hc.ErrorLog = log.New(&logged, "", 0) })
	home, base := f.home, f.url
	watch := "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"
	c, br := rawConn(t, base)
	if _, err := io.WriteString(c, watch); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, home, 1)
	first.end()
	if code, _, _ := readAnswer(t, br); code != 200 {
		t.Fatalf("first watch: %d", code)
	}
	if _, err := io.WriteString(c, watch); err != nil { // served detached: the store panics
		t.Fatal(err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the panic: %v, want the connection closed", err)
	}
	if !strings.Contains(logged.String(), "panic serving") || !strings.Contains(logged.String(), "store bug") {
		t.Errorf("panic not logged: %q", logged.String())
	}
	c2, br2 := rawConn(t, base) // the server goes on
	if _, err := io.WriteString(c2, watch); err != nil {
		t.Fatal(err)
	}
	if code, _, body := readAnswer(t, br2); code != 200 || body == "" {
		t.Fatalf("a watch after the panic: %d %q", code, body)
	}
}

// syncBuffer is a strings.Builder safe for a logger on another goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A request that came in the same packet as the watch is already in
// net/http's buffer when the watch detaches: the watch ends at once with the
// empty end and the connection closes, as for a request sent behind it later.
func TestDetachedWatchWithARequestReadAlongWithItEndsAndClosesTheConnection(t *testing.T) {
	w := newFakeWatch(5, 1)
	base, _ := homeServer(t, &fakeStore{watch: w}, false)
	c, br := rawConn(t, base)
	if _, err := io.WriteString(c, "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /version HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if code, _, body := readAnswer(t, br); code != 200 || body != "" {
		t.Fatalf("answer %d %q, want the empty end of a watch", code, body)
	}
	w.waitCancelled(t)
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want the connection closed (EOF)", err)
	}
}

// A watch whose connection would detach just as the Home closes gets the
// empty end, as the watches waiting then do, rather than a closed
// connection with no answer.
func TestWatchDetachingAsTheHomeClosesGetsTheEmptyEnd(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	w := newFakeWatch(5, 1)
	st := &fakeStore{newWatch: func() *fakeWatch {
		close(entered)
		<-release
		return w
	}}
	base, home := homeServer(t, st, false)
	c, br := rawConn(t, base)
	if _, err := io.WriteString(c, "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(3 * time.Second):
		t.Fatal("the watch did not reach the store")
	}
	_ = home.Close()
	close(release)
	code, hdr, body := readAnswer(t, br)
	if code != 200 || body != "" || hdr.Get("X-Etcd-Index") != "5" {
		t.Fatalf("answer %d %v %q, want the empty end of a watch", code, hdr, body)
	}
	w.waitCancelled(t)
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want the connection closed (EOF)", err)
	}
}

// A watch sent with a body stays in net/http, which knows where the body
// ends: were its connection to detach, what of the body was not read yet
// would be read as the client's next request (a body larger than the
// bridge's body limit is left unread by design).
func TestWatchWithABodyStaysInNetHTTP(t *testing.T) {
	w := newFakeWatch(5, 1)
	st := &fakeStore{watch: w, getEv: watchEvent("get", "/dir/a", "0", 3)}
	base, home := homeServer(t, st, false)
	c, br := rawConn(t, base)
	inner := "GET /version HTTP/1.1\r\nHost: x\r\n\r\n"
	if _, err := io.WriteString(c, "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nContent-Length: "+
		strconv.Itoa(len(inner))+"\r\n\r\n"+inner); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(st.recorded()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the watch did not reach the store")
		}
		time.Sleep(time.Millisecond)
	}
	if n := home.Detached(); n != 0 {
		t.Fatalf("%d watches detached, want none", n)
	}
	w.events <- encoded(watchEvent("set", "/dir/a", "1", 7))
	if code, _, body := readAnswer(t, br); code != 200 || body != eventLine(t, watchEvent("set", "/dir/a", "1", 7)) {
		t.Fatalf("watch: %d %q, want its event", code, body)
	}
	if _, err := io.WriteString(c, "GET /v2/keys/dir/a HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if code, _, body := readAnswer(t, br); code != 200 || !strings.Contains(body, `"action":"get"`) {
		t.Fatalf("next request: %d %q, want the GET's answer (not the body's)", code, body)
	}
}

func TestMalformedWatchOnADetachedConnectionGetsNetHTTPs400(t *testing.T) {
	for _, tc := range []struct{ name, head string }{
		{"two Host headers", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n"},
		{"a bad header value", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := newFakeWatch(5, 1)
			st := &fakeStore{newWatch: func() *fakeWatch { return first }}
			base, home := homeServer(t, st, false)
			c, br := rawConn(t, base)
			if _, err := io.WriteString(c, "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			waitDetached(t, home, 1)
			first.end()
			if code, _, _ := readAnswer(t, br); code != 200 {
				t.Fatalf("first watch: %d", code)
			}
			if _, err := io.WriteString(c, tc.head); err != nil {
				t.Fatal(err)
			}
			if code, _, body := readAnswer(t, br); code != 400 {
				t.Fatalf("malformed watch: %d %q, want net/http's 400", code, body)
			}
		})
	}
}
