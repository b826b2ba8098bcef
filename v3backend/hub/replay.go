// SPDX-License-Identifier: Apache-2.0

package hub

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// replay catches up watchers whose waitIndex is older than the ring with
// one history feed, read from the oldest waitIndex up to the ring. At most
// one runs at a time, whatever the number of stale watchers: each revision
// of history is read and decoded once, for all of them. Watchers that
// arrive while it runs join it if it has not passed their waitIndex yet,
// and wait for the next one otherwise. What it reads is kept in front of
// the ring as far as the ring has room, so the re-watches that follow are
// answered from memory.
type replay struct {
	from uint64 // the lowest index wanted: history is read from its revision
	// Guarded by Hub.mu.
	pos     uint64 // every event with an index < pos has been offered to the members
	members map[*Watcher]struct{}
	kept    *keeper   // the newest events read, for the ring and for late joiners
	idle    time.Time // since when it has served nobody (zero: it serves someone)
}

// replayIdle is how long a replay goes on reading with nobody to serve and
// nothing it could keep: long enough for a client walking history to send
// its next watch, which the replay then answers from what it read.
const replayIdle = time.Second

// addReplayLocked serves w, whose waitIndex is older than the ring, by a
// replay: the running one if it can, or the next.
func (h *Hub) addReplayLocked(w *Watcher) {
	if r := h.replay; r != nil && (w.next >= r.pos || r.kept.covers(w.next)) {
		// Behind the replay but within what it has read (a client walking
		// history re-watching at modifiedIndex + 1): answered from memory,
		// never registered; otherwise it follows the replay.
		for _, ev := range r.kept.evs {
			if w.wants(ev) && !h.deliverLocked(w, ev) {
				return
			}
		}
		h.addedLocked(w)
		r.members[w] = struct{}{}
		w.where = placeReplay
		r.idle = time.Time{}
		return
	}
	h.addedLocked(w)
	h.queued[w] = struct{}{}
	w.where = placeQueued
	if h.replay == nil {
		h.startReplayLocked()
	}
}

// startReplayLocked starts a replay for the queued watchers.
func (h *Hub) startReplayLocked() {
	if len(h.queued) == 0 || h.ctx.Err() != nil {
		return
	}
	r := &replay{members: map[*Watcher]struct{}{}}
	first := true
	for w := range h.queued {
		if first || w.next < r.from {
			r.from, first = w.next, false
		}
	}
	r.pos = r.from
	r.kept = newKeeper(len(h.ring.buf), r.from)
	for w := range h.queued {
		delete(h.queued, w)
		r.members[w] = struct{}{}
		w.where = placeReplay
	}
	h.replay = r
	h.metrics.replays.Inc()
	h.wg.Add(1)
	go h.runReplay(r)
}

// runReplay reads history for r until it reaches the ring, then hands its
// members over to the live path.
func (h *Hub) runReplay(r *replay) {
	defer h.wg.Done()
	kept := r.kept
	feed, err := h.src.History(h.ctx, h.num.Revision(r.from))
	if err == nil {
		defer feed.Close()
		for {
			var b Batch
			b, err = feed.Next(h.ctx)
			if err != nil {
				break
			}
			if b.Created {
				continue
			}
			h.metrics.replayRevisions.Inc()
			h.mu.Lock()
			if !b.Progress && h.num.FirstIndex(b.Rev) > h.floor {
				// The ring has everything from here on, or the shared feed
				// is still to bring it.
				h.finishReplayLocked(r, kept)
				h.mu.Unlock()
				return
			}
			for _, ev := range b.Events {
				for w := range r.members {
					if w.wants(ev) && !h.deliverLocked(w, ev) {
						h.removeLocked(w)
					}
				}
			}
			if next := h.num.Index(b.Rev) + 1; next > r.pos {
				r.pos = next
			}
			kept.add(b.Events)
			if h.num.Index(b.Rev) >= h.floor { // every revision up to the ring has been read
				h.finishReplayLocked(r, kept)
				h.mu.Unlock()
				return
			}
			if h.uselessLocked(r) {
				err = errReplayIdle
				h.mu.Unlock()
				break
			}
			h.mu.Unlock()
		}
	}
	h.lg.Debug("history replay ended", zap.Uint64("from", r.from), zap.Error(err))
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range r.members {
		h.removeLocked(w)
		h.metrics.errored.Inc()
		w.finish("history replay ended")
	}
	h.replay = nil
	if h.live {
		h.startReplayLocked()
	}
}

