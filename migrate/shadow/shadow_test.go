// SPDX-License-Identifier: Apache-2.0

package shadow

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/v2bridge/v2bridge/bridge/passthrough"
	"github.com/v2bridge/v2bridge/v2api"
)

// env is a passthrough in front of a fake v2 server (v2api over a
// fakeStore), with a shadow comparing against another fakeStore, the v3
// side.
type env struct {
	up, v3 *fakeStore
	url    string // the passthrough's
	direct string // the v2 server's
	pass   *passthrough.Passthrough
	sh     *Shadow
	logs   *observer.ObservedLogs
	reg    *prometheus.Registry
}

// newEnv starts the parts; cfg, when given, adjusts the shadow's Config
// (nil Store: no shadow at all).
func newEnv(t *testing.T, adjust func(*Config)) *env {
	t.Helper()
	e := &env{up: newFake(1000), v3: newFake(5), reg: prometheus.NewRegistry()}
	upSrv := httptest.NewServer(v2api.New(v2api.Config{Store: e.up}))
	t.Cleanup(upSrv.Close)
	e.direct = upSrv.URL
	core, logs := observer.New(zapcore.DebugLevel)
	e.logs = logs
	cfg := Config{Store: e.v3, SampleRate: 1, CatchUp: time.Second, Timeout: time.Second,
		Logger: zap.New(core), Registry: e.reg, Name: "test-bridge"}
	if adjust != nil {
		adjust(&cfg)
	}
	ucfg := passthrough.Config{URLs: []string{upSrv.URL}, HeartbeatInterval: 50 * time.Millisecond}
	if cfg.Store != nil {
		sh, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sh.Close)
		e.sh = sh
		ucfg.Observer = sh
	}
	p, err := passthrough.New(ucfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	e.pass = p
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// both puts a node on both sides (a faithful copy).
func (e *env) both(p, value string, dir bool) {
	e.up.put(p, value, dir, 0)
	e.v3.put(p, value, dir, 0)
}

// do sends a v2 request to base and returns the status and body.
func do(t *testing.T, base, method, target string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, base+target, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// settle waits until every sampled request is compared or dropped.
func (e *env) settle(t *testing.T) Counts {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c := e.sh.Stats()
		if c.Sampled > 0 && c.Compared()+c.DroppedTotal()-c.Dropped["busy"]-c.Dropped["queue_full"]-c.Dropped["too_large"] >= c.Sampled {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("comparisons not finished: %+v", c)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEqualAnswersCountNoDivergence(t *testing.T) {
	e := newEnv(t, nil)
	e.both("/a", "1", false)
	e.both("/dir/x", "x", false)
	e.both("/dir/sub/y", "y", false)
	e.both("/empty", "", true)
	// The v2 server numbers its writes from 1000, the v3 side from 5: every
	// index differs, and none of that counts.
	for _, target := range []string{
		"/v2/keys/a", "/v2/keys/dir", "/v2/keys/dir?recursive=true", "/v2/keys/dir?recursive=true&sorted=true",
		"/v2/keys/empty", "/v2/keys/nope", "/v2/keys/?recursive=true", "/v2/keys/a?quorum=true",
	} {
		if code, body := do(t, e.url, "GET", target, nil); code == 0 || body == "" {
			t.Fatalf("GET %s: %d %q", target, code, body)
		}
	}
	c := e.settle(t)
	if c.Reads != 8 || c.Diverged() != 0 || c.Lagging != 0 {
		t.Fatalf("counts %+v, log %v", c, e.logs.All())
	}
	if n := testutil.ToFloat64(e.sh.m.compared.WithLabelValues("read")); n != 8 {
		t.Errorf("v2bridge_shadow_compared_total{op=read} = %v", n)
	}
}

func TestDivergencesAreCountedByKind(t *testing.T) {
	for _, c := range []struct {
		name   string
		v3     func(f *fakeStore) // how the v3 copy departs from the v2 server
		target string
		kind   string
		key    string
	}{
		{"a changed value", func(f *fakeStore) { f.put("/a", "changed", false, 0) }, "/v2/keys/a", KindValue, "/a"},
		{"a missing key", func(f *fakeStore) { f.remove("/a") }, "/v2/keys/a", KindMissing, "/a"},
		{"a key only v3 has", func(f *fakeStore) { f.put("/new", "n", false, 0) }, "/v2/keys/new", KindExtra, "/new"},
		{"an extra child", func(f *fakeStore) { f.put("/dir/extra", "e", false, 0) }, "/v2/keys/dir", KindChildren, "/dir"},
		{"a missing child in a recursive listing", func(f *fakeStore) { f.remove("/dir/sub/y") },
			"/v2/keys/dir?recursive=true&sorted=true", KindChildren, "/dir/sub"},
		{"a changed value deep in a listing", func(f *fakeStore) { f.put("/dir/sub/y", "z", false, 0) },
			"/v2/keys/dir?recursive=true", KindValue, "/dir/sub/y"},
		{"a directory where a file was", func(f *fakeStore) { f.remove("/a"); f.put("/a", "", true, 0) },
			"/v2/keys/a", KindDir, "/a"},
		{"a TTL only v3 has", func(f *fakeStore) { f.put("/a", "1", false, time.Hour) }, "/v2/keys/a", KindTTL, "/a"},
		{"another error code", func(f *fakeStore) { f.errs["/nope"] = 104 }, "/v2/keys/nope", KindErrorCode, "/nope"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.both("/a", "1", false)
			e.both("/dir/x", "x", false)
			e.both("/dir/sub/y", "y", false)
			c.v3(e.v3)
			do(t, e.url, "GET", c.target, nil)
			got := e.settle(t)
			if got.Diverged() != 1 || got.Divergences[c.kind] != 1 || got.Lagging != 0 {
				t.Fatalf("counts %+v, want one %s", got, c.kind)
			}
			if n := testutil.ToFloat64(e.sh.m.divergences.WithLabelValues(c.kind)); n != 1 {
				t.Errorf("v2bridge_shadow_divergences_total{kind=%q} = %v", c.kind, n)
			}
			warns := e.logs.FilterLevelExact(zapcore.WarnLevel).FilterField(zap.String("key", c.key)).All()
			if len(warns) != 1 {
				t.Errorf("want one warning naming %s, got %v", c.key, e.logs.All())
			}
			for _, w := range warns {
				for _, f := range w.Context {
					if f.Key == "differences" && f.Type != zapcore.Int64Type {
						t.Errorf("the warning carries values: %v", w.Context)
					}
				}
			}
			if len(e.logs.FilterLevelExact(zapcore.DebugLevel).FilterMessageSnippet("with values").All()) != 1 {
				t.Errorf("no debug line with the values: %v", e.logs.All())
			}
		})
	}
}

func TestTTLsAgreeWithinTheTolerance(t *testing.T) {
	e := newEnv(t, nil)
	e.up.put("/t", "v", false, time.Hour)
	e.v3.put("/t", "v", false, time.Hour-3*time.Second) // the follower's lease, granted a moment later
	do(t, e.url, "GET", "/v2/keys/t", nil)
	if c := e.settle(t); c.Reads != 1 || c.Diverged() != 0 {
		t.Fatalf("counts %+v", c)
	}
}

func TestAReadOfAMovingKeyThatV3DoesNotFollowIsLagging(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.CatchUp = 200 * time.Millisecond })
	e.both("/m", "1", false)
	e.up.put("/m", "2", false, 0) // not applied on the v3 side yet
	do(t, e.url, "GET", "/v2/keys/m", nil)
	e.up.put("/m", "3", false, 0) // and the v2 server keeps moving
	if c := e.settle(t); c.Reads != 1 || c.Lagging != 1 || c.Diverged() != 0 {
		t.Fatalf("counts %+v", c)
	}
}

func TestAFullQueueDropsWithoutBlocking(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Queue, c.Workers = 2, 1 })
	e.v3.mu.Lock()
	e.v3.block = true // every comparison waits for its deadline
	e.v3.mu.Unlock()
	req := httptest.NewRequest("GET", "/v2/keys/a", nil)
	ans := passthrough.Answer{URL: e.direct, Status: 200, Header: http.Header{}, Body: []byte("{}\n")}
	start := time.Now()
	for range 1000 {
		if e.sh.Sample(req) {
			e.sh.Observe(req, ans)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("1000 observations took %v", d)
	}
	c := e.sh.Stats()
	if c.Sampled > 3 || c.Dropped["queue_full"] == 0 || c.Dropped["busy"] == 0 {
		t.Errorf("counts %+v: want the queue's worth sampled, the rest dropped", c)
	}
	if r := testutil.ToFloat64(e.sh.m.rate); r >= 1 {
		t.Errorf("the sample rate did not drop under pressure: %v", r)
	}
	if n := testutil.ToFloat64(e.sh.m.dropped.WithLabelValues("queue_full")); n == 0 {
		t.Error("v2bridge_shadow_dropped_total{reason=queue_full} is 0")
	}
	closed := make(chan struct{})
	go func() {
		e.sh.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits for the stalled v3 side")
	}
}

