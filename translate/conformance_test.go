// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"encoding/json"
	"testing"
	"time"
)

// TestPlanWriteConformanceFixes holds the write-planning differences the
// conformance suite (../conformance) found against a real etcd v2 server,
// one row per fix, so each stays fixed without a server.
func TestPlanWriteConformanceFixes(t *testing.T) {
	l, _ := NewLayout("", "_v2bridge/")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	file := func(k, v string, rev int64) *KV {
		return &KV{Key: l.DataKey(k), Value: []byte(v), CreateRevision: rev, ModRevision: rev}
	}
	marker := func(k string, rev int64) *KV { return &KV{Key: l.MarkerKey(k), CreateRevision: rev, ModRevision: rev} }
	// snap builds a snapshot of p at revision 20 from the keys that exist.
	snap := func(p string, kvs map[string]*KV) *Snapshot {
		reads := l.SnapshotReads(p, false)
		vals := make([]*KV, len(reads))
		for i, r := range reads {
			if r.End == "" {
				vals[i] = kvs[r.Key]
				continue
			}
			for k, kv := range kvs { // first key of the range
				if k >= r.Key && k < r.End && (vals[i] == nil || k < vals[i].Key) {
					vals[i] = kv
				}
			}
		}
		return l.NewSnapshot(p, 20, false, vals)
	}
	keyed := func(kvs ...*KV) map[string]*KV {
		m := map[string]*KV{}
		for _, kv := range kvs {
			m[kv.Key] = kv
		}
		return m
	}
	cases := []struct {
		name  string
		req   Request
		state map[string]*KV
		code  int
		cause string
		check func(t *testing.T, p *Plan)
	}{
		{
			// v2's cause is the root's internal path "/1", trimmed to "".
			name: "compareAndDelete on the root names no path",
			req:  Request{Method: "DELETE", Path: "/", PrevValue: "x"},
			code: EcodeNotFile, cause: "",
		},
		{
			name:  "compareAndDelete on a directory names it",
			req:   Request{Method: "DELETE", Path: "/d", PrevValue: "x"},
			state: keyed(marker("/d", 5)),
			code:  EcodeNotFile, cause: "/d",
		},
		{
			// Revoking the directory's lease would delete its marker: the
			// directory would lose its TTL or vanish.
			name:  "post into a directory with a ttl leaves its lease alone",
			req:   Request{Method: "POST", Path: "/d", Value: "x"},
			state: keyed(&KV{Key: l.MarkerKey("/d"), CreateRevision: 5, ModRevision: 5, Lease: 77}),
			check: func(t *testing.T, p *Plan) {
				if p.Releases(77) {
					t.Error("POST releases its directory's lease")
				}
			},
		},
		{
			name:  "set over a file with a ttl releases its lease",
			req:   Request{Method: "PUT", Path: "/f", Value: "x"},
			state: keyed(&KV{Key: l.DataKey("/f"), Value: []byte("v"), CreateRevision: 5, ModRevision: 5, Lease: 77}),
			check: func(t *testing.T, p *Plan) {
				if !p.Releases(77) || p.Releases(0) {
					t.Error("the replaced file's lease is not released")
				}
			},
		},
		{
			name:  "set below a directory with a ttl leaves its lease alone",
			req:   Request{Method: "PUT", Path: "/d/f", Value: "x"},
			state: keyed(&KV{Key: l.MarkerKey("/d"), CreateRevision: 5, ModRevision: 5, Lease: 77}),
			check: func(t *testing.T, p *Plan) {
				if p.Releases(77) {
					t.Error("a write below a directory releases the directory's lease")
				}
			},
		},
		{
			name:  "delete of a directory with a ttl releases its lease",
			req:   Request{Method: "DELETE", Path: "/d", Recursive: true},
			state: keyed(&KV{Key: l.MarkerKey("/d"), CreateRevision: 5, ModRevision: 5, Lease: 77}),
			check: func(t *testing.T, p *Plan) {
				if !p.Releases(77) {
					t.Error("the deleted directory's lease is not released")
				}
			},
		},
		{
			name:  "a delete's ttl asks for no lease",
			req:   Request{Method: "DELETE", Path: "/f", TTL: ptrU64(5)},
			state: keyed(file("/f", "v", 5)),
			check: func(t *testing.T, p *Plan) {
				if p.TTL != 0 {
					t.Errorf("plan TTL %d", p.TTL)
				}
			},
		},
		{
			name:  "a compareAndDelete's huge ttl is no error",
			req:   Request{Method: "DELETE", Path: "/f", PrevValue: "v", TTL: ptrU64(MaxLeaseTTL + 1)},
			state: keyed(file("/f", "v", 5)),
			check: func(t *testing.T, p *Plan) {
				if p.TTL != 0 || p.Action() != ActionCompareAndDelete {
					t.Errorf("plan TTL %d, action %s", p.TTL, p.Action())
				}
			},
		},
		{
			name:  "compareAndDelete of a file still compares",
			req:   Request{Method: "DELETE", Path: "/f", PrevValue: "x"},
			state: keyed(file("/f", "v", 5)),
			code:  EcodeTestFailed, cause: "[x != v]",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			p, verr := l.PlanWrite(&req, snap(req.Path, c.state), nil, now)
			if c.code != 0 {
				if verr == nil || verr.Code != c.code || verr.Cause != c.cause {
					t.Fatalf("got %v, want error %d with cause %q", verr, c.code, c.cause)
				}
				return
			}
			if verr != nil {
				t.Fatalf("unexpected error %v", verr)
			}
			if c.check != nil {
				c.check(t, p)
			}
		})
	}
}

