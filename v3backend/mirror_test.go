// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// mirrorUnderTest is a mirror fed revision by revision as the shared feed
// feeds it (previous values from the mirror, the real decoding, then
// apply), with no etcd member: the events are what a v3 watch would deliver.
type mirrorUnderTest struct {
	t   *testing.T
	m   *mirror
	now time.Time
}

func newMirrorUnderTest(t *testing.T, rev int64) *mirrorUnderTest {
	l, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	m := newMirror(l)
	// As load leaves it over an empty key space at rev.
	m.kvs, m.rev, m.valid = newKVTree(), rev, true
	return &mirrorUnderTest{t: t, m: m, now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func put(key, value string, created, rev, lease int64) translate.V3Event {
	return translate.V3Event{KV: translate.KV{Key: key, Value: []byte(value), CreateRevision: created, ModRevision: rev, Lease: lease}}
}

func del(key string, rev int64) translate.V3Event {
	return translate.V3Event{Delete: true, KV: translate.KV{Key: key, ModRevision: rev}}
}

// feed delivers one revision and returns the v2 events it decoded to, as
// JSON lines.
func (mt *mirrorUnderTest) feed(rev int64, evs ...translate.V3Event) string {
	mt.m.fillPrev(evs)
	out, _, forged := mt.m.layout.DecodeRevision(rev, evs, nil, mt.now)
	if forged {
		mt.t.Fatalf("revision %d: forged", rev)
	}
	mt.m.apply(rev, evs, out)
	var lines []string
	for _, ev := range out {
		lines = append(lines, strings.TrimSuffix(string(ev.JSON()), "\n"))
	}
	return strings.Join(lines, "\n")
}

// get is a v2 GET of p answered from the mirror, as JSON ("" when p does
// not exist), and the revision it was read at.
func (mt *mirrorUnderTest) get(p string, recursive bool) (string, int64) {
	mt.t.Helper()
	l := mt.m.layout
	lists, rev, ok := mt.m.read(l.GetReads(p), false)
	if !ok {
		mt.t.Fatal("the mirror is not valid")
	}
	var file, marker *translate.KV
	if len(lists[0]) > 0 {
		file = lists[0][0]
	}
	if len(lists[1]) > 0 {
		marker = lists[1][0]
	}
	n := l.BuildGet(p, file, marker, lists[2], lists[3], recursive, nil, mt.now)
	if n == nil {
		return "", rev
	}
	return strings.TrimSuffix(string((&translate.Event{Action: "get", Node: n}).JSON()), "\n"), rev
}

func (mt *mirrorUnderTest) wantGet(p string, recursive bool, want string, wantRev int64) {
	mt.t.Helper()
	if got, rev := mt.get(p, recursive); got != want || rev != wantRev {
		mt.t.Fatalf("GET %s at revision %d:\n got %s\nwant %s at revision %d", p, rev, got, want, wantRev)
	}
}

func (mt *mirrorUnderTest) wantEvents(got, want string) {
	mt.t.Helper()
	if got != want {
		mt.t.Fatalf("decoded\n%s\nwant\n%s", got, want)
	}
}

// TestMirrorAppliesPutsDeletesAndExpiries: every change a revision makes is
// in the mirror's reads at that revision, and what it takes from the mirror
// (previous values) makes the watch events right.
func TestMirrorAppliesPutsDeletesAndExpiries(t *testing.T) {
	mt := newMirrorUnderTest(t, 1)
	l := mt.m.layout
	a, dx, dy, tk := l.DataKey("/a"), l.DataKey("/d/x"), l.DataKey("/d/y"), l.DataKey("/t")

	mt.wantEvents(mt.feed(2, put(a, "1", 2, 2, 0)),
		`{"action":"create","node":{"key":"/a","value":"1","modifiedIndex":2000000,"createdIndex":2000000}}`)
	mt.wantGet("/a", false, `{"action":"get","node":{"key":"/a","value":"1","modifiedIndex":2000000,"createdIndex":2000000}}`, 2)

	// The previous value comes from the mirror.
	mt.wantEvents(mt.feed(3, put(a, "2", 2, 3, 0)),
		`{"action":"set","node":{"key":"/a","value":"2","modifiedIndex":3000000,"createdIndex":3000000},`+
			`"prevNode":{"key":"/a","value":"1","modifiedIndex":2000000,"createdIndex":2000000}}`)
	mt.wantGet("/a", false, `{"action":"get","node":{"key":"/a","value":"2","modifiedIndex":3000000,"createdIndex":2000000}}`, 3)

	// Two events in one revision: the keys keep their events' indexes.
	mt.wantEvents(mt.feed(4, put(dx, "x", 4, 4, 0), put(dy, "y", 4, 4, 0)),
		`{"action":"create","node":{"key":"/d/x","value":"x","modifiedIndex":3999999,"createdIndex":3999999}}`+"\n"+
			`{"action":"create","node":{"key":"/d/y","value":"y","modifiedIndex":4000000,"createdIndex":4000000}}`)
	mt.wantGet("/d", true, `{"action":"get","node":{"key":"/d","dir":true,"nodes":[`+
		`{"key":"/d/x","value":"x","modifiedIndex":3999999,"createdIndex":3999999},`+
		`{"key":"/d/y","value":"y","modifiedIndex":4000000,"createdIndex":4000000}]}}`, 4)

	mt.wantEvents(mt.feed(5, del(a, 5)),
		`{"action":"delete","node":{"key":"/a","modifiedIndex":5000000,"createdIndex":2000000},`+
			`"prevNode":{"key":"/a","value":"2","modifiedIndex":3000000,"createdIndex":2000000}}`)
	mt.wantGet("/a", false, "", 5)

	// A key with a lease, then its lease running out: an expiry.
	mt.wantEvents(mt.feed(6, put(tk, "t", 6, 6, 9)),
		`{"action":"create","node":{"key":"/t","value":"t","modifiedIndex":6000000,"createdIndex":6000000}}`)
	mt.wantEvents(mt.feed(7, del(tk, 7)),
		`{"action":"expire","node":{"key":"/t","modifiedIndex":7000000,"createdIndex":6000000},`+
			`"prevNode":{"key":"/t","value":"t","modifiedIndex":6000000,"createdIndex":6000000}}`)
	mt.wantGet("/t", false, "", 7)

	// A range delete: one event per key.
	mt.wantEvents(mt.feed(8, del(dx, 8), del(dy, 8)),
		`{"action":"delete","node":{"key":"/d/x","modifiedIndex":7999999,"createdIndex":3999999},`+
			`"prevNode":{"key":"/d/x","value":"x","modifiedIndex":3999999,"createdIndex":3999999}}`+"\n"+
			`{"action":"delete","node":{"key":"/d/y","modifiedIndex":8000000,"createdIndex":4000000},`+
			`"prevNode":{"key":"/d/y","value":"y","modifiedIndex":4000000,"createdIndex":4000000}}`)
	mt.wantGet("/d", true, "", 8)
	mt.wantGet("/", true, `{"action":"get","node":{"dir":true}}`, 8)
	if n := mt.m.kvs.Len(); n != 0 {
		t.Fatalf("the mirror keeps %d keys of an empty key space", n)
	}
}

// TestMirrorKeepsOnlyItsKeysAndNewerRevisions: a revision the mirror
// already has (it was loaded after it) changes nothing; the journal is not
// kept; an invalidated mirror answers nothing.
func TestMirrorKeepsOnlyItsKeysAndNewerRevisions(t *testing.T) {
	mt := newMirrorUnderTest(t, 10)
	l := mt.m.layout
	mt.m.apply(9, []translate.V3Event{put(l.DataKey("/old"), "x", 9, 9, 0)}, nil)
	mt.wantGet("/old", false, "", 10)

	mt.m.apply(11, []translate.V3Event{put(l.JournalKey(), "{}", 11, 11, 0), put(l.MarkerKey("/m"), "", 11, 11, 0),
		put(l.LeaseKey(5), "123", 11, 11, 5), put(l.SeqKey("/m"), "11", 11, 11, 0)}, nil)
	lo, hi := l.WatchRange()
	lists, rev, ok := mt.m.read([]translate.Read{{Key: lo, End: hi}}, false)
	if !ok || rev != 11 {
		t.Fatalf("read: valid %v at revision %d", ok, rev)
	}
	var keys []string
	for _, kv := range lists[0] {
		keys = append(keys, kv.Key)
	}
	want := []string{l.MarkerKey("/m"), l.LeaseKey(5), l.SeqKey("/m")}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("kept %q, want %q", keys, want)
	}
	mt.wantGet("/m", false, `{"action":"get","node":{"key":"/m","dir":true,"modifiedIndex":11000000,"createdIndex":11000000}}`, 11)

	// A write's snapshot reads from the mirror: the first key of each.
	kvs, rev, ok := mt.m.firsts(l.SnapshotReads("/m", true))
	if !ok || rev != 11 || len(kvs) != 5 || kvs[0] != nil || kvs[1] == nil || kvs[1].Key != l.MarkerKey("/m") ||
		kvs[2] != nil || kvs[3] != nil || kvs[4] == nil || string(kvs[4].Value) != "11" {
		t.Fatalf("firsts: %v at %d (valid %v)", kvs, rev, ok)
	}

	mt.m.invalidate()
	if _, _, ok := mt.m.read([]translate.Read{{Key: lo, End: hi}}, false); ok {
		t.Fatal("an invalidated mirror answered a read")
	}
	if _, _, ok := mt.m.firsts(l.SnapshotReads("/m", false)); ok {
		t.Fatal("an invalidated mirror answered a snapshot")
	}
	if !mt.m.resume(12) {
		t.Fatal("a mirror at revision 11 did not resume a feed from 12")
	}
	mt.wantGet("/m", false, `{"action":"get","node":{"key":"/m","dir":true,"modifiedIndex":11000000,"createdIndex":11000000}}`, 11)
}

// TestMirrorReloadKeepsEventIndexes: a key written in a revision of several
// events keeps its event's index across a reload of the copy (a reload
// reads revisions only), while a key rewritten since shows its new
// revision's index.
func TestMirrorReloadKeepsEventIndexes(t *testing.T) {
	mt := newMirrorUnderTest(t, 3)
	l := mt.m.layout
	dx, dy := l.DataKey("/d/x"), l.DataKey("/d/y")
	mt.feed(4, put(dx, "x", 4, 4, 0), put(dy, "y", 4, 4, 0))
	mt.feed(5, put(dy, "y2", 4, 5, 0))

	// What load reads back at revision 6, after a write the copy missed:
	// /d/x as it was, /d/y rewritten in revision 6.
	t6 := newKVTree()
	t6.ReplaceOrInsert(&translate.KV{Key: dx, Value: []byte("x"), CreateRevision: 4, ModRevision: 4})
	t6.ReplaceOrInsert(&translate.KV{Key: dy, Value: []byte("y3"), CreateRevision: 4, ModRevision: 6})
	mt.m.invalidate()
	mt.m.install(t6, 6)
	mt.wantGet("/d", true, `{"action":"get","node":{"key":"/d","dir":true,"nodes":[`+
		`{"key":"/d/x","value":"x","modifiedIndex":3999999,"createdIndex":3999999},`+
		`{"key":"/d/y","value":"y3","modifiedIndex":6000000,"createdIndex":4000000}]}}`, 6)
}
