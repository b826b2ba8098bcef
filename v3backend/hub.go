// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// Hub serves every v2 watch of the bridge from one shared v3 watch over the
// bridge's key range (data and meta together, so a write's journal record,
// markers and data arrive in the same revision). It keeps a ring of recent v2
// events, so re-watches right after an event are answered from memory; a
// waitIndex older than the ring is replayed from v3 history by a watch of its
// own, or refused with 401 when v3 has compacted it.
type Hub struct {
	b *Backend

	mu      sync.Mutex
	ring    []*translate.Event // circular
	head    int                // index of the oldest event
	n       int
	floor   int64 // every event with index > floor has been seen
	lastRev int64 // every revision <= lastRev has been processed
	live    bool  // the shared v3 watch is up
	byKey   map[string]map[*Watcher]struct{}
	count   int
	cur     curRev // shares the current-revision reads of watch requests

	closeCh chan struct{}
	wg      sync.WaitGroup
}

// Watcher is one v2 watch request.
type Watcher struct {
	key       string
	recursive bool
	stream    bool
	next      uint64 // the lowest index still wanted
	start     uint64 // X-Etcd-Index of the response
	ch        chan *translate.Event
	done      chan struct{}
	reason    string
	hub       *Hub
	once      sync.Once
	replay    context.CancelFunc // set for a watcher fed by its own history watch
}

func newHub(b *Backend) *Hub {
	h := &Hub{b: b, ring: make([]*translate.Event, b.cfg.RingSize), byKey: map[string]map[*Watcher]struct{}{},
		closeCh: make(chan struct{})}
	h.wg.Add(1)
	go h.run()
	return h
}

func (h *Hub) close() {
	close(h.closeCh)
	h.wg.Wait()
	h.mu.Lock()
	h.endAllLocked("bridge shutting down")
	h.mu.Unlock()
}

// StartIndex is the store index when the watch was created (X-Etcd-Index).
func (w *Watcher) StartIndex() uint64 { return w.start }

// Events delivers the watcher's events.
func (w *Watcher) Events() <-chan *translate.Event { return w.ch }

// Done is closed when the watcher is ended without (more) events: its
// backend was lost, it fell behind, or the bridge is closing. Events already
// queued in Events are still valid.
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Reason says why Done was closed.
func (w *Watcher) Reason() string { return w.reason }

// Cancel releases the watcher (the client went away or it was answered).
func (w *Watcher) Cancel() {
	w.hub.mu.Lock()
	w.hub.removeLocked(w)
	w.hub.mu.Unlock()
	w.finish("canceled")
}

func (w *Watcher) finish(reason string) {
	w.once.Do(func() {
		w.reason = reason
		if w.replay != nil {
			w.replay()
		}
		close(w.done)
	})
}

func (h *Hub) addLocked(w *Watcher) {
	set := h.byKey[w.key]
	if set == nil {
		set = map[*Watcher]struct{}{}
		h.byKey[w.key] = set
	}
	set[w] = struct{}{}
	h.count++
	h.b.metrics.v2Watchers.Inc()
}

func (h *Hub) removeLocked(w *Watcher) {
	set := h.byKey[w.key]
	if _, ok := set[w]; !ok {
		return
	}
	delete(set, w)
	if len(set) == 0 {
		delete(h.byKey, w.key)
	}
	h.count--
	h.b.metrics.v2Watchers.Dec()
}

func (h *Hub) endAllLocked(reason string) {
	for _, set := range h.byKey {
		for w := range set {
			h.removeLocked(w)
			h.b.metrics.watchesErrored.Inc()
			w.finish(reason)
		}
	}
}

