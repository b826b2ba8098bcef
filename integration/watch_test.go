// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v2"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

type v2event struct {
	Action   string  `json:"action"`
	Node     *v2node `json:"node"`
	PrevNode *v2node `json:"prevNode"`
	status   int
	header   http.Header
}

type v2node struct {
	Key           string  `json:"key"`
	Value         *string `json:"value"`
	Dir           bool    `json:"dir"`
	TTL           int64   `json:"ttl"`
	ModifiedIndex uint64  `json:"modifiedIndex"`
	CreatedIndex  uint64  `json:"createdIndex"`
}

// startWatch issues a one-shot watch and returns once its headers arrived.
func startWatch(t *testing.T, base, key string, f ...string) <-chan v2event {
	t.Helper()
	q := form(append([]string{"wait", "true"}, f...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v2/keys"+key+"?"+q.Encode(), nil)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("watch %s: %v", key, err)
	}
	out := make(chan v2event, 1)
	go func() {
		defer func() { _ = r.Body.Close() }()
		var ev v2event
		ev.status, ev.header = r.StatusCode, r.Header
		_ = json.NewDecoder(r.Body).Decode(&ev)
		out <- ev
	}()
	return out
}

func expectEvent(t *testing.T, ch <-chan v2event, action, key string) v2event {
	t.Helper()
	select {
	case ev := <-ch:
		if ev.Action != action || ev.Node == nil || ev.Node.Key != key {
			t.Fatalf("got %s %+v, want %s %s", ev.Action, ev.Node, action, key)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s event for %s", action, key)
	}
	return v2event{}
}

func expectNoEvent(t *testing.T, ch <-chan v2event, d time.Duration) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Fatalf("unexpected event %s %+v", ev.Action, ev.Node)
	case <-time.After(d):
	}
}

func TestWatchActions(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	u := e.url
	type step struct {
		watch         string
		watchArgs     []string
		method, path  string
		form          []string
		action, evKey string
		prevValue     string
	}
	for _, s := range []step{
		{"/k", nil, "PUT", "/k", []string{"value", "1"}, "set", "/k", ""},
		{"/k", nil, "PUT", "/k", []string{"value", "2", "prevExist", "true"}, "update", "/k", "1"},
		{"/k", nil, "PUT", "/k", []string{"value", "3", "prevValue", "2"}, "compareAndSwap", "/k", "2"},
		{"/k", nil, "DELETE", "/k", []string{"prevValue", "3"}, "compareAndDelete", "/k", "3"},
		{"/k", nil, "PUT", "/k", []string{"value", "4", "prevExist", "false"}, "create", "/k", ""},
		{"/k", nil, "DELETE", "/k", nil, "delete", "/k", "4"},
		{"/d", []string{"recursive", "true"}, "POST", "/d", []string{"value", "q"}, "create", "", ""},
		{"/mk", nil, "PUT", "/mk", []string{"dir", "true"}, "set", "/mk", ""},
	} {
		t.Run(s.action+s.path, func(t *testing.T) {
			ch := startWatch(t, u, s.watch, s.watchArgs...)
			if r := do(t, s.method, u, "/v2/keys"+s.path, form(s.form...)); r.status >= 300 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			ev := <-ch
			if ev.Action != s.action || (s.evKey != "" && ev.Node.Key != s.evKey) {
				t.Fatalf("event %s %+v", ev.Action, ev.Node)
			}
			if s.prevValue != "" && (ev.PrevNode == nil || ev.PrevNode.Value == nil || *ev.PrevNode.Value != s.prevValue) {
				t.Fatalf("prevNode %+v", ev.PrevNode)
			}
			if ev.header.Get("X-Etcd-Index") == "" || ev.header.Get("X-Etcd-Index") == fmt.Sprint(ev.Node.ModifiedIndex) {
				t.Errorf("X-Etcd-Index %q must be the index when the watch started, not the event's %d",
					ev.header.Get("X-Etcd-Index"), ev.Node.ModifiedIndex)
			}
		})
	}
}

