// SPDX-License-Identifier: Apache-2.0

// Package hub serves every v2 watch of a bridge from one shared feed of
// decoded v2 events. It owns the ring of recent events and every watcher —
// those served live from the shared feed and those catching up through a
// replay of history — and nothing else: the feed, its decoding and the
// connection's liveness belong to the backend, behind the Source interface.
//
// A watch whose waitIndex is in the ring is answered from memory. One older
// than the ring is caught up by a replay of history, shared by every
// watcher it can serve. A replay keeps the newest events it read, so that a
// client walking history re-watch by re-watch is answered from memory, and
// is paced by its watchers: it stops reading while what it keeps is ahead of
// everyone it serves. A waitIndex older than what the ring can hold, older
// than MaxReplayRevisions, or compacted away gets v2's 401 before any header
// is written, as v2 answered one older than its 1000-event window.
package hub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// Config configures a Hub.
type Config struct {
	Source Source
	// RingSize is how many recent v2 events are kept: the history horizon
	// in events, as v2 kept its last 1000. A waitIndex older than a full
	// ring gets 401; one older than a ring not yet full (after a start, a
	// compaction) is caught up by a replay.
	RingSize int
	// WatcherBuffer is a stream=true watcher's queue; a reader further
	// behind than that is cut off.
	WatcherBuffer int
	// MaxReplayRevisions bounds how far back (in revisions from the current
	// one) a replay reads history; an older waitIndex gets 401.
	MaxReplayRevisions int64
	// LiveWait is how long a watch request waits for a shared feed that is
	// being (re)established, as right after a failover.
	LiveWait time.Duration
	// MaxReplays bounds the replays reading history at once: the one for
	// the queued watchers and those started for clients walking history
	// that fell out of what another replay kept.
	MaxReplays int
	// SkimAfter is how many revisions in a row a replay reads in full
	// without finding anything for its watchers before it skims instead:
	// asks etcd only for what may concern them (Source.History with keys).
	SkimAfter int64
	// Numbering relates v2 indexes to v3 revisions (translate.Numbering
	// when nil).
	Numbering Numbering
	Logger    *zap.Logger
	Registry  prometheus.Registerer
}

// Numbering is how v2 indexes relate to the v3 revisions the Source speaks
// in: a revision owns a block of indexes, its events the last ones.
type Numbering interface {
	Index(rev int64) uint64      // a revision's last index (0 for revision 0)
	FirstIndex(rev int64) uint64 // a revision's first index
	Revision(index uint64) int64 // the revision an index belongs to
}

// Defaults of Config's zero values.
const (
	DefaultRingSize           = 1000 // v2's window
	DefaultWatcherBuffer      = 100
	DefaultMaxReplayRevisions = 100000
	DefaultLiveWait           = 2 * time.Second
	DefaultMaxReplays         = 4
	DefaultSkimAfter          = 1000 // one round of etcd's catch-up of a watch
)

// Hub is the watch hub. Its goroutines (the shared feed's reader and at most
// MaxReplays replays) are started by the hub and waited for by Close.
type Hub struct {
	cfg     Config
	src     Source
	num     Numbering
	lg      *zap.Logger
	metrics *metrics

	ctx    context.Context // ends at Close; every feed runs under it
	cancel context.CancelFunc
	wg     sync.WaitGroup // run, and the replay goroutines

	// mu guards everything below, every Watcher's next, where and replay,
	// every replay's state (replay.go, keeper.go), and the encoding of the
	// events it delivers (Event.Encoded). It is the only lock of the
	// package; no other lock is taken while it is held.
	mu      sync.Mutex
	ring    ring
	floor   uint64 // every event with index > floor is in the ring or yet to come
	lastRev int64  // every revision <= lastRev has been dispatched
	live    bool   // the shared feed is established
	byKey   map[string]map[*Watcher]struct{}
	replays map[*replay]struct{}  // the replays running (or paused)
	qreplay *replay               // the one of them started for the queued watchers, if any
	queued  map[*Watcher]struct{} // waiting for the next such replay
	count   int                   // watchers registered, in any place

	afterWaitLive func() // tests: runs in Watch once the feed was seen live
}

