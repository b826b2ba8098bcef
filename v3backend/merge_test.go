// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func ev(key string, rev int64) *clientv3.Event {
	return &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}}
}

func keysOf(g []*clientv3.Event) string {
	s := ""
	for _, e := range g {
		s += fmt.Sprintf("%s@%d ", e.Kv.Key, e.Kv.ModRevision)
	}
	return s
}

// TestMergerHandsOnOnlyCompleteRevisions: a revision goes on once every
// range has shown it (a later change, or progress), whole and range by
// range; progress is told only past what was handed on.
func TestMergerHandsOnOnlyCompleteRevisions(t *testing.T) {
	m := newMerger(3, 10) // ranges: data, markers, journal; watching from revision 10
	if g := m.next(); g != nil {
		t.Fatalf("next on nothing: %s", keysOf(g))
	}
	if _, ok := m.progressed(); ok {
		t.Fatal("progress told before anything was received")
	}
	// Revision 12 (a write: data, journal) arrives on two ranges; the
	// markers' range has said nothing of it.
	m.add(2, []*clientv3.Event{ev("j", 12)})
	m.add(0, []*clientv3.Event{ev("/a", 12), ev("/b", 12), ev("/c", 13)})
	if g := m.next(); g != nil {
		t.Fatalf("handed on %s before the markers' range showed revision 12", keysOf(g))
	}
	if !m.waiting() {
		t.Fatal("not waiting with revisions received")
	}
	if _, ok := m.progressed(); ok {
		t.Fatal("progress told while revisions wait")
	}
	m.add(1, []*clientv3.Event{ev("d/a", 12)})
	if got, want := keysOf(m.next()), "/a@12 /b@12 d/a@12 j@12 "; got != want {
		t.Fatalf("revision 12: %q, want %q", got, want)
	}
	// Revision 13 only on the data range: the others must say they are
	// past it.
	if g := m.next(); g != nil {
		t.Fatalf("handed on %s before every range passed 13", keysOf(g))
	}
	m.progress(1, 20)
	if g := m.next(); g != nil {
		t.Fatalf("handed on %s with the journal's range at 12", keysOf(g))
	}
	m.progress(2, 15)
	if got, want := keysOf(m.next()), "/c@13 "; got != want {
		t.Fatalf("revision 13: %q, want %q", got, want)
	}
	if m.waiting() {
		t.Fatal("waiting with nothing left")
	}
	// The data range is at 13, just handed on: nothing to tell. Progress
	// is the least of the ranges'.
	if rev, ok := m.progressed(); ok {
		t.Fatalf("progress %d told at the revision just handed on", rev)
	}
	m.progress(0, 20)
	if rev, ok := m.progressed(); !ok || rev != 15 {
		t.Fatalf("progressed = %d, %v; want 15", rev, ok)
	}
	if rev, ok := m.progressed(); ok {
		t.Fatalf("progress %d told twice", rev)
	}
	// Revisions in the past never go back.
	m.add(2, []*clientv3.Event{ev("j", 16), ev("j", 21)})
	m.progress(2, 21)
	m.progress(0, 21)
	m.progress(1, 21)
	if got, want := keysOf(m.next()), "j@16 "; got != want {
		t.Fatalf("revision 16: %q, want %q", got, want)
	}
	if got, want := keysOf(m.next()), "j@21 "; got != want {
		t.Fatalf("revision 21: %q, want %q", got, want)
	}
	if rev, ok := m.progressed(); ok {
		t.Fatalf("progress %d told at the last revision handed on", rev)
	}
}

// TestMergerOfOneRangeIsTheWatch: one range (a bridge serving the whole
// tree) hands on every revision as it arrives, with no progress needed.
func TestMergerOfOneRangeIsTheWatch(t *testing.T) {
	m := newMerger(1, 0)
	m.add(0, []*clientv3.Event{ev("/a", 5), ev("/b", 5), ev("/a", 6)})
	if got, want := keysOf(m.next()), "/a@5 /b@5 "; got != want {
		t.Fatalf("revision 5: %q, want %q", got, want)
	}
	if got, want := keysOf(m.next()), "/a@6 "; got != want {
		t.Fatalf("revision 6: %q, want %q", got, want)
	}
	if m.waiting() {
		t.Fatal("one range waits")
	}
}
