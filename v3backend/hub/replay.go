// SPDX-License-Identifier: Apache-2.0

package hub

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// replay catches up watchers whose waitIndex is older than the ring from v3
// history, on a history feed of its own, up to the ring. Watchers that
// arrive while it runs are answered from what it kept, join it if it has
// not passed their waitIndex, or wait in the queue for the next replay
// started for the queue (at most one at a time), so each revision is read
// once for all of them. A client walking history one-shot (re-watching at
// modifiedIndex + 1) is answered from what the replay kept, and paces it:
// with no member left to serve, the replay stops reading, and closes its
// feed, once it keeps RingSize events its walkers have not passed yet, and
// reads on when they have gone through half of them. A walker that fell
// out of what a replay kept (the replay had members to read on for) starts
// a replay of its own, within MaxReplays.
//
// A replay reads history in full, every revision decoded. After SkimAfter
// revisions in a row that concerned none of its watchers it skims instead:
// it asks etcd only for the keys that may concern them, decodes nothing,
// and goes back to reading in full from the first revision the skim finds.
type replay struct {
	from  uint64 // the index it was started at
	queue bool   // started for the queued watchers (false: for a walker)
	// ctx ends when the replay is over (finished, failed or stopped); its
	// feed runs under it.
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{} // 1-buffered: reading may be due again

	// Guarded by Hub.mu.
	pos       uint64 // every event with an index below pos has been offered to the members
	members   map[*Watcher]struct{}
	kept      *keeper
	walkers   map[walker]time.Time // one-shot watchers it answered, by where they will re-watch: when
	skim      []string             // the keys it skims for (nil: it reads in full)
	skimFrom  int64                // the revision its skim started at
	quiet     int64                // revisions read in full in a row that concerned none of its watchers
	skimAfter int64                // how many of those make it skim
	idle      time.Time            // since when it has had nobody to read for (zero: it has someone)
	paused    bool                 // it stopped reading for its walkers to catch up
	over      bool                 // finished, failed or stopped: its goroutine ends
}

// walker is a one-shot watcher a replay answered: the key it watched and
// the index it will re-watch at (its event's index + 1).
type walker struct {
	key  string
	next uint64
}

// replayIdle is how long a replay waits with nobody to read for before it
// ends, and how long a walker counts as coming back: long enough for a
// client walking history to send its next watch.
const replayIdle = time.Second

// maxWalkers bounds the walkers a replay remembers.
const maxWalkers = 1024

// maxSkimKeys bounds the keys a skim looks for; with more, the replay
// reads in full.
const maxSkimKeys = 1024

// maxSkimBackoff bounds how far SkimAfter grows for a replay whose skims
// keep finding something at once.
const maxSkimBackoff = 64

// serveFromReplaysLocked serves w, whose waitIndex is older than the ring,
// from what a replay kept: a one-shot watcher whose first matching event
// is there is answered at once, never registered; a watcher it kept
// everything for from w's waitIndex on joins that replay. It reports
// whether w was served.
func (h *Hub) serveFromReplaysLocked(w *Watcher) bool {
	wi := w.next
	for r := range h.replays {
		until := r.kept.knownUntil(w.key, w.next, r.pos)
		if until <= w.next {
			continue
		}
		for _, ev := range r.kept.from(w.next) {
			if ev.Index() >= until {
				break
			}
			if w.wants(ev) && !h.deliverLocked(w, ev) {
				h.forgetWalkerLocked(w.key, wi)
				if !w.stream { // answered: a walker, likely back soon
					r.noteWalker(w.key, w.next, time.Now())
					h.walkedOnLocked(r)
				}
				return true
			}
		}
		if until == r.pos {
			h.forgetWalkerLocked(w.key, wi)
			h.addedLocked(w)
			h.joinLocked(r, w)
			return true
		}
	}
	return false
}

// forgetWalkerLocked forgets the walker on key re-watching at next in every
// replay (it is back); it reports whether one knew it.
func (h *Hub) forgetWalkerLocked(key string, next uint64) bool {
	known := false
	for r := range h.replays {
		if r.forgetWalker(key, next) {
			known = true
		}
	}
	return known
}

