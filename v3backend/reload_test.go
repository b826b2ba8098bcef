// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// TestMirrorReloadKeepsEveryKeysIndexes: after a reload, every key shows
// the createdIndex and modifiedIndex its writes answered, whichever event
// of a revision of several made it: a key created in such a revision and
// changed while the mirror was invalid keeps its own createdIndex (not
// its revision's), one unchanged keeps both, one created meanwhile shows
// its revision's; and so on through the writes after the reload and a
// second reload.
func TestMirrorReloadKeepsEveryKeysIndexes(t *testing.T) {
	mt := newMirrorUnderTest(t, 3)
	l := mt.m.layout
	dx, dy, dz, dw := l.DataKey("/d/x"), l.DataKey("/d/y"), l.DataKey("/d/z"), l.DataKey("/d/w")
	kv := func(key, value string, created, mod int64) *translate.KV {
		return &translate.KV{Key: key, Value: []byte(value), CreateRevision: created, ModRevision: mod}
	}

	// Three keys created in one revision: each its own index, the last
	// the revision's.
	mt.wantEvents(mt.feed(4, put(dx, "x", 4, 4, 0), put(dy, "y", 4, 4, 0), put(dz, "z", 4, 4, 0)),
		`{"action":"create","node":{"key":"/d/x","value":"x","modifiedIndex":3999998,"createdIndex":3999998}}`+"\n"+
			`{"action":"create","node":{"key":"/d/y","value":"y","modifiedIndex":3999999,"createdIndex":3999999}}`+"\n"+
			`{"action":"create","node":{"key":"/d/z","value":"z","modifiedIndex":4000000,"createdIndex":4000000}}`)
	// /d/y rewritten first in a revision of two (a set: v2 answers it
	// with a new node; reads show the key's createdIndex).
	mt.wantEvents(mt.feed(5, put(dy, "y2", 4, 5, 0), put(dz, "z2", 4, 5, 0)),
		`{"action":"set","node":{"key":"/d/y","value":"y2","modifiedIndex":4999999,"createdIndex":4999999},`+
			`"prevNode":{"key":"/d/y","value":"y","modifiedIndex":3999999,"createdIndex":3999999}}`+"\n"+
			`{"action":"set","node":{"key":"/d/z","value":"z2","modifiedIndex":5000000,"createdIndex":5000000},`+
			`"prevNode":{"key":"/d/z","value":"z","modifiedIndex":4000000,"createdIndex":4000000}}`)

	mt.wantGet("/d/y", false, `{"action":"get","node":{"key":"/d/y","value":"y2","modifiedIndex":4999999,"createdIndex":3999999}}`, 5)

	// The feed ends; meanwhile /d/x is rewritten (revision 6), /d/z
	// deleted (7) and /d/w created (8). The reload reads revision 8.
	mt.m.invalidate()
	t8 := newKVTree()
	t8.ReplaceOrInsert(kv(dx, "x3", 4, 6))
	t8.ReplaceOrInsert(kv(dy, "y2", 4, 5))
	t8.ReplaceOrInsert(kv(dw, "w", 8, 8))
	mt.m.install(t8, 8)
	mt.wantGet("/d", true, `{"action":"get","node":{"key":"/d","dir":true,"nodes":[`+
		`{"key":"/d/w","value":"w","modifiedIndex":8000000,"createdIndex":8000000},`+
		`{"key":"/d/x","value":"x3","modifiedIndex":6000000,"createdIndex":3999998},`+
		`{"key":"/d/y","value":"y2","modifiedIndex":4999999,"createdIndex":3999999}]}}`, 8)

	// The feed resumed: a later write of /d/x (a v3 put, decoded as a
	// set, which v2 answers with a new node) shows as prevNode what the
	// reload read, and a read still shows the key's first createdIndex.
	mt.wantEvents(mt.feed(9, put(dx, "x4", 4, 9, 0)),
		`{"action":"set","node":{"key":"/d/x","value":"x4","modifiedIndex":9000000,"createdIndex":9000000},`+
			`"prevNode":{"key":"/d/x","value":"x3","modifiedIndex":6000000,"createdIndex":3999998}}`)

	mt.wantGet("/d/x", false, `{"action":"get","node":{"key":"/d/x","value":"x4","modifiedIndex":9000000,"createdIndex":3999998}}`, 9)

	// A second reload, /d/y rewritten meanwhile: it still keeps its own
	// createdIndex, and /d/x both of its indexes.
	mt.m.invalidate()
	t11 := newKVTree()
	t11.ReplaceOrInsert(kv(dx, "x4", 4, 9))
	t11.ReplaceOrInsert(kv(dy, "y3", 4, 10))
	t11.ReplaceOrInsert(kv(dw, "w", 8, 8))
	mt.m.install(t11, 11)
	mt.wantGet("/d", true, `{"action":"get","node":{"key":"/d","dir":true,"nodes":[`+
		`{"key":"/d/w","value":"w","modifiedIndex":8000000,"createdIndex":8000000},`+
		`{"key":"/d/x","value":"x4","modifiedIndex":9000000,"createdIndex":3999998},`+
		`{"key":"/d/y","value":"y3","modifiedIndex":10000000,"createdIndex":3999999}]}}`, 11)
	mt.wantEvents(mt.feed(12, del(dy, 12)),
		`{"action":"delete","node":{"key":"/d/y","modifiedIndex":12000000,"createdIndex":3999999},`+
			`"prevNode":{"key":"/d/y","value":"y3","modifiedIndex":10000000,"createdIndex":3999999}}`)
}

