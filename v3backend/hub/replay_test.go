// SPDX-License-Identifier: Apache-2.0

package hub

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/v2bridge/v2bridge/translate"
)

// walkHistory writes n revisions before the hub starts: /walk at every
// other one (the first included), /other<rev> at the rest. It returns the
// revisions of /walk.
func walkHistory(src *fakeSource, n int) []int64 {
	var walk []int64
	for i := range n {
		if i%2 == 0 {
			walk = append(walk, src.write(ev(translate.ActionSet, "/walk")))
		} else {
			src.write(ev(translate.ActionSet, fmt.Sprintf("/other%d", src.current()+1)))
		}
	}
	return walk
}

// settled reports whether every replay but those started at index busy
// (0: none) is paused (its feed closed) or over: what it will read for the
// watchers it has is read.
func settled(h *Hub, src *fakeSource, busy uint64) bool {
	open := 0
	ok := locked(h, func() bool {
		for r := range h.replays {
			if r.from == busy {
				open++
			} else if !r.paused {
				return false
			}
		}
		return true
	})
	return ok && src.openHistory() == open
}

// walkOneShot walks key one-shot from index from, re-watching at
// modifiedIndex + 1 once the replays (but those started at busy) have
// settled, until it has n events. It returns their indexes and how many
// re-watches were not answered at once (from memory).
func walkOneShot(t *testing.T, h *Hub, src *fakeSource, key string, from uint64, n int, busy uint64) (got []uint64, waited int) {
	t.Helper()
	next := from
	for len(got) < n {
		waitFor(t, "the replays to settle", func() bool { return settled(h, src, busy) })
		w := watch(t, h, src, key, false, false, next)
		e := now(w)
		if e == nil {
			waited++
			e = recv(t, w)
		}
		if e.Node.Key != key {
			t.Fatalf("walk on %s got %s", key, e.Node.Key)
		}
		got = append(got, e.Index())
		next = e.Index() + 1
	}
	return got, waited
}

// A client walking history one-shot from far behind the ring paces the
// replay: it reads a window ahead of the walker, stops (its feed closed)
// once it keeps RingSize events the walker has not passed, and reads on
// when the walker is half through them, so every re-watch is answered
// from memory and no event is lost or repeated.
func TestWalkerFarBehindPacesTheReplayAndIsAnsweredFromMemory(t *testing.T) {
	src := newFake()
	walk := walkHistory(src, 200) // /walk at 2, 4, … 200
	h, _ := newHub(t, src, Config{RingSize: 10})

	const steps = 60
	got, waited := walkOneShot(t, h, src, "/walk", 2, steps, 0)
	for i, idx := range got {
		if idx != uint64(walk[i]) {
			t.Fatalf("event %d of the walk at %d, want %d (lost or repeated events)", i, idx, walk[i])
		}
	}
	if waited > 1 {
		t.Fatalf("%d re-watches waited for the replay, want at most the first watch", waited)
	}
	if n := testutil.ToFloat64(h.metrics.replays); n != 1 {
		t.Fatalf("%v replays for one walk, want 1", n)
	}
	// A window of 10 events (5 of the walker's), re-read once the walker
	// is half through it: a feed per few events, never one per re-watch.
	_, hist := src.counts()
	if hist < 2 || hist > steps/2 {
		t.Fatalf("%d history feeds for a walk of %d events with a window of 10, want between 2 and %d", hist, steps, steps/2)
	}
	// The replay read ahead of the walker by at most its window, not up to
	// the ring.
	if read := testutil.ToFloat64(h.metrics.replayRevisions); read > float64(2*steps+2*10+2) {
		t.Fatalf("the replay read %v revisions for a walk over %d, want it paced by the walker", read, 2*steps)
	}

	// The walker leaves: the replay ends, its window with it.
	deadline := time.Now().Add(3*replayIdle + waitTimeout)
	for locked(h, func() int { return len(h.replays) }) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the replay outlived its walker")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := src.openHistory(); n != 0 {
		t.Fatalf("%d history feeds open after the replay ended", n)
	}
}

