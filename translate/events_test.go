// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestDecodeRevisionFromJournal(t *testing.T) {
	l, _ := NewLayout("", "_v2bridge/")
	now := time.Now()
	// Plan a CAS the way the backend does, then decode what etcd would emit.
	s := l.NewSnapshot("/k", 10, false, []*KV{{Key: "/k", Value: []byte("old"), CreateRevision: 3, ModRevision: 9}, nil, nil, nil})
	r := &Request{Method: "PUT", Path: "/k", Value: "new", PrevValue: "old"}
	p, verr := l.PlanWrite(r, s, nil, now)
	if verr != nil {
		t.Fatal(verr)
	}
	p.Bind(0, time.Time{}, now, false)
	var journal []byte
	for _, op := range p.Ops {
		if op.Key == l.JournalKey() {
			journal = op.Value
		}
	}
	evs := []V3Event{
		{KV: KV{Key: "/k", Value: []byte("new"), CreateRevision: 3, ModRevision: 11},
			Prev: &KV{Key: "/k", Value: []byte("old"), CreateRevision: 3, ModRevision: 9}},
		{KV: KV{Key: l.JournalKey(), Value: journal, ModRevision: 11}},
	}
	out, _, _ := l.DecodeRevision(11, evs, nil, now)
	if len(out) != 1 {
		t.Fatalf("%d events", len(out))
	}
	got, _ := json.Marshal(out[0])
	want, _ := json.Marshal(p.Result(11))
	if string(got) != string(want) {
		t.Fatalf("watch event %s\nresponse    %s", got, want)
	}
}

func TestDecodeRevisionNative(t *testing.T) {
	l, _ := NewLayout("", "_v2bridge/")
	now := time.Now()
	for _, c := range []struct {
		name    string
		evs     []V3Event
		actions string
	}{
		{"put new", []V3Event{{KV: KV{Key: "/a", Value: []byte("1"), CreateRevision: 5, ModRevision: 5}}}, "create"},
		{"put over", []V3Event{{KV: KV{Key: "/a", ModRevision: 5}, Prev: &KV{Key: "/a", ModRevision: 4}}}, "set"},
		{"delete", []V3Event{{Delete: true, KV: KV{Key: "/a", ModRevision: 5}, Prev: &KV{Key: "/a"}}}, "delete"},
		{"lease expiry", []V3Event{{Delete: true, KV: KV{Key: "/a", ModRevision: 5}, Prev: &KV{Key: "/a", Lease: 7}}}, "expire"},
		{"dir ttl expiry collapses", []V3Event{
			{Delete: true, KV: KV{Key: l.MarkerKey("/d"), ModRevision: 5}, Prev: &KV{Key: l.MarkerKey("/d"), Lease: 7}},
			{Delete: true, KV: KV{Key: "/d/x", ModRevision: 5}, Prev: &KV{Key: "/d/x", Lease: 7}},
		}, "expire"},
		{"unmappable keys ignored", []V3Event{{KV: KV{Key: "/a//b", ModRevision: 5}}, {KV: KV{Key: "/a/", ModRevision: 5}}}, ""},
		{"foreign keys ignored", []V3Event{{KV: KV{Key: "Zforeign", ModRevision: 5}}}, ""},
	} {
		out, _, _ := l.DecodeRevision(5, c.evs, nil, now)
		got := ""
		for _, e := range out {
			got += e.Action
		}
		if got != c.actions {
			t.Errorf("%s: actions %q, want %q", c.name, got, c.actions)
		}
	}
}

func TestRefreshIsSilent(t *testing.T) {
	l, _ := NewLayout("", "_v2bridge/")
	j, _ := json.Marshal(Journal{Action: ActionSet, Node: &Node{Key: "/a"}, Refresh: true})
	out, _, _ := l.DecodeRevision(5, []V3Event{{KV: KV{Key: "/a", Value: []byte("v"), ModRevision: 5}, Prev: &KV{Key: "/a", Value: []byte("v")}},
		{KV: KV{Key: l.JournalKey(), Value: j}}}, nil, time.Now())
	if len(out) != 0 {
		t.Fatalf("refresh produced %d events", len(out))
	}
}