// TestWatchMatchingConformanceFixes: v2 matches events already in its
// history (a watch with a past waitIndex) by EventHistory.scan's rules and
// live events by the watcher hub's, and a directory deletion tells only the
// watchers on the paths it removed.
func TestWatchMatchingConformanceFixes(t *testing.T) {
	set := func(k string, idx uint64) *Event {
		return &Event{Action: ActionSet, Node: &Node{Key: k, ModifiedIndex: idx}}
	}
	delDir := func(k string, idx uint64, removed ...string) *Event {
		ev := &Event{Action: ActionDelete, Node: &Node{Key: k, Dir: true, ModifiedIndex: idx},
			PrevNode: &Node{Key: k, Dir: true}}
		if removed != nil {
			ev.Removed = map[string]bool{k: true}
			for _, r := range removed {
				ev.Removed[r] = true
			}
		}
		return ev
	}
	const current = 10 // the store index when the watch was made
	for _, c := range []struct {
		name      string
		key       string
		recursive bool
		ev        *Event
		want      bool
	}{
		{"live: hidden key below a recursive watch is skipped", "/d", true, set("/d/_h", 11), false},
		{"history: hidden key below a recursive watch is shown", "/d", true, set("/d/_h", 9), true},
		{"history: hidden key below the root", "/", true, set("/d/_h/x", 9), true},
		{"live: dir delete tells a removed path", "/d/x", false, delDir("/d", 11, "/d/x"), true},
		{"live: dir delete does not tell a path that did not exist", "/d/nope", false, delDir("/d", 11, "/d/x"), false},
		{"live: dir delete with unknown contents tells every path inside", "/d/nope", false, delDir("/d", 11), true},
		{"live: dir delete keeps the '/' boundary", "/dd", false, delDir("/d", 11), false},
		{"history: dir delete tells any path inside", "/d/nope", false, delDir("/d", 9, "/d/x"), true},
		{"history: dir delete is a plain prefix", "/dd", false, delDir("/d", 9), true},
		{"history: recursive keeps the '/' boundary", "/d", true, set("/dd", 9), false},
		{"history: non-recursive ignores children", "/d", false, set("/d/x", 9), false},
		{"live: the key itself", "/d/_h", false, set("/d/_h", 11), true},
	} {
		if got := WatchMatches(c.key, c.recursive, current, c.ev); got != c.want {
			t.Errorf("%s: WatchMatches(%q, %v, %d, %s %s@%d) = %v", c.name, c.key, c.recursive, current,
				c.ev.Action, c.ev.Node.Key, c.ev.Index(), got)
		}
	}
}