// waitLive gives a hub that is (re)creating its shared watch on a live
// session a moment to finish, so a watch re-issued right after a failover is
// served instead of refused; it never waits past ctx or the session.
func (h *Hub) waitLive(ctx context.Context, s *session) bool {
	deadline := time.NewTimer(2 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !h.Live() {
		select {
		case <-ctx.Done():
			return false
		case <-s.ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
	return true
}

// Live reports whether the shared v3 watch is established.
func (h *Hub) Live() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live
}

// Watchers is the number of v2 watchers registered with the shared watch.
func (h *Hub) Watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// Watch registers a v2 watch on key. waitIndex 0 means "after the current
// index". A waitIndex older than v3's compaction gets v2's 401 here, before
// the caller writes any header.
func (h *Hub) Watch(ctx context.Context, key string, recursive, stream bool, waitIndex uint64) (*Watcher, Meta, error) {
	b := h.b
	s, err := b.client()
	if err != nil {
		return nil, b.Meta(), err
	}
	rctx, cancel := b.reqCtx(ctx, s)
	defer cancel()
	resp, err := h.cur.get(rctx, b, s)
	if err != nil {
		return nil, b.Meta(), b.mapErr(s, err)
	}
	meta := b.noteHeader(resp.Header)
	cur := uint64(resp.Header.Revision)
	w := &Watcher{key: key, recursive: recursive, stream: stream, start: cur, hub: h,
		done: make(chan struct{})}
	if stream {
		w.ch = make(chan *translate.Event, b.cfg.WatcherBuffer)
	} else {
		w.ch = make(chan *translate.Event, 1)
	}
	w.next = waitIndex
	if waitIndex == 0 {
		w.next = cur + 1
	}

	if !h.waitLive(rctx, s) {
		return nil, meta, ErrUnavailable
	}
	h.mu.Lock()
	if !h.live {
		h.mu.Unlock()
		return nil, meta, ErrUnavailable
	}
	if int64(w.next) > h.floor {
		h.serveFromRingLocked(w)
		h.mu.Unlock()
		return w, meta, nil
	}
	h.mu.Unlock()

	// Older than the ring: v3 history, unless compacted.
	if _, err := b.probe(rctx, s, int64(w.next)); err != nil {
		if errors.Is(err, rpctypes.ErrCompacted) {
			oldest := h.oldestAvailable(rctx, s, int64(w.next), int64(cur))
			return nil, meta, translate.NewError(translate.EcodeEventIndexCleared,
				fmt.Sprintf("the requested history has been cleared [%d/%d]", oldest, waitIndex), cur)
		}
		return nil, meta, b.mapErr(s, err)
	}
	h.startReplay(s, w)
	return w, meta, nil
}

// oldestAvailable finds the oldest revision v3 still keeps (for 401's cause).
func (h *Hub) oldestAvailable(ctx context.Context, s *session, lo, hi int64) int64 {
	for lo < hi {
		mid := lo + (hi-lo)/2
		_, err := h.b.probe(ctx, s, mid)
		switch {
		case err == nil:
			hi = mid
		case errors.Is(err, rpctypes.ErrCompacted):
			lo = mid + 1
		default:
			return hi
		}
	}
	return hi
}

// serveFromRingLocked hands w the ring's events it is due and, if it wants
// more, registers it for live events.
func (h *Hub) serveFromRingLocked(w *Watcher) {
	for i := 0; i < h.n; i++ {
		ev := h.ring[(h.head+i)%len(h.ring)]
		if ev.Index() < w.next || !translate.WatchMatches(w.key, w.recursive, w.start, ev) {
			continue
		}
		if !h.deliverLocked(w, ev) {
			return
		}
	}
	h.addLocked(w)
}

// deliverLocked offers ev to w and reports whether w wants more.
func (h *Hub) deliverLocked(w *Watcher, ev *translate.Event) bool {
	select {
	case w.ch <- ev:
		h.b.metrics.eventsDelivered.Inc()
		w.next = ev.Index() + 1
		if !w.stream {
			w.finish("answered")
			return false
		}
		return true
	default:
		// A stream reader that fell behind is cut off rather than allowed to
		// delay the hub (v2 dropped such watchers too).
		h.b.metrics.slowCutoffs.Inc()
		w.finish("fell behind")
		return false
	}
}

// dispatchLocked records a revision's events and hands them to watchers.
func (h *Hub) dispatchLocked(evs []*translate.Event) {
	for _, ev := range evs {
		if h.n == len(h.ring) {
			h.floor = int64(h.ring[h.head].Index())
			h.head = (h.head + 1) % len(h.ring)
			h.n--
		}
		h.ring[(h.head+h.n)%len(h.ring)] = ev
		h.n++
		for _, w := range h.candidatesLocked(ev) {
			if ev.Index() < w.next || !translate.WatchMatches(w.key, w.recursive, w.start, ev) {
				continue
			}
			if !h.deliverLocked(w, ev) {
				h.removeLocked(w)
			}
		}
	}
}

// candidatesLocked lists the watchers that may match ev: those on its key
// and its ancestors, and for a removed directory, those below it.
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

// run keeps the shared v3 watch open on the current session and resumes it
// from the last processed revision after every session change, so the ring
// never has a gap.
func (h *Hub) run() {
	defer h.wg.Done()
	for {
		s, changed := h.b.sessionChanged()
		if s == nil {
			select {
			case <-changed:
				continue
			case <-h.closeCh:
				return
			}
		}
		err := h.watchSession(s)
		h.mu.Lock()
		h.live = false
		h.endAllLocked("backend watch ended")
		h.mu.Unlock()
		select {
		case <-h.closeCh:
			return
		default:
		}
		if s.ctx.Err() == nil && !errors.Is(err, errResumedPastCompaction) {
			// The watch failed while the member still answers heartbeats
			// (for example it lost its leader): move to another member.
			h.b.lose(s, fmt.Sprintf("shared watch ended: %v", err))
		}
	}
}

// errResumedPastCompaction: the shared watch restarts on the same session.
var errResumedPastCompaction = errors.New("shared watch resumed past a compaction")

func (h *Hub) watchSession(s *session) error {
	b := h.b
	h.mu.Lock()
	start := h.lastRev + 1
	h.mu.Unlock()
	if start == 1 {
		resp, err := b.readCurrent(s)
		if err != nil {
			return err
		}
		h.mu.Lock()
		h.lastRev, h.floor = resp.Header.Revision, resp.Header.Revision
		start = h.lastRev + 1
		h.mu.Unlock()
	}
	lo, hi := b.layout.WatchRange()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	defer cancel()
	wch := s.cli.Watch(wctx, lo, clientv3.WithRange(hi), clientv3.WithRev(start), clientv3.WithPrevKV(),
		clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	b.metrics.v3Watches.Inc()
	defer b.metrics.v3Watches.Dec()
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-wch:
		case <-h.closeCh:
			return errors.New("closing")
		case <-s.ctx.Done(): // the session is lost: its v2 watches end now
			return s.ctx.Err()
		}
		if !ok {
			return errors.New("watch channel closed")
		}
		if resp.CompactRevision != 0 {
			// The gap since lastRev is gone from v3: restart the ring after it.
			b.lg.Warn("hub watch resumed past a compaction; older waitIndexes get 401",
				zap.Int64("compactRevision", resp.CompactRevision))
			h.mu.Lock()
			h.head, h.n, h.lastRev, h.floor = 0, 0, 0, 0
			h.mu.Unlock()
			return fmt.Errorf("%w at %d", errResumedPastCompaction, resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.Canceled {
			return errors.New("watch canceled by the server")
		}
		if resp.Created {
			h.mu.Lock()
			h.live = true
			h.mu.Unlock()
			continue
		}
		h.process(s, resp)
	}
}

// process decodes one watch response, revision by revision.
func (h *Hub) process(s *session, resp clientv3.WatchResponse) {
	b := h.b
	for _, g := range groupByRevision(resp.Events) {
		rev := g[0].Kv.ModRevision
		v2evs, sweeps := b.decodeRevision(s.ctx, s, g)
		for _, d := range sweeps { // before the event goes out, as v2 removes a subtree at once
			translate.SetRemoved(v2evs, d, b.sweep(s, d, rev))
		}
		h.mu.Lock()
		h.dispatchLocked(v2evs)
		if rev > h.lastRev {
			h.lastRev = rev
		}
		h.mu.Unlock()
	}
	if resp.IsProgressNotify() {
		h.mu.Lock()
		if r := resp.Header.Revision; r > h.lastRev {
			h.lastRev = r
		}
		h.mu.Unlock()
	}
}

// sweep removes what is left below a directory whose TTL ran out (its marker
// carried the lease; its children carry none). Bridges racing to sweep the
// same directory are harmless: the guard lets the first one act.
func (b *Backend) sweep(s *session, dir string, rev int64) map[string]bool {
	l := b.layout
	dc, mc := l.DataChildPrefix(dir), l.MarkerChildPrefix(dir)
	j := fmt.Sprintf(`{"a":"expire","n":{"key":%q,"dir":true},"s":true,"dp":%q}`, dir, l.DataPrefix)
	ctx, cancel := b.reqCtx(context.Background(), s)
	defer cancel()
	_, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(l.MarkerKey(dir)), "=", 0),
	).Then(
		clientv3.OpDelete(dc, clientv3.WithRange(translate.PrefixEnd(dc))),
		clientv3.OpDelete(mc, clientv3.WithRange(translate.PrefixEnd(mc))),
		clientv3.OpPut(l.JournalKey(), j),
	).Commit()
	if err != nil {
		b.lg.Warn("sweeping an expired directory failed", zap.String("dir", dir), zap.Error(err))
	}
	// What the expiry removed (whichever bridge swept): the subtree as it
	// was at the expiry's revision. Nil if unknown.
	var deleted []string
	for _, pfx := range []string{dc, mc} {
		resp, err := s.cli.Get(ctx, pfx, clientv3.WithRange(translate.PrefixEnd(pfx)), clientv3.WithRev(rev),
			clientv3.WithKeysOnly(), clientv3.WithSerializable())
		if err != nil {
			return nil
		}
		for _, kv := range resp.Kvs {
			deleted = append(deleted, string(kv.Key))
		}
	}
	return l.SweptPaths(dir, deleted)
}

// startReplay serves w from v3 history with a watch of its own, starting at
// its waitIndex; it ends with w.
func (h *Hub) startReplay(s *session, w *Watcher) {
	b := h.b
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	w.replay = cancel
	lo, hi := b.layout.WatchRange()
	wch := s.cli.Watch(ctx, lo, clientv3.WithRange(hi), clientv3.WithRev(int64(w.next)), clientv3.WithPrevKV())
	b.metrics.v3Watches.Inc()
	b.metrics.v2Watchers.Inc()
	go func() {
		defer b.metrics.v3Watches.Dec()
		defer b.metrics.v2Watchers.Dec()
		defer w.finish("history watch ended")
		for resp := range wch {
			if resp.Err() != nil || resp.Canceled {
				return
			}
			for _, g := range groupByRevision(resp.Events) {
				v2evs, _ := b.decodeRevision(ctx, s, g)
				for _, ev := range v2evs {
					if ev.Index() < w.next || !translate.WatchMatches(w.key, w.recursive, w.start, ev) {
						continue
					}
					select {
					case w.ch <- ev:
						w.next = ev.Index() + 1
						if !w.stream {
							return
						}
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
}

// decodeRevision turns one revision's v3 events into v2 events, resolving
// the expirations of the leases they carry (bounded to a second, so a slow
// lookup shows a key as permanent rather than stall the watch).
func (b *Backend) decodeRevision(ctx context.Context, s *session, g []*clientv3.Event) ([]*translate.Event, []string) {
	evs, leased := toV3Events(g)
	var ls translate.Leases
	if len(leased) > 0 {
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		ls = b.resolveLeases(lctx, s, translate.LeasesOf(leased))
		cancel()
	}
	return b.layout.DecodeRevision(g[0].Kv.ModRevision, evs, ls, time.Now())
}

// groupByRevision splits a watch response's events into revisions.
func groupByRevision(evs []*clientv3.Event) [][]*clientv3.Event {
	var groups [][]*clientv3.Event
	for _, e := range evs {
		if n := len(groups); n > 0 && groups[n-1][0].Kv.ModRevision == e.Kv.ModRevision {
			groups[n-1] = append(groups[n-1], e)
		} else {
			groups = append(groups, []*clientv3.Event{e})
		}
	}
	return groups
}

// toV3Events converts one revision's events and lists the key-values that
// carry a lease.
func toV3Events(g []*clientv3.Event) (evs []translate.V3Event, leased []*translate.KV) {
	evs = make([]translate.V3Event, len(g))
	for i, e := range g {
		evs[i] = translate.V3Event{Delete: e.Type == mvccpb.DELETE, KV: *toKV(e.Kv)}
		if e.PrevKv != nil {
			evs[i].Prev = toKV(e.PrevKv)
			if e.PrevKv.Lease != 0 {
				leased = append(leased, evs[i].Prev)
			}
		}
		if e.Kv.Lease != 0 {
			leased = append(leased, &evs[i].KV)
		}
	}
	return evs, leased
}

// EndAll ends every v2 watch now (graceful shutdown: clients re-issue them).
func (h *Hub) EndAll(reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endAllLocked(reason)
}