// TestJournalIsBelievedOnlyWhenItMatchesItsRevision: a record a v3 client
// writes by hand cannot make watchers see a change that did not happen, nor
// hide one that did.
func TestJournalIsBelievedOnlyWhenItMatchesItsRevision(t *testing.T) {
	l, _ := NewLayout("", "_v2bridge/")
	rec := func(j Journal) V3Event {
		b, _ := json.Marshal(j)
		return V3Event{KV: KV{Key: l.JournalKey(), Value: b}}
	}
	slot := func(i int, j Journal) V3Event {
		b, _ := json.Marshal(j)
		return V3Event{KV: KV{Key: l.JournalSlotKey(i), Value: b}}
	}
	put := func(k, v string, prev *KV) V3Event { return V3Event{KV: KV{Key: k, Value: []byte(v)}, Prev: prev} }
	del := func(k string) V3Event {
		return V3Event{Delete: true, KV: KV{Key: k}, Prev: &KV{Key: k, CreateRevision: 2}}
	}
	file := func(k string) *Node { return &Node{Key: k, Value: strPtr("")} }
	dir := func(k string) *Node { return &Node{Key: k, Dir: true} }
	for _, c := range []struct {
		name    string
		evs     []V3Event
		forged  bool
		actions string // the events decoded, "action:key" joined by spaces
	}{
		{"a set of its own key", []V3Event{put("/a", "v", nil), rec(Journal{Action: ActionSet, Node: file("/a")})}, false, "set:/a"},
		{"a create with its ancestors' markers", []V3Event{put(l.MarkerKey("/d"), "", nil), put("/d/a", "v", nil),
			rec(Journal{Action: ActionCreate, Node: file("/d/a")})}, false, "create:/d/a"},
		{"an in-order create with its sequence key", []V3Event{put("/q/00000000000000000005", "v", nil),
			put(l.SeqKey("/q"), "5", nil), rec(Journal{Action: ActionCreate, Node: file("/q/00000000000000000005")})}, false,
			"create:/q/00000000000000000005"},
		{"a recursive delete", []V3Event{del("/d/a"), del(l.MarkerKey("/d")), rec(Journal{Action: ActionDelete, Node: dir("/d")})},
			false, "delete:/d"},
		{"a sweep below its directory is silent", []V3Event{del("/d/a"), rec(Journal{Action: ActionExpire, Node: dir("/d"), Sweep: true})},
			false, ""},
		{"a refresh that keeps the value is silent", []V3Event{put("/a", "v", &KV{Key: "/a", Value: []byte("v")}),
			rec(Journal{Action: ActionSet, Node: file("/a"), Refresh: true})}, false, ""},
		{"a delete of a key nobody touched", []V3Event{rec(Journal{Action: ActionDelete, Node: file("/jv")})}, true, ""},
		{"a sweep hiding a real write", []V3Event{put("/x", "v", nil), rec(Journal{Action: ActionExpire, Node: dir("/d"), Sweep: true})},
			true, "create:/x"},
		{"a set naming another key", []V3Event{put("/b", "v", nil), rec(Journal{Action: ActionSet, Node: file("/a")})}, true, "create:/b"},
		{"a refresh that changes the value", []V3Event{put("/a", "new", &KV{Key: "/a", Value: []byte("old")}),
			rec(Journal{Action: ActionSet, Node: file("/a"), Refresh: true})}, true, "set:/a"},
		{"a delete with an unrelated write", []V3Event{del("/d/a"), put("/other", "v", nil), rec(Journal{Action: ActionDelete, Node: dir("/d")})},
			true, "delete:/d/a create:/other"},
		{"an action no bridge writes", []V3Event{put("/a", "v", nil), rec(Journal{Action: ActionExpire, Node: file("/a")})}, true, "create:/a"},
		{"a record that is not JSON", []V3Event{put("/a", "v", nil), {KV: KV{Key: l.JournalKey(), Value: []byte("{")}}}, true, "create:/a"},
		{"a path outside the key space", []V3Event{rec(Journal{Action: ActionDelete, Node: file("../x")})}, true, ""},
		{"a directory's refresh hiding writes below it", []V3Event{put(l.MarkerKey("/d"), "", &KV{Key: l.MarkerKey("/d")}),
			put("/d/x", "v", nil), rec(Journal{Action: ActionUpdate, Node: dir("/d"), Refresh: true})}, true, "create:/d/x"},
		{"a refresh in a slot hiding writes below it", []V3Event{put(l.MarkerKey("/d"), "", &KV{Key: l.MarkerKey("/d")}),
			put("/d/x", "v", nil), slot(0, Journal{Action: ActionUpdate, Node: dir("/d"), Refresh: true})}, true, "create:/d/x"},
		{"a directory's refresh is silent", []V3Event{put(l.MarkerKey("/d"), "", &KV{Key: l.MarkerKey("/d")}),
			rec(Journal{Action: ActionUpdate, Node: dir("/d"), Refresh: true})}, false, ""},
	} {
		out, _, forged := l.DecodeRevision(7, c.evs, nil, time.Now())
		var got []string
		for _, ev := range out {
			got = append(got, ev.Action+":"+ev.Node.Key)
		}
		if forged != c.forged || strings.Join(got, " ") != c.actions {
			t.Errorf("%s: forged %v, events %q; want %v, %q", c.name, forged, strings.Join(got, " "), c.forged, c.actions)
		}
	}
}

