// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/bridge/detach"
	"github.com/v2bridge/v2bridge/translate"
)

// watchEvent is a watch event as a store hands it over.
func watchEvent(action, key, value string, index uint64) *translate.Event {
	return &translate.Event{Action: action, Node: &translate.Node{Key: key, Value: strp(value),
		ModifiedIndex: index, CreatedIndex: index}, EtcdIndex: index}
}

// encoded sets the bytes the backend shares among watchers.
func encoded(ev *translate.Event) *translate.Event {
	ev.Encode()
	return ev
}

// eventLine is the body line v2 writes for ev.
func eventLine(t *testing.T, ev *translate.Event) string {
	t.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// bothWays runs a watch test with one-shot watches parked outside net/http
// (detached) and kept inside it: the client sees the same.
func bothWays(t *testing.T, f func(t *testing.T, detached bool)) {
	for _, d := range []bool{false, true} {
		t.Run(map[bool]string{false: "in net/http", true: "detached"}[d], func(t *testing.T) { f(t, d) })
	}
}

// serveAsTheBridge serves h on a loopback port as the bridge does (an
// http.Server over a detach.Listener) until the test ends; it returns the
// base URL.
func serveAsTheBridge(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dl := detach.NewListener(ln, 0)
	// The header timeout of core.DefaultHTTPLimits.
	srv := &http.Server{Handler: detach.Handler(h), ConnContext: dl.ConnContext, ConnState: dl.ConnState, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(dl)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		_ = dl.Wait(ctx)
	})
	return "http://" + ln.Addr().String()
}

// startWatch serves the bridge over a real HTTP server, issues a watch
// request and returns once its headers have arrived. Every read of the body
// is bounded by the request's deadline, so a missing flush fails the test
// instead of hanging it. cancel drops the connection.
func startWatch(t *testing.T, st *fakeStore, query string, detached bool) (resp *http.Response, body *bufio.Reader, cancel context.CancelFunc) {
	t.Helper()
	url := serveAsTheBridge(t, newTestServer(t, st, func(c *Config) { c.DetachWatches = detached }))
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/v2/keys/dir?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("no headers before any event: %v", err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp, bufio.NewReader(resp.Body), cancel
}

func TestWatchFlushesHeadersBeforeTheEventThenEnds(t *testing.T) {
	bothWays(t, testWatchFlushesHeaders)
}

func testWatchFlushesHeaders(t *testing.T, detached bool) {
	fw := newFakeWatch(17, 100)
	st := &fakeStore{watch: fw, meta: Meta{ClusterID: 0xbeef, RaftTerm: 3}, storeMeta: Meta{ClusterID: 0xbeef}}
	resp, body, _ := startWatch(t, st, "wait=true&waitIndex=18&recursive=true", detached)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The index is the store's when the watch was created, not the event's.
	for h, want := range map[string]string{"Content-Type": "application/json", "X-Etcd-Index": "17",
		"X-Raft-Index": "17", "X-Raft-Term": "3", "X-Etcd-Cluster-Id": "beef"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s %q, want %q", h, got, want)
		}
	}
	c := st.only(t)
	if want := (translate.Request{Method: "GET", Path: "/dir", Wait: true, WaitIndex: 18, Recursive: true}); c.op != "watch" || *c.req != want {
		t.Fatalf("store got %s %+v, want watch %+v", c.op, *c.req, want)
	}
	if fw.isCancelled() {
		t.Fatal("the watch was cancelled before its event")
	}
	ev := watchEvent("set", "/dir/a", "1", 25)
	fw.events <- ev
	fw.events <- watchEvent("set", "/dir/b", "2", 26) // a plain watch answers one event
	got, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	if want := eventLine(t, ev); string(got) != want {
		t.Fatalf("body %q, want %q", got, want)
	}
	fw.waitCancelled(t)
}

func TestWatchDoneWithoutEventEndsWithAnEmptyBody(t *testing.T) {
	bothWays(t, testWatchDoneWithoutEvent)
}

func testWatchDoneWithoutEvent(t *testing.T, detached bool) {
	for _, query := range []string{"wait=true", "wait=true&stream=true"} {
		t.Run(query, func(t *testing.T) {
			fw := newFakeWatch(5, 100)
			resp, body, _ := startWatch(t, &fakeStore{watch: fw}, query, detached)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			fw.end()
			got, err := io.ReadAll(body)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 0 {
				t.Fatalf("body %q, want empty", got)
			}
			fw.waitCancelled(t)
		})
	}
}

