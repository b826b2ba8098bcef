// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/translate"
)

// FollowStats is what Follow did.
type FollowStats struct {
	Events       int // v2 server events received
	Applied      int // events that changed the bridge
	Unchanged    int // events the bridge already reflected
	TTLRefreshed int // TTLs carried over by the periodic TTL re-sync
	Resyncs      int // full re-copies after the v2 server's history ran out (401)
	Conflicts    []Conflict
	Failures     []Failure
	Index        uint64 // v2 server index of the last event received
}

// resyncNeeded is a watch whose waitIndex the v2 server no longer holds.
type resyncNeeded struct {
	root  string
	index uint64
}

func (r *resyncNeeded) Error() string {
	return fmt.Sprintf("the v2 server's event history no longer reaches index %d (watch on %s)", r.index, r.root)
}

// Follow applies the v2 server's changes to the bridge after a Copy, from the
// copy's snapshot index on, until ctx ends (which is not an error). The
// events come from one stream watch; those on unrelated keys are applied
// side by side, those on one key (or above or below it) in order. Each
// v2 server event is checked against the bridge first: a node the bridge holds
// as the v2 server held it before the event (or as this process left it) is
// updated; anything else is a conflict, reported and left alone unless
// Overwrite. A file this process wrote is checked by a write guarded by
// the index it wrote it at, not by a read. When the v2 server no longer holds
// the history the watch needs (v2 keeps 1000 events; error 401), Follow
// re-syncs with a full Copy, logs that it did, and carries on from the new
// snapshot.
//
// v2 does not report refresh=true writes (TTL renewals that keep the value)
// to watchers; every Options.TTLResync Follow re-reads the v2 server and carries
// changed TTLs over. Hidden nodes are followed when Copy knew them (named or
// found); hidden nodes created later are not seen by a v2 watch.
func Follow(ctx context.Context, o Options, snap *Summary) (*FollowStats, error) {
	if snap == nil || len(snap.roots) == 0 {
		return nil, errors.New("migrate: Follow needs the summary of a Copy")
	}
	if o.DryRun {
		return nil, errors.New("migrate: Follow cannot run as a dry run")
	}
	m, err := newMigrator(o)
	if err != nil {
		return nil, err
	}
	defer m.src.close()
	if snap.owned != nil {
		m.owned = snap.owned
	}
	return m.follow(ctx, snap)
}

func (m *migrator) follow(ctx context.Context, snap *Summary) (*FollowStats, error) {
	fs := &FollowStats{Index: snap.Index}
	roots := snap.roots
	for {
		err := m.followOnce(ctx, roots, fs)
		if ctx.Err() != nil {
			return fs, nil
		}
		var rs *resyncNeeded
		if !errors.As(err, &rs) {
			return fs, err
		}
		m.logf("re-syncing: %v (v2 keeps only its last 1000 events); copying the tree again", rs)
		s2, cerr := m.copy(ctx)
		if ctx.Err() != nil {
			return fs, nil
		}
		if s2 == nil {
			return fs, fmt.Errorf("re-sync after losing the v2 server's history: %w", cerr)
		}
		fs.Resyncs++
		fs.Conflicts = append(fs.Conflicts, s2.Conflicts...)
		fs.Failures = append(fs.Failures, s2.Failures...)
		m.logf("re-synced from the v2 server at index %d: %d created, %d updated, %d deleted, %d already there, %d conflicts, %d extra left on the bridge",
			s2.Index, s2.Created, s2.Updated, s2.Deleted, s2.Unchanged, len(s2.Conflicts), s2.Extra-s2.Deleted)
		var ie *IncompleteError
		if errors.As(cerr, &ie) && ie.Stopped {
			return fs, fmt.Errorf("re-sync: %w", cerr)
		}
		roots = s2.roots
		if s2.Index > fs.Index {
			fs.Index = s2.Index
		}
		if m.o.Applied != nil {
			m.o.Applied(fs.Index)
		}
	}
}

// result is the outcome of applying one event.
type result struct {
	seq     int
	ev      *translate.Event
	changed bool
	c       *Conflict
	fail    *Failure
	stopped bool // ctx ended first: nothing to count
}

