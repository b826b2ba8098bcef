package translate

import (
	"bytes"
	"encoding/json"
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
	p.Bind(0, time.Time{}, now)
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