func TestWatchDeliversEventsQueuedBeforeDone(t *testing.T) {
	// Events and Done are both ready when the handler first looks: either
	// order of the select must deliver what was queued; repeat to take both.
	ev1, ev2 := watchEvent("set", "/dir/a", "1", 8), watchEvent("delete", "/dir/a", "", 9)
	cases := []struct {
		query  string
		queued []*translate.Event
		want   string
	}{
		{"wait=true", []*translate.Event{ev1}, eventLine(t, ev1)},
		{"wait=true", []*translate.Event{ev1, ev2}, eventLine(t, ev1)},
		{"wait=true&stream=true", []*translate.Event{ev1, ev2}, eventLine(t, ev1) + eventLine(t, ev2)},
	}
	for _, c := range cases {
		for range 20 {
			fw := newFakeWatch(7, 100)
			for _, ev := range c.queued {
				fw.events <- ev
			}
			fw.end()
			s := newTestServer(t, &fakeStore{watch: fw})
			w := serve(s, "GET", "/v2/keys/dir?"+c.query, "")
			if w.Code != 200 || w.Body.String() != c.want {
				t.Fatalf("%s with %d queued: %d %q, want 200 %q", c.query, len(c.queued), w.Code, w.Body, c.want)
			}
			if w.Header().Get("X-Etcd-Index") != "7" {
				t.Fatalf("X-Etcd-Index %q, want 7", w.Header().Get("X-Etcd-Index"))
			}
			if !fw.isCancelled() {
				t.Fatal("the answered watch was not cancelled")
			}
		}
	}
}

func TestWatchStreamWritesOneFlushedObjectPerLine(t *testing.T) {
	fw := newFakeWatch(3, 100)
	resp, body, _ := startWatch(t, &fakeStore{watch: fw}, "wait=true&stream=true&recursive=true", true)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for i, ev := range []*translate.Event{
		watchEvent("set", "/dir/a", "1", 4),
		encoded(watchEvent("create", "/dir/b", "2", 5)), // shared bytes, as the backend hands them over
		{Action: "delete", Node: &translate.Node{Key: "/dir/a", ModifiedIndex: 6, CreatedIndex: 4},
			PrevNode: &translate.Node{Key: "/dir/a", Value: strp("1"), ModifiedIndex: 4, CreatedIndex: 4}},
	} {
		fw.events <- ev
		// Each event is flushed alone: the line is readable before the next is sent.
		line, err := body.ReadString('\n')
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := eventLine(t, ev); line != want {
			t.Fatalf("event %d: line %q, want %q", i, line, want)
		}
		if fw.isCancelled() {
			t.Fatal("a stream was cancelled after one event")
		}
	}
	fw.end()
	if rest, err := io.ReadAll(body); err != nil || len(rest) != 0 {
		t.Fatalf("after Done: %q %v, want a clean end", rest, err)
	}
	fw.waitCancelled(t)
}

func TestWatchClientDisconnectCancelsTheWatch(t *testing.T) { bothWays(t, testWatchClientDisconnect) }

func testWatchClientDisconnect(t *testing.T, detached bool) {
	for _, query := range []string{"wait=true", "wait=true&stream=true"} {
		t.Run(query, func(t *testing.T) {
			fw := newFakeWatch(5, 100)
			resp, _, cancel := startWatch(t, &fakeStore{watch: fw}, query, detached)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			cancel()
			fw.waitCancelled(t)
		})
	}
}

func TestWatchErrorsAnswerBeforeAnyHeader(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		status int
		body   string
	}{
		{"history cleared", translate.NewError(translate.EcodeEventIndexCleared, "the requested history has been cleared [20/3]", 30),
			400, v2ErrorJSON(401, "The event in requested index is outdated and cleared", "the requested history has been cleared [20/3]", 30)},
		{"unavailable backend", errUnavailable, 500, v2ErrorJSON(300, "Raft Internal Error", errUnavailable.Error(), 0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &fakeStore{watchErr: c.err, storeMeta: Meta{ClusterID: 0xc1}, meta: Meta{RaftTerm: 2}}
			s := newTestServer(t, st)
			w := serve(s, "GET", "/v2/keys/dir?wait=true&waitIndex=3", "")
			checkV2Error(t, w, c.status, c.body, "c1")
			if st.only(t).op != "watch" {
				t.Fatal("the store was not asked for a watch")
			}
		})
	}
}

