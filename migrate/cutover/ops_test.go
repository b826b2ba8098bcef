// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/bridge/membership"
	"github.com/v2bridge/v2bridge/migrate/v2client"
	"github.com/v2bridge/v2bridge/translate"
)

// fakeOldServer answers what the commands ask a v2 server: a quorum
// GET with its index, and a probe's watch, which parks until the request
// ends. It notes when each index read came.
type fakeOldServer struct {
	index uint64

	mu    sync.Mutex // guards reads
	reads []time.Time
}

func (o *fakeOldServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Etcd-Index", strconv.FormatUint(o.index, 10))
	w.Header().Set("X-Etcd-Cluster-Id", "cafe")
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Query().Get("wait") == "true" {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	o.mu.Lock()
	o.reads = append(o.reads, time.Now())
	o.mu.Unlock()
	_, _ = w.Write([]byte(`{"action":"get","node":{"dir":true}}`))
}

func (o *fakeOldServer) readTimes() []time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]time.Time(nil), o.reads...)
}

func startOldServer(t *testing.T, index uint64) (*fakeOldServer, *V2Server) {
	t.Helper()
	old := &fakeOldServer{index: index}
	srv := httptest.NewServer(old)
	t.Cleanup(srv.Close)
	src, err := NewV2Server([]string{srv.URL}, nil, "", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	src.Quiet = 20 * time.Millisecond
	t.Cleanup(src.Close)
	return old, src
}

func testOptions(t *testing.T, f *fakeEtcd, src *V2Server) (Options, *strings.Builder) {
	t.Helper()
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // guards log
	log := &strings.Builder{}
	return Options{Client: f, Keys: testKeys, Layout: layout, V2Server: src,
		V3Index:        func(context.Context) (uint64, error) { return 58_000_000, nil },
		V2ServerPadKey: "/_v2bridge_rollback_pad", AckTimeout: 5 * time.Second, FollowTimeout: 5 * time.Second,
		RequestTimeout: time.Second, Poll: 10 * time.Millisecond, By: "test",
		Log: func(s string) {
			mu.Lock()
			defer mu.Unlock()
			log.WriteString(s + "\n")
		}}, log
}

func modeRecord(t *testing.T, f *fakeEtcd) *Record {
	t.Helper()
	v, ok := f.value(testKeys.Mode)
	if !ok {
		return nil
	}
	r, err := Decode([]byte(v))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRollbackLooksForV3WritesAgainOnceFenced(t *testing.T) {
	for _, c := range []struct {
		name    string
		force   bool
		mode    string // of the record afterwards
		errText string
	}{
		{"a write while fencing: back to v3", false, ModeV3, "while the rollback fenced"},
		{"a write while fencing, --force: discarded", true, ModePassthrough, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeEtcd(testKeys)
			f.put(testKeys.Mode, string((&Record{Mode: ModeV3, Generation: 2, CutoverIndex: 57_000_000,
				WatchFloor: 57_000_000}).Encode()), 0)
			var once sync.Once
			f.afterTxn = func() {
				// A write that passed the scan but not yet the fence.
				once.Do(func() { f.put("/coreos.com/network/subnets/a", "v", 0) })
			}
			_, src := startOldServer(t, 27)
			o, log := testOptions(t, f, src)
			o.Force = c.force
			res, err := Rollback(testCtx(t, time.Minute), o)
			if c.errText == "" && err != nil || c.errText != "" && (err == nil || !strings.Contains(err.Error(), c.errText)) {
				t.Fatalf("rollback: %v; want an error with %q\n%s", err, c.errText, log)
			}
			if r := modeRecord(t, f); r.Mode != c.mode || r.Generation != 4 {
				t.Errorf("record afterwards: %+v, want %s at generation 4", r, c.mode)
			}
			if c.force && (res.V3Writes != 1 || !strings.Contains(log.String(), "discarding 1 more write")) {
				t.Errorf("--force: %d write(s) counted\n%s", res.V3Writes, log)
			}
		})
	}
}

func TestRollbackCountsOnlyClientsWrites(t *testing.T) {
	layout, _ := translate.NewLayout("", "_v2bridge/")
	journal := func(j translate.Journal) change {
		b, _ := json.Marshal(j)
		return change{key: layout.JournalKey(), val: string(b)}
	}
	for _, c := range []struct {
		name    string
		changes []change
		writes  int
	}{
		{"a v3 client's put", []change{{key: "/x", val: "v"}}, 1},
		{"a bridge's write", []change{{key: "/d/b", val: "v"},
			journal(translate.Journal{Action: translate.ActionSet, Node: &translate.Node{Key: "/d/b"}})}, 1},
		{"a refresh: the v2 server would let the key expire", []change{{key: "/t", val: "v", lease: 7},
			journal(translate.Journal{Action: translate.ActionSet, Node: &translate.Node{Key: "/t"}, Refresh: true})}, 1},
		{"a key's lease expired", []change{{key: "/t", del: true}}, 0},
		{"a directory's TTL ran out: its marker's lease expired", []change{{key: layout.MarkerKey("/d"), del: true}}, 0},
		{"the sweep of what was below it", []change{{key: "/d/a", del: true}, {key: layout.MarkerKey("/d/e"), del: true},
			journal(translate.Journal{Action: translate.ActionExpire, Node: &translate.Node{Key: "/d", Dir: true}, Sweep: true})}, 0},
		{"a sweep record hiding a write", []change{{key: "/d/a", del: true}, {key: "/x", val: "v"},
			journal(translate.Journal{Action: translate.ActionExpire, Node: &translate.Node{Key: "/d", Dir: true}, Sweep: true})}, 2},
		{"bookkeeping only", []change{{key: testKeys.Follow, val: "{}"}}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeEtcd(testKeys)
			f.apply(change{key: "/t", val: "v", lease: 7}, change{key: layout.MarkerKey("/d"), val: "1", lease: 8},
				change{key: "/d/a", val: "v"}, change{key: layout.MarkerKey("/d/e"), val: ""})
			f.put(testKeys.Mode, string((&Record{Mode: ModeV3, Generation: 2}).Encode()), 0)
			f.mu.Lock()
			since := f.rev
			f.mu.Unlock()
			f.apply(c.changes...)
			o, _ := testOptions(t, f, nil)
			o.setDefaults()
			n, paths, err := o.v3WritesSince(testCtx(t, time.Minute), since)
			if err != nil || n != c.writes {
				t.Errorf("%d write(s) %v (%v), want %d", n, paths, err, c.writes)
			}
		})
	}
}

