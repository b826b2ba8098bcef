// SPDX-License-Identifier: Apache-2.0

package hub

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/v2bridge/v2bridge/translate"
)

// waitTimeout bounds every wait of these tests; nothing should come close.
const waitTimeout = 2 * time.Second

// newHub starts a hub on src and waits for its shared feed.
func newHub(t *testing.T, src *fakeSource, cfg Config) (*Hub, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Source, cfg.Registry = src, reg
	if cfg.Numbering == nil && !src.numbered {
		cfg.Numbering = oneIndexPerRevision{}
	}
	h := New(cfg)
	t.Cleanup(h.Close)
	waitFor(t, "the shared feed", h.Live)
	return h, reg
}

// waitFor polls cond until it holds or waitTimeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// locked runs f under the hub's lock.
func locked[T any](h *Hub, f func() T) T {
	h.mu.Lock()
	defer h.mu.Unlock()
	return f()
}

// waitDispatched waits until the hub has dispatched revision rev.
func waitDispatched(t *testing.T, h *Hub, rev int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("revision %d dispatched", rev), func() bool {
		return locked(h, func() bool { return h.lastRev >= rev })
	})
}

// waitReplayIdle waits until no replay runs and none is queued.
func waitReplayIdle(t *testing.T, h *Hub) {
	t.Helper()
	waitFor(t, "the replays to end", func() bool {
		return locked(h, func() bool { return len(h.replays) == 0 && len(h.queued) == 0 })
	})
}

// replayAt reports whether a replay has read up to pos (its position).
func replayAt(h *Hub, pos uint64) bool {
	return locked(h, func() bool {
		for r := range h.replays {
			if r.pos == pos {
				return true
			}
		}
		return false
	})
}

func placeOf(h *Hub, w *Watcher) place { return locked(h, func() place { return w.where }) }

// recv waits for w's next event.
func recv(t *testing.T, w *Watcher) *translate.Event {
	t.Helper()
	select {
	case e := <-w.Events():
		return e
	case <-time.After(waitTimeout):
		t.Fatalf("no event for the watcher on %s", w.key)
		return nil
	}
}

// now returns w's event if one is queued already.
func now(w *Watcher) *translate.Event {
	select {
	case e := <-w.Events():
		return e
	default:
		return nil
	}
}

// waitDone waits for w to be ended and checks why.
func waitDone(t *testing.T, w *Watcher, reason string) {
	t.Helper()
	select {
	case <-w.Done():
	case <-time.After(waitTimeout):
		t.Fatalf("watcher on %s not ended", w.key)
	}
	if reason != "" && w.Reason() != reason {
		t.Fatalf("watcher on %s ended with %q, want %q", w.key, w.Reason(), reason)
	}
}

func isDone(w *Watcher) bool {
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}

// gauge reads v2bridge_v2_watchers from reg.
func gauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "v2bridge_v2_watchers" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("v2bridge_v2_watchers not registered")
	return 0
}

// checkCount checks that Watchers() and the gauge both say n.
func checkCount(t *testing.T, h *Hub, reg *prometheus.Registry, n int) {
	t.Helper()
	if got := h.Watchers(); got != n {
		t.Fatalf("Watchers() = %d, want %d", got, n)
	}
	if got := gauge(t, reg); got != float64(n) {
		t.Fatalf("v2bridge_v2_watchers = %v, want %d", got, n)
	}
}

// watch registers a watch with the store's current revision as the fake
// has it.
func watch(t *testing.T, h *Hub, src *fakeSource, key string, recursive, stream bool, waitIndex uint64) *Watcher {
	t.Helper()
	w, err := h.Watch(context.Background(), key, recursive, stream, waitIndex, h.num.Index(src.current()))
	if err != nil {
		t.Fatalf("Watch(%s, waitIndex %d): %v", key, waitIndex, err)
	}
	return w
}

// cleared401 checks that err is v2's 401 with the given cause and index.
func cleared401(t *testing.T, err error, oldest, waitIndex, current uint64) {
	t.Helper()
	var e *translate.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want a 401", err)
	}
	want := fmt.Sprintf("[%d/%d]", oldest, waitIndex)
	if e.Code != translate.EcodeEventIndexCleared || !strings.Contains(e.Cause, want) || e.Index != current {
		t.Fatalf("err = %v, want code %d, cause with %s, index %d", e, translate.EcodeEventIndexCleared, want, current)
	}
}

// history writes revisions 2..n+1 before the hub starts, one set of /k<rev>
// each, so they are older than its ring.
func history(src *fakeSource, n int) {
	for range n {
		rev := src.current() + 1
		src.write(ev(translate.ActionSet, fmt.Sprintf("/k%d", rev)))
	}
}