func TestTheSampleRateRecovers(t *testing.T) {
	sh, err := New(Config{Store: newFake(1), SampleRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	sh.shift.Store(3)
	sh.lastShift.Store(time.Now().Add(-time.Hour).UnixNano())
	sh.lastFull.Store(time.Now().Add(-time.Hour).UnixNano())
	now := time.Now()
	sh.recover(now)
	if sh.shift.Load() != 2 {
		t.Fatalf("shift %d after a quiet second", sh.shift.Load())
	}
	sh.recover(now.Add(100 * time.Millisecond))
	if sh.shift.Load() != 2 {
		t.Fatalf("recovered twice within a second")
	}
}

func TestSampleDecides(t *testing.T) {
	sh, err := New(Config{Store: newFake(1), SampleRate: 0.25, Prefix: "/coreos.com/network"})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	for _, c := range []struct {
		method, target string
		never          bool
	}{
		{"GET", "/v2/keys/coreos.com/network/config", false},
		{"PUT", "/v2/keys/coreos.com/network/subnets/x", true}, // without Updates: see TestEveryWriteIsTaken
		{"GET", "/v2/keys/coreos.com/network", false},
		{"GET", "/v2/keys/coreos.com/networking", true},
		{"GET", "/v2/keys/other", true},
		{"GET", "/v2/keys/", true},
		{"GET", "/version", true},
		{"GET", "/v2/stats/self", true},
		{"OPTIONS", "/v2/keys/coreos.com/network/config", true},
	} {
		n := 0
		for range 4000 {
			if sh.Sample(httptest.NewRequest(c.method, c.target, nil)) {
				n++
			}
		}
		if c.never && n != 0 || !c.never && (n < 700 || n > 1300) {
			t.Errorf("%s %s: sampled %d of 4000 at rate 0.25", c.method, c.target, n)
		}
	}
	for _, bad := range []float64{0, -1, 1.5} {
		if _, err := New(Config{Store: newFake(1), SampleRate: bad}); err == nil {
			t.Errorf("sample rate %v accepted", bad)
		}
	}
}

// TestAStalledV3SideLeavesClientsAlone: with the v3 side blackholed (every
// call waits for its deadline), clients get the v2 server's answers as fast
// as without a shadow.
func TestAStalledV3SideLeavesClientsAlone(t *testing.T) {
	plain := newEnv(t, func(c *Config) { c.Store = nil })
	stalled := newEnv(t, func(c *Config) { c.Timeout = 2 * time.Second })
	stalled.v3.mu.Lock()
	stalled.v3.block = true
	stalled.v3.mu.Unlock()
	for _, e := range []*env{plain, stalled} {
		e.up.put("/a", "1", false, 0)
	}
	measure := func(e *env) (time.Duration, []string) {
		var worst time.Duration
		var bodies []string
		for i := range 40 {
			start := time.Now()
			var code int
			var body string
			if i%4 == 3 {
				code, body = do(t, e.url, "PUT", "/v2/keys/b", url.Values{"value": {"x"}})
			} else {
				code, body = do(t, e.url, "GET", "/v2/keys/a", nil)
			}
			worst = max(worst, time.Since(start))
			bodies = append(bodies, strings.Join([]string{http.StatusText(code), normalise(body)}, " "))
		}
		return worst, bodies
	}
	pw, pb := measure(plain)
	sw, sb := measure(stalled)
	if strings.Join(pb, "\n") != strings.Join(sb, "\n") {
		t.Errorf("answers differ with a stalled shadow:\n%v\n%v", pb, sb)
	}
	// Every shadow call takes 2 s; no client request may come near that.
	if sw > 500*time.Millisecond {
		t.Errorf("slowest request %v with a stalled v3 side (%v without a shadow)", sw, pw)
	}
	c := stalled.sh.Stats()
	if c.Compared() != 0 || c.Dropped["queue_full"]+c.Dropped["busy"] == 0 && c.Sampled < 30 {
		t.Errorf("counts %+v", c)
	}
	t.Logf("slowest request: %v without a shadow, %v with a stalled v3 side; %+v", pw, sw, c)
}

// normalise drops the indexes from a body (the two v2 server URLs are fakes of
// their own).
func normalise(body string) string {
	var out bytes.Buffer
	skip := false
	for _, f := range strings.FieldsFunc(body, func(r rune) bool { return r == ',' || r == '{' || r == '}' }) {
		skip = strings.Contains(f, "Index")
		if !skip {
			out.WriteString(f + ",")
		}
	}
	return out.String()
}

// fakeRecorder keeps what is published.
type fakeRecorder struct {
	mu        sync.Mutex // guards the fields below
	published []*Record
	refreshed int
}

func (f *fakeRecorder) Publish(_ context.Context, r *Record) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, r)
	return nil
}