// addReplayLocked serves w, whose waitIndex is older than the ring, by a
// replay: from what one kept, by joining one that has not passed its
// waitIndex, by one of its own if it is a walker that fell out of what a
// replay kept, or by the next replay for the queue.
func (h *Hub) addReplayLocked(w *Watcher) {
	if h.serveFromReplaysLocked(w) {
		return
	}
	walked := h.forgetWalkerLocked(w.key, w.next)
	var join *replay
	for r := range h.replays {
		if w.next >= r.pos && (join == nil || r.pos > join.pos) {
			join = r
		}
	}
	h.addedLocked(w)
	switch {
	case join != nil:
		h.joinLocked(join, w)
	case walked && len(h.replays)-h.queueReplays() < h.cfg.MaxReplays-1:
		h.newReplayLocked(w.next, false, w)
	default:
		h.queued[w] = struct{}{}
		w.where = placeQueued
		if h.qreplay == nil {
			h.startQueueReplayLocked()
		} else {
			h.resumeLocked(h.qreplay) // it hands the queue over if it has nobody to read for
		}
	}
}

func (h *Hub) queueReplays() int {
	if h.qreplay != nil {
		return 1
	}
	return 0
}

// joinLocked makes w, already counted, a member of r.
func (h *Hub) joinLocked(r *replay, w *Watcher) {
	r.members[w] = struct{}{}
	w.where, w.replay = placeReplay, r
	h.resumeLocked(r)
}

// resumeLocked makes r read on (if it was paused).
func (h *Hub) resumeLocked(r *replay) {
	r.paused, r.idle = false, time.Time{}
	r.poke()
}

// walkedOnLocked resumes r, paused for its walkers, once they are half
// through what it kept ahead of them.
func (h *Hub) walkedOnLocked(r *replay) {
	if !r.paused {
		return
	}
	if mark, ok := h.markLocked(r); ok && r.kept.countFrom(mark) <= r.kept.max/2 {
		h.resumeLocked(r)
	}
}

// startQueueReplayLocked starts a replay for the queued watchers, from the
// oldest of their waitIndexes, unless one runs.
func (h *Hub) startQueueReplayLocked() {
	if h.qreplay != nil || len(h.queued) == 0 || !h.live || h.ctx.Err() != nil {
		return
	}
	ws := make([]*Watcher, 0, len(h.queued))
	var from uint64
	for w := range h.queued {
		if len(ws) == 0 || w.next < from {
			from = w.next
		}
		ws = append(ws, w)
		delete(h.queued, w)
	}
	h.newReplayLocked(from, true, ws...)
}

// newReplayLocked starts a replay from index from for the (counted)
// watchers ws.
func (h *Hub) newReplayLocked(from uint64, queue bool, ws ...*Watcher) {
	r := &replay{from: from, queue: queue, wake: make(chan struct{}, 1), pos: from,
		members: map[*Watcher]struct{}{}, kept: newKeeper(len(h.ring.buf), from), walkers: map[walker]time.Time{},
		skimAfter: h.cfg.SkimAfter}
	r.ctx, r.cancel = context.WithCancel(h.ctx)
	for _, w := range ws {
		r.members[w] = struct{}{}
		w.where, w.replay = placeReplay, r
	}
	h.replays[r] = struct{}{}
	if queue {
		h.qreplay = r
	}
	h.metrics.replays.Inc()
	h.wg.Add(1)
	go h.runReplay(r)
}

// dropReplayLocked marks r over and forgets it; its goroutine ends. Its
// members must have been moved or ended.
func (h *Hub) dropReplayLocked(r *replay) {
	r.over = true
	r.cancel()
	delete(h.replays, r)
	if h.qreplay == r {
		h.qreplay = nil
	}
}

// replayStep is what a replay's goroutine does next.
type replayStep struct {
	over bool
	read bool          // read on (false: paused)
	from int64         // the revision to open a feed at
	skim []string      // the keys to skim for (nil: read in full)
	wait time.Duration // paused: look again after this long at most
}

// runReplay reads history for r until it reaches the ring, fails, or has
// nobody left to read for.
func (h *Hub) runReplay(r *replay) {
	defer h.wg.Done()
	var feed Feed
	var feedSkim []string // what feed skims for (nil: it reads in full)
	closeFeed := func() {
		if feed != nil {
			feed.Close()
			feed = nil
		}
	}
	defer closeFeed()
	timer := time.NewTimer(replayIdle)
	defer timer.Stop()
	for {
		h.mu.Lock()
		st := h.replayStepLocked(r, time.Now())
		h.mu.Unlock()
		if st.over {
			return
		}
		if !st.read {
			// Paused: a closed feed leaves nothing to pile up in the
			// client's buffers meanwhile.
			closeFeed()
			timer.Reset(st.wait)
			select {
			case <-r.wake:
			case <-timer.C:
			case <-r.ctx.Done():
			}
			timer.Stop()
			continue
		}
		if feed != nil && !slices.Equal(feedSkim, st.skim) {
			closeFeed()
		}
		if feed == nil {
			f, err := h.src.History(r.ctx, st.from, st.skim)
			if err != nil {
				h.replayFailed(r, err)
				return
			}
			feed, feedSkim = f, st.skim
			mode := "full"
			if st.skim != nil {
				mode = "skim"
			}
			h.metrics.replayFeeds.WithLabelValues(mode).Inc()
		}
		b, err := feed.Next(r.ctx)
		if err != nil {
			closeFeed()
			h.replayFailed(r, err)
			return
		}
		if b.Created {
			continue
		}
		h.mu.Lock()
		h.replayBatchLocked(r, b, feedSkim)
		h.mu.Unlock()
	}
}