// TestDirectoryRemovalConformanceFixes: what a directory's deletion or
// expiry removed is known to the watch side, and an expired directory's
// prevNode shows its expiration as v2's does.
func TestDirectoryRemovalConformanceFixes(t *testing.T) {
	l, _ := NewLayout("", "_v2bridge/")
	now := time.Now()
	del := func(k string) V3Event {
		return V3Event{Delete: true, KV: KV{Key: k}, Prev: &KV{Key: k, CreateRevision: 3}}
	}
	journal := func(action string, n *Node) V3Event {
		b, _ := json.Marshal(Journal{Action: action, Node: n, PrevNode: &Node{Key: n.Key, Dir: true, CreatedIndex: 3}})
		return V3Event{KV: KV{Key: l.JournalKey(), Value: b}}
	}
	exp := now.Add(-time.Second)
	for _, c := range []struct {
		name  string
		evs   []V3Event
		ls    Leases
		check func(t *testing.T, out []*Event, sweeps []string)
	}{
		{
			name: "recursive delete lists the removed paths and the directories they imply",
			evs: []V3Event{del(l.DataKey("/d/a/b")), del(l.MarkerKey("/d")), del(l.MarkerKey("/d/e")),
				del(l.DataKey("/other")), journal(ActionDelete, &Node{Key: "/d", Dir: true})},
			check: func(t *testing.T, out []*Event, _ []string) {
				want := map[string]bool{"/d": true, "/d/a": true, "/d/a/b": true, "/d/e": true}
				if len(out) != 1 || len(out[0].Removed) != len(want) {
					t.Fatalf("events %v", out)
				}
				for k := range want {
					if !out[0].Removed[k] {
						t.Errorf("%s missing from %v", k, out[0].Removed)
					}
				}
			},
		},
		{
			name: "file delete has no removed list",
			evs:  []V3Event{del(l.DataKey("/f")), journal(ActionDelete, &Node{Key: "/f", Value: strPtr("")})},
			check: func(t *testing.T, out []*Event, _ []string) {
				if len(out) != 1 || out[0].Removed != nil {
					t.Fatalf("events %+v", out)
				}
			},
		},
		{
			name: "expired directory shows its expiration",
			evs: []V3Event{{Delete: true, KV: KV{Key: l.MarkerKey("/td")},
				Prev: &KV{Key: l.MarkerKey("/td"), CreateRevision: 3, ModRevision: 3, Lease: 9}}},
			ls: Leases{9: exp},
			check: func(t *testing.T, out []*Event, sweeps []string) {
				if len(out) != 1 || out[0].Action != ActionExpire || len(sweeps) != 1 || sweeps[0] != "/td" {
					t.Fatalf("events %+v, sweeps %v", out, sweeps)
				}
				if e := out[0].PrevNode.Expiration; e == nil || !e.Equal(exp) {
					t.Errorf("prevNode expiration %v, want %v", e, exp)
				}
				SetRemoved(out, "/td", l.SweptPaths("/td", []string{l.DataKey("/td/x/y"), l.MarkerKey("/td/z")}))
				for _, k := range []string{"/td", "/td/x", "/td/x/y", "/td/z"} {
					if !out[0].Removed[k] {
						t.Errorf("%s missing from %v", k, out[0].Removed)
					}
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, sweeps := l.DecodeRevision(20, c.evs, c.ls, now)
			c.check(t, out, sweeps)
		})
	}
}

func ptrU64(v uint64) *uint64 { return &v }
