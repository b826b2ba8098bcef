// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v2"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// normalized is a v2 body as JSON with every node's ttl left out: ttl is the
// seconds left, rounded up, so two reads a moment apart may differ by one.
// Every index stays as the v2 server sent it.
func normalized(t *testing.T, body string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", body, err)
	}
	var strip func(any)
	strip = func(v any) {
		switch n := v.(type) {
		case map[string]any:
			delete(n, "ttl")
			for _, c := range n {
				strip(c)
			}
		case []any:
			for _, c := range n {
				strip(c)
			}
		}
	}
	strip(m)
	b, _ := json.Marshal(m)
	return string(b)
}

func TestPassthroughAnswersAsTheV2Server(t *testing.T) {
	e := newPassEnv(t, fastLiveness)
	for _, c := range []struct {
		name, method, path string
		form               url.Values
		// write: compare with the v2 server's own record of the write, its
		// event at the answer's X-Etcd-Index; otherwise ask the v2 server
		// the same question directly.
		write bool
	}{
		{"set creates a key", "PUT", "/v2/keys/pt/a", form("value", "1"), true},
		{"set replaces a key", "PUT", "/v2/keys/pt/a", form("value", "2"), true},
		{"set with a ttl", "PUT", "/v2/keys/pt/ttl", form("value", "t", "ttl", "300"), true},
		{"compare-and-swap succeeds", "PUT", "/v2/keys/pt/a", form("value", "3", "prevValue", "2"), true},
		{"compare-and-swap fails with 101", "PUT", "/v2/keys/pt/a", form("value", "4", "prevValue", "nope"), false},
		{"create fails on an existing key with 105", "PUT", "/v2/keys/pt/a", form("value", "x", "prevExist", "false"), false},
		{"a key that needs escaping", "PUT", "/v2/keys/pt/sp%20ace%2Fslash%3F", form("value", "esc"), true},
		{"get of a key that needs escaping", "GET", "/v2/keys/pt/sp%20ace%2Fslash%3F", nil, false},
		{"in-order POST", "POST", "/v2/keys/pt/queue", form("value", "job1"), true},
		{"a second in-order POST", "POST", "/v2/keys/pt/queue", form("value", "job2"), true},
		{"get of a key", "GET", "/v2/keys/pt/a", nil, false},
		{"get of a key with a ttl", "GET", "/v2/keys/pt/ttl", nil, false},
		{"recursive sorted get", "GET", "/v2/keys/pt", form("recursive", "true", "sorted", "true"), false},
		{"missing key is 100", "GET", "/v2/keys/pt/nope", nil, false},
		{"compare-and-delete", "DELETE", "/v2/keys/pt/a", form("prevValue", "3"), true},
		{"recursive delete", "DELETE", "/v2/keys/pt/queue", form("recursive", "true"), true},
		{"version", "GET", "/version", nil, false},
		{"store stats", "GET", "/v2/stats/self", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := do(t, c.method, e.url, c.path, c.form)
			var want resp
			if c.write {
				if got.status >= 300 {
					t.Fatalf("%s %s: %d %s", c.method, c.path, got.status, got.body)
				}
				want = do(t, "GET", e.ref.URL, c.path, form("wait", "true", "recursive", "true",
					"waitIndex", got.header.Get("X-Etcd-Index")))
			} else {
				want = do(t, c.method, e.ref.URL, c.path, c.form)
				if got.status != want.status {
					t.Fatalf("status %d through the bridge, %d from the v2 server (%s)", got.status, want.status, want.body)
				}
			}
			for _, h := range []string{"X-Etcd-Index", "X-Etcd-Cluster-Id", "Content-Type"} {
				if got.header.Get(h) != want.header.Get(h) {
					t.Errorf("%s %q through the bridge, %q from the v2 server", h, got.header.Get(h), want.header.Get(h))
				}
			}
			if c.path == "/v2/stats/self" {
				return // its counters move between two reads
			}
			if g, w := normalized(t, got.body), normalized(t, want.body); g != w {
				t.Errorf("through the bridge:\n%s\nfrom the v2 server:\n%s", g, w)
			}
		})
	}
}