func TestWaitIndexInRingIsAnsweredFromMemory(t *testing.T) {
	src := newFake()
	h, reg := newHub(t, src, Config{})
	src.write(ev(translate.ActionSet, "/a"))         // 2
	src.write(ev(translate.ActionSet, "/b"))         // 3
	last := src.write(ev(translate.ActionSet, "/a")) // 4
	waitDispatched(t, h, last)

	for _, tc := range []struct {
		waitIndex uint64
		want      uint64
	}{{2, 2}, {3, 4}, {4, 4}} {
		w := watch(t, h, src, "/a", false, false, tc.waitIndex)
		e := now(w)
		if e == nil || e.Index() != tc.want {
			t.Fatalf("waitIndex %d: got %v at once, want the event at %d", tc.waitIndex, e, tc.want)
		}
		waitDone(t, w, "answered")
	}
	if _, hist := src.counts(); hist != 0 {
		t.Fatalf("%d history feeds opened for waitIndexes in the ring", hist)
	}
	checkCount(t, h, reg, 0)
}

func TestWatchGetsTheFirstMatchingEvent(t *testing.T) {
	set := func(k string) *translate.Event { return ev(translate.ActionSet, k) }
	for _, tc := range []struct {
		name      string
		key       string
		recursive bool
		writes    []*translate.Event
		want      string // key of the event the watcher gets
	}{
		{"waitIndex 0 waits for the next write on the key", "/a", false, []*translate.Event{set("/b"), set("/a")}, "/a"},
		{"not recursive skips children", "/a", false, []*translate.Event{set("/a/b"), set("/a")}, "/a"},
		{"recursive skips a sibling with the key as prefix", "/a", true, []*translate.Event{set("/ab"), set("/a/b")}, "/a/b"},
		{"recursive gets a child", "/a", true, []*translate.Event{set("/b/a"), set("/a/b/c")}, "/a/b/c"},
		{"recursive on the root gets everything", "/", true, []*translate.Event{set("/x/y")}, "/x/y"},
		{"a directory delete reaches a watcher below it", "/d/x", false, []*translate.Event{dirEv(translate.ActionDelete, "/d")}, "/d"},
		{"a directory expiry reaches a watcher below it", "/d/x/y", true, []*translate.Event{dirEv(translate.ActionExpire, "/d")}, "/d"},
		{"a live directory delete skips a sibling with it as prefix", "/dd", false,
			[]*translate.Event{dirEv(translate.ActionDelete, "/d"), set("/dd")}, "/dd"},
		{"a file delete does not reach below it", "/f/x", false,
			[]*translate.Event{ev(translate.ActionDelete, "/f"), set("/f/x")}, "/f/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newFake()
			h, reg := newHub(t, src, Config{})
			w := watch(t, h, src, tc.key, tc.recursive, false, 0)
			if w.StartIndex() != 1 {
				t.Fatalf("StartIndex() = %d, want 1", w.StartIndex())
			}
			checkCount(t, h, reg, 1)
			for _, e := range tc.writes {
				src.write(e)
			}
			e := recv(t, w)
			if e.Node.Key != tc.want || e.Index() != uint64(src.current()) {
				t.Fatalf("got %s at %d, want %s at %d", e.Node.Key, e.Index(), tc.want, src.current())
			}
			waitDone(t, w, "answered")
			checkCount(t, h, reg, 0)
		})
	}
}

func TestDirectoryDeleteInTheRingReachesAPlainPrefix(t *testing.T) {
	// v2's history rule: deleting /d answers a past waitIndex on /dd.
	src := newFake()
	h, _ := newHub(t, src, Config{})
	rev := src.write(dirEv(translate.ActionDelete, "/d"))
	src.write(ev(translate.ActionSet, "/dd"))
	waitDispatched(t, h, rev+1)
	w := watch(t, h, src, "/dd", false, false, uint64(rev))
	if e := now(w); e == nil || e.Node.Key != "/d" {
		t.Fatalf("got %v, want the delete of /d", e)
	}
}

func TestStreamWatcherGetsEveryEventInOrder(t *testing.T) {
	src := newFake()
	h, reg := newHub(t, src, Config{})
	w := watch(t, h, src, "/s", true, true, 0)
	var want []uint64
	for i := range 20 {
		key := "/other"
		if i%3 != 0 {
			key = fmt.Sprintf("/s/%d", i)
		}
		rev := src.write(ev(translate.ActionCreate, key))
		if key != "/other" {
			want = append(want, uint64(rev))
		}
	}
	for _, idx := range want {
		if e := recv(t, w); e.Index() != idx {
			t.Fatalf("got the event at %d, want %d", e.Index(), idx)
		}
	}
	if isDone(w) {
		t.Fatalf("stream watcher ended: %s", w.Reason())
	}
	checkCount(t, h, reg, 1)
	w.Cancel()
	waitDone(t, w, "canceled")
	checkCount(t, h, reg, 0)
}

func TestSlowStreamReaderIsCutOffWithoutBlockingOthers(t *testing.T) {
	src := newFake()
	h, reg := newHub(t, src, Config{WatcherBuffer: 2})
	slow := watch(t, h, src, "/s", true, true, 0)
	fast := watch(t, h, src, "/s", true, true, 0)
	for i := range 6 {
		rev := src.write(ev(translate.ActionSet, fmt.Sprintf("/s/%d", i)))
		if e := recv(t, fast); e.Index() != uint64(rev) {
			t.Fatalf("fast reader got %d, want %d", e.Index(), rev)
		}
	}
	waitDone(t, slow, "fell behind")
	if len(slow.Events()) != 2 {
		t.Fatalf("slow reader has %d events queued, want its buffer's 2", len(slow.Events()))
	}
	if isDone(fast) {
		t.Fatal("the fast reader was ended")
	}
	checkCount(t, h, reg, 1)
}