// New starts a hub reading the shared feed of cfg.Source.
func New(cfg Config) *Hub {
	if cfg.RingSize <= 0 {
		cfg.RingSize = DefaultRingSize
	}
	if cfg.WatcherBuffer <= 0 {
		cfg.WatcherBuffer = DefaultWatcherBuffer
	}
	if cfg.MaxReplayRevisions <= 0 {
		cfg.MaxReplayRevisions = DefaultMaxReplayRevisions
	}
	if cfg.LiveWait <= 0 {
		cfg.LiveWait = DefaultLiveWait
	}
	if cfg.MaxReplays <= 0 {
		cfg.MaxReplays = DefaultMaxReplays
	}
	if cfg.SkimAfter <= 0 {
		cfg.SkimAfter = DefaultSkimAfter
	}
	if cfg.Numbering == nil {
		cfg.Numbering = translate.Numbering{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{cfg: cfg, src: cfg.Source, num: cfg.Numbering, lg: cfg.Logger, metrics: newMetrics(cfg.Registry), ctx: ctx, cancel: cancel,
		ring: newRing(cfg.RingSize), byKey: map[string]map[*Watcher]struct{}{}, replays: map[*replay]struct{}{},
		queued: map[*Watcher]struct{}{}}
	h.wg.Add(1)
	go h.run()
	return h
}

// Close stops the hub's goroutines and ends every watcher.
func (h *Hub) Close() {
	h.cancel()
	h.wg.Wait()
	h.EndAll("bridge shutting down")
}

// EndAll ends every v2 watch now (graceful shutdown: clients re-issue them).
func (h *Hub) EndAll(reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endAllLocked(reason)
}

// Live reports whether the shared feed is established.
func (h *Hub) Live() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live
}

// Watchers is the number of v2 watchers registered (live, replaying or
// queued for a replay).
func (h *Hub) Watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// TryProbe reports whether the hub's lock is free now (a wedged hub holds
// it forever).
func (h *Hub) TryProbe() bool {
	if h.mu.TryLock() {
		h.mu.Unlock()
		return true
	}
	return false
}

// Watch registers a v2 watch on key. current is the store's index now
// (the response's X-Etcd-Index: the index of the current revision);
// waitIndex 0 means "after current". A
// waitIndex the hub cannot serve gets v2's 401 here, before the caller
// writes any header; ErrNotLive while the shared feed is down.
func (h *Hub) Watch(ctx context.Context, key string, recursive, stream bool, waitIndex, current uint64) (*Watcher, error) {
	w := &Watcher{key: key, recursive: recursive, stream: stream, start: current, hub: h, done: make(chan struct{}),
		next: waitIndex}
	if waitIndex == 0 {
		w.next = current + 1
	}
	if stream {
		w.ch = make(chan *translate.Event, h.cfg.WatcherBuffer)
	} else {
		w.ch = make(chan *translate.Event, 1)
	}
	if !h.waitLive(ctx) {
		return nil, ErrNotLive
	}
	if h.afterWaitLive != nil {
		h.afterWaitLive()
	}
	h.mu.Lock()
	if !h.live { // the feed ended since: after a reset the floor means nothing
		h.mu.Unlock()
		return nil, ErrNotLive
	}
	if w.next > h.floor {
		h.serveFromRingLocked(w)
		h.mu.Unlock()
		return w, nil
	}
	err := h.checkHorizonLocked(w.next, current)
	if err == nil && h.serveFromReplaysLocked(w) {
		// Within what a replay read (a client walking history): no need
		// to ask whether v3 still keeps it.
		h.mu.Unlock()
		return w, nil
	}
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// Older than the ring: history, unless v3 compacted it.
	if ok, err := h.src.Kept(ctx, h.num.Revision(w.next)); err != nil {
		return nil, err
	} else if !ok {
		h.metrics.refused.WithLabelValues("compacted").Inc()
		oldest := h.oldestKept(ctx, h.num.Revision(w.next), h.num.Revision(current))
		return nil, cleared(h.num.FirstIndex(oldest), w.next, current)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.live {
		return nil, ErrNotLive
	}
	if w.next > h.floor { // a replay lowered the floor meanwhile
		h.serveFromRingLocked(w)
		return w, nil
	}
	h.addReplayLocked(w)
	return w, nil
}

// checkHorizonLocked refuses a waitIndex (older than the ring) that is
// beyond the hub's history horizon.
func (h *Hub) checkHorizonLocked(next, current uint64) error {
	if h.ring.full() {
		// The ring holds the last RingSize events: next is older than that.
		h.metrics.refused.WithLabelValues("events").Inc()
		return cleared(h.ring.at(0).Index(), next, current)
	}
	limit, cur := h.cfg.MaxReplayRevisions, h.num.Revision(current)
	if cur > limit && h.num.Revision(next) < cur-limit {
		h.metrics.refused.WithLabelValues("revisions").Inc()
		return cleared(h.num.FirstIndex(cur-limit), next, current)
	}
	return nil
}

func cleared(oldest, waitIndex, current uint64) error {
	return translate.NewError(translate.EcodeEventIndexCleared,
		fmt.Sprintf("the requested history has been cleared [%d/%d]", oldest, waitIndex), current)
}

// oldestKept finds the oldest revision the backend still keeps, for the
// 401's cause.
func (h *Hub) oldestKept(ctx context.Context, lo, hi int64) int64 {
	for lo < hi {
		mid := lo + (hi-lo)/2
		ok, err := h.src.Kept(ctx, mid)
		switch {
		case err != nil:
			return hi
		case ok:
			hi = mid
		default:
			lo = mid + 1
		}
	}
	return hi
}

// waitLive gives a hub that is (re)establishing its shared feed a moment
// to finish, so a watch re-issued right after a failover is served instead
// of refused; it never waits past ctx.
func (h *Hub) waitLive(ctx context.Context) bool {
	if h.Live() {
		return true
	}
	deadline := time.NewTimer(h.cfg.LiveWait)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !h.Live() {
		select {
		case <-ctx.Done():
			return false
		case <-h.ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
	return true
}

// serveFromRingLocked hands w the ring's events it is due and, if it wants
// more, registers it for live events.
func (h *Hub) serveFromRingLocked(w *Watcher) {
	for i := h.ring.from(w.next); i < h.ring.n; i++ {
		ev := h.ring.at(i)
		if !w.wants(ev) {
			continue
		}
		if !h.deliverLocked(w, ev) {
			h.removeLocked(w)
			return
		}
	}
	if w.where == placeNone {
		h.addedLocked(w)
	}
	set := h.byKey[w.key]
	if set == nil {
		set = map[*Watcher]struct{}{}
		h.byKey[w.key] = set
	}
	set[w] = struct{}{}
	w.where, w.replay = placeLive, nil
}

// addedLocked counts a watcher that enters the hub.
func (h *Hub) addedLocked(*Watcher) {
	h.count++
	h.metrics.watchers.Inc()
}

// removeLocked takes w out of wherever it is registered.
func (h *Hub) removeLocked(w *Watcher) {
	w.removed.Store(true)
	switch w.where {
	case placeNone:
		return
	case placeLive:
		set := h.byKey[w.key]
		delete(set, w)
		if len(set) == 0 {
			delete(h.byKey, w.key)
		}
	case placeReplay:
		delete(w.replay.members, w)
		w.replay = nil
	case placeQueued:
		delete(h.queued, w)
	}
	w.where = placeNone
	h.count--
	h.metrics.watchers.Dec()
}

// deliverLocked offers ev to w and reports whether w wants more.
func (h *Hub) deliverLocked(w *Watcher, ev *translate.Event) bool {
	if ev.Encoded == nil {
		// Encoded once, on its first delivery, for every watcher it reaches;
		// an event nobody watches is never encoded. Readers see the bytes
		// through the channel send below.
		ev.Encode()
	}
	select {
	case w.ch <- ev:
		h.metrics.delivered.Inc()
		w.next = ev.Index() + 1
		if !w.stream {
			w.finish("answered")
			return false
		}
		return true
	default:
		// A stream reader that fell behind is cut off rather than allowed to
		// delay the hub (v2 dropped such watchers too).
		h.metrics.slowCutoffs.Inc()
		w.finish("fell behind")
		return false
	}
}

func (h *Hub) endAllLocked(reason string) {
	end := func(w *Watcher) {
		h.removeLocked(w)
		h.metrics.errored.Inc()
		w.finish(reason)
	}
	for _, set := range h.byKey {
		for w := range set {
			end(w)
		}
	}
	for r := range h.replays {
		for w := range r.members {
			end(w)
		}
	}
	for w := range h.queued {
		end(w)
	}
}

// run keeps the shared feed open and resumes it from the last dispatched
// revision after every session change, so the ring never has a gap.
func (h *Hub) run() {
	defer h.wg.Done()
	for {
		h.mu.Lock()
		from := int64(0)
		if h.lastRev > 0 {
			from = h.lastRev + 1
		}
		h.mu.Unlock()
		feed, err := h.src.Feed(h.ctx, from)
		if err == nil {
			err = h.consume(feed)
			feed.Close()
		}
		h.mu.Lock()
		h.live = false
		h.endAllLocked("backend watch ended")
		// What the replays read stays true, but how it meets the ring is
		// decided again by the next feed (a compaction resets the ring).
		for r := range h.replays {
			h.dropReplayLocked(r)
		}
		if errors.Is(err, ErrCompacted) {
			// The gap since lastRev is gone from history: restart the ring
			// after it; older waitIndexes get 401.
			h.lg.Warn("shared watch resumed past a compaction; older waitIndexes get 401", zap.Int64("lastRev", h.lastRev))
			h.ring.reset()
			h.lastRev, h.floor = 0, 0
		}
		h.mu.Unlock()
		if h.ctx.Err() != nil {
			return
		}
		if err != nil {
			h.lg.Debug("shared watch ended", zap.Error(err))
		}
		select { // no busy loop when feeds fail at once
		case <-h.ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// consume dispatches the shared feed until it ends.
func (h *Hub) consume(feed Feed) error {
	for {
		b, err := feed.Next(h.ctx)
		if err != nil {
			return err
		}
		h.mu.Lock()
		switch {
		case b.Created:
			h.live = true
			if h.lastRev == 0 {
				h.lastRev, h.floor = b.Rev, h.num.Index(b.Rev)
			}
		default:
			// A Created batch's revision is the present, not what was
			// dispatched: only events and progress move lastRev.
			h.dispatchLocked(b.Events)
			if b.Rev > h.lastRev {
				h.lastRev = b.Rev
			}
		}
		h.mu.Unlock()
	}
}

// dispatchLocked records a revision's events and hands them to watchers.
func (h *Hub) dispatchLocked(evs []*translate.Event) {
	for _, ev := range evs {
		if old := h.ring.push(ev); old != nil {
			h.floor = old.Index()
		}
		for _, w := range h.candidatesLocked(ev) {
			if w.wants(ev) && !h.deliverLocked(w, ev) {
				h.removeLocked(w)
			}
		}
	}
}

// candidatesLocked lists the live watchers that may match ev: those on its
// key and its ancestors, and for a removed directory, those below it.
func (h *Hub) candidatesLocked(ev *translate.Event) []*Watcher {
	var out []*Watcher
	add := func(key string) {
		for w := range h.byKey[key] {
			out = append(out, w)
		}
	}
	k := ev.Node.Key
	add(k)
	for _, a := range translate.Ancestors(k) {
		add(a)
	}
	if k != "/" {
		add("/")
	}
	if ev.Node.Dir && (ev.Action == translate.ActionDelete || ev.Action == translate.ActionExpire) {
		// A plain prefix, not k+"/": a watcher that arrived before the hub
		// saw this event gets it by v2's history rule, under which deleting
		// /d answers a watch on /dd (WatchMatches decides).
		for key := range h.byKey {
			if key != k && strings.HasPrefix(key, k) {
				add(key)
			}
		}
	}
	return out
}