// errReplayIdle: a replay stopped because it served nobody and the ring had
// no room for what it read.
var errReplayIdle = errors.New("nobody to serve and no room to keep what it reads")

// uselessLocked reports whether r has served nobody for replayIdle and has
// nothing to gain by reading on: no watcher waits for a replay and the ring
// has no room for what it reads.
func (h *Hub) uselessLocked(r *replay) bool {
	if len(r.members) > 0 || len(h.queued) > 0 || h.ring.free() > 0 {
		r.idle = time.Time{}
		return false
	}
	if r.idle.IsZero() {
		r.idle = time.Now()
		return false
	}
	return time.Since(r.idle) > replayIdle
}

// finishReplayLocked keeps what r read in front of the ring, as far as
// there is room, and moves r's members, and the queued watchers the ring
// can now serve, to the live path.
func (h *Hub) finishReplayLocked(r *replay, kept *keeper) {
	// lastRev 0: the ring was reset (the shared feed resumed past a
	// compaction) and the new feed has not said where it starts; what r
	// read is not contiguous with what the ring will hold, so none of it is
	// kept (its oldest event would later be evicted as the floor).
	if free := h.ring.free(); free > 0 && h.lastRev > 0 {
		evs, floor := kept.newest(free)
		if floor < r.from-1 {
			floor = r.from - 1
		}
		if len(evs) > 0 || floor < h.floor {
			h.ring.prepend(evs)
			if floor < h.floor {
				h.floor = floor
			}
		}
	}
	for w := range r.members {
		delete(r.members, w)
		h.serveFromRingLocked(w)
	}
	h.replay = nil
	for w := range h.queued {
		if w.next > h.floor {
			delete(h.queued, w)
			h.serveFromRingLocked(w)
		}
	}
	h.startReplayLocked()
}

// keeper keeps the newest events a replay read, up to a limit.
type keeper struct {
	max     int
	from    uint64 // the lowest index the replay was started for
	evs     []*translate.Event
	dropped uint64 // index of the newest event dropped (0: none)
}

func newKeeper(max int, from uint64) *keeper { return &keeper{max: max, from: from} }

func (k *keeper) add(evs []*translate.Event) {
	k.evs = append(k.evs, evs...)
	if over := len(k.evs) - k.max; over > 0 {
		k.dropped = k.evs[over-1].Index()
		k.evs = append(k.evs[:0:0], k.evs[over:]...)
	}
}

// covers reports whether every event read with an index of next or above
// is still kept.
func (k *keeper) covers(next uint64) bool { return next >= k.from && next > k.dropped }

// newest returns the newest n kept events and the floor below them: every
// event read with an index above it is among them (0 when none was left
// out).
func (k *keeper) newest(n int) ([]*translate.Event, uint64) {
	if n >= len(k.evs) {
		return k.evs, k.dropped
	}
	cut := len(k.evs) - n
	return k.evs[cut:], k.evs[cut-1].Index()
}

type metrics struct {
	watchers        prometheus.Gauge
	errored         prometheus.Counter
	slowCutoffs     prometheus.Counter
	delivered       prometheus.Counter
	replays         prometheus.Counter
	replayRevisions prometheus.Counter
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
			Help: "Revisions of history read by replays."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "v2bridge_watch_history_refused_total",
			Help: "Watches refused with 401 by horizon: events (older than the ring), revisions, compacted."}, []string{"horizon"}),
	}
	if reg != nil {
		reg.MustRegister(m.watchers, m.errored, m.slowCutoffs, m.delivered, m.replays, m.replayRevisions, m.refused)
	}
	return m
}