func (f *fakeRecorder) Refresh(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshed++
	return nil
}

func (f *fakeRecorder) last() (*Record, int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.published) == 0 {
		return nil, 0, f.refreshed
	}
	return f.published[len(f.published)-1], len(f.published), f.refreshed
}

func TestTheCountersArePublished(t *testing.T) {
	rec := &fakeRecorder{}
	e := newEnv(t, func(c *Config) { c.Recorder, c.RecordInterval = rec, time.Second })
	e.both("/a", "1", false)
	e.v3.put("/a", "2", false, 0)
	do(t, e.url, "GET", "/v2/keys/a", nil)
	e.settle(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, n, refreshed := rec.last()
		if r != nil && r.Counts.Diverged() == 1 && n >= 1 && refreshed >= 1 {
			if r.Name != "test-bridge" || len(r.Recent) != 1 || r.Recent[0].Key != "/a" || r.Recent[0].Kind != KindValue {
				t.Fatalf("record %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("published %d records (last %+v), refreshed %d", n, r, refreshed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, before, _ := rec.last()
	e.sh.Close()
	if _, after, _ := rec.last(); after != before+1 {
		t.Errorf("Close did not publish a last record: %d then %d", before, after)
	}
}

func TestWriteSummary(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	recs := []Record{
		{Name: "node-a", Host: "a", AdvertiseURLs: []string{"http://127.0.0.1:2379"}, Prefix: "/", SampleRate: 1,
			Started: now.Add(-time.Hour), Updated: now.Add(-4 * time.Second),
			Counts: Counts{Reads: 90, Writes: 10, Lagging: 1, Retried: 3,
				Divergences: map[string]uint64{KindValue: 1}, Dropped: map[string]uint64{"queue_full": 2}},
			Recent: []Divergence{{Key: "/x", Kind: KindValue, Method: "GET", Where: "body.node.value", At: now.Add(-time.Minute)}}},
		{Name: "node-b", Prefix: "/", SampleRate: 0.5, Started: now.Add(-time.Hour), Updated: now,
			Counts: Counts{Reads: 5}},
	}
	var b bytes.Buffer
	WriteSummary(&b, recs, now)
	out := b.String()
	for _, want := range []string{
		"shadow       2 bridge(s)",
		"node-a on a (http://127.0.0.1:2379): 100 compared (90 reads, 10 writes), 1 divergences (1 value), 1 lagging, 3 caught up on re-check, 2 dropped (2 queue_full)",
		"node-b: 5 compared (5 reads, 0 writes), 0 divergences, 0 lagging",
		"total: 105 compared (95 reads, 10 writes), 1 divergences (1 value), 1 lagging",
		"recent: /x: value at body.node.value (node-a GET, 1m0s ago)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	WriteSummary(&b, nil, now)
	if !strings.Contains(b.String(), "no bridge reports") {
		t.Errorf("empty summary: %q", b.String())
	}
}

// BenchmarkSample is what a forwarded request pays for the decision, at a
// rate that leaves most of them out.
func BenchmarkSample(b *testing.B) {
	sh, err := New(Config{Store: newFake(1), SampleRate: 0.01})
	if err != nil {
		b.Fatal(err)
	}
	defer sh.Close()
	r := httptest.NewRequest("GET", "/v2/keys/coreos.com/network/config", nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			sh.Sample(r)
		}
	})
}

func TestAnswersRefusedForAuthAreNotCompared(t *testing.T) {
	e := newEnv(t, nil)
	e.both("/a", "1", false)
	e.up.errs["/a"] = 110 // the v2 server refuses the credentials
	if code, _ := do(t, e.url, "GET", "/v2/keys/a", nil); code != http.StatusUnauthorized {
		t.Fatalf("GET: %d, want 401", code)
	}
	deadline := time.Now().Add(15 * time.Second)
	c := e.sh.Stats()
	for ; c.Dropped["auth_refused"] == 0 && time.Now().Before(deadline); c = e.sh.Stats() {
		time.Sleep(5 * time.Millisecond) // Observe runs once the answer is sent
	}
	if c.Sampled != 0 || c.Compared() != 0 || c.Diverged() != 0 || c.Dropped["auth_refused"] != 1 {
		t.Fatalf("counts %+v", c)
	}
	if n := testutil.ToFloat64(e.sh.m.dropped.WithLabelValues("auth_refused")); n != 1 {
		t.Errorf("v2bridge_shadow_dropped_total{reason=auth_refused} = %v", n)
	}
}
