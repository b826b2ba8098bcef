// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// fakeSide answers every request with its name, and parks watches until
// their request ends.
type fakeSide struct {
	name    string
	writes  atomic.Int64
	release chan struct{} // a write waits on it when set
}

func (f *fakeSide) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v2/stats/self" {
		_, _ = io.WriteString(w, `{"name":"`+f.name+`","state":"StateLeader"}`)
		return
	}
	if r.Method == http.MethodPut {
		f.writes.Add(1)
		if f.release != nil {
			<-f.release
		}
	}
	if r.URL.Query().Get("wait") == "true" {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	_, _ = io.WriteString(w, f.name)
}

func newTestSwitch(t *testing.T) (*Switch, *fakeSide, *fakeSide) {
	t.Helper()
	pass, v3 := &fakeSide{name: "old"}, &fakeSide{name: "v3"}
	ok := func() bool { return true }
	s := NewSwitch(SwitchConfig{Passthrough: SideHandlers{API: pass, Probes: pass, Ready: ok},
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "metrics") })})
	s.SetV3(SideHandlers{API: v3, Probes: v3, Ready: ok})
	s.ExtendWrites(time.Now().Add(time.Hour))
	return s, pass, v3
}

func serve(s *Switch, method, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

func apply(t *testing.T, s *Switch, r *Record) {
	t.Helper()
	if err := s.Apply(testCtx(t, 10*time.Second), StateOf(r)); err != nil {
		t.Fatal(err)
	}
}

func TestSwitchRoutesByTheRecord(t *testing.T) {
	s, _, _ := newTestSwitch(t)
	if r := serve(s, "GET", "/v2/keys/a"); r.Code != 500 || !strings.Contains(r.Body.String(), "not read its mode record") {
		t.Errorf("before the record is read: %d %s", r.Code, r.Body)
	}
	if r := serve(s, "GET", "/readyz"); r.Code != 503 {
		t.Errorf("readyz before the record is read: %d", r.Code)
	}
	for _, c := range []struct {
		name              string
		rec               *Record
		read, write, code string
	}{
		{"no record: the v2 server", nil, "old", "old", ""},
		{"fencing a cutover: reads from the v2 server, writes refused", &Record{Mode: ModeFencing, From: ModePassthrough, Generation: 1}, "old", "", "cutover is in progress"},
		{"v3", &Record{Mode: ModeV3, Generation: 2, WatchFloor: 100}, "v3", "v3", ""},
		{"fencing a rollback: reads from v3", &Record{Mode: ModeFencing, From: ModeV3, Generation: 3, WatchFloor: 100}, "v3", "", "cutover is in progress"},
		{"passthrough again", &Record{Mode: ModePassthrough, Generation: 4, WatchFloor: 300}, "old", "old", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			apply(t, s, c.rec)
			if r := serve(s, "GET", "/v2/keys/a"); r.Body.String() != c.read {
				t.Errorf("read served by %q, want %q", r.Body, c.read)
			}
			r := serve(s, "PUT", "/v2/keys/a")
			if c.write != "" && r.Body.String() != c.write {
				t.Errorf("write served by %q, want %q", r.Body, c.write)
			}
			if c.write == "" && (r.Code != 500 || !strings.Contains(r.Body.String(), `"errorCode":300`) ||
				!strings.Contains(r.Body.String(), c.code)) {
				t.Errorf("a fenced write: %d %s", r.Code, r.Body)
			}
			if r := serve(s, "GET", "/metrics"); r.Body.String() != "metrics" {
				t.Errorf("/metrics: %s", r.Body)
			}
		})
	}
}

func TestSwitchFencesTheAuthAPIsWrites(t *testing.T) {
	s, pass, v3 := newTestSwitch(t)
	apply(t, s, &Record{Mode: ModeFencing, From: ModePassthrough, Generation: 1})
	for _, m := range []string{"PUT", "DELETE"} {
		for _, p := range []string{"/v2/auth/enable", "/v2/auth/users/alice", "/v2/auth/roles/apps"} {
			r := serve(s, m, p)
			if r.Code != 500 || r.Header().Get("Content-Type") != "application/json" ||
				!strings.HasPrefix(r.Body.String(), `{"message":"v2bridge: a migration cutover is in progress`) {
				t.Errorf("%s %s while fenced: %d %q", m, p, r.Code, r.Body)
			}
		}
	}
	if pass.writes.Load()+v3.writes.Load() != 0 {
		t.Errorf("a fenced auth write reached a side")
	}
	if got := s.FencedWrites(); got != 6 {
		t.Errorf("fenced writes counted: %d, want 6", got)
	}
	if r := serve(s, "GET", "/v2/auth/users"); r.Body.String() != "old" {
		t.Errorf("an auth read while fenced: %d %q", r.Code, r.Body)
	}
	apply(t, s, &Record{Mode: ModeV3, Generation: 2, WatchFloor: 100})
	if r := serve(s, "PUT", "/v2/auth/users/alice"); r.Body.String() != "v3" || v3.writes.Load() != 1 {
		t.Errorf("an auth write once on v3: %d %q", r.Code, r.Body)
	}
}