// TestOnlyABelievedSweepIsASweep: a rollback skips sweeps when it looks for
// clients' writes, so a sweep record must not hide a write.
func TestOnlyABelievedSweepIsASweep(t *testing.T) {
	l, _ := NewLayout("", "_v2bridge/")
	rec := func(j Journal) V3Event {
		b, _ := json.Marshal(j)
		return V3Event{KV: KV{Key: l.JournalKey(), Value: b}}
	}
	del := func(k string) V3Event {
		return V3Event{Delete: true, KV: KV{Key: k}, Prev: &KV{Key: k, CreateRevision: 2}}
	}
	sweep := Journal{Action: ActionExpire, Node: &Node{Key: "/d", Dir: true}, Sweep: true}
	for _, c := range []struct {
		name  string
		evs   []V3Event
		sweep bool
	}{
		{"the contents of an expired directory removed", []V3Event{del("/d/a"), del(l.MarkerKey("/d/e")), rec(sweep)}, true},
		{"a sweep hiding a put", []V3Event{del("/d/a"), {KV: KV{Key: "/d/b", Value: []byte("v")}}, rec(sweep)}, false},
		{"a sweep hiding a delete elsewhere", []V3Event{del("/x"), rec(sweep)}, false},
		{"a sweep of another data prefix", []V3Event{del("/d/a"), rec(Journal{Action: ActionExpire, Node: sweep.Node, Sweep: true,
			DataPrefix: "/other"})}, false},
		{"a bridge's delete", []V3Event{del("/d/a"), rec(Journal{Action: ActionDelete, Node: &Node{Key: "/d/a"}})}, false},
		{"no journal record", []V3Event{del("/d/a")}, false},
	} {
		if got := l.IsSweep(c.evs); got != c.sweep {
			t.Errorf("%s: sweep %v, want %v", c.name, got, c.sweep)
		}
	}
}

// TestExpireEventsHaveNoTTLLeft: v2 took an expired node's prevNode at the
// moment of expiry; decoding the event later (a replay from history) must
// not count its ttl from now.
func TestExpireEventsHaveNoTTLLeft(t *testing.T) {
	l, _ := NewLayout("", "_v2bridge/")
	exp := time.Now().Add(-3 * time.Second)
	ls := Leases{9: exp}
	evs := []V3Event{
		{Delete: true, KV: KV{Key: "/t"}, Prev: &KV{Key: "/t", Value: []byte("1"), CreateRevision: 4, ModRevision: 4, Lease: 9}},
		{Delete: true, KV: KV{Key: l.MarkerKey("/d")}, Prev: &KV{Key: l.MarkerKey("/d"), CreateRevision: 3, ModRevision: 3, Lease: 9}},
	}
	out, _, _ := l.DecodeRevision(6, evs, ls, time.Now())
	if len(out) != 2 {
		t.Fatalf("events %v", out)
	}
	for _, ev := range out {
		if ev.Action != ActionExpire || ev.PrevNode.TTL != 0 || ev.PrevNode.Expiration == nil {
			t.Errorf("%s %s: prevNode ttl %d, expiration %v; want no ttl and the expiration", ev.Action, ev.Node.Key,
				ev.PrevNode.TTL, ev.PrevNode.Expiration)
		}
	}
}