func (m *migrator) followOnce(ctx context.Context, roots []root, fs *FollowStats) error {
	var wg sync.WaitGroup // the watches and the events being applied
	defer wg.Wait()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	evc := make(chan *translate.Event, eventBuffer)
	errc := make(chan error, len(roots))
	for i, r := range roots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.watchLoop(wctx, r, i == 0, evc, errc)
		}()
	}
	var ttlTick <-chan time.Time
	if m.o.TTLResync > 0 {
		t := time.NewTicker(m.o.TTLResync)
		defer t.Stop()
		ttlTick = t.C
	}
	beat := time.NewTicker(time.Second)
	defer beat.Stop()
	report := func(force bool) {
		m.progress(Progress{Phase: "following", Events: fs.Events, Index: fs.Index,
			Conflicts: len(fs.Conflicts), Resyncs: fs.Resyncs}, force)
	}
	report(true)

	pl := newPipeline(eventsInFlight)
	done := make(chan result, eventsInFlight) // never full: one slot per event in flight
	dispatch := func(ev *translate.Event) {
		fs.Events++
		fs.Index = max(fs.Index, ev.Node.ModifiedIndex)
		seq := pl.start(ev.Node.Key, ev.Node.ModifiedIndex)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := m.applyEvent(ctx, ev)
			r.seq = seq
			done <- r
		}()
	}
	finish := func(r result) {
		m.account(r, fs)
		if applied, ok := pl.finish(r.seq); ok && m.o.Applied != nil && ctx.Err() == nil {
			m.o.Applied(applied)
		}
		report(false)
	}
	var held *translate.Event // the next event, waiting for its key or a free slot
	drain := func() {
		for pl.busy() {
			finish(<-done)
		}
		if held != nil && ctx.Err() == nil {
			dispatch(held)
			held = nil
			finish(<-done)
		}
	}
	defer drain()
	for {
		in := evc
		if held != nil {
			in = nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return err
		case ev := <-in:
			if pl.blocked(ev.Node.Key) {
				held = ev
				continue
			}
			dispatch(ev)
		case r := <-done:
			finish(r)
			if held != nil && !pl.blocked(held.Node.Key) {
				dispatch(held)
				held = nil
			}
		case <-ttlTick:
			drain() // the re-sync reads what the events in flight write
			m.resyncTTLs(ctx, roots, fs)
		case <-beat.C:
			report(true)
		}
	}
}

// eventsInFlight is how many events are applied at once: as many writes
// as the bridge's group commit puts in one transaction by default, since
// an event waits mostly for its transaction.
const eventsInFlight = 64

// eventBuffer is how many received events may wait to be applied: the
// stream reader keeps reading meanwhile, since v2 drops a stream watcher
// that falls 100 events behind.
const eventBuffer = 4096

// account adds one applied event's outcome to fs.
func (m *migrator) account(r result, fs *FollowStats) {
	switch {
	case r.stopped:
	case r.fail != nil:
		fs.Failures = append(fs.Failures, *r.fail)
	case r.c != nil:
		fs.Conflicts = append(fs.Conflicts, *r.c)
		m.logf("conflict at %s (v2 server event %s at index %d): %s", r.c.Path, r.ev.Action, r.ev.Node.ModifiedIndex, r.c.Detail)
	case r.changed:
		fs.Applied++
	default:
		fs.Unchanged++
	}
}

// pipeline orders the events being applied at once: an event waits while
// one on its key, above it or below it is in flight (their order matters),
// and the index reported as applied is the last one up to which every
// event received is done. Only followOnce's loop uses it.
type pipeline struct {
	limit   int
	running map[int]string // seq -> key of each event in flight
	order   []bool         // done, of each event not yet retired, from seq first
	index   []uint64       // the v2 server index of each, likewise
	first   int
}

func newPipeline(limit int) *pipeline {
	return &pipeline{limit: max(limit, 1), running: map[int]string{}}
}

func (p *pipeline) busy() bool { return len(p.running) > 0 }