// replayStepLocked decides whether r reads on, pauses, or is over.
func (h *Hub) replayStepLocked(r *replay, now time.Time) replayStep {
	if r.over {
		return replayStep{over: true}
	}
	for wk, at := range r.walkers {
		if now.Sub(at) >= replayIdle {
			delete(r.walkers, wk)
		}
	}
	if r.queue && len(r.members) == 0 && len(h.queued) > 0 {
		// It reads for nobody the queue waits for: the queue gets a
		// replay of its own now rather than once this one reaches the
		// ring; this one goes on for its walkers, if there is room.
		r.queue, h.qreplay = false, nil
		h.startQueueReplayLocked()
		if len(h.replays)-h.queueReplays() > h.cfg.MaxReplays-1 {
			h.dropReplayLocked(r)
			return replayStep{over: true}
		}
	}
	if len(r.members) == 0 {
		mark, ok := h.markLocked(r)
		if !ok { // nobody to read for
			r.paused = true
			if r.idle.IsZero() {
				r.idle = now
			}
			left := replayIdle - now.Sub(r.idle)
			if left <= 0 {
				h.lg.Debug("history replay stopped: nobody to read for", zap.Uint64("from", r.from), zap.Uint64("pos", r.pos))
				h.dropReplayLocked(r)
				return replayStep{over: true}
			}
			return replayStep{wait: left}
		}
		r.idle = time.Time{}
		// Paced by its walkers: it stops once it keeps RingSize events
		// ahead of the slowest, and reads on when they are half through.
		ahead := r.kept.countFrom(mark)
		if ahead >= r.kept.max || (r.paused && ahead > r.kept.max/2) {
			r.paused = true
			return replayStep{wait: r.walkerExpiry(now)}
		}
	}
	r.paused, r.idle = false, time.Time{}
	keys := h.interestLocked(r)
	if r.skim != nil && !coversAll(r.skim, keys) {
		r.skim, r.quiet = nil, 0 // a watcher it does not skim for joined
	}
	if r.skim == nil && r.quiet >= r.skimAfter && len(keys) > 0 && len(keys) <= maxSkimKeys && !slices.Contains(keys, "/") {
		r.skim, r.skimFrom = keys, h.num.Revision(r.pos)
	}
	return replayStep{read: true, from: h.num.Revision(r.pos), skim: r.skim}
}

// markLocked is the lowest index a walker of r that r can still serve will
// re-watch at; false if r has none.
func (h *Hub) markLocked(r *replay) (uint64, bool) {
	var mark uint64
	ok := false
	for wk := range r.walkers {
		if wk.next < r.pos && !r.kept.covers(wk.key, wk.next, r.pos) {
			continue // fell out of what r kept
		}
		if !ok || wk.next < mark {
			mark, ok = wk.next, true
		}
	}
	return mark, ok
}