// TestEncodedIsWhatAnEncoderWrites: the bytes shared among watchers are the
// ones each would have written itself.
func TestEncodedIsWhatAnEncoderWrites(t *testing.T) {
	v := "<b>&"
	ev := &Event{Action: ActionSet, Node: &Node{Key: "/a", Value: &v, ModifiedIndex: 3, CreatedIndex: 3},
		PrevNode: &Node{Key: "/a", Value: &v, ModifiedIndex: 2, CreatedIndex: 2}}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(ev); err != nil {
		t.Fatal(err)
	}
	ev.Encode()
	if string(ev.Encoded) != buf.String() {
		t.Fatalf("Encoded %q, encoder %q", ev.Encoded, buf.String())
	}
}

// TestWatchMatchesPastAndLiveEventsByDifferentRules: v2 matches events
// already in its history (a watch with a past waitIndex) by
// EventHistory.scan's rules and live events by the watcher hub's, and a
// directory deletion reaches live only the watchers on the paths it removed.
func TestWatchMatchesPastAndLiveEventsByDifferentRules(t *testing.T) {
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

// TestDirectoryRemovalListsWhatItRemoved: the event of a directory's
// deletion or expiry carries every path it removed (itself, what was below
// it, and the directories those imply), so the watch side tells only them; a
// file's deletion carries no list.
func TestDirectoryRemovalListsWhatItRemoved(t *testing.T) {
	l, _ := NewLayout("", "_v2bridge/")
	del := func(k string) V3Event {
		return V3Event{Delete: true, KV: KV{Key: k}, Prev: &KV{Key: k, CreateRevision: 3}}
	}
	journal := func(action string, n *Node) V3Event {
		b, _ := json.Marshal(Journal{Action: action, Node: n, PrevNode: &Node{Key: n.Key, Dir: true, CreatedIndex: 3}})
		return V3Event{KV: KV{Key: l.JournalKey(), Value: b}}
	}
	expiredDir := V3Event{Delete: true, KV: KV{Key: l.MarkerKey("/td")},
		Prev: &KV{Key: l.MarkerKey("/td"), CreateRevision: 3, ModRevision: 3, Lease: 9}}
	for _, c := range []struct {
		name string
		evs  []V3Event
		// sweep, when set, is what the backend finds below the expired
		// directory /td and records with SetRemoved.
		sweep []string
		want  []string // nil: no list
	}{
		{
			name: "recursive delete lists the removed paths and the directories they imply",
			evs: []V3Event{del(l.DataKey("/d/a/b")), del(l.MarkerKey("/d")), del(l.MarkerKey("/d/e")),
				journal(ActionDelete, &Node{Key: "/d", Dir: true})},
			want: []string{"/d", "/d/a", "/d/a/b", "/d/e"},
		},
		{
			name: "file delete has no removed list",
			evs:  []V3Event{del(l.DataKey("/f")), journal(ActionDelete, &Node{Key: "/f", Value: strPtr("")})},
		},
		{
			name:  "expired directory lists what its sweep removed",
			evs:   []V3Event{expiredDir},
			sweep: []string{l.DataKey("/td/x/y"), l.MarkerKey("/td/z")},
			want:  []string{"/td", "/td/x", "/td/x/y", "/td/z"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, sweeps, _ := l.DecodeRevision(20, c.evs, Leases{9: time.Now()}, time.Now())
			if c.sweep != nil {
				if len(sweeps) != 1 || sweeps[0] != "/td" {
					t.Fatalf("sweeps %v, want [/td]", sweeps)
				}
				SetRemoved(out, "/td", l.SweptPaths("/td", c.sweep))
			}
			if len(out) != 1 {
				t.Fatalf("events %+v", out)
			}
			if c.want == nil {
				if out[0].Removed != nil {
					t.Errorf("removed %v, want none", out[0].Removed)
				}
				return
			}
			if len(out[0].Removed) != len(c.want) {
				t.Errorf("removed %v, want %v", out[0].Removed, c.want)
			}
			for _, k := range c.want {
				if !out[0].Removed[k] {
					t.Errorf("%s missing from %v", k, out[0].Removed)
				}
			}
		})
	}
}

// TestExpiredDirectoryShowsItsExpiration: an expired directory's event is an
// expire whose prevNode shows the expiration, as v2's does.
func TestExpiredDirectoryShowsItsExpiration(t *testing.T) {
	l, _ := NewLayout("", "_v2bridge/")
	now := time.Now()
	exp := now.Add(-time.Second)
	evs := []V3Event{{Delete: true, KV: KV{Key: l.MarkerKey("/td")},
		Prev: &KV{Key: l.MarkerKey("/td"), CreateRevision: 3, ModRevision: 3, Lease: 9}}}
	out, _, _ := l.DecodeRevision(20, evs, Leases{9: exp}, now)
	if len(out) != 1 || out[0].Action != ActionExpire {
		t.Fatalf("events %+v", out)
	}
	if e := out[0].PrevNode.Expiration; e == nil || !e.Equal(exp) {
		t.Errorf("prevNode expiration %v, want %v", e, exp)
	}
}

// TestEveryWriteDecodesToItsAnswer plans v2 writes, applies their
// transactions to a store as etcd would (events with their previous
// values), and decodes the revision as a watcher does: the event must be
// the write's answer, whether the plan carries a journal record or leaves
// it out because the rule for v3 clients' writes decodes it exactly.
func TestEveryWriteDecodesToItsAnswer(t *testing.T) {
	l := planLayout
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name    string
		req     Request
		state   []*KV
		journal bool
	}{
		{"set over a file", Request{Method: "PUT", Path: "/a/f", Value: "2"}, []*KV{markerKV("/a", 3, 0), fileKV("/a/f", "1", 4, 0)}, false},
		{"set over a file with a ttl", Request{Method: "PUT", Path: "/f", Value: "2"}, []*KV{fileKV("/f", "1", 4, 9)}, true},
		{"set of a file with a ttl", Request{Method: "PUT", Path: "/f", Value: "2", TTL: uint64Ptr(30)}, []*KV{fileKV("/f", "1", 4, 0)}, true},
		{"set of a new file", Request{Method: "PUT", Path: "/a/f", Value: "1"}, nil, true},
		{"create of a new file, with its directories", Request{Method: "PUT", Path: "/a/b/f", Value: "1", PrevExist: boolPtr(false)}, nil, false},
		{"in-order create", Request{Method: "POST", Path: "/q", Value: "1"}, []*KV{markerKV("/q", 3, 0)}, false},
		{"delete of a file", Request{Method: "DELETE", Path: "/f"}, []*KV{fileKV("/f", "1", 4, 0)}, false},
		{"delete of a file with a lease", Request{Method: "DELETE", Path: "/f"}, []*KV{fileKV("/f", "1", 4, 9)}, true},
		{"update", Request{Method: "PUT", Path: "/f", Value: "2", PrevExist: boolPtr(true)}, []*KV{fileKV("/f", "1", 4, 0)}, true},
		{"compare-and-swap", Request{Method: "PUT", Path: "/f", Value: "2", PrevValue: "1"}, []*KV{fileKV("/f", "1", 4, 0)}, true},
		{"compare-and-delete", Request{Method: "DELETE", Path: "/f", PrevValue: "1"}, []*KV{fileKV("/f", "1", 4, 0)}, true},
		{"directory create", Request{Method: "PUT", Path: "/d", Dir: true}, nil, true},
		{"recursive delete", Request{Method: "DELETE", Path: "/a", Recursive: true}, []*KV{markerKV("/a", 3, 0), fileKV("/a/f", "1", 4, 0)}, true},
		{"set of a directory over a file", Request{Method: "PUT", Path: "/f", Dir: true}, []*KV{fileKV("/f", "1", 4, 0)}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			p, verr := l.PlanWrite(&req, snapshotOf(req.Path, c.state), nil, now)
			if verr != nil {
				t.Fatal(verr)
			}
			p.SetJournalLease(7)
			p.Bind(0, time.Time{}, now, false)
			for _, o := range p.Ops {
				if o.Key == l.RecordKey(req.Path) && o.Lease != 7 {
					t.Errorf("the journal record is on lease %d, want the journal lease", o.Lease)
				}
			}
			const rev = 21
			evs := applyOps(c.state, p.Ops, rev)
			hasJournal, hasRecord := false, false
			for _, e := range evs {
				hasJournal = hasJournal || e.KV.Key == l.JournalKey()
				hasRecord = hasRecord || e.KV.Key == l.RecordKey(req.Path)
			}
			if hasJournal != c.journal || hasRecord != c.journal {
				t.Errorf("journal records written: %v and %v, want %v", hasJournal, hasRecord, c.journal)
			}
			// Decoded with both records, with the journal record alone
			// (what a bridge serving a subtree watches), and with the old
			// journal alone (a bridge of the release before wrote it).
			without := func(drop func(string) bool) []V3Event {
				return slices.DeleteFunc(slices.Clone(evs), func(e V3Event) bool { return drop(e.KV.Key) })
			}
			for name, evs := range map[string][]V3Event{
				"both":        evs,
				"record only": without(func(k string) bool { return k == l.JournalKey() }),
				"old only":    without(func(k string) bool { return strings.HasPrefix(k, l.RecordKey("")) }),
			} {
				out, _, forged := l.DecodeRevision(rev, evs, nil, now)
				if forged || len(out) != 1 {
					t.Fatalf("%s: decoded %d events (forged %v), want 1", name, len(out), forged)
				}
				out[0].Removed = nil // what a recursive delete removed is not in its answer
				got, _ := json.Marshal(out[0])
				want, _ := json.Marshal(p.Result(rev))
				if string(got) != string(want) {
					t.Fatalf("%s: watch event %s\nanswer      %s", name, got, want)
				}
			}
		})
	}
}