// A client that sends one more byte behind its watch and then disconnects
// (net/http stops reading after that byte) has its watch cancelled at once,
// whether the watch waits parked, streams, or waits inside net/http: it does
// not hold a goroutine, a descriptor and a connection slot until the key
// changes.
func TestWatchOfAClientThatSendsMoreThenLeavesIsCancelled(t *testing.T) {
	bothWays(t, testWatchSendsMoreThenLeaves)
}

func testWatchSendsMoreThenLeaves(t *testing.T, detached bool) {
	for _, query := range []string{"wait=true", "wait=true&stream=true"} {
		t.Run(query, func(t *testing.T) {
			fw := newFakeWatch(5, 100)
			url := serveAsTheBridge(t, newTestServer(t, &fakeStore{watch: fw}, func(c *Config) { c.DetachWatches = detached }))
			c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.WriteString(c, "GET /v2/keys/dir?"+query+" HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("head: %v %v", resp, err)
			}
			// Whether net/http's background read takes the byte or it
			// waits in the socket, the close ends the watch.
			_, _ = c.Write([]byte("G"))
			time.Sleep(50 * time.Millisecond) // let net/http's background read take the byte
			_ = c.Close()
			fw.waitCancelled(t)
		})
	}
}

// A request pipelined behind a watch is answered after the watch's event,
// on the same connection, as etcd answers it: whether net/http read it along
// with the watch or it came while the watch waited, and whether the event
// was there at once (a watch served from history) or came later.
func TestRequestPipelinedBehindAWatchIsAnsweredAfterIt(t *testing.T) {
	bothWays(t, testPipelinedBehindAWatch)
}

func testPipelinedBehindAWatch(t *testing.T, detached bool) {
	const watchReq = "GET /v2/keys/dir?wait=true&waitIndex=1&recursive=true HTTP/1.1\r\nHost: x\r\n\r\n"
	const getReq = "GET /v2/keys/dir/b HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		name        string
		eventAtOnce bool // the watch's event is there when it is registered
		pipeAlong   bool // the GET is sent with the watch, not after its head
	}{
		{"event at once, sent along", true, true},
		{"event later, sent along", false, true},
		{"event later, sent while waiting", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fw := newFakeWatch(5, 100)
			ev := watchEvent("set", "/dir/a", "1", 2)
			if tc.eventAtOnce {
				fw.events <- ev
			}
			got := watchEvent("get", "/dir/b", "2", 3)
			st := &fakeStore{watch: fw, getEv: got, meta: Meta{ClusterID: 0xbeef, RaftTerm: 3},
				storeMeta: Meta{ClusterID: 0xbeef}}
			url := serveAsTheBridge(t, newTestServer(t, st, func(c *Config) { c.DetachWatches = detached }))
			c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			if tc.pipeAlong {
				_, _ = io.WriteString(c, watchReq+getReq)
			} else {
				_, _ = io.WriteString(c, watchReq)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the watch's head: %v", err)
			}
			if !tc.pipeAlong {
				_, _ = io.WriteString(c, getReq)
			}
			if !tc.eventAtOnce {
				// The watch goes on with the request behind it.
				time.Sleep(50 * time.Millisecond)
				if fw.isCancelled() {
					t.Fatal("the request behind the watch ended it")
				}
				fw.events <- ev
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 || resp.Close || string(body) != eventLine(t, ev) ||
				resp.Header.Get("X-Etcd-Index") != "5" || resp.Header.Get("X-Etcd-Cluster-Id") != "beef" {
				t.Fatalf("the watch: %d close=%v %v %q %v, want 200, index 5, body %q",
					resp.StatusCode, resp.Close, resp.Header, body, err, eventLine(t, ev))
			}
			fw.waitCancelled(t)
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the request behind the watch got no answer: %v", err)
			}
			body, err = io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 || string(body) != eventLine(t, got) ||
				resp.Header.Get("X-Etcd-Index") != "3" || resp.Header.Get("X-Etcd-Cluster-Id") != "beef" {
				t.Fatalf("the request behind the watch: %d %v %q %v, want 200, index 3, body %q",
					resp.StatusCode, resp.Header, body, err, eventLine(t, got))
			}
			cs := st.recorded()
			if len(cs) != 2 || cs[0].op != "watch" || cs[1].op != "get" || cs[1].req.Path != "/dir/b" {
				t.Fatalf("store calls %+v, want the watch then the get", cs)
			}
		})
	}
}