// A walker that falls out of what a replay keeps (the replay reads on for
// a member the walker cannot hold back) starts a replay of its own, which
// it then paces: its re-watches are answered from memory again.
func TestWalkerThatFellOutOfTheWindowStartsItsOwnReplay(t *testing.T) {
	src := newFake()
	walk := walkHistory(src, 300)
	h, _ := newHub(t, src, Config{RingSize: 10})
	src.gateHistory()
	src.mu.Lock()
	src.gateOnly = 2 // the first replay's feed; the walker's runs free
	src.mu.Unlock()
	member := watch(t, h, src, "/never", false, false, 2) // keeps the first replay reading
	w := watch(t, h, src, "/walk", false, false, 2)
	for range 130 { // revisions 2..131
		if !src.step(waitTimeout) {
			t.Fatal("the replay did not read on")
		}
	}
	if e := recv(t, w); e.Index() != uint64(walk[0]) {
		t.Fatalf("first event at %d, want %d", e.Index(), walk[0])
	}
	waitFor(t, "the replay to pass revision 131", func() bool { return replayAt(h, 132) })
	// The first replay, held from here on, keeps the events of 122..131:
	// the walker, at 3, fell out of it (and its walk stays below them).
	got, waited := walkOneShot(t, h, src, "/walk", uint64(walk[0])+1, 40, 2)
	for i, idx := range got {
		if idx != uint64(walk[i+1]) {
			t.Fatalf("event %d of the walk at %d, want %d", i+1, idx, walk[i+1])
		}
	}
	if waited > 1 {
		t.Fatalf("%d re-watches waited, want at most the one that started the walker's replay", waited)
	}
	if n := testutil.ToFloat64(h.metrics.replays); n != 2 {
		t.Fatalf("%v replays, want 2: the first, and the one the walker started", n)
	}
	member.Cancel()
	src.releaseHistory()
}

// Fallen-out walkers start replays of their own only within MaxReplays;
// beyond it they wait in the queue for the next replay for the queue.
func TestFallenOutWalkersBeyondMaxReplaysAreQueued(t *testing.T) {
	src := newFake()
	walkHistory(src, 100)
	h, _ := newHub(t, src, Config{RingSize: 4, MaxReplays: 1})
	src.gateHistory()
	member := watch(t, h, src, "/never", false, false, 2)
	w := watch(t, h, src, "/walk", false, false, 2)
	for range 20 {
		if !src.step(waitTimeout) {
			t.Fatal("the replay did not read on")
		}
	}
	next := recv(t, w).Index() + 1
	waitFor(t, "the replay to pass revision 21", func() bool { return replayAt(h, 22) })
	back := watch(t, h, src, "/walk", false, false, next)
	if p := placeOf(h, back); p != placeQueued {
		t.Fatalf("a fallen-out walker beyond MaxReplays is in place %d, want queued", p)
	}
	if n := testutil.ToFloat64(h.metrics.replays); n != 1 {
		t.Fatalf("%v replays, want 1", n)
	}
	member.Cancel()
	src.releaseHistory()
	if e := recv(t, back); e.Index() != next+1 {
		t.Fatalf("queued walker got %d, want %d", e.Index(), next+1)
	}
}

// skimHistory writes n revisions before the hub starts, /k<rev> each, and
// /target at the revisions in targets.
func skimHistory(src *fakeSource, n int, targets ...int64) {
	for range n {
		rev := src.current() + 1
		key := fmt.Sprintf("/k%d", rev)
		if slices.Contains(targets, rev) {
			key = "/target"
		}
		src.write(ev(translate.ActionSet, key))
	}
}

// A replay that has read SkimAfter revisions in a row with nothing for its
// watchers skims the rest (etcd sends only what may concern them) and reads
// in full again from the first revision the skim finds something at.
func TestQuietReplaySkimsToTheNextRevisionForItsWatchers(t *testing.T) {
	src := newFake()
	skimHistory(src, 80, 41) // /target at 41
	h, _ := newHub(t, src, Config{SkimAfter: 5})
	w := watch(t, h, src, "/target", false, false, 2)
	if e := recv(t, w); e.Index() != 41 || e.Node.Key != "/target" {
		t.Fatalf("got %s at %d, want /target at 41", e.Node.Key, e.Index())
	}
	src.mu.Lock()
	skims, froms := slices.Clone(src.skimKeys), slices.Clone(src.histFroms)
	src.mu.Unlock()
	if len(skims) == 0 || !slices.Equal(skims[0], []string{"/target"}) {
		t.Fatalf("skims %v, want one for /target", skims)
	}
	if len(froms) < 2 || froms[0] != 2 || froms[1] != 41 {
		t.Fatalf("full history feeds from %v, want 2, then 41 (where the skim found /target)", froms)
	}
	// After the answer the replay reads on for the walker it answered: 5
	// more in full, then it skims up to the ring.
	waitReplayIdle(t, h)
	if read := testutil.ToFloat64(h.metrics.replayRevisions); read > 5+1+5 {
		t.Fatalf("%v revisions read in full, want 2..6, 41 and 42..46", read)
	}
	if skimmed := testutil.ToFloat64(h.metrics.replaySkimmed); skimmed < (40-7+1)+(81-47+1) {
		t.Fatalf("%v revisions skimmed, want 7..40 and 47..81", skimmed)
	}
}