// applyOps applies ops to state as etcd's transaction would at rev and
// returns the watch events, with previous values, in op order.
func applyOps(state []*KV, ops []Op, rev int64) []V3Event {
	kvs := map[string]*KV{}
	for _, kv := range state {
		kvs[kv.Key] = kv
	}
	var evs []V3Event
	for _, o := range ops {
		switch o.Type {
		case OpPut:
			kv := KV{Key: o.Key, Value: o.Value, CreateRevision: rev, ModRevision: rev}
			prev := kvs[o.Key]
			if prev != nil {
				kv.CreateRevision = prev.CreateRevision
			}
			evs = append(evs, V3Event{KV: kv, Prev: prev})
			kvs[o.Key] = &kv
		case OpDelete:
			var keys []string
			for k := range kvs {
				if k == o.Key || (o.End != "" && k >= o.Key && k < o.End) {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				evs = append(evs, V3Event{Delete: true, KV: KV{Key: k, ModRevision: rev}, Prev: kvs[k]})
				delete(kvs, k)
			}
		}
	}
	return evs
}

func boolPtr(b bool) *bool { return &b }

func uint64Ptr(u uint64) *uint64 { return &u }

// TestWritesCommittedTogetherDecodeToTheirAnswers: the writes of one
// transaction of nested ones (group commit) decode into one event each, in
// order, equal to each write's answer at its place; journaled writes put
// their records at the slots of their places.
func TestWritesCommittedTogetherDecodeToTheirAnswers(t *testing.T) {
	l := planLayout
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	exp := now.Add(30 * time.Second)
	ttl := uint64Ptr(30)
	state := []*KV{fileKV("/f1", "1", 4, 0), fileKV("/f2", "1", 5, 0), fileKV("/f3", "1", 6, 0), fileKV("/f5", "1", 7, 9),
		fileKV("/g1", "1", 8, 0), fileKV("/g3", "1", 9, 0), markerKV("/d", 3, 0)}
	type write struct {
		req   Request
		lease int64
	}
	for _, tc := range []struct {
		name   string
		writes []write
	}{
		{"journaled writes", []write{
			{Request{Method: "PUT", Path: "/f1", Value: "2", PrevExist: boolPtr(true)}, 0},
			{Request{Method: "PUT", Path: "/f2", Value: "2", PrevValue: "1", TTL: ttl}, 11},
			{Request{Method: "PUT", Path: "/f3", Value: "2", TTL: ttl}, 11},
			{Request{Method: "PUT", Path: "/new/dir/f4", Value: "1", PrevExist: boolPtr(false), TTL: ttl}, 11},
			{Request{Method: "DELETE", Path: "/f5"}, 0},
			{Request{Method: "PUT", Path: "/d/sub", Dir: true}, 0},
		}},
		{"writes without a record", []write{
			{Request{Method: "PUT", Path: "/g1", Value: "2"}, 0},
			{Request{Method: "PUT", Path: "/g2/new/f", Value: "1", PrevExist: boolPtr(false)}, 0},
			{Request{Method: "DELETE", Path: "/g3"}, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const rev = 21
			var plans []*Plan
			var ops []Op
			for i, w := range tc.writes {
				req := w.req
				p, verr := l.PlanWrite(&req, snapshotOf(req.Path, state), nil, now)
				if verr != nil {
					t.Fatal(verr)
				}
				p.Bind(w.lease, exp, now, i > 1) // the first TTL write records the lease
				if !p.Batchable() {
					t.Fatalf("%s %s is not batchable", req.Method, req.Path)
				}
				plans = append(plans, p)
				ops = append(ops, p.OpsInSlot(i)...)
			}
			for _, o := range ops {
				if o.Key == l.JournalKey() {
					t.Fatal("a batched write put the journal key itself")
				}
			}
			evs := applyOps(state, ops, rev)
			out, _, forged := l.DecodeRevision(rev, evs, Leases{11: exp}, now)
			if forged || len(out) != len(plans) {
				t.Fatalf("decoded %d events (forged %v), want %d", len(out), forged, len(plans))
			}
			// A bridge serving subtrees watches a range each: it sees the
			// revision's changes grouped by range, not in the order of the
			// transaction. It decodes the same events.
			// (It watches no old journal, which holds every tenant's.)
			byKey := slices.DeleteFunc(slices.Clone(evs), func(e V3Event) bool { return strings.HasPrefix(e.KV.Key, l.JournalKey()) })
			slices.SortStableFunc(byKey, func(a, b V3Event) int { return strings.Compare(a.KV.Key, b.KV.Key) })
			scoped := l.WithServed([]string{"/d", "/f1", "/f2", "/f3", "/f5", "/g1", "/g2", "/g3", "/new"})
			again, _, forged := scoped.DecodeRevision(rev, byKey, Leases{11: exp}, now)
			if a, b := mustJSON(t, out), mustJSON(t, again); forged || a != b {
				t.Errorf("decoded from the ranges (forged %v):\n%s\nwant\n%s", forged, b, a)
			}
			for i, p := range plans {
				got, _ := json.Marshal(out[i])
				want := p.ResultAt(EventIndex(rev, i, len(plans)))
				want.EtcdIndex = 0
				wantJSON, _ := json.Marshal(want)
				if string(got) != string(wantJSON) {
					t.Errorf("write %d: watch event %s\nanswer             %s", i, got, wantJSON)
				}
			}
		})
	}
}

// TestASlotRecordDecodesOnlyWhatItAccountsFor: a slot record accounts for
// the changes at and below its node (and the markers of the directories
// above it it creates), wherever they sit in the revision; a change it does
// not account for (a v3 client's put in the same transaction) is decoded by
// rule after it, never hidden.
func TestASlotRecordDecodesOnlyWhatItAccountsFor(t *testing.T) {
	l := planLayout
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	state := []*KV{fileKV("/a", "1", 4, 0), fileKV("/b", "1", 5, 0)}
	req := Request{Method: "PUT", Path: "/a", Value: "2", PrevExist: boolPtr(true)}
	p, verr := l.PlanWrite(&req, snapshotOf(req.Path, state), nil, now)
	if verr != nil {
		t.Fatal(verr)
	}
	p.Bind(0, time.Time{}, now, false)
	ops := append([]Op{{Type: OpPut, Key: l.DataKey("/b"), Value: []byte("x")}}, p.OpsInSlot(0)...)
	out, _, forged := l.DecodeRevision(21, applyOps(state, ops, 21), nil, now)
	if forged {
		t.Error("a record that matches its own changes was counted as forged")
	}
	if len(out) != 2 {
		t.Fatalf("decoded %d events, want 2", len(out))
	}
	want := []string{
		`{"action":"update","node":{"key":"/a","value":"2","modifiedIndex":20999999,"createdIndex":4000000},"prevNode":{"key":"/a","value":"1","modifiedIndex":4000000,"createdIndex":4000000}}`,
		`{"action":"set","node":{"key":"/b","value":"x","modifiedIndex":21000000,"createdIndex":21000000},"prevNode":{"key":"/b","value":"1","modifiedIndex":5000000,"createdIndex":5000000}}`,
	}
	for i, ev := range out {
		got, _ := json.Marshal(ev)
		if string(got) != want[i] {
			t.Errorf("event %d: %s\nwant     %s", i, got, want[i])
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
