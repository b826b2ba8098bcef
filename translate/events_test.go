// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"encoding/json"
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
	out, _ := l.DecodeRevision(11, evs, nil, now)
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
		out, _ := l.DecodeRevision(5, c.evs, nil, now)
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
	out, _ := l.DecodeRevision(5, []V3Event{{KV: KV{Key: "/a", ModRevision: 5}}, {KV: KV{Key: l.JournalKey(), Value: j}}}, nil, time.Now())
	if len(out) != 0 {
		t.Fatalf("refresh produced %d events", len(out))
	}
}