// A watcher that joins a skimming replay on a key the skim does not look
// for makes it read in full again from where it is, so the watcher misses
// nothing.
func TestWatcherJoiningASkimOnAnotherKeyMakesItReadInFull(t *testing.T) {
	src := newFake()
	skimHistory(src, 40)
	h, _ := newHub(t, src, Config{SkimAfter: 3})
	src.gateHistory()
	member := watch(t, h, src, "/target", false, false, 2)
	for range 4 { // 2, 3, 4 in full; then the skim's first Progress (5)
		if !src.step(waitTimeout) {
			t.Fatal("the replay did not read on")
		}
	}
	waitFor(t, "the skim to pass revision 5", func() bool { return replayAt(h, 6) })
	if n := src.skims(); n != 1 {
		t.Fatalf("%d skims, want 1", n)
	}
	w := watch(t, h, src, "/k8", false, false, 6)
	if p := placeOf(h, w); p != placeReplay {
		t.Fatalf("watcher in place %d, want the replay", p)
	}
	src.releaseHistory()
	if e := recv(t, w); e.Index() != 8 || e.Node.Key != "/k8" {
		t.Fatalf("got %s at %d, want /k8 at 8", e.Node.Key, e.Index())
	}
	src.mu.Lock()
	froms := slices.Clone(src.histFroms)
	src.mu.Unlock()
	if !slices.Contains(froms, 6) {
		t.Fatalf("full history feeds from %v, want one from 6", froms)
	}
	member.Cancel()
}

// What a replay skimmed past is not in what it kept for other keys: a
// watcher behind it on another key is not answered from there (it would
// miss the event the skim passed over) but by the next replay.
func TestWatcherBehindASkimOnAnotherKeyIsNotAnsweredFromIt(t *testing.T) {
	src := newFake()
	skimHistory(src, 40)
	h, _ := newHub(t, src, Config{SkimAfter: 3})
	src.gateHistory()
	member := watch(t, h, src, "/target", false, false, 2)
	for range 5 { // 2, 3, 4 in full; the skim's Progress for 5 and 6
		if !src.step(waitTimeout) {
			t.Fatal("the replay did not read on")
		}
	}
	waitFor(t, "the skim to pass revision 6", func() bool { return replayAt(h, 7) })
	w := watch(t, h, src, "/k5", false, false, 3) // behind: 3 and 4 were read in full, 5 skimmed
	if e := now(w); e != nil {
		t.Fatalf("answered at once with %s at %d from what the replay kept", e.Node.Key, e.Index())
	}
	if p := placeOf(h, w); p != placeQueued {
		t.Fatalf("watcher in place %d, want queued", p)
	}
	// /k3 behind it is answered from what was read in full.
	w3 := watch(t, h, src, "/k3", false, false, 3)
	if e := now(w3); e == nil || e.Index() != 3 {
		t.Fatalf("watcher on /k3 got %v at once, want /k3 at 3 from what the replay kept", e)
	}
	src.releaseHistory()
	if e := recv(t, w); e.Index() != 5 || e.Node.Key != "/k5" {
		t.Fatalf("got %s at %d, want /k5 at 5", e.Node.Key, e.Index())
	}
	member.Cancel()
}

func TestMayConcern(t *testing.T) {
	for _, tc := range []struct {
		path string
		keys []string
		want bool
	}{
		{"/a", []string{"/a"}, true},
		{"/a/b/c", []string{"/a"}, true},     // below
		{"/a", []string{"/a/b"}, true},       // an ancestor: its deletion reaches /a/b
		{"/a", []string{"/ab"}, true},        // a plain prefix: v2's history rule
		{"/ab", []string{"/a"}, false},       // a sibling that shares a prefix
		{"/a-b", []string{"/a/b"}, false},    // sorts between, unrelated
		{"/b", []string{"/a", "/c"}, false},  // none of them
		{"/c/d", []string{"/a", "/c"}, true}, // one of them
		{"/anything", []string{"/"}, true},   // the root covers everything
		{"/a/_hidden", []string{"/a"}, true}, // hidden below: history shows it to a recursive watcher
		{"/x", nil, false},
	} {
		if got := MayConcern(tc.path, tc.keys); got != tc.want {
			t.Errorf("MayConcern(%q, %q) = %v, want %v", tc.path, tc.keys, got, tc.want)
		}
	}
}