func TestCutoverWaitsForWritesOfABridgeThatDroppedOut(t *testing.T) {
	f := newFakeEtcd(testKeys)
	g, err := f.Grant(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := json.Marshal(membership.Registration{Name: "gone", Mode: ModePassthrough})
	f.put(testKeys.Bridges+strconv.FormatInt(int64(g.ID), 16), string(reg), int64(g.ID))
	fr, _ := json.Marshal(FollowRecord{Prefix: "/", Index: 27, ClusterID: "cafe"})
	f.put(testKeys.Follow, string(fr), 0)
	var (
		mu        sync.Mutex // guards lists, droppedAt
		lists     int
		droppedAt time.Time
	)
	f.onList = func(prefix string) {
		if prefix != testKeys.Bridges {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if lists++; lists == 2 { // seen once unacknowledged, then gone
			droppedAt = time.Now()
			f.expire()
		}
	}
	old, src := startOldServer(t, 27)
	o, log := testOptions(t, f, src)
	o.RequestTimeout = 500 * time.Millisecond
	res, err := Cutover(testCtx(t, time.Minute), o)
	if err != nil {
		t.Fatalf("cutover: %v\n%s", err, log)
	}
	if res.Record.Mode != ModeV3 {
		t.Fatalf("record: %+v", res.Record)
	}
	mu.Lock()
	dropped := droppedAt
	mu.Unlock()
	var next time.Time
	for _, r := range old.readTimes() {
		if r.After(dropped) {
			next = r
			break
		}
	}
	if next.IsZero() || next.Sub(dropped) < 450*time.Millisecond {
		t.Errorf("the v2 server's index was read %v after a bridge dropped out; want at least the request timeout (500ms)\n%s",
			next.Sub(dropped), log)
	}
	if !strings.Contains(log.String(), "dropped out without acknowledging") {
		t.Errorf("the drop-out was not said:\n%s", log)
	}
}

func TestCaughtIsNoProofWhenTheCallerGivesUp(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Etcd-Index", "27")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The caller gives up once the probe's watch has its headers.
	c, err := v2client.New(v2client.Config{URLs: []string{srv.URL},
		Transport: headersThen{http.DefaultTransport, cancel}})
	if err != nil {
		t.Fatal(err)
	}
	src := &V2Server{c: c, timeout: 5 * time.Second, Quiet: time.Minute}
	defer src.Close()
	ok, at, err := src.Caught(ctx, "/", 28)
	if ok || err == nil {
		t.Errorf("a probe its caller cancelled: caught %v at %d (%v); want an error", ok, at, err)
	}
}

// headersThen calls then once a response's headers are in.
type headersThen struct {
	base http.RoundTripper
	then func()
}

func (h headersThen) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.base.RoundTrip(r)
	if err == nil {
		h.then()
	}
	return resp, err
}

var _ Etcd = (*clientv3.Client)(nil)

func TestCutoverCopiesTheAuthDataAndRefusesUnknownPasswords(t *testing.T) {
	for _, c := range []struct {
		name    string
		unknown func(dryRun bool) []string // users whose password is unknown
		allow   bool
		mode    string // of the record afterwards ("": none)
		gen     uint64
		errText string
	}{
		{"every password known", func(bool) []string { return nil }, false, ModeV3, 2, ""},
		{"unknown before fencing: refused, nothing fenced",
			func(bool) []string { return []string{"alice", "bob"} }, false, "", 0, "no password for alice, bob"},
		{"unknown in the last copy: the fence is lifted",
			func(dry bool) []string {
				if dry {
					return nil
				}
				return []string{"carol"}
			}, false, ModePassthrough, 2, "no password for carol"},
		{"unknown, allowed", func(bool) []string { return []string{"alice"} }, true, ModeV3, 2, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeEtcd(testKeys)
			fr, _ := json.Marshal(FollowRecord{Prefix: "/", Index: 27, ClusterID: "cafe"})
			f.put(testKeys.Follow, string(fr), 0)
			_, src := startOldServer(t, 27)
			o, log := testOptions(t, f, src)
			var copies []bool // dryRun of each call
			o.CopyAuth = func(_ context.Context, dryRun bool) (AuthCopy, error) {
				copies = append(copies, dryRun)
				return AuthCopy{Enabled: true, Users: 3, Roles: 1, UnknownPasswords: c.unknown(dryRun)}, nil
			}
			o.AllowUnknownPasswords = c.allow
			res, err := Cutover(testCtx(t, time.Minute), o)
			if c.errText == "" && err != nil || c.errText != "" && (err == nil || !strings.Contains(err.Error(), c.errText) ||
				!strings.Contains(err.Error(), "--allow-unknown-passwords")) {
				t.Fatalf("cutover: %v; want an error with %q\n%s", err, c.errText, log)
			}
			r := modeRecord(t, f)
			switch {
			case c.mode == "" && r != nil:
				t.Errorf("record afterwards: %+v, want none", r)
			case c.mode != "" && (r == nil || r.Mode != c.mode || r.Generation != c.gen):
				t.Errorf("record afterwards: %+v, want %s at generation %d", r, c.mode, c.gen)
			}
			wantCopies := []bool{true, false}
			if c.mode == "" {
				wantCopies = []bool{true}
			}
			if !reflect.DeepEqual(copies, wantCopies) {
				t.Errorf("copies (dry run each): %v, want %v", copies, wantCopies)
			}
			if c.mode == ModeV3 && !strings.Contains(log.String(), "copied the users and roles one last time: 3 users, 1 roles, auth enabled: true") {
				t.Errorf("the last copy was not said:\n%s", log)
			}
			if want := (&AuthCopy{Enabled: true, Users: 3, Roles: 1, UnknownPasswords: c.unknown(false)}); c.mode == ModeV3 &&
				!reflect.DeepEqual(res.Auth, want) {
				t.Errorf("the result's last copy: %+v, want %+v", res.Auth, want)
			}
		})
	}
}