func TestStreamWatcherCatchingUpPastItsBufferIsCutOff(t *testing.T) {
	src := newFake()
	h, reg := newHub(t, src, Config{WatcherBuffer: 2})
	last := src.writeN(3, "/s")
	waitDispatched(t, h, last)
	w := watch(t, h, src, "/s", false, true, 2)
	waitDone(t, w, "fell behind")
	checkCount(t, h, reg, 0)
}

func TestStaleWatchersShareOneReplay(t *testing.T) {
	src := newFake()
	history(src, 20) // /k2../k21
	h, reg := newHub(t, src, Config{})
	src.gateHistory() // hold the replay until every watcher is in

	const n = 50
	ws := make([]*Watcher, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("/k%d", 2+i%20)
			if i >= 40 {
				key = fmt.Sprintf("/never%d", i)
			}
			w, err := h.Watch(context.Background(), key, false, false, 2, uint64(src.current()))
			if err != nil {
				t.Errorf("Watch(%s): %v", key, err)
				return
			}
			ws[i] = w
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	checkCount(t, h, reg, n)
	src.releaseHistory()
	for i := range 40 {
		if e := recv(t, ws[i]); e.Node.Key != ws[i].key || e.Index() != uint64(2+i%20) {
			t.Fatalf("watcher on %s got %s at %d", ws[i].key, e.Node.Key, e.Index())
		}
	}
	waitReplayIdle(t, h)
	if _, hist := src.counts(); hist != 1 {
		t.Fatalf("%d history feeds opened for %d watchers, want 1", hist, n)
	}
	checkCount(t, h, reg, n-40)

	// The replay's events are kept: a re-watch in its range is answered
	// from memory.
	w := watch(t, h, src, "/k5", false, false, 3)
	if e := now(w); e == nil || e.Index() != 5 {
		t.Fatalf("re-watch got %v at once, want /k5 from the ring", e)
	}
	if _, hist := src.counts(); hist != 1 {
		t.Fatalf("a re-watch in the replayed range opened a history feed")
	}

	// The replay handed the watchers it could not answer to the live path.
	for i := 40; i < n; i++ {
		if p := placeOf(h, ws[i]); p != placeLive {
			t.Fatalf("watcher on %s is in place %d after the replay, want live", ws[i].key, p)
		}
	}
	src.write(ev(translate.ActionSet, "/never45"))
	if e := recv(t, ws[45]); e.Node.Key != "/never45" {
		t.Fatalf("got %s", e.Node.Key)
	}
	checkCount(t, h, reg, n-41)
}

func TestWatchersArrivingDuringAReplayJoinItOrQueue(t *testing.T) {
	src := newFake()
	history(src, 10) // /k2../k11
	h, reg := newHub(t, src, Config{})
	src.gateHistory()

	a := watch(t, h, src, "/x", false, false, 5)
	for range 2 { // revisions 5 and 6 read
		if !src.step(waitTimeout) {
			t.Fatal("the replay did not read on")
		}
	}
	waitFor(t, "the replay to pass revision 6", func() bool {
		return replayAt(h, 7)
	})
	join := watch(t, h, src, "/k7", false, false, 7)
	behind := watch(t, h, src, "/k6", false, false, 6) // passed, but within what the replay read
	queue := watch(t, h, src, "/k3", false, false, 3)  // before the replay's start
	if p := placeOf(h, join); p != placeReplay {
		t.Fatalf("a watcher the replay has not passed is in place %d, want the replay", p)
	}
	// Behind the replay but within what it read: answered at once from it.
	if e := now(behind); e == nil || e.Index() != 6 {
		t.Fatalf("watcher behind the replay got %v at once, want /k6 from what the replay read", e)
	}
	if p := placeOf(h, queue); p != placeQueued {
		t.Fatalf("a watcher older than the replay's start is in place %d, want queued", p)
	}
	checkCount(t, h, reg, 3)
	src.releaseHistory()

	if e := recv(t, join); e.Index() != 7 {
		t.Fatalf("joiner got %d, want 7", e.Index())
	}
	if e := recv(t, queue); e.Index() != 3 {
		t.Fatalf("queued watcher got %d, want 3", e.Index())
	}
	waitReplayIdle(t, h)
	if _, hist := src.counts(); hist != 2 {
		t.Fatalf("%d history feeds, want 2 (the first replay, then the queued one)", hist)
	}
	if p := placeOf(h, a); p != placeLive {
		t.Fatalf("unanswered replay member in place %d, want live", p)
	}
	src.write(ev(translate.ActionSet, "/x"))
	if e := recv(t, a); e.Node.Key != "/x" {
		t.Fatalf("got %s", e.Node.Key)
	}
	checkCount(t, h, reg, 0)
	// Everything from 3 on is in memory now.
	if got := locked(h, func() uint64 { return h.floor }); got != 2 {
		t.Fatalf("floor = %d after the replays, want 2", got)
	}
}

func TestReplayKeepsWhatTheRingHasRoomFor(t *testing.T) {
	src := newFake()
	history(src, 10) // /k2../k11
	h, _ := newHub(t, src, Config{RingSize: 4})
	src.write(ev(translate.ActionSet, "/live"))         // 12
	last := src.write(ev(translate.ActionSet, "/live")) // 13
	waitDispatched(t, h, last)

	src.gateHistory() // both in before the replay reads
	w := watch(t, h, src, "/k3", false, false, 3)
	never := watch(t, h, src, "/never", false, false, 3) // keeps the replay reading up to the ring
	src.releaseHistory()
	if e := recv(t, w); e.Index() != 3 {
		t.Fatalf("got %d", e.Index())
	}
	waitReplayIdle(t, h)
	if p := placeOf(h, never); p != placeLive {
		t.Fatalf("the unanswered member is in place %d after the replay, want live", p)
	}
	// Two free slots: the ring now holds 10..13, everything above 9.
	if got := locked(h, func() uint64 { return h.floor }); got != 9 {
		t.Fatalf("floor = %d, want 9", got)
	}
	w = watch(t, h, src, "/k10", false, false, 10)
	if e := now(w); e == nil || e.Index() != 10 {
		t.Fatalf("got %v at once, want /k10 from the ring", e)
	}
	_, err := h.Watch(context.Background(), "/k9", false, false, 9, uint64(last))
	cleared401(t, err, 10, 9, uint64(last))
	if n := testutil.ToFloat64(h.metrics.replays); n != 1 {
		t.Fatalf("%v replays, want 1", n)
	}
}

func TestWaitIndexBeyondTheHorizonGets401BeforeRegistering(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       Config
		setup     func(*fakeSource, *Hub) // after the hub is live
		before    func(*fakeSource)       // before
		waitIndex uint64
		oldest    uint64
		refused   string
	}{
		{name: "older than a full ring", cfg: Config{RingSize: 4},
			setup:     func(src *fakeSource, h *Hub) { src.writeN(6, "/a") }, // 2..7: the ring holds 4..7
			waitIndex: 2, oldest: 4, refused: "events"},
		{name: "more than MaxReplayRevisions back", cfg: Config{MaxReplayRevisions: 5},
			before:    func(src *fakeSource) { history(src, 20) }, // current 21
			waitIndex: 10, oldest: 16, refused: "revisions"},
		{name: "compacted", cfg: Config{},
			before:    func(src *fakeSource) { history(src, 10); src.compact(6) },
			waitIndex: 3, oldest: 6, refused: "compacted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newFake()
			if tc.before != nil {
				tc.before(src)
			}
			h, reg := newHub(t, src, tc.cfg)
			if tc.setup != nil {
				tc.setup(src, h)
			}
			cur := src.current()
			waitDispatched(t, h, cur)
			other := watch(t, h, src, "/other", false, false, 0)
			checkCount(t, h, reg, 1)

			w, err := h.Watch(context.Background(), "/a", true, true, tc.waitIndex, uint64(cur))
			if w != nil {
				t.Fatal("a refused watch returned a watcher")
			}
			cleared401(t, err, tc.oldest, tc.waitIndex, uint64(cur))
			checkCount(t, h, reg, 1)
			if _, hist := src.counts(); hist != 0 {
				t.Fatalf("%d history feeds opened for a refused watch", hist)
			}
			if got := counterValue(t, reg, "v2bridge_watch_history_refused_total", tc.refused); got != 1 {
				t.Fatalf("refused{horizon=%q} = %v, want 1", tc.refused, got)
			}
			if isDone(other) {
				t.Fatal("a refusal ended another watcher")
			}
		})
	}
}