func TestKeeperCoversOnlyWhatItKeptForTheKey(t *testing.T) {
	at := func(i uint64, key string) *translate.Event {
		e := ev(translate.ActionSet, key)
		e.Node.ModifiedIndex = i
		return e
	}
	k := newKeeper(4, 10)
	k.add([]*translate.Event{at(10, "/a")})
	k.add([]*translate.Event{at(11, "/b")})
	k.skimmed([]string{"/a"}, 12, 20) // 12..19: looked for /a only
	k.add([]*translate.Event{at(20, "/b")})
	for _, tc := range []struct {
		key       string
		next, pos uint64
		want      bool
	}{
		{"/a", 10, 21, true},   // everything for /a from 10 on
		{"/a/x", 11, 21, true}, // below /a: the skim looked for it
		{"/b", 11, 21, false},  // the skim did not look for /b
		{"/b", 20, 21, true},   // after the skim
		{"/a", 9, 21, false},   // before the replay started
		{"/a", 21, 21, false},  // not read yet
	} {
		if got := k.covers(tc.key, tc.next, tc.pos); got != tc.want {
			t.Errorf("covers(%s, %d, %d) = %v, want %v", tc.key, tc.next, tc.pos, got, tc.want)
		}
	}
	if c := k.complete(); c != 20 {
		t.Fatalf("complete() = %d, want 20 (after the skim)", c)
	}
	// The ring, floor 20, takes only what is known in full: 20.
	evs, below, ok := k.forRing(20, 21, 10)
	if !ok || len(evs) != 1 || evs[0].Index() != 20 || below != 19 {
		t.Fatalf("forRing = %v, %d, %v; want [20], 19, true", evs, below, ok)
	}
	// Events dropped beyond max raise lo past the gap.
	for i := uint64(21); i < 25; i++ {
		k.add([]*translate.Event{at(i, "/b")})
	}
	if k.lo != 21 || len(k.gaps) != 0 {
		t.Fatalf("lo %d, %d gaps after dropping up to 20, want 21 and none", k.lo, len(k.gaps))
	}
}

// A replay for the queue left with no member while watchers are queued
// hands the queue to a new replay at once, rather than reading on to the
// ring for nobody.
func TestQueueReplayLeftWithNobodyHandsTheQueueOver(t *testing.T) {
	src := newFake()
	history(src, 100) // /k2../k101
	h, _ := newHub(t, src, Config{})
	src.gateHistory()
	m := watch(t, h, src, "/never", false, false, 10)
	for range 3 { // 10..12
		if !src.step(waitTimeout) {
			t.Fatal("the replay did not read on")
		}
	}
	waitFor(t, "the replay to pass revision 12", func() bool { return replayAt(h, 13) })
	m.Cancel()
	q := watch(t, h, src, "/k5", false, false, 5) // behind the replay: queued
	if p := placeOf(h, q); p != placeQueued {
		t.Fatalf("watcher in place %d, want queued", p)
	}
	// Two batches: the first replay's next one (after which it hands the
	// queue over), then the new replay's first, which answers q; the
	// first replay does not read on to the ring (101) before.
	for range 2 {
		if !src.step(waitTimeout) {
			t.Fatal("no replay read on")
		}
	}
	if e := recv(t, q); e.Index() != 5 {
		t.Fatalf("queued watcher got %d, want 5", e.Index())
	}
	src.releaseHistory()
	if n := testutil.ToFloat64(h.metrics.replays); n != 2 {
		t.Fatalf("%v replays, want 2", n)
	}
	waitReplayIdleWithin(t, h, 3*replayIdle+waitTimeout)
	src.mu.Lock()
	froms := slices.Clone(src.histFroms)
	src.mu.Unlock()
	if len(froms) < 2 || froms[0] != 10 || froms[1] != 5 {
		t.Fatalf("history feeds from %v, want 10 then 5", froms)
	}
}

// waitReplayIdleWithin waits up to d for every replay to end.
func waitReplayIdleWithin(t *testing.T, h *Hub, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for locked(h, func() bool { return len(h.replays) > 0 || len(h.queued) > 0 }) {
		if time.Now().After(deadline) {
			t.Fatal("replays still running")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