// blocked reports whether an event on key must wait.
func (p *pipeline) blocked(key string) bool {
	if len(p.running) >= p.limit || len(p.order) >= eventBuffer {
		return true // (done events wait in order for one still in flight)
	}
	for _, k := range p.running {
		if under(k, key) || under(key, k) {
			return true
		}
	}
	return false
}

// start records an event on key at the v2 server index idx and returns its seq.
func (p *pipeline) start(key string, idx uint64) int {
	seq := p.first + len(p.order)
	p.order = append(p.order, false)
	p.index = append(p.index, idx)
	p.running[seq] = key
	return seq
}

// finish marks the event seq done and returns the index up to which every
// event is, if that moved.
func (p *pipeline) finish(seq int) (uint64, bool) {
	delete(p.running, seq)
	p.order[seq-p.first] = true
	var idx uint64
	moved := false
	for len(p.order) > 0 && p.order[0] {
		idx, moved = p.index[0], true
		p.order, p.index = p.order[1:], p.index[1:]
		p.first++
	}
	return idx, moved
}

// streamIdle is how long a stream watch may bring nothing before it is made
// again: v2 stops sending to a stream watcher it found slow without ending
// the request, so a quiet stream may be a dropped one.
const streamIdle = time.Second

// watchLoop reads the v2 server's events on r from a stream watch (stream=true;
// made again from the next index whenever it ends or idles) and hands them
// over in order.
func (m *migrator) watchLoop(ctx context.Context, r root, main bool, evc chan<- *translate.Event, errc chan<- error) {
	wait := r.index + 1
	backoff := 100 * time.Millisecond
	down := false
	for {
		sctx, cancel := context.WithCancel(ctx)
		idle := time.AfterFunc(streamIdle, cancel)
		st, err := m.src.stream(sctx, r.path, wait)
		if err == nil {
			if down {
				m.logf("watching %s on the v2 server again from index %d", r.path, wait)
				down = false
			}
			backoff = 100 * time.Millisecond
			var n int
			wait, n = m.readStream(ctx, st, idle, r, main, wait, evc)
			st.close()
			if n == 0 && ctx.Err() == nil && !ctxsleep.Sleep(ctx, 50*time.Millisecond) {
				idle.Stop()
				cancel()
				return // (an ended watch: ask again, not in a busy loop)
			}
		}
		idle.Stop()
		idled := sctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil || idled {
			continue // ended, idle, or an event from history: watch again from wait
		}
		var ve *translate.Error
		if errors.As(err, &ve) && ve.Code == translate.EcodeEventIndexCleared {
			errc <- &resyncNeeded{root: r.path, index: wait}
			return
		}
		if !down {
			m.logf("watching %s on the v2 server failed: %v; retrying", r.path, err)
			down = true
		}
		if !ctxsleep.Sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// readStream hands over st's events until it ends (or idle cancels it) and
// returns the next waitIndex and how many events it read. An event from
// the v2 server's history ends it: v2 sends no more on such a stream.
func (m *migrator) readStream(ctx context.Context, st *eventStream, idle *time.Timer, r root, main bool,
	wait uint64, evc chan<- *translate.Event) (uint64, int) {
	n := 0
	for {
		ev, err := st.next()
		if err != nil {
			return wait, n
		}
		n++
		idle.Reset(streamIdle)
		next := wait + 1
		if idx := ev.Node.ModifiedIndex; idx >= wait {
			next = idx + 1
		}
		live := ev.Node.ModifiedIndex > st.index
		if ev = acceptEvent(r.path, main, ev); ev != nil {
			select {
			case evc <- ev:
			case <-ctx.Done():
				return wait, n
			}
		}
		wait = next
		if !live {
			return wait, n
		}
	}
}

// acceptEvent decides which watch handles an event, so each is applied once:
// a watch takes its root and what is below it without passing through a
// hidden element (hidden nodes have watches of their own). The deletion of a
// directory above the prefix deletes the prefix; above a hidden root it is
// the prefix watch's business.
func acceptEvent(root string, main bool, ev *translate.Event) *translate.Event {
	k := ev.Node.Key
	if under(k, root) {
		if hiddenBelow(root, k) {
			return nil
		}
		return ev
	}
	if main && isDelete(ev.Action) && under(root, k) {
		c := *ev
		c.Node = &translate.Node{Key: root, ModifiedIndex: ev.Node.ModifiedIndex}
		c.PrevNode = nil
		return &c
	}
	return nil
}

func isDelete(action string) bool {
	return action == translate.ActionDelete || action == translate.ActionExpire || action == translate.ActionCompareAndDelete
}

// applyEvent applies one v2 server event, retrying while the bridge's backend
// is unavailable, so no event is lost.
func (m *migrator) applyEvent(ctx context.Context, ev *translate.Event) result {
	backoff := 100 * time.Millisecond
	down := false
	for {
		changed, c, err := m.applyOne(ctx, ev)
		if err == nil {
			if down {
				m.logf("the bridge's backend answers again")
			}
			return result{ev: ev, changed: changed, c: c}
		}
		if ctx.Err() != nil {
			return result{ev: ev, stopped: true}
		}
		if isKeyError(err) {
			m.logf("could not apply %s of %s (index %d): %v", ev.Action, ev.Node.Key, ev.Node.ModifiedIndex, err)
			return result{ev: ev, fail: &Failure{Path: ev.Node.Key, Err: err}}
		}
		if !down {
			m.logf("applying %s of %s to the bridge failed: %v; retrying until it works", ev.Action, ev.Node.Key, err)
			down = true
		}
		if !ctxsleep.Sleep(ctx, backoff) {
			return result{ev: ev, stopped: true}
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// applyOne brings the bridge's node at the event's key to what the event
// made of it on the v2 server. The first attempt decides from the file this
// process last wrote there, if it knows it; the write is guarded by that
// file's index, so a bridge that holds anything else fails it, and the
// next attempt reads the bridge.
func (m *migrator) applyOne(ctx context.Context, ev *translate.Event) (changed bool, c *Conflict, err error) {
	for attempt := 0; ; attempt++ {
		if isDelete(ev.Action) {
			changed, c, err = m.followDelete(ctx, ev.Node.Key, ev.PrevNode, attempt > 0)
		} else {
			changed, c, err = m.followPut(ctx, ev.Node, ev.PrevNode, attempt > 0)
		}
		if err != nil && isRace(err) && attempt < 2 {
			continue // the bridge changed under us: read it again
		}
		return changed, c, err
	}
}

func (m *migrator) followPut(ctx context.Context, n, prev *translate.Node, fresh bool) (bool, *Conflict, error) {
	var d *translate.Node
	if k := m.owned.known(n.Key); k != nil && !fresh && !n.Dir {
		// Only writes guarded by k's index: the same value with the
		// same TTL, or another kind, are decided on a read.
		if kind, _ := diff(n, k, m.o.TTLTolerance); kind == KindValue || kind == KindTTL || kind == KindExpiry {
			d = k
		}
	}
	if d == nil {
		var err error
		if d, err = m.tgt.get(ctx, n.Key, false); err != nil {
			return false, nil, err
		}
	}
	kind, detail := diff(n, d, m.o.TTLTolerance)
	var res *translate.Event
	var err error
	switch {
	case kind == "":
		return false, nil, nil
	case kind == KindMissing: // writing where nothing is can destroy nothing
		res, err = m.tgt.create(ctx, n, true)
	case !m.owned.owns(d) && !m.o.Overwrite:
		was := "absent"
		if prev != nil {
			was = describe(prev)
		}
		return false, &Conflict{Path: n.Key, Kind: kind, Detail: fmt.Sprintf(
			"%s; the v2 server's node was %s before, and the bridge's node is not the copy this migration made "+
				"(a client changed it through the bridge or v3): left unchanged; --overwrite replaces it", detail, was)}, nil
	case kind == KindTTL || kind == KindExpiry:
		res, err = m.tgt.fixTTL(ctx, n, d)
	case kind == KindType:
		res, err = m.tgt.replaceKind(ctx, n, d)
	default:
		res, err = m.tgt.replaceFile(ctx, n, d, true)
	}
	if err != nil {
		if errors.Is(err, errExpired) {
			return false, nil, nil
		}
		return false, nil, err
	}
	if kind == KindType {
		m.owned.dropTree(n.Key)
	}
	if n.Dir {
		m.owned.set(n.Key, res.Node.ModifiedIndex)
	} else {
		w := *n
		w.ModifiedIndex, w.Expiration, w.TTL = res.Node.ModifiedIndex, res.Node.Expiration, res.Node.TTL
		m.owned.setFile(&w)
	}
	return true, nil, nil
}

// followDelete deletes the bridge's node at p when the v2 server deleted (or
// expired) it, if the bridge's node, and for a directory everything in it, is
// still the copy this migration made. prev is the v2 server's node before; nil
// when a directory above the migrated prefix went. Unless fresh, a file
// this process wrote there is deleted without reading it first (guarded by
// its index).
func (m *migrator) followDelete(ctx context.Context, p string, prev *translate.Node, fresh bool) (bool, *Conflict, error) {
	d := m.owned.known(p)
	if d == nil || fresh {
		var err error
		if d, err = m.tgt.get(ctx, p, true); err != nil {
			return false, nil, err
		}
	}
	if d == nil {
		m.owned.dropTree(p)
		return false, nil, nil
	}
	if !m.o.Overwrite {
		mine, theirs := m.ownedTree(d)
		if !mine {
			was := "node"
			if prev != nil {
				was = describe(prev)
			}
			return false, &Conflict{Path: p, Kind: KindExtra, Detail: fmt.Sprintf(
				"deleted on the v2 server (was %s), but the bridge's %s is not the copy this migration made "+
					"(a client changed it through the bridge or v3%s): left unchanged; --overwrite deletes it",
				was, describe(d), theirs)}, nil
		}
	}
	if _, err := m.tgt.remove(ctx, d); err != nil {
		return false, nil, err
	}
	m.owned.dropTree(p)
	return true, nil, nil
}

// ownedTree reports whether n (read recursively when a directory) is all
// this migration's: every file as it wrote or found it. theirs names what is not.
func (m *migrator) ownedTree(n *translate.Node) (bool, string) {
	if !n.Dir {
		return m.owned.owns(n), ""
	}
	t := newTree()
	t.add(n)
	for _, p := range t.sorted() {
		if c := t.nodes[p]; !c.Dir && !m.owned.owns(c) {
			return false, ": " + p
		}
	}
	return true, ""
}

// resyncTTLs carries over TTLs the v2 server renewed without telling watchers
// (refresh=true): nodes with the same value whose expirations drifted apart,
// when the bridge's node is still this migration's copy.
func (m *migrator) resyncTTLs(ctx context.Context, roots []root, fs *FollowStats) {
	n := 0
	defer func() {
		if n > 0 {
			fs.TTLRefreshed += n
			m.logf("carried over %d TTL(s) renewed on the v2 server with refresh=true (v2 does not report refreshes to watchers)", n)
		}
	}()
	for _, r := range roots {
		sn, _, err := m.src.get(ctx, r.path, true)
		if err != nil {
			if ctx.Err() == nil {
				m.logf("TTL re-sync: reading %s from the v2 server: %v", r.path, err)
			}
			return
		}
		dn, err := m.tgt.get(ctx, r.path, true)
		if err != nil {
			if ctx.Err() == nil {
				m.logf("TTL re-sync: reading %s from the bridge: %v", r.path, err)
			}
			return
		}
		st, tt := newTree(), newTree()
		st.add(sn)
		tt.add(dn)
		for _, p := range st.sorted() {
			if hiddenBelow(r.path, p) {
				continue
			}
			s, d := st.nodes[p], tt.nodes[p]
			if kind, _ := diff(s, d, m.o.TTLTolerance); (kind != KindTTL && kind != KindExpiry) || !m.owned.owns(d) {
				continue // only this migration's own copies: a renewal made through the bridge stays
			}
			res, err := m.tgt.fixTTL(ctx, s, d)
			if err != nil {
				if !errors.Is(err, errExpired) && !isRace(err) {
					m.logf("TTL re-sync of %s: %v", p, err)
				}
				continue
			}
			m.owned.set(p, res.Node.ModifiedIndex)
			n++
		}
	}
}