// counterValue reads a counter (with the given label value, if any).
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || (len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == label) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestHugeWaitIndexRegistersAndWaits(t *testing.T) {
	for _, wi := range []uint64{math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64} {
		t.Run(fmt.Sprint(wi), func(t *testing.T) {
			src := newFake()
			h, reg := newHub(t, src, Config{})
			w := watch(t, h, src, "/a", false, false, wi)
			if e := now(w); e != nil || isDone(w) {
				t.Fatalf("answered at once: %v %q", e, w.Reason())
			}
			rev := src.write(ev(translate.ActionSet, "/a"))
			waitDispatched(t, h, rev)
			if e := now(w); e != nil || isDone(w) {
				t.Fatalf("answered by an older event: %v %q", e, w.Reason())
			}
			checkCount(t, h, reg, 1)
			w.Cancel()
			checkCount(t, h, reg, 0)
		})
	}
}

// threePlaces registers a live watcher, one in a held replay and one
// queued for the next replay.
func threePlaces(t *testing.T, h *Hub, src *fakeSource, reg *prometheus.Registry) (live, replaying, queued *Watcher) {
	t.Helper()
	live = watch(t, h, src, "/live", false, false, 0)
	checkCount(t, h, reg, 1)
	src.gateHistory()
	replaying = watch(t, h, src, "/k9", false, false, 5)
	checkCount(t, h, reg, 2)
	if !src.step(waitTimeout) {
		t.Fatal("the replay did not start")
	}
	waitFor(t, "the replay to pass revision 5", func() bool {
		return replayAt(h, 6)
	})
	queued = watch(t, h, src, "/k3", false, false, 3)
	checkCount(t, h, reg, 3)
	for w, p := range map[*Watcher]place{live: placeLive, replaying: placeReplay, queued: placeQueued} {
		if got := placeOf(h, w); got != p {
			t.Fatalf("watcher on %s in place %d, want %d", w.key, got, p)
		}
	}
	return live, replaying, queued
}