// interestLocked lists the keys r reads for: its members' and its walkers'
// (those it can still serve), none below another.
func (h *Hub) interestLocked(r *replay) []string {
	var keys []string
	for w := range r.members {
		keys = append(keys, w.key)
	}
	for wk := range r.walkers {
		if wk.next >= r.pos || r.kept.covers(wk.key, wk.next, r.pos) {
			keys = append(keys, wk.key)
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	out := keys[:0]
	for _, k := range keys {
		// Sorted: a key's ancestors come before it.
		if len(out) == 0 || !covered(k, out) {
			out = append(out, k)
		}
	}
	return out
}

// replayBatchLocked applies one batch of r's feed (skimming for skim, or
// read in full when nil).
func (h *Hub) replayBatchLocked(r *replay, b Batch, skim []string) {
	if r.over {
		return
	}
	if skim != nil && (r.skim == nil || !coversAll(skim, h.interestLocked(r))) {
		// A watcher the skim does not look for joined: the batch says
		// nothing about it. Read on in full from where r is.
		r.skim, r.quiet = nil, 0
		return
	}
	switch {
	case b.Unread:
		h.skippedLocked(r, skim, h.num.FirstIndex(b.Rev), b.Rev-1)
		// Something for its watchers may be at b.Rev: read it in full. A
		// skim that found something soon makes the next one wait longer.
		if b.Rev-r.skimFrom < r.skimAfter {
			r.skimAfter = min(2*r.skimAfter, maxSkimBackoff*h.cfg.SkimAfter)
		} else {
			r.skimAfter = h.cfg.SkimAfter
		}
		r.skim, r.quiet = nil, 0
		if h.num.FirstIndex(b.Rev) > h.floor {
			h.finishReplayLocked(r)
		}
		return
	case b.Progress:
		if next := h.num.Index(b.Rev) + 1; skim != nil {
			h.skippedLocked(r, skim, next, b.Rev)
		} else if next > r.pos {
			r.pos = next
		}
		if h.num.Index(b.Rev) >= h.floor { // every revision up to the ring has been read
			h.finishReplayLocked(r)
		}
		return
	}
	// Read in full: the revisions the feed did not send changed nothing in
	// the bridge's range.
	if first := h.num.FirstIndex(b.Rev); first > r.pos {
		r.pos = first
	}
	if h.num.FirstIndex(b.Rev) > h.floor {
		// The ring has everything from here on, or the shared feed is
		// still to bring it.
		h.finishReplayLocked(r)
		return
	}
	h.metrics.replayRevisions.Inc()
	now := time.Now()
	concerned := false
	for _, ev := range b.Events {
		for w := range r.members {
			if !w.wants(ev) {
				continue
			}
			concerned = true
			if !h.deliverLocked(w, ev) {
				h.removeLocked(w)
				if !w.stream {
					r.noteWalker(w.key, w.next, now)
				}
			}
		}
		if !concerned {
			for wk := range r.walkers {
				if ev.Index() >= wk.next && eventConcerns(ev, []string{wk.key}) {
					concerned = true
					break
				}
			}
		}
	}
	if concerned {
		r.quiet = 0
	} else {
		r.quiet++
	}
	if next := h.num.Index(b.Rev) + 1; next > r.pos {
		r.pos = next
	}
	r.kept.add(b.Events)
	if h.num.Index(b.Rev) >= h.floor { // every revision up to the ring has been read
		h.finishReplayLocked(r)
	}
}

// skippedLocked moves r, skimming for skim, to pos to: nothing before it
// (up to revision last) concerns those keys.
func (h *Hub) skippedLocked(r *replay, skim []string, to uint64, last int64) {
	if to <= r.pos {
		return
	}
	if n := last - h.num.Revision(r.pos) + 1; n > 0 {
		h.metrics.replaySkimmed.Add(float64(n))
	}
	r.kept.skimmed(skim, r.pos, to)
	r.pos = to
}

// replayFailed ends r after its feed failed, with its members; the next
// replay for the queue starts if r was it.
func (h *Hub) replayFailed(r *replay, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.over { // finished or stopped: that ended its feed
		return
	}
	h.lg.Debug("history replay ended", zap.Uint64("from", r.from), zap.Uint64("pos", r.pos), zap.Error(err))
	for w := range r.members {
		h.removeLocked(w)
		h.metrics.errored.Inc()
		w.finish("history replay ended")
	}
	h.dropReplayLocked(r)
	h.startQueueReplayLocked()
}

// finishReplayLocked ends r, which has read up to the ring: it keeps what r
// read in front of the ring, as far as there is room, moves r's members,
// and the queued watchers the ring can now serve, to the live path, and
// ends the other replays the ring now reaches.
func (h *Hub) finishReplayLocked(r *replay) {
	// lastRev 0: the ring was reset (the shared feed resumed past a
	// compaction) and the new feed has not said where it starts; what r
	// read is not contiguous with what the ring will hold, so none of it is
	// kept (its oldest event would later be evicted as the floor).
	if free := h.ring.free(); free > 0 && h.lastRev > 0 {
		if evs, below, ok := r.kept.forRing(h.floor, r.pos, free); ok && (len(evs) > 0 || below < h.floor) {
			h.ring.prepend(evs)
			h.floor = min(h.floor, below)
		}
	}
	for w := range r.members {
		delete(r.members, w)
		h.serveFromRingLocked(w)
	}
	h.dropReplayLocked(r)
	for w := range h.queued {
		if w.next > h.floor {
			delete(h.queued, w)
			h.serveFromRingLocked(w)
		}
	}
	var reached []*replay
	for o := range h.replays {
		if o.pos > h.floor {
			reached = append(reached, o)
		}
	}
	for _, o := range reached {
		if !o.over {
			h.finishReplayLocked(o)
		}
	}
	h.startQueueReplayLocked()
}

// poke wakes r's goroutine if it is paused.
func (r *replay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// noteWalker remembers that a one-shot watcher on key was answered and will
// re-watch at next.
func (r *replay) noteWalker(key string, next uint64, now time.Time) {
	if len(r.walkers) < maxWalkers {
		r.walkers[walker{key, next}] = now
	}
}

// forgetWalker forgets the walker on key re-watching at next (it is back);
// it reports whether r knew it.
func (r *replay) forgetWalker(key string, next uint64) bool {
	wk := walker{key, next}
	if _, ok := r.walkers[wk]; ok {
		delete(r.walkers, wk)
		return true
	}
	return false
}

// walkerExpiry is how long until r's first walker stops counting.
func (r *replay) walkerExpiry(now time.Time) time.Duration {
	d := replayIdle
	for _, at := range r.walkers {
		d = min(d, replayIdle-now.Sub(at))
	}
	return max(d, time.Millisecond)
}

// MayConcern reports whether a change at the v2 path p may yield an event
// for a watcher on one of keys, recursive or not: p is one of them or below
// one, or a plain string prefix of one (v2's history rule answers a watch
// on /ab with the deletion of directory /a, and one below a directory with
// that directory's deletion). Skims look for what it accepts.
func MayConcern(p string, keys []string) bool {
	for _, k := range keys {
		if strings.HasPrefix(k, p) || strings.HasPrefix(p, strings.TrimSuffix(k, "/")+"/") {
			return true
		}
	}
	return false
}

// eventConcerns reports whether ev may concern a watcher on one of keys.
func eventConcerns(ev *translate.Event, keys []string) bool {
	return MayConcern(ev.Node.Key, keys) || (ev.PrevNode != nil && MayConcern(ev.PrevNode.Key, keys))
}

// covered reports whether a watcher on key is covered by a skim for keys:
// key is one of them or below one.
func covered(key string, keys []string) bool {
	for _, k := range keys {
		if key == k || strings.HasPrefix(key, strings.TrimSuffix(k, "/")+"/") {
			return true
		}
	}
	return false
}

// coversAll reports whether a skim for skim covers every one of keys.
func coversAll(skim, keys []string) bool {
	for _, k := range keys {
		if !covered(k, skim) {
			return false
		}
	}
	return true
}

type metrics struct {
	watchers        prometheus.Gauge
	errored         prometheus.Counter
	slowCutoffs     prometheus.Counter
	delivered       prometheus.Counter
	replays         prometheus.Counter
	replayRevisions prometheus.Counter
	replaySkimmed   prometheus.Counter
	replayFeeds     *prometheus.CounterVec
	refused         *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "v2bridge_v2_watchers",
			Help: "v2 watch requests waiting for an event (live, replaying history, or queued for a replay)."}),
		errored: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_watches_errored_total",
			Help: "v2 watches ended without an event because their feed ended (backend lost, shutdown)."}),
		slowCutoffs: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_watch_slow_cutoffs_total",
			Help: "stream=true watchers cut off because they fell behind."}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_watch_events_delivered_total",
			Help: "v2 events handed to watchers."}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_watch_history_replays_total",
			Help: "History replays started for waitIndexes older than the ring (one serves many watchers)."}),
		replayRevisions: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_watch_history_replay_revisions_total",
			Help: "Revisions of history read and decoded by replays."}),
		replaySkimmed: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_watch_history_skimmed_revisions_total",
			Help: "Revisions of history replays skimmed past: etcd sent nothing of them that could concern their watchers."}),
		replayFeeds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "v2bridge_watch_history_feeds_total",
			Help: "v3 history watches opened by replays, by mode: full (every revision decoded) or skim (only keys that may concern the replay's watchers)."}, []string{"mode"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "v2bridge_watch_history_refused_total",
			Help: "Watches refused with 401 by horizon: events (older than the ring), revisions, compacted."}, []string{"horizon"}),
	}
	if reg != nil {
		reg.MustRegister(m.watchers, m.errored, m.slowCutoffs, m.delivered, m.replays, m.replayRevisions, m.replaySkimmed,
			m.replayFeeds, m.refused)
	}
	return m
}