func TestSwitchRefusesWritesOnceTheRegistrationMayHaveLapsed(t *testing.T) {
	s, pass, _ := newTestSwitch(t)
	apply(t, s, nil)
	s.RevokeWrites()
	r := serve(s, "PUT", "/v2/keys/a")
	if r.Code != 500 || !strings.Contains(r.Body.String(), "cannot renew its registration") || pass.writes.Load() != 0 {
		t.Errorf("a write without a live registration: %d %s", r.Code, r.Body)
	}
	if r := serve(s, "GET", "/v2/keys/a"); r.Body.String() != "old" {
		t.Errorf("reads go on without a registration: %s", r.Body)
	}
	s.ExtendWrites(time.Now().Add(time.Minute))
	if r := serve(s, "PUT", "/v2/keys/a"); r.Body.String() != "old" {
		t.Errorf("a write once the registration is renewed: %d %s", r.Code, r.Body)
	}
	if got := s.FencedWrites(); got != 1 {
		t.Errorf("fenced writes counted: %d", got)
	}
}

func TestSwitchAnswersAnIndexOfTheOtherSideWith401(t *testing.T) {
	s, _, _ := newTestSwitch(t)
	apply(t, s, &Record{Mode: ModeV3, Generation: 2, WatchFloor: 100})
	for _, c := range []struct {
		name, query string
		refused     bool
	}{
		{"at the floor", "wait=true&waitIndex=100", true},
		{"below it", "wait=true&waitIndex=7&recursive=true", true},
		{"above it", "wait=true&waitIndex=101", false},
		{"no waitIndex", "wait=true", false},
		{"a quorum read is no watch", "wait=true&quorum=true&waitIndex=5", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest("GET", "/v2/keys/a?"+c.query, nil).WithContext(ctx))
			refused := rec.Code == 400 && strings.Contains(rec.Body.String(), `"errorCode":401`)
			if refused != c.refused {
				t.Errorf("%d %s; want refused=%v", rec.Code, rec.Body, c.refused)
			}
		})
	}
}

func TestSwitchAnswersAnIndexAboveTheCeilingWith401(t *testing.T) {
	s, _, _ := newTestSwitch(t)
	apply(t, s, &Record{Mode: ModePassthrough, Generation: 4, WatchFloor: 6, WatchCeiling: 12000000})
	for _, c := range []struct {
		name, query string
		refused     bool
	}{
		{"an index of etcd v3's", "wait=true&waitIndex=12000001", true},
		{"the v2 server's next index", "wait=true&waitIndex=7", false},
		{"at the ceiling", "wait=true&waitIndex=12000000", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest("GET", "/v2/keys/a?"+c.query, nil).WithContext(ctx))
			refused := rec.Code == 400 && strings.Contains(rec.Body.String(), `"errorCode":401`)
			if refused != c.refused {
				t.Errorf("%d %s; want refused=%v", rec.Code, rec.Body, c.refused)
			}
		})
	}
}

func TestSwitchEndsWatchesWhenTheSideChanges(t *testing.T) {
	s, _, _ := newTestSwitch(t)
	apply(t, s, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve(s, "GET", "/v2/keys/a?wait=true")
	}()
	waitUntil(t, func() bool { return s.Watches() == 1 })
	apply(t, s, &Record{Mode: ModeFencing, From: ModePassthrough, Generation: 1})
	if s.Watches() != 1 {
		t.Fatalf("fencing keeps the side, and the watch")
	}
	apply(t, s, &Record{Mode: ModeV3, Generation: 2})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a watch on the v2 server outlived the switch to v3")
	}
}

// writeInFlight starts s in passthrough with a PUT held at the v2 server
// (until pass.release is closed); wrote is closed once it is answered.
func writeInFlight(t *testing.T, s *Switch, pass *fakeSide) (wrote chan struct{}) {
	t.Helper()
	pass.release = make(chan struct{})
	apply(t, s, nil)
	wrote = make(chan struct{})
	go func() {
		defer close(wrote)
		serve(s, "PUT", "/v2/keys/a")
	}()
	waitUntil(t, func() bool { return pass.writes.Load() == 1 })
	return wrote
}