func TestLossEndsEveryWatcher(t *testing.T) {
	src := newFake()
	history(src, 10)
	h, reg := newHub(t, src, Config{})
	live, replaying, queued := threePlaces(t, h, src, reg)
	checkCount(t, h, reg, 3)
	src.lose()
	for _, w := range []*Watcher{live, replaying, queued} {
		// Whichever of the shared feed or the history feed the hub sees
		// end first ends the replay's watchers.
		waitDone(t, w, "")
		if r := w.Reason(); r != "backend watch ended" && (w == live || r != "history replay ended") {
			t.Fatalf("watcher on %s ended with %q", w.key, r)
		}
	}
	checkCount(t, h, reg, 0)
	waitFor(t, "the hub to see the loss", func() bool { return !h.Live() })
	waitReplayIdle(t, h)
	checkCount(t, h, reg, 0)
	src.up()
	waitFor(t, "the hub to re-establish its feed", h.Live)
	checkCount(t, h, reg, 0)
}

func TestSharedFeedResumesAfterLossWithoutGapOrDuplicate(t *testing.T) {
	src := newFake()
	h, reg := newHub(t, src, Config{LiveWait: 20 * time.Millisecond})
	first := src.write(ev(translate.ActionSet, "/a"))
	for range 4 {
		src.write(ev(translate.ActionSet, "/a"))
	}
	src.lose() // some of them may not have been read: the resume brings them
	waitFor(t, "the hub to see the loss", func() bool { return !h.Live() })
	for range 3 {
		src.write(ev(translate.ActionSet, "/a"))
	}
	if _, err := h.Watch(context.Background(), "/a", false, false, 0, uint64(src.current())); !errors.Is(err, ErrNotLive) {
		t.Fatalf("Watch while the feed is down: %v, want ErrNotLive", err)
	}
	checkCount(t, h, reg, 0)
	src.up()
	waitFor(t, "the hub to re-establish its feed", h.Live)
	last := src.write(ev(translate.ActionSet, "/a"))
	waitDispatched(t, h, last)

	src.mu.Lock()
	froms := append([]int64(nil), src.feedFroms...)
	src.mu.Unlock()
	if len(froms) != 2 || froms[0] != 0 || froms[1] < first || froms[1] > first+5 {
		t.Fatalf("feeds opened from %v, want 0 then the revision after the last dispatched one", froms)
	}
	w := watch(t, h, src, "/a", false, true, uint64(first))
	for idx := uint64(first); idx <= uint64(last); idx++ {
		if e := recv(t, w); e.Index() != idx {
			t.Fatalf("got the event at %d, want %d", e.Index(), idx)
		}
	}
	if e := now(w); e != nil {
		t.Fatalf("an extra event at %d", e.Index())
	}
	if n := locked(h, func() int { return h.ring.n }); n != int(last-first+1) {
		t.Fatalf("the ring holds %d events, want %d", n, last-first+1)
	}
}

func TestEndAllAndCloseEndEveryWatcher(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*Hub)
	}{
		{"EndAll", func(h *Hub) { h.EndAll("draining") }},
		{"Close", func(h *Hub) { h.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newFake()
			history(src, 10)
			h, reg := newHub(t, src, Config{})
			ws := []*Watcher{}
			l, r, q := threePlaces(t, h, src, reg)
			ws = append(ws, l, r, q)
			checkCount(t, h, reg, 3)
			tc.end(h)
			for _, w := range ws {
				waitDone(t, w, "")
				if tc.name == "EndAll" && w.Reason() != "draining" {
					t.Fatalf("ended with %q", w.Reason())
				}
			}
			checkCount(t, h, reg, 0)
			if tc.name == "Close" {
				if src.openShared() != 0 {
					t.Fatal("Close left the shared feed open")
				}
				if _, err := h.Watch(context.Background(), "/a", false, false, 0, 1); !errors.Is(err, ErrNotLive) {
					t.Fatalf("Watch after Close: %v, want ErrNotLive", err)
				}
			}
		})
	}
}

func TestCancelRemovesTheWatcherFromWhereverItIs(t *testing.T) {
	for _, which := range []string{"live", "replaying", "queued"} {
		t.Run(which, func(t *testing.T) {
			src := newFake()
			history(src, 10)
			h, reg := newHub(t, src, Config{})
			l, r, q := threePlaces(t, h, src, reg)
			w := map[string]*Watcher{"live": l, "replaying": r, "queued": q}[which]
			w.Cancel()
			waitDone(t, w, "canceled")
			checkCount(t, h, reg, 2)
			in := locked(h, func() bool {
				_, inLive := h.byKey[w.key][w]
				inReplay := false
				for r := range h.replays {
					_, in := r.members[w]
					inReplay = inReplay || in
				}
				_, inQueue := h.queued[w]
				return inLive || inReplay || inQueue
			})
			if in || placeOf(h, w) != placeNone {
				t.Fatal("a canceled watcher is still registered")
			}
			w.Cancel() // twice is harmless
			checkCount(t, h, reg, 2)
			src.releaseHistory()
			for _, o := range []*Watcher{l, r, q} {
				if o != w && o != l {
					if e := recv(t, o); e.Node.Key != o.key {
						t.Fatalf("got %s", e.Node.Key)
					}
				}
			}
		})
	}
}