// TestMirrorResumesOnlyRightAfterItsRevision: a feed may keep an
// invalidated mirror only if it starts right after the mirror's revision;
// one that starts later would leave the revisions between out of the copy,
// and one that starts at or before it would apply a revision twice.
func TestMirrorResumesOnlyRightAfterItsRevision(t *testing.T) {
	mt := newMirrorUnderTest(t, 10)
	l := mt.m.layout
	mt.feed(11, put(l.DataKey("/a"), "1", 11, 11, 0))
	lo, hi := l.WatchRange()
	for _, from := range []int64{13, 11, 10} {
		mt.m.invalidate()
		if mt.m.resume(from) {
			t.Fatalf("a mirror at revision 11 resumed a feed from %d", from)
		}
		if _, _, ok := mt.m.read([]translate.Read{{Key: lo, End: hi}}, false); ok {
			t.Fatalf("after a refused resume from %d, the mirror answered a read", from)
		}
	}
	if !mt.m.resume(12) {
		t.Fatal("a mirror at revision 11 did not resume a feed from 12")
	}
	mt.wantGet("/a", false, `{"action":"get","node":{"key":"/a","value":"1","modifiedIndex":11000000,"createdIndex":11000000}}`, 11)
}

// TestMirrorKeepsADirectorysIndexInARevisionOfSeveral: a directory made in
// a revision of several events (a batch of journaled writes, decoded record
// by record) reads with its own event's index, as does the file beside it
// and a directory the file's write made above it.
func TestMirrorKeepsADirectorysIndexInARevisionOfSeveral(t *testing.T) {
	mt := newMirrorUnderTest(t, 4)
	l := mt.m.layout
	evs := []translate.V3Event{put(l.MarkerKey("/m"), "", 5, 5, 0), put(l.MarkerKey("/p"), "", 5, 5, 0),
		put(l.DataKey("/p/f"), "f", 5, 5, 0), put(l.DataKey("/g"), "g", 5, 5, 0)}
	f, g := "f", "g"
	decoded := []*translate.Event{
		{Action: translate.ActionCreate, Node: &translate.Node{Key: "/m", Dir: true, ModifiedIndex: 4999998, CreatedIndex: 4999998}},
		{Action: translate.ActionCreate, Node: &translate.Node{Key: "/p/f", Value: &f, ModifiedIndex: 4999999, CreatedIndex: 4999999}},
		{Action: translate.ActionCreate, Node: &translate.Node{Key: "/g", Value: &g, ModifiedIndex: 5000000, CreatedIndex: 5000000}},
	}
	mt.m.apply(5, evs, decoded)
	mt.wantGet("/", true, `{"action":"get","node":{"dir":true,"nodes":[`+
		`{"key":"/g","value":"g","modifiedIndex":5000000,"createdIndex":5000000},`+
		`{"key":"/m","dir":true,"modifiedIndex":4999998,"createdIndex":4999998},`+
		`{"key":"/p","dir":true,"nodes":[{"key":"/p/f","value":"f","modifiedIndex":4999999,"createdIndex":4999999}],`+
		`"modifiedIndex":4999999,"createdIndex":4999999}]}}`, 5)
}

// TestMirrorServesAReadThatNeedsItsOwnRevision: a read that needs the
// revision the mirror is at (the last write acknowledged, the usual case
// when writes pause) is answered from it without waiting for a later one;
// one that needs a later revision waits for it, and an invalid mirror
// answers nothing.
func TestMirrorServesAReadThatNeedsItsOwnRevision(t *testing.T) {
	mt := newMirrorUnderTest(t, 7)
	ctx := context.Background()
	if !mt.m.waitFor(ctx, 7, 10*time.Second, nil) {
		t.Fatal("a mirror at revision 7 did not serve a read that needs revision 7")
	}
	nudged := make(chan struct{}, 1)
	if mt.m.waitFor(ctx, 8, 50*time.Millisecond, func() { nudged <- struct{}{} }) {
		t.Fatal("a mirror at revision 7 served a read that needs revision 8")
	}
	select {
	case <-nudged:
	default:
		t.Fatal("a read waiting for a later revision did not ask the feed for progress")
	}
	got := make(chan bool, 1)
	go func() { got <- mt.m.waitFor(ctx, 8, 10*time.Second, nil) }()
	mt.m.progress(8)
	if !<-got {
		t.Fatal("a read that needs revision 8 was not served once the mirror got there")
	}
	mt.m.invalidate()
	if mt.m.waitFor(ctx, 8, 50*time.Millisecond, nil) {
		t.Fatal("an invalid mirror served a read")
	}
}