func TestSwitchFencesOnlyAfterTheWritesInFlight(t *testing.T) {
	s, pass, _ := newTestSwitch(t)
	wrote := writeInFlight(t, s, pass)
	var release sync.Once
	defer func() {
		release.Do(func() { close(pass.release) })
		recv(t, "the write in flight", wrote)
	}()
	applied := make(chan error, 1)
	go func() {
		applied <- s.Apply(testCtx(t, 10*time.Second), StateOf(&Record{Mode: ModeFencing, From: ModePassthrough, Generation: 1}))
	}()
	select {
	case <-applied:
		t.Fatal("the fence was applied while a write to the v2 server was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	// The fence closes the write gate before it waits (a write let through
	// would wait at the v2 server for good).
	waitUntil(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.open
	})
	if r := serve(s, "PUT", "/v2/keys/b"); r.Code != 500 {
		t.Errorf("a new write while the fence waits: %d %s", r.Code, r.Body)
	}
	release.Do(func() { close(pass.release) })
	if err := recv(t, "the fence", applied); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.State(); st.Mode != ModeFencing {
		t.Errorf("state after the fence: %+v", st)
	}
}

func TestSwitchStatsSelfKeepsTheV2ShapeAndAddsTheMode(t *testing.T) {
	s, _, _ := newTestSwitch(t)
	apply(t, s, &Record{Mode: ModeV3, Generation: 2})
	r := serve(s, "GET", "/v2/stats/self")
	var m map[string]any
	if err := json.Unmarshal(r.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["name"] != "v3" || m["state"] != "StateLeader" || m["v2bridgeMode"] != "v3" || m["v2bridgeModeGeneration"] != 2.0 ||
		m["v2bridgeModeSince"] == nil {
		t.Errorf("stats: %v", m)
	}
}

// testCtx is a context that ends after d, or when the test does: no call
// a test makes can outlive it.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// recv waits for ch to yield or close, failing the test after 10s: a
// goroutine that never answers fails the test instead of hanging it.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing within 10s", what)
		panic("unreachable")
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSwitchWriteWindowKeepsTheMonotonicClock: a step of the wall clock
// cannot be faked in a test, but it cannot move a bound that carries the
// monotonic clock reading of the time.Now it came from (String shows it as
// m=); a bound rebuilt from Unix nanoseconds has none.
func TestSwitchWriteWindowKeepsTheMonotonicClock(t *testing.T) {
	s, _, _ := newTestSwitch(t)
	until := s.WritesUntil()
	if !strings.Contains(until.String(), " m=") {
		t.Errorf("the write window's bound %v lost the monotonic clock reading", until)
	}
	s.ExtendWrites(time.Now().Add(-time.Minute)) // never shortens it
	if got := s.WritesUntil(); !got.Equal(until) || !strings.Contains(got.String(), " m=") {
		t.Errorf("the bound after an earlier extension: %v, want %v", got, until)
	}
	s.RevokeWrites()
	if got := s.WritesUntil(); !got.IsZero() {
		t.Errorf("the bound after a revocation: %v", got)
	}
}

func TestSwitchClosedForShutdownStaysClosed(t *testing.T) {
	s, pass, _ := newTestSwitch(t)
	wrote := writeInFlight(t, s, pass)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.CloseWrites(ctx); err == nil {
		t.Error("CloseWrites returned with a write in flight")
	}
	close(pass.release)
	recv(t, "the write in flight", wrote)
	if err := s.CloseWrites(testCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	apply(t, s, &Record{Mode: ModeV3, Generation: 2})
	if r := serve(s, "PUT", "/v2/keys/a"); r.Code != 500 {
		t.Errorf("a write after the gate was closed for good: %d %s", r.Code, r.Body)
	}
}

func TestSwitchPassesTheOldServersOwnIndexAboveTheCeiling(t *testing.T) {
	var idx atomic.Uint64
	core, logs := observer.New(zap.WarnLevel)
	pass, v3 := &fakeSide{name: "old"}, &fakeSide{name: "v3"}
	ok := func() bool { return true }
	s := NewSwitch(SwitchConfig{Passthrough: SideHandlers{API: pass, Probes: pass, Ready: ok, Index: idx.Load},
		Metrics: http.NotFoundHandler(), Logger: zap.New(core)})
	s.SetV3(SideHandlers{API: v3, Probes: v3, Ready: ok})
	apply(t, s, &Record{Mode: ModePassthrough, Generation: 4, WatchFloor: 1000, WatchCeiling: 11000})
	for _, c := range []struct {
		name    string
		index   uint64 // the v2 server's last X-Etcd-Index
		query   string
		refused bool
		room    uint64
		warned  int
	}{
		{"well below the ceiling: an index above it is etcd v3's", 5000, "wait=true&waitIndex=11001", true, 6000, 0},
		{"near the ceiling: warned once", 10500, "wait=true&waitIndex=10501", false, 500, 1},
		{"still near it: not warned again", 10600, "wait=true&waitIndex=10601", false, 400, 1},
		{"past the ceiling: its own index goes through", 11500, "wait=true&waitIndex=11200", false, 0, 2},
		{"past the ceiling: an index above its own is etcd v3's", 11500, "wait=true&waitIndex=11501", true, 0, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			idx.Store(c.index)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest("GET", "/v2/keys/a?"+c.query, nil).WithContext(ctx))
			refused := rec.Code == 400 && strings.Contains(rec.Body.String(), `"errorCode":401`)
			if refused != c.refused {
				t.Errorf("%d %s; want refused=%v", rec.Code, rec.Body, c.refused)
			}
			if room, ok := s.CeilingHeadroom(); !ok || room != c.room {
				t.Errorf("headroom %d (%v), want %d", room, ok, c.room)
			}
			if n := logs.Len(); n != c.warned {
				t.Errorf("%d warnings, want %d: %v", n, c.warned, logs.All())
			}
		})
	}
	apply(t, s, &Record{Mode: ModeV3, Generation: 5, WatchFloor: 20000})
	if _, ok := s.CeilingHeadroom(); ok {
		t.Error("a ceiling reported while serving etcd v3")
	}
}

// idSide answers as a v2 server of cluster id does: the id on every /v2/
// answer, a flushed 200 on a watch.
func idSide(id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v2/") {
			w.Header().Set("X-Etcd-Cluster-Id", id)
		}
		if r.URL.Query().Get("wait") == "true" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			return
		}
		_, _ = io.WriteString(w, id)
	})
}