func TestCancelAfterTheAnswerChangesNothing(t *testing.T) {
	src := newFake()
	h, reg := newHub(t, src, Config{})
	w := watch(t, h, src, "/a", false, false, 0)
	src.write(ev(translate.ActionSet, "/a"))
	recv(t, w)
	waitDone(t, w, "answered")
	w.Cancel()
	if w.Reason() != "answered" {
		t.Fatalf("reason %q after Cancel", w.Reason())
	}
	checkCount(t, h, reg, 0)
}

func TestCompactedSharedFeedResetsTheRing(t *testing.T) {
	src := newFake()
	h, reg := newHub(t, src, Config{})
	for i := range 5 { // 2..6, all in the ring
		src.write(ev(translate.ActionSet, fmt.Sprintf("/k%d", i+2)))
	}
	waitDispatched(t, h, 6)
	src.lose()
	waitFor(t, "the hub to see the loss", func() bool { return !h.Live() })
	for i := range 4 { // 7..10, never seen by the hub
		src.write(ev(translate.ActionSet, fmt.Sprintf("/k%d", i+7)))
	}
	src.compact(8)
	src.up() // the resume from 7 is refused: the hub restarts its ring at 10
	waitFor(t, "the hub to restart past the compaction", func() bool {
		return locked(h, func() bool { return h.live && h.lastRev == 10 })
	})
	if n, floor := locked(h, func() int { return h.ring.n }), locked(h, func() uint64 { return h.floor }); n != 0 || floor != 10 {
		t.Fatalf("ring of %d events above %d, want an empty one above 10", n, floor)
	}
	// In the old ring, now compacted: 401 naming the oldest kept revision.
	_, err := h.Watch(context.Background(), "/k3", false, false, 3, 10)
	cleared401(t, err, 8, 3, 10)
	// Still in history: a replay.
	w := watch(t, h, src, "/k9", false, false, 8)
	if e := recv(t, w); e.Index() != 9 {
		t.Fatalf("got %d, want 9", e.Index())
	}
	if _, hist := src.counts(); hist != 1 {
		t.Fatalf("%d history feeds, want 1", hist)
	}
	checkCount(t, h, reg, 0)
}