func TestWatchMatchRules(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	u := e.url
	t.Run("foo vs foobar", func(t *testing.T) {
		ch := startWatch(t, u, "/foo", "recursive", "true")
		do(t, "PUT", u, "/v2/keys/foobar", form("value", "x"))
		do(t, "PUT", u, "/v2/keys/foo/bar", form("value", "y"))
		expectEvent(t, ch, "set", "/foo/bar")
	})
	t.Run("non-recursive dir watch ignores children", func(t *testing.T) {
		do(t, "PUT", u, "/v2/keys/nr", form("dir", "true"))
		ch := startWatch(t, u, "/nr")
		do(t, "PUT", u, "/v2/keys/nr/child", form("value", "x"))
		expectNoEvent(t, ch, 300*time.Millisecond)
		do(t, "DELETE", u, "/v2/keys/nr", form("recursive", "true"))
		expectEvent(t, ch, "delete", "/nr")
	})
	t.Run("hidden keys", func(t *testing.T) {
		rec := startWatch(t, u, "/h", "recursive", "true")
		direct := startWatch(t, u, "/h/_secret")
		do(t, "PUT", u, "/v2/keys/h/_secret", form("value", "s"))
		expectEvent(t, direct, "set", "/h/_secret")
		expectNoEvent(t, rec, 300*time.Millisecond)
		do(t, "PUT", u, "/v2/keys/h/visible", form("value", "v"))
		expectEvent(t, rec, "set", "/h/visible")
	})
	t.Run("dir delete notifies inner watchers once", func(t *testing.T) {
		do(t, "PUT", u, "/v2/keys/tree/a/b", form("value", "1"))
		do(t, "PUT", u, "/v2/keys/tree/a/c", form("value", "2"))
		inner := startWatch(t, u, "/tree/a/b")
		stream := streamWatch(t, u, "/tree", "recursive", "true")
		do(t, "DELETE", u, "/v2/keys/tree/a", form("recursive", "true"))
		ev := expectEvent(t, inner, "delete", "/tree/a")
		if !ev.Node.Dir || !ev.PrevNode.Dir {
			t.Fatalf("dir delete event %+v %+v", ev.Node, ev.PrevNode)
		}
		first := <-stream
		do(t, "PUT", u, "/v2/keys/tree/z", form("value", "marker"))
		second := <-stream
		if first.Node.Key != "/tree/a" || second.Node.Key != "/tree/z" {
			t.Fatalf("a recursive delete must be one event: got %s then %s", first.Node.Key, second.Node.Key)
		}
	})
	t.Run("ttl expire and refresh", func(t *testing.T) {
		do(t, "PUT", u, "/v2/keys/lease", form("value", "v", "ttl", "3"))
		ch := startWatch(t, u, "/lease")
		do(t, "PUT", u, "/v2/keys/lease", form("refresh", "true", "ttl", "3", "prevExist", "true"))
		ev := <-ch
		if ev.Action != "expire" || ev.PrevNode == nil || *ev.PrevNode.Value != "v" {
			t.Fatalf("refresh must wake no watcher and expiry must be 'expire': %s %+v", ev.Action, ev.Node)
		}
	})
	t.Run("ttl dir expires as one event for inner watchers", func(t *testing.T) {
		do(t, "PUT", u, "/v2/keys/tdir", form("dir", "true", "ttl", "2"))
		do(t, "PUT", u, "/v2/keys/tdir/in", form("value", "x"))
		ch := startWatch(t, u, "/tdir/in")
		ev := expectEvent(t, ch, "expire", "/tdir")
		if !ev.Node.Dir {
			t.Fatalf("%+v", ev.Node)
		}
		waitFor(t, 10*time.Second, "the expired dir's contents to go", func() bool {
			return do(t, "GET", u, "/v2/keys/tdir/in", nil).status == 404
		})
	})
	t.Run("quorum wait is a plain get", func(t *testing.T) {
		do(t, "PUT", u, "/v2/keys/qw", form("value", "now"))
		r := do(t, "GET", u, "/v2/keys/qw", form("wait", "true", "quorum", "true"))
		if r.status != 200 || !strings.Contains(r.body, `"action":"get"`) {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
}

// streamWatch opens a stream=true watch and decodes its events.
func streamWatch(t *testing.T, base, key string, f ...string) <-chan v2event {
	t.Helper()
	q := form(append([]string{"wait", "true", "stream", "true"}, f...)...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v2/keys"+key+"?"+q.Encode(), nil)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan v2event, 1000)
	go func() {
		defer func() { _ = r.Body.Close() }()
		defer close(out)
		sc := bufio.NewScanner(r.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev v2event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				out <- ev
			}
		}
	}()
	return out
}

func TestWatchStream(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	ch := streamWatch(t, e.url, "/s", "recursive", "true")
	for i := 0; i < 50; i++ {
		do(t, "PUT", e.url, fmt.Sprintf("/v2/keys/s/%d", i), form("value", fmt.Sprint(i)))
	}
	for i := 0; i < 50; i++ {
		select {
		case ev := <-ch:
			if ev.Node.Key != fmt.Sprintf("/s/%d", i) {
				t.Fatalf("event %d is %s", i, ev.Node.Key)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("stream stalled after %d events", i)
		}
	}
}

// TestWatchRapidWrites: 500 rapid writes are seen in order, without gaps,
// with exact modifiedIndex, by the v2 client's re-watching Watcher and by a
// one-shot long-poll loop with waitIndex = modifiedIndex+1.
func TestWatchRapidWrites(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	k := v2client(t, e.url)
	ctx := ctxT(t, 2*time.Minute)
	start, err := k.Set(ctx, "/rapid/start", "0", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	var written []uint64
	collect := func(next func() (*client.Response, error)) ([]uint64, error) {
		var got []uint64
		for len(got) < n {
			r, err := next()
			if err != nil {
				return got, err
			}
			got = append(got, r.Node.ModifiedIndex)
		}
		return got, nil
	}
	var wg sync.WaitGroup
	results := make([][]uint64, 2)
	errs := make([]error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		w := k.Watcher("/rapid", &client.WatcherOptions{AfterIndex: start.Index, Recursive: true})
		results[0], errs[0] = collect(func() (*client.Response, error) { return w.Next(ctx) })
	}()
	go func() {
		defer wg.Done()
		after := start.Index
		results[1], errs[1] = collect(func() (*client.Response, error) {
			w := k.Watcher("/rapid", &client.WatcherOptions{AfterIndex: after, Recursive: true})
			r, err := w.Next(ctx)
			if err == nil {
				after = r.Node.ModifiedIndex
			}
			return r, err
		})
	}()
	for i := 0; i < n; i++ {
		r, err := k.Set(ctx, fmt.Sprintf("/rapid/k%d", i%7), fmt.Sprint(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		written = append(written, r.Node.ModifiedIndex)
	}
	wg.Wait()
	for i, got := range results {
		if errs[i] != nil {
			t.Fatalf("watcher %d: %v after %d events", i, errs[i], len(got))
		}
		for j := range written {
			if got[j] != written[j] {
				t.Fatalf("watcher %d: event %d has index %d, want %d", i, j, got[j], written[j])
			}
		}
	}
}

// TestWatchHistory: a waitIndex inside v3 history is replayed from it, one
// older than the compaction gets 401 before any header is sent.
func TestWatchHistory(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	v3 := e.cluster.Client(t)
	ctx := ctxT(t, time.Minute)
	first := uint64(do(t, "PUT", e.url, "/v2/keys/hist", form("value", "1")).json(t)["node"].(map[string]any)["modifiedIndex"].(float64))
	for i := 0; i < 20; i++ {
		do(t, "PUT", e.url, "/v2/keys/other", form("value", fmt.Sprint(i)))
	}
	r := do(t, "GET", e.url, "/v2/keys/hist", form("wait", "true", "waitIndex", fmt.Sprint(first)))
	if r.status != 200 || !strings.Contains(r.body, `"value":"1"`) {
		t.Fatalf("history replay: %d %s", r.status, r.body)
	}
	// A bridge started after the writes has none of them in its ring: the
	// same watch is caught up by a replay of v3 history, and its events are
	// then kept, so a re-watch there is answered from memory.
	fresh := v2bridgetest.StartBridge(t, e.cluster.Endpoints(), v2bridgetest.Options{})
	for i := 0; i < 2; i++ {
		r = do(t, "GET", fresh.URL, "/v2/keys/hist", form("wait", "true", "waitIndex", fmt.Sprint(first)))
		if r.status != 200 || !strings.Contains(r.body, `"value":"1"`) {
			t.Fatalf("history replay on a fresh bridge: %d %s", r.status, r.body)
		}
	}
	if n := metricValue(t, fresh.Registry, "v2bridge_watch_history_replays_total"); n != 1 {
		t.Errorf("%v replays for two watches of the same history, want 1 (the second from memory)", n)
	}
	cur, err := v3.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v3.Compact(ctx, cur.Header.Revision); err != nil {
		t.Fatal(err)
	}
	// A second bridge has no ring, so it must go to v3 history.
	b2 := v2bridgetest.StartBridge(t, e.cluster.Endpoints(), v2bridgetest.Options{})
	r = do(t, "GET", b2.URL, "/v2/keys/hist", form("wait", "true", "waitIndex", fmt.Sprint(first)))
	m := r.json(t)
	if r.status != 400 || m["errorCode"].(float64) != 401 ||
		!strings.HasPrefix(m["cause"].(string), "the requested history has been cleared [") {
		t.Fatalf("compacted waitIndex: %d %s", r.status, r.body)
	}
	// The oldest index kept: the first of the compaction revision's block.
	if want := fmt.Sprintf("[%d/%d]", translate.FirstIndex(cur.Header.Revision), first); !strings.HasSuffix(m["cause"].(string), want) {
		t.Errorf("cause %q, want suffix %s", m["cause"], want)
	}
}

// TestWatchIndexesOverTheWholeRange: a waitIndex anywhere in uint64 is a
// future index that the watch waits for, as in v2 (none answers at once or
// overflows into the past).
func TestWatchIndexesOverTheWholeRange(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	before := metricValue(t, e.bridge.Registry, "v2bridge_v2_watchers")
	var chans []<-chan v2event
	for _, idx := range []string{"9223372036854775807", "9223372036854775808", "18446744073709551615"} {
		chans = append(chans, startWatch(t, e.url, "/far", "waitIndex", idx))
	}
	do(t, "PUT", e.url, "/v2/keys/far", form("value", "1"))
	waitFor(t, 10*time.Second, "the three watches registered", func() bool {
		return metricValue(t, e.bridge.Registry, "v2bridge_v2_watchers") == before+3
	})
	for _, ch := range chans {
		expectNoEvent(t, ch, 200*time.Millisecond)
	}
}

// TestWatchTwoBridges: each bridge's watchers see the other's writes, with
// exact actions (the journal is shared through etcd).
func TestWatchTwoBridges(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	b1 := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{})
	b2 := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{})
	ch := startWatch(t, b1.URL, "/shared")
	do(t, "PUT", b2.URL, "/v2/keys/shared", form("value", "x", "prevExist", "false"))
	expectEvent(t, ch, "create", "/shared")
	ch = startWatch(t, b2.URL, "/shared")
	do(t, "PUT", b1.URL, "/v2/keys/shared", form("value", "y", "prevValue", "x"))
	expectEvent(t, ch, "compareAndSwap", "/shared")
	// A v3-native write is reported by the key layout's rules (docs/design.md, "Key layout").
	ch = startWatch(t, b1.URL, "/native")
	if _, err := cl.Client(t).Put(ctxT(t, 10*time.Second), "/native", "v"); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ch, "create", "/native")
}

// TestWatchSharedAndReleased: many watchers share one v3 watch, and every
// watcher's goroutines and buffers go when its client goes away.
func TestWatchSharedAndReleased(t *testing.T) {
	// A thousand watches at once starve this process under the race
	// detector on a busy machine; a loss declared meanwhile would end them.
	// Not a liveness test: the heartbeat is patient.
	e := newEnv(t, patientHeartbeat)
	gauge := func() float64 {
		mfs, err := e.bridge.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "v2bridge_v3_watches" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no v2bridge_v3_watches metric")
		return 0
	}
	do(t, "PUT", e.url, "/v2/keys/warm", form("value", "1"))
	runtime.GC()
	before := runtime.NumGoroutine()
	tr := &http.Transport{MaxIdleConnsPerHost: 2000}
	hc := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 1000
	var started sync.WaitGroup
	for i := 0; i < n; i++ {
		started.Add(1)
		go func(i int) {
			req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v2/keys/dir%d/k?wait=true", e.url, i%50), nil)
			r, err := hc.Do(req)
			started.Done()
			if err == nil {
				<-ctx.Done()
				_ = r.Body.Close()
			}
		}(i)
	}
	started.Wait()
	if got := e.bridge.Backend.Hub().Watchers(); got != n {
		t.Fatalf("%d watchers registered, want %d", got, n)
	}
	if g := gauge(); g != 1 {
		t.Fatalf("%v v3 watches for %d v2 watchers on 50 subtrees", g, n)
	}
	cancel()
	tr.CloseIdleConnections()
	waitFor(t, 20*time.Second, "watchers to be released", func() bool { return e.bridge.Backend.Hub().Watchers() == 0 })
	waitFor(t, 20*time.Second, "goroutines to return", func() bool {
		runtime.GC()
		return runtime.NumGoroutine() <= before+10
	})
}

// TestWatchDirectoryDeleteReachesEmptySubdirectories: deleting a directory
// tells the watchers of every directory it removed, empty ones included, as
// v2 did.
func TestWatchDirectoryDeleteReachesEmptySubdirectories(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	do(t, "PUT", e.url, "/v2/keys/a/empty", form("dir", "true"))
	do(t, "PUT", e.url, "/v2/keys/a/deeper/empty", form("dir", "true"))
	do(t, "PUT", e.url, "/v2/keys/a/f", form("value", "1"))
	empty := startWatch(t, e.url, "/a/empty")
	deeper := startWatch(t, e.url, "/a/deeper/empty")
	do(t, "DELETE", e.url, "/v2/keys/a", form("recursive", "true"))
	expectEvent(t, empty, "delete", "/a")
	expectEvent(t, deeper, "delete", "/a")
}