func TestSwitchPresentsTheOldServersClusterIDOnEverySide(t *testing.T) {
	ok := func() bool { return true }
	s := NewSwitch(SwitchConfig{Passthrough: SideHandlers{API: idSide("01d"), Probes: idSide("01d"), Ready: ok}})
	s.SetV3(SideHandlers{API: idSide("3e3"), Probes: idSide("3e3"), Ready: ok})
	s.ExtendWrites(time.Now().Add(time.Hour))
	check := func(when, method, target string, code int, id string) {
		t.Helper()
		r := serve(s, method, target)
		if r.Code != code || r.Header().Get("X-Etcd-Cluster-Id") != id {
			t.Errorf("%s: %s %s: %d, cluster id %q; want %d, %q (%s)", when, method, target, r.Code,
				r.Header().Get("X-Etcd-Cluster-Id"), code, id, r.Body)
		}
	}
	apply(t, s, nil)
	check("passthrough", "GET", "/v2/keys/a", 200, "01d")
	check("passthrough, a watch", "GET", "/v2/keys/a?wait=true", 200, "01d")
	// No cutover has recorded the v2 server's id yet: the one it sent.
	apply(t, s, &Record{Mode: ModeV3, Generation: 1, WatchFloor: 1000})
	check("v3, before a cutover recorded an id", "GET", "/v2/keys/a", 200, "01d")
	check("v3, a waitIndex of the v2 server's", "GET", "/v2/keys/a?wait=true&waitIndex=7", 400, "01d")
	rec := &Record{Mode: ModeV3, Generation: 2, WatchFloor: 1000, V2ServerClusterID: "0ab"}
	apply(t, s, rec)
	for _, c := range []struct{ method, target string }{{"GET", "/v2/keys/a"}, {"PUT", "/v2/keys/a"},
		{"GET", "/v2/keys/a?wait=true&waitIndex=2000"}, {"GET", "/v2/members"}} {
		check("v3", c.method, c.target, 200, "0ab")
	}
	check("v3, a waitIndex of the v2 server's", "GET", "/v2/keys/a?wait=true&waitIndex=7", 400, "0ab")
	fenced := Next(rec, ModeFencing, ModeV3, "t", time.Now())
	apply(t, s, &fenced)
	check("fenced on v3, a write", "PUT", "/v2/keys/a", 500, "0ab")
	back := Next(&fenced, ModePassthrough, "", "t", time.Now())
	apply(t, s, &back)
	check("rolled back", "GET", "/v2/keys/a", 200, "0ab")
	// An answer the side gives without an id gets none.
	check("/version", "GET", "/version", 200, "")
}