func TestNotLiveWithinLiveWait(t *testing.T) {
	src := newFake()
	src.hold() // no session: Feed waits
	reg := prometheus.NewRegistry()
	h := New(Config{Source: src, Registry: reg, LiveWait: 20 * time.Millisecond, Numbering: oneIndexPerRevision{}})
	defer h.Close()
	if _, err := h.Watch(context.Background(), "/a", false, false, 0, 1); !errors.Is(err, ErrNotLive) {
		t.Fatalf("Watch with no feed: %v, want ErrNotLive", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.Watch(ctx, "/a", false, false, 0, 1); !errors.Is(err, ErrNotLive) {
		t.Fatalf("Watch with a canceled context: %v, want ErrNotLive", err)
	}
	checkCount(t, h, reg, 0)
	src.up()
	waitFor(t, "the shared feed", h.Live)
	w := watch(t, h, src, "/a", false, false, 0)
	src.write(ev(translate.ActionSet, "/a"))
	recv(t, w)
}

func TestWatchWaitsForAFeedBeingEstablished(t *testing.T) {
	src := newFake()
	src.hold()
	h := New(Config{Source: src, LiveWait: waitTimeout, Numbering: oneIndexPerRevision{}})
	defer h.Close()
	go src.up() // while Watch waits, most likely
	w, err := h.Watch(context.Background(), "/a", false, false, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	src.write(ev(translate.ActionSet, "/a"))
	recv(t, w)
}

func TestKeptErrorIsReturned(t *testing.T) {
	src := newFake()
	history(src, 5)
	h, reg := newHub(t, src, Config{})
	boom := errors.New("boom")
	src.mu.Lock()
	src.keptErr = boom
	src.mu.Unlock()
	if _, err := h.Watch(context.Background(), "/k3", false, false, 3, 6); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	checkCount(t, h, reg, 0)
}

func TestCompacted401WhenTheOldestKeptRevisionCannotBeFound(t *testing.T) {
	src := newFake()
	history(src, 10)
	src.compact(6)
	h, _ := newHub(t, src, Config{})
	calls := 0
	src.mu.Lock()
	src.onKept = func() { // the first Kept answers; the search's fail
		calls++
		if calls == 1 {
			src.mu.Lock()
			src.keptErr = errors.New("boom")
			src.mu.Unlock()
		}
	}
	src.mu.Unlock()
	_, err := h.Watch(context.Background(), "/k3", false, false, 3, 11)
	cleared401(t, err, 11, 3, 11)
}

func TestLossDuringTheHistoryCheckAnswersNotLive(t *testing.T) {
	src := newFake()
	history(src, 5)
	h, reg := newHub(t, src, Config{LiveWait: 20 * time.Millisecond})
	src.mu.Lock()
	src.onKept = func() {
		src.lose()
		waitFor(t, "the hub to see the loss", func() bool { return !h.Live() })
	}
	src.mu.Unlock()
	if _, err := h.Watch(context.Background(), "/k3", false, false, 3, 6); !errors.Is(err, ErrNotLive) {
		t.Fatalf("err = %v, want ErrNotLive", err)
	}
	checkCount(t, h, reg, 0)
}

func TestReplayEndingDuringTheHistoryCheckServesFromTheRing(t *testing.T) {
	src := newFake()
	history(src, 10)
	h, reg := newHub(t, src, Config{})
	src.gateHistory()
	first := watch(t, h, src, "/x", false, false, 4)
	src.mu.Lock()
	src.onKept = func() { // the replay from 4 ends while the next watch checks history
		src.releaseHistory()
		waitReplayIdle(t, h)
	}
	src.mu.Unlock()
	w := watch(t, h, src, "/k6", false, false, 5)
	if e := now(w); e == nil || e.Index() != 6 {
		t.Fatalf("got %v at once, want /k6 from the ring", e)
	}
	if _, hist := src.counts(); hist != 1 {
		t.Fatalf("%d history feeds, want 1", hist)
	}
	checkCount(t, h, reg, 1)
	first.Cancel()
}

func TestFailedReplayEndsItsMembersAndStartsTheQueuedOnes(t *testing.T) {
	src := newFake()
	history(src, 10)
	h, reg := newHub(t, src, Config{})
	_, replaying, queued := threePlaces(t, h, src, reg)
	src.failHistory(errors.New("boom"))
	waitDone(t, replaying, "history replay ended")
	src.releaseHistory()
	if e := recv(t, queued); e.Index() != 3 {
		t.Fatalf("queued watcher got %d, want 3", e.Index())
	}
	if _, hist := src.counts(); hist != 2 {
		t.Fatalf("%d history feeds, want 2", hist)
	}
	checkCount(t, h, reg, 1)
	if got := counterValue(t, reg, "v2bridge_watches_errored_total", ""); got != 1 {
		t.Fatalf("errored = %v, want 1", got)
	}
}

func TestTryProbe(t *testing.T) {
	src := newFake()
	h, _ := newHub(t, src, Config{})
	if !h.TryProbe() {
		t.Fatal("TryProbe on an idle hub")
	}
	h.mu.Lock()
	held := h.TryProbe()
	h.mu.Unlock()
	if held {
		t.Fatal("TryProbe with the lock held")
	}
}

func TestDefaults(t *testing.T) {
	h := New(Config{Source: newFake(), Numbering: oneIndexPerRevision{}})
	defer h.Close()
	c := h.cfg
	if c.RingSize != DefaultRingSize || c.WatcherBuffer != DefaultWatcherBuffer ||
		c.MaxReplayRevisions != DefaultMaxReplayRevisions || c.LiveWait != DefaultLiveWait || c.Logger == nil {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestReplayEndingBetweenARingResetAndTheNewFeedKeepsNothing(t *testing.T) {
	src := newFake()
	history(src, 10) // /k2../k11
	h, _ := newHub(t, src, Config{RingSize: 4})
	src.gateHistory()
	w := watch(t, h, src, "/k5", false, false, 3)
	if !src.step(waitTimeout) { // revision 3 read
		t.Fatal("the replay did not start")
	}
	waitFor(t, "the replay to pass revision 3", func() bool {
		return replayAt(h, 4)
	})
	// The shared feed ends as compacted and no new one is up yet.
	src.hold()
	src.failShared(ErrCompacted)
	waitDone(t, w, "backend watch ended")
	waitFor(t, "the ring reset", func() bool {
		return locked(h, func() bool { return !h.live && h.lastRev == 0 })
	})
	// The end of the shared feed stopped the replay with it.
	waitReplayIdle(t, h)
	src.up()
	waitFor(t, "the new shared feed", h.Live)
	last := src.writeN(4, "/new") // 12..15: a full ring
	waitDispatched(t, h, last)

	// What the replay read before the reset is no part of the new ring:
	// the ring holds 12..15 and waitIndex 5 is older than that.
	if got := locked(h, func() uint64 { return h.ring.at(0).Index() }); got != 12 {
		t.Fatalf("the ring starts at %d, want 12", got)
	}
	if got := locked(h, func() uint64 { return h.floor }); got != 11 {
		t.Fatalf("floor = %d, want 11 (where the new feed started)", got)
	}
	w2, err := h.Watch(context.Background(), "/k5", false, false, 5, uint64(last))
	if w2 != nil {
		w2.Cancel()
	}
	cleared401(t, err, 12, 5, uint64(last))
}

func TestWatchRacingTheEndOfTheFeedIsNotRegistered(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*testing.T, *Hub, *fakeSource)
	}{
		{"compacted: the ring is reset, its floor 0 until a new feed is up", func(t *testing.T, h *Hub, src *fakeSource) {
			src.hold()
			src.failShared(ErrCompacted)
			waitFor(t, "the ring reset", func() bool {
				return locked(h, func() bool { return !h.live && h.lastRev == 0 })
			})
		}},
		{"closed: nothing would ever end the watcher", func(t *testing.T, h *Hub, src *fakeSource) { h.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newFake()
			h, reg := newHub(t, src, Config{LiveWait: 20 * time.Millisecond})
			last := src.writeN(3, "/a") // 2..4, in the ring
			waitDispatched(t, h, last)
			// The feed ends between Watch seeing it live and taking the lock.
			h.afterWaitLive = func() { tc.end(t, h, src) }
			w, err := h.Watch(context.Background(), "/a", false, false, 3, uint64(last))
			h.afterWaitLive = nil
			if !errors.Is(err, ErrNotLive) {
				if w != nil {
					w.Cancel()
				}
				t.Fatalf("Watch while the feed is down: %v, want ErrNotLive", err)
			}
			checkCount(t, h, reg, 0)
		})
	}
}

// A client walking history one re-watch at a time (waitIndex =
// modifiedIndex + 1) is answered from what the replay already read, without
// a replay per step.
func TestWalkThroughHistoryIsAnsweredFromTheReplay(t *testing.T) {
	src := newFake()
	history(src, 10) // /k2../k11
	h, _ := newHub(t, src, Config{})
	src.gateHistory()
	w := watch(t, h, src, "/", true, false, 2)
	for range 6 { // revisions 2..7 read
		if !src.step(waitTimeout) {
			t.Fatal("the replay did not read on")
		}
	}
	next := recv(t, w).Index() + 1
	for next < 7 {
		w = watch(t, h, src, "/", true, false, next)
		e := now(w)
		if e == nil {
			t.Fatalf("re-watch at %d not answered at once from what the replay read", next)
		}
		next = e.Index() + 1
	}
	src.releaseHistory()
	if _, hist := src.counts(); hist != 1 {
		t.Fatalf("%d history feeds for one walk, want 1", hist)
	}
}

// A replay that serves nobody and cannot keep what it reads (the ring is
// full) stops instead of reading on.
func TestIdleReplayWithAFullRingStops(t *testing.T) {
	src := newFake()
	history(src, 10) // /k2../k11
	h, _ := newHub(t, src, Config{RingSize: 2})
	src.gateHistory()
	w := watch(t, h, src, "/never", false, false, 2)
	if !src.step(waitTimeout) {
		t.Fatal("the replay did not start")
	}
	last := src.write(ev(translate.ActionSet, "/live")) // the ring fills
	src.write(ev(translate.ActionSet, "/live"))
	waitDispatched(t, h, last+1)
	w.Cancel()
	// Read on slowly: the replay stops once it has been idle for
	// replayIdle, before it reaches the end of the history.
	deadline := time.Now().Add(5 * replayIdle)
	for src.step(waitTimeout) {
		if time.Now().After(deadline) {
			t.Fatal("the idle replay kept reading")
		}
		time.Sleep(replayIdle / 4)
	}
	waitReplayIdle(t, h)
	if got := testutil.ToFloat64(h.metrics.replayRevisions); got >= 10 {
		t.Fatalf("the idle replay read %v revisions, want it to stop before the ring", got)
	}
}

// A v3 transaction that changes several keys is one revision but several v2
// events, each with an index of its own: a client that resumes at
// modifiedIndex + 1 gets every one of them, whether the watch was waiting
// (live), arrives after them (ring) or arrives at a hub started after them
// (replay).
func TestEveryEventOfAMultiKeyRevisionReachesAClientResumingAtModifiedIndexPlusOne(t *testing.T) {
	txn := func(src *fakeSource) int64 {
		return src.write(ev(translate.ActionSet, "/d/a"), ev(translate.ActionCreate, "/d/b"), ev(translate.ActionDelete, "/d/c"))
	}
	walk := func(t *testing.T, h *Hub, src *fakeSource, first *Watcher) {
		t.Helper()
		var got []string
		e := recv(t, first)
		for {
			got = append(got, e.Node.Key)
			if len(got) == 3 {
				break
			}
			e = recv(t, watch(t, h, src, "/d", true, false, e.Index()+1))
		}
		if strings.Join(got, " ") != "/d/a /d/b /d/c" {
			t.Fatalf("events %v, want /d/a /d/b /d/c", got)
		}
	}
	t.Run("live", func(t *testing.T) {
		src := newFake()
		src.numbered = true
		h, _ := newHub(t, src, Config{})
		w := watch(t, h, src, "/d", true, false, 0)
		txn(src)
		walk(t, h, src, w)
	})
	t.Run("ring", func(t *testing.T) {
		src := newFake()
		src.numbered = true
		h, _ := newHub(t, src, Config{})
		start := translate.Index(src.current()) + 1
		waitDispatched(t, h, txn(src))
		walk(t, h, src, watch(t, h, src, "/d", true, false, start))
	})
	t.Run("replay", func(t *testing.T) {
		src := newFake()
		src.numbered = true
		start := translate.Index(src.current()) + 1
		txn(src)
		src.write(ev(translate.ActionSet, "/other"))
		h, _ := newHub(t, src, Config{})
		walk(t, h, src, watch(t, h, src, "/d", true, false, start))
	})
}