func TestPassthroughAdvertisesTheBridgeNotTheV2Server(t *testing.T) {
	e := newPassEnv(t, fastLiveness)
	c, err := client.New(client.Config{Endpoints: []string{e.url}, Transport: client.DefaultTransport})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := client.NewMembersAPI(c).List(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || len(ms[0].ClientURLs) != 1 || ms[0].ClientURLs[0] != e.url {
		t.Fatalf("members %+v, want the bridge alone at %s", ms, e.url)
	}
	if m := do(t, "GET", e.url, "/v2/machines", nil); m.body != e.url {
		t.Fatalf("machines %q, want %q", m.body, e.url)
	}
	// A client that syncs its member list keeps talking to the bridge.
	if err := c.Sync(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if eps := c.Endpoints(); len(eps) != 1 || eps[0] != e.url {
		t.Fatalf("endpoints after sync %v, want [%s]", eps, e.url)
	}
	if v := metricValue(t, e.reg, "v2bridge_upstream_up"); v != 1 {
		t.Fatalf("v2bridge_upstream_up %v, want 1", v)
	}
}

func TestPassthroughServesV2Clients(t *testing.T) {
	e := newPassEnv(t, fastLiveness)
	kapi := v2client(t, e.url)
	ctx := ctxT(t, 30*time.Second)
	set, err := kapi.Set(ctx, "/cli/a", "1", &client.SetOptions{TTL: 100 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if set.Node.TTL <= 0 || set.Node.Expiration == nil {
		t.Fatalf("set with a ttl: node %+v has no ttl", set.Node)
	}
	if _, err := kapi.Set(ctx, "/cli/a", "2", &client.SetOptions{PrevValue: "nope"}); !isV2Error(err, client.ErrorCodeTestFailed) {
		t.Fatalf("compare-and-swap on a wrong value: %v, want error 101", err)
	}
	cas, err := kapi.Set(ctx, "/cli/a", "2", &client.SetOptions{PrevIndex: set.Node.ModifiedIndex})
	if err != nil || cas.Action != "compareAndSwap" || cas.PrevNode.Value != "1" {
		t.Fatalf("compare-and-swap: %+v, %v", cas, err)
	}
	for _, v := range []string{"j1", "j2", "j3"} {
		if _, err := kapi.CreateInOrder(ctx, "/cli/q", v, nil); err != nil {
			t.Fatal(err)
		}
	}
	q, err := kapi.Get(ctx, "/cli/q", &client.GetOptions{Recursive: true, Sort: true})
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, n := range q.Node.Nodes {
		vals = append(vals, n.Value)
	}
	if strings.Join(vals, ",") != "j1,j2,j3" {
		t.Fatalf("in-order keys %v, want j1,j2,j3", vals)
	}
	if _, err := kapi.Delete(ctx, "/cli/a", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := kapi.Get(ctx, "/cli/a", nil); !isV2Error(err, client.ErrorCodeKeyNotFound) {
		t.Fatalf("get after delete: %v, want error 100", err)
	}
}

func isV2Error(err error, code int) bool {
	ce, ok := err.(client.Error)
	return ok && ce.Code == code
}

func TestPassthroughRelaysWatches(t *testing.T) {
	e := newPassEnv(t, fastLiveness)
	kapi := v2client(t, e.url)
	ctx := ctxT(t, 30*time.Second)
	start, err := kapi.Set(ctx, "/w/start", "0", nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("long-poll watch", func(t *testing.T) {
		w := kapi.Watcher("/w/lp", &client.WatcherOptions{AfterIndex: start.Index})
		type result struct {
			r   *client.Response
			err error
		}
		got := make(chan result, 1)
		go func() {
			r, err := w.Next(ctx)
			got <- result{r, err}
		}()
		waitFor(t, 10*time.Second, "the watch parked on the v2 server", func() bool { return e.pass.Watchers() == 1 })
		if _, err := kapi.Set(ctx, "/w/lp", "v", nil); err != nil {
			t.Fatal(err)
		}
		res := <-got
		if res.err != nil || res.r.Action != "set" || res.r.Node.Value != "v" {
			t.Fatalf("watch: %+v, %v", res.r, res.err)
		}
	})

	t.Run("stream watch", func(t *testing.T) {
		sw := openWatch(t, e.url, "/v2/keys/w/st?wait=true&stream=true&recursive=true")
		for i := 1; i <= 2; i++ {
			if _, err := kapi.Set(ctx, fmt.Sprintf("/w/st/%d", i), "v", nil); err != nil {
				t.Fatal(err)
			}
			line, err := sw.lines.ReadString('\n')
			if err != nil {
				t.Fatalf("stream event %d: %v", i, err)
			}
			var ev client.Response
			if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Node.Key != fmt.Sprintf("/w/st/%d", i) {
				t.Fatalf("stream event %d: %q (%v)", i, line, err)
			}
		}
	})
}

// rawWatch is a watch sent over plain HTTP, its headers received.
type rawWatch struct {
	resp  *http.Response
	lines *bufio.Reader
}

func openWatch(t *testing.T, base, path string) *rawWatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Body.Close() })
	if r.StatusCode != http.StatusOK {
		t.Fatalf("watch %s: %s", path, r.Status)
	}
	return &rawWatch{resp: r, lines: bufio.NewReader(r.Body)}
}

// livenessBound is how long a lost v2 server may keep a watch parked.
const livenessBound = 4 * time.Second

func TestPassthroughEndsWatchesWhenTheV2ServerIsLost(t *testing.T) {
	for _, c := range []struct {
		name        string
		fault, heal func(e *passEnv)
	}{
		{"blackholed", func(e *passEnv) { e.proxy.Blackhole() }, func(e *passEnv) { e.proxy.Heal() }},
		{"frozen", func(e *passEnv) { signal(t, e, syscall.SIGSTOP) }, func(e *passEnv) { signal(t, e, syscall.SIGCONT) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newPassEnv(t, fastLiveness)
			t.Cleanup(func() { c.heal(e) }) // before the v2 server stops
			lp := openWatch(t, e.url, "/v2/keys/lost/lp?wait=true")
			st := openWatch(t, e.url, "/v2/keys/lost/st?wait=true&stream=true")
			waitFor(t, 5*time.Second, "both watches parked on the v2 server", func() bool { return e.pass.Watchers() == 2 })

			t0 := time.Now()
			c.fault(e)
			ended := make(chan string, 2)
			for name, w := range map[string]*rawWatch{"long-poll": lp, "stream": st} {
				go func() {
					b, err := io.ReadAll(w.resp.Body)
					ended <- fmt.Sprintf("%s watch: %d bytes %q, err %v after %v", name, len(b), b, err, time.Since(t0))
				}()
			}
			for range 2 {
				select {
				case s := <-ended:
					t.Log(s)
					if !strings.Contains(s, "0 bytes") || !strings.Contains(s, "err <nil>") {
						t.Errorf("want an empty 200 ended cleanly: %s", s)
					}
				case <-time.After(livenessBound - time.Since(t0)):
					t.Fatalf("a watch still parked %v after the v2 server was %s", livenessBound, c.name)
				}
			}
			t.Logf("loss detected, watches ended %v after the fault", time.Since(t0))

			asked := time.Now()
			r := do(t, "GET", e.url, "/v2/keys/lost/x", nil)
			if took := time.Since(asked); r.status != 500 || !strings.Contains(r.body, `"errorCode":300`) || took > time.Second {
				t.Fatalf("a request to a lost v2 server: %d %s after %v, want a fast error 300", r.status, r.body, took)
			}
			if r := do(t, "GET", e.url, "/readyz", nil); r.status != http.StatusServiceUnavailable {
				t.Fatalf("/readyz %d while the v2 server is lost, want 503", r.status)
			}
			if v := metricValue(t, e.reg, "v2bridge_upstream_up"); v != 0 {
				t.Fatalf("v2bridge_upstream_up %v while lost, want 0", v)
			}

			c.heal(e)
			if err := e.pass.WaitReady(ctxT(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			if r := do(t, "PUT", e.url, "/v2/keys/lost/x", form("value", "back")); r.status != http.StatusCreated {
				t.Fatalf("a write after recovery: %d %s", r.status, r.body)
			}
			if r := do(t, "GET", e.url, "/readyz", nil); r.status != http.StatusOK {
				t.Fatalf("/readyz %d after recovery, want 200", r.status)
			}
		})
	}
}

func signal(t *testing.T, e *passEnv, sig syscall.Signal) {
	if err := syscall.Kill(e.ref.Pid(), sig); err != nil {
		t.Errorf("signal %v to the v2 server: %v", sig, err)
	}
}

func TestPassthroughWatcherLosesNoEventAcrossALoss(t *testing.T) {
	e := newPassEnv(t, fastLiveness)
	direct := v2client(t, e.ref.URL) // writes reach the v2 server while the bridge is cut off
	ctx := ctxT(t, 60*time.Second)
	start, err := direct.Set(ctx, "/lossless", "", &client.SetOptions{Dir: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := v2bridgetest.StartV2Watcher([]string{e.url}, "/lossless", start.Index)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	n := 0
	write := func(k int) {
		for range k {
			n++
			if _, err := direct.Set(ctx, fmt.Sprintf("/lossless/%d", n), fmt.Sprint(n), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	seen := func(k int) func([]v2bridgetest.WatchedEvent) bool {
		return func(evs []v2bridgetest.WatchedEvent) bool { return len(evs) >= k }
	}
	write(3)
	if !w.WaitFor(ctxT(t, 10*time.Second), seen(3)) {
		t.Fatalf("events before the fault: %v", w.Events())
	}
	e.proxy.Blackhole()
	waitFor(t, livenessBound, "the v2 server declared lost", func() bool { return !e.pass.Ready() })
	write(3)
	e.proxy.Heal()
	if err := e.pass.WaitReady(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	write(3)
	if !w.WaitFor(ctxT(t, 20*time.Second), seen(n)) {
		t.Fatalf("got %d events of %d: %v", len(w.Events()), n, w.Events())
	}
	for i, ev := range w.Events() {
		if ev.Value != fmt.Sprint(i+1) {
			t.Fatalf("event %d is %+v, want value %d: events lost or repeated across the fault", i, ev, i+1)
		}
	}
}
