// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v3backend/hub"
)

// hubSource feeds the watch hub from etcd v3: a watch over the bridge's
// whole key range (data and meta together, so a write's journal record,
// markers and data arrive in the same revision), decoded revision by
// revision into v2 events. Every feed runs on one session and ends with it.
type hubSource struct{ b *Backend }

var _ hub.Source = hubSource{}

// Feed waits for a live session and opens the shared watch on it. The
// mirror is kept by this feed: it resumes where it stopped if the feed
// continues from there, and is loaded afresh otherwise (from 0: the feed
// then starts after the revision it was loaded at).
func (src hubSource) Feed(ctx context.Context, from int64) (hub.Feed, error) {
	b := src.b
	for {
		s, changed := b.sessionChanged()
		if s == nil {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-changed:
				continue
			}
		}
		if from > 0 {
			// etcd creates a watch from a compacted revision before it
			// refuses it: without this check the hub would go live for a
			// moment on a feed that is about to end.
			if kept, err := src.Kept(ctx, from-1); err == nil && !kept {
				return nil, fmt.Errorf("%w: resuming at %d", hub.ErrCompacted, from)
			}
		}
		var loaded int64
		if from == 0 || !b.mirror.resume(from) {
			lctx, cancel := context.WithTimeout(ctx, mirrorLoadTimeout)
			stop := context.AfterFunc(s.ctx, cancel)
			rev, err := b.mirror.load(lctx, s.cli)
			stop()
			cancel()
			if err != nil {
				return nil, fmt.Errorf("load the key space: %w", err)
			}
			if from == 0 {
				from, loaded = rev+1, rev
				b.sweepOrphans(s)
			}
		}
		f := b.openFeed(s, from, true, nil)
		f.loaded = loaded
		b.shared.Store(f)
		return f, nil
	}
}

// mirrorLoadTimeout bounds the initial read of the key space (a large one
// takes many pages).
const mirrorLoadTimeout = time.Minute

// History opens a watch of history on the current session: over the
// whole range, or, skimming for keys, over skimRange.
func (src hubSource) History(ctx context.Context, from int64, keys []string) (hub.Feed, error) {
	s, err := src.b.client()
	if err != nil {
		return nil, err
	}
	return src.b.openFeed(s, from, false, keys), nil
}

// skimRange is the one v3 range a skim for keys watches: the data keys at
// and below each of keys (a plain prefix of the key, as a v3 range can only
// be contiguous), every directory marker (a directory's deletion or expiry
// reaches the watchers below it and, from history, those whose key it is a
// plain prefix of) and the journal with its slots and records (a bridge's
// delete of a directory that has no marker shows only there), and whatever sorts
// between those.
// Changes a full read would decode into an event for a watcher on one of
// keys all fall inside: data keys at or below it, markers, and the journal
// record of a bridge write, whose node names the event.
func skimRange(l translate.Layout, keys []string) (lo, hi string) {
	lo, hi = l.MarkerKey("/"), translate.PrefixEnd(l.MarkerKey("/"))
	jk, rk := l.JournalKey(), l.RecordKey("/")
	lo, hi = min(lo, jk), max(hi, translate.PrefixEnd(jk)) // the journal key and its slots
	lo, hi = min(lo, rk), max(hi, translate.PrefixEnd(rk)) // the journal records
	for _, k := range keys {
		dk := l.DataKey(k)
		lo, hi = min(lo, dk), max(hi, translate.PrefixEnd(dk))
	}
	return lo, hi
}

// mayConcern reports whether a revision's changes, as a skim for keys sees
// them, may decode into an event for a watcher on one of keys: a data key
// or marker at a path MayConcern accepts, or a journal record whose node
// is at such a path. (Decoding believes a journal record or decodes the
// data keys and markers by rule: either way the event's node is among
// these.)
func (sk *skimmer) mayConcern(g []*clientv3.Event) bool {
	for _, e := range g {
		key := string(e.Kv.Key)
		if p, ok := sk.layout.PathOfData(key); ok {
			if hub.MayConcern(p, sk.keys) {
				return true
			}
			continue
		}
		if p, ok := sk.layout.PathOfMarker(key); ok {
			if hub.MayConcern(p, sk.keys) {
				return true
			}
			continue
		}
		if !sk.layout.IsJournalKey(key) || e.Type != mvccpb.PUT {
			continue
		}
		var j translate.Journal
		if json.Unmarshal(e.Kv.Value, &j) != nil || j.Node == nil || j.DataPrefix != sk.layout.DataPrefix {
			continue // decoded by rule: its data keys and markers tell
		}
		if hub.MayConcern(j.Node.Key, sk.keys) || (j.PrevNode != nil && hub.MayConcern(j.PrevNode.Key, sk.keys)) {
			return true
		}
	}
	return false
}

// skimmer is what a skimming feed looks for.
type skimmer struct {
	layout translate.Layout
	keys   []string
}

// Kept reports whether rev is still in v3 history.
func (src hubSource) Kept(ctx context.Context, rev int64) (bool, error) {
	b := src.b
	s, err := b.client()
	if err != nil {
		return false, err
	}
	rctx, cancel := b.reqCtx(ctx, s)
	defer cancel()
	if _, err := b.probe(rctx, s, rev); err != nil {
		if errors.Is(err, rpctypes.ErrCompacted) {
			return false, nil
		}
		return false, b.mapErr(s, err)
	}
	return true, nil
}

// feed is one v3 watch over the bridge's key range. A shared feed sweeps
// expired directories and, when its watch fails while the member still
// answers heartbeats (it lost its leader, say), declares the session lost
// so the bridge moves to another member. A history feed does neither and,
// once idle, asks for progress so its reader learns it has caught up. A
// skimming history feed decodes nothing: it tells its reader which
// revision may concern the keys it skims for.
type feed struct {
	b      *Backend
	s      *session
	shared bool
	skim   *skimmer             // nil: every revision is decoded
	w      clientv3.Watcher     // a stream of its own: progress requests reach this feed's watches only
	wchs   []clientv3.WatchChan // a watch per range, on that stream
	// askProgress: the member's answer to a progress request is true (see
	// progressBugFixed). Without it, the feed never asks, so every
	// progress notification it gets is etcd's periodic one, which follows
	// the watch's events; and it watches one range covering all of its
	// ranges, keeping only the events inside them (only), as merging
	// several needs progress answers.
	askProgress bool
	only        []translate.KeyRange
	cancel      context.CancelFunc
	// Owned by the hub goroutine that calls Next: the revisions received,
	// merged across the ranges, and how many watches etcd has created.
	m       *merger
	created int
	loaded  int64 // the revision the mirror was loaded at for this feed (0: resumed)
	// lastNudge is when a progress request was last sent (unix ns).
	lastNudge atomic.Int64
}

func (b *Backend) openFeed(s *session, from int64, shared bool, skim []string) *feed {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	ranges := b.layout.WatchRanges()
	var sk *skimmer
	if skim != nil {
		if !b.layout.Scoped() { // a scoped bridge's ranges are already narrow
			lo, hi := skimRange(b.layout, skim)
			ranges = []translate.KeyRange{{Start: lo, End: hi}}
		}
		sk = &skimmer{layout: b.layout, keys: skim}
	}
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify()}
	if from > 0 {
		opts = append(opts, clientv3.WithRev(from))
	}
	switch {
	case shared:
		// The previous values come from the mirror, which holds the key
		// space as of the revision before: etcd need not look each one up.
		opts = append(opts, clientv3.WithProgressNotify())
	case sk == nil: // a skim decodes nothing: it needs no previous values
		opts = append(opts, clientv3.WithPrevKV())
	}
	f := &feed{b: b, s: s, shared: shared, skim: sk, w: b.newWatcher(s), cancel: cancel, askProgress: !s.progressBug}
	if !f.askProgress && len(ranges) > 1 {
		f.only, ranges = ranges, []translate.KeyRange{covering(ranges)}
	}
	f.m = newMerger(len(ranges), from)
	for _, r := range ranges {
		f.wchs = append(f.wchs, f.w.Watch(ctx, r.Start, append(opts, clientv3.WithRange(r.End))...))
	}
	b.metrics.v3Watches.Inc()
	return f
}

// Close ends the watch.
func (f *feed) Close() {
	if f.shared {
		f.b.shared.CompareAndSwap(f, nil)
		f.b.mirror.invalidate()
	}
	f.cancel()
	_ = f.w.Close()
	f.b.metrics.v3Watches.Dec()
}

// historyIdle is how long a history feed waits for events before it asks
// etcd whether it has caught up.
const historyIdle = 50 * time.Millisecond

// Next returns the next revision's events, decoded.
func (f *feed) Next(ctx context.Context) (hub.Batch, error) {
	for {
		if f.skim != nil {
			if b, ok := f.skimPending(); ok {
				return b, nil
			}
		} else if g := f.m.next(); g != nil {
			return f.decode(g), nil
		}
		if rev, ok := f.progressed(); ok {
			if f.shared {
				f.b.mirror.progress(rev)
			}
			return hub.Batch{Progress: true, Rev: rev}, nil
		}
		i, resp, err := f.receive(ctx)
		if err != nil {
			if f.shared {
				f.b.mirror.invalidate()
				if f.s.ctx.Err() == nil && ctx.Err() == nil && !errors.Is(err, hub.ErrCompacted) {
					f.b.lose(f.s, fmt.Sprintf("shared watch ended: %v", err))
				}
			}
			return hub.Batch{}, err
		}
		switch {
		case resp.Created:
			if f.created++; f.created < len(f.wchs) {
				continue
			}
			rev := resp.Header.Revision
			if f.loaded > 0 {
				rev = f.loaded
			}
			return hub.Batch{Created: true, Rev: rev}, nil
		case resp.IsProgressNotify():
			f.m.progress(i, resp.Header.Revision)
		default:
			evs := resp.Events
			if f.only != nil {
				evs = within(evs, f.only)
				if n := len(resp.Events); n > 0 {
					// The watch has sent everything up to its last event:
					// one outside the ranges tells progress.
					f.m.progress(i, resp.Events[n-1].Kv.ModRevision)
				}
			}
			if f.shared {
				f.b.metrics.v3Events.Add(float64(len(evs)))
			}
			f.m.add(i, evs)
		}
	}
}

// progressed is the revision up to which every watch has told all, once
// every watch is created and that is past what was last told.
func (f *feed) progressed() (int64, bool) {
	if f.created < len(f.wchs) {
		return 0, false
	}
	return f.m.progressed()
}

// receive waits for the next watch response that carries something, and
// tells which range's watch sent it. While a revision waits for the other
// ranges (or, for a history feed, while the watches are idle), it asks etcd
// for progress, which every watch of the stream answers once caught up.
func (f *feed) receive(ctx context.Context) (int, clientv3.WatchResponse, error) {
	var tick <-chan time.Time
	switch {
	case f.m.waiting() && f.created == len(f.wchs):
		if time.Now().UnixNano()-f.lastNudge.Load() >= int64(time.Millisecond) {
			f.requestProgress(ctx)
		}
		t := time.NewTicker(mergeWait)
		defer t.Stop()
		tick = t.C
	case !f.shared && f.askProgress:
		t := time.NewTicker(historyIdle)
		defer t.Stop()
		tick = t.C
	}
	n := len(f.wchs)
	for {
		i, resp, ok := f.wait(ctx, tick)
		switch {
		case i == n: // tick
			if f.created == n { // etcd answers once the watches have caught up with the present
				f.requestProgress(ctx)
			}
			continue
		case i == n+1:
			return 0, clientv3.WatchResponse{}, ctx.Err()
		case i == n+2: // the session is lost: what it fed ends now
			return 0, clientv3.WatchResponse{}, errors.New("backend session lost")
		case !ok:
			return i, resp, errors.New("watch channel closed")
		case resp.CompactRevision != 0:
			return i, resp, fmt.Errorf("%w (compacted at %d)", hub.ErrCompacted, resp.CompactRevision)
		case resp.Err() != nil:
			return i, resp, resp.Err()
		case resp.Canceled:
			return i, resp, errors.New("watch canceled by the server")
		}
		return i, resp, nil
	}
}

// wait waits for a watch response (i < len(f.wchs): range i's; ok false:
// its channel closed), the tick (i = len), ctx's end (len + 1) or the
// session's (len + 2).
func (f *feed) wait(ctx context.Context, tick <-chan time.Time) (i int, resp clientv3.WatchResponse, ok bool) {
	n := len(f.wchs)
	if n == 1 { // the whole key space: no reflection on the hot path
		select {
		case resp, ok = <-f.wchs[0]:
			return 0, resp, ok
		case <-tick:
			return n, resp, true
		case <-ctx.Done():
			return n + 1, resp, true
		case <-f.s.ctx.Done():
			return n + 2, resp, true
		}
	}
	cases := make([]reflect.SelectCase, 0, n+3)
	for _, ch := range f.wchs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	for _, ch := range []any{tick, ctx.Done(), f.s.ctx.Done()} {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	i, v, ok := reflect.Select(cases)
	if i < n {
		resp, _ = v.Interface().(clientv3.WatchResponse)
	}
	return i, resp, ok
}

// mergeWait is how often a feed whose ranges have not all shown a revision
// asks again for progress (etcd answers a request only once every watch of
// the stream has caught up).
const mergeWait = 20 * time.Millisecond

// requestProgress asks etcd for a progress notification on every watch of
// the feed's stream.
func (f *feed) requestProgress(ctx context.Context) {
	if !f.askProgress {
		return
	}
	f.lastNudge.Store(time.Now().UnixNano())
	rctx, cancel := f.b.reqCtx(ctx, f.s)
	_ = f.w.RequestProgress(clientv3.WithRequireLeader(rctx)) // the watch's stream is keyed by its metadata
	cancel()
}

// skimPending tells what the complete revisions received but not yet told
// hold: the first that may concern the skim's keys (Unread), or that none of
// them does (Progress, up to the last); false when none is complete.
func (f *feed) skimPending() (hub.Batch, bool) {
	var last int64
	for g := f.m.next(); g != nil; g = f.m.next() {
		rev := g[0].Kv.ModRevision
		if f.skim.mayConcern(g) {
			return hub.Batch{Rev: rev, Unread: true}, true
		}
		last = rev
	}
	if last == 0 {
		return hub.Batch{}, false
	}
	return hub.Batch{Rev: last, Progress: true}, true
}

// decode turns one revision's events into v2 events; on the shared feed it
// first sweeps the directories whose TTL ran out, as v2 removes a subtree at
// once.
func (f *feed) decode(g []*clientv3.Event) hub.Batch {
	rev := g[0].Kv.ModRevision
	v3evs := toV3Events(g)
	if f.shared {
		f.b.mirror.fillPrev(v3evs)
	}
	leased := leasedKVs(f.b.layout, v3evs)
	evs, sweeps := f.b.decodeRevision(f.s, rev, v3evs, leased)
	if f.shared {
		// Applied once decoded, so the keys keep their events' indexes
		// from the first read that sees them.
		f.b.mirror.apply(rev, v3evs, evs)
		for _, d := range sweeps {
			translate.SetRemoved(evs, d, f.b.sweep(f.s, d, rev))
		}
	}
	return hub.Batch{Rev: rev, Events: evs}
}

// sweepOrphans sweeps the remains of TTL directories that expired while no
// bridge was running to see it: their records outlived their markers. A
// bridge does this when it starts; the watchers missed the expiry anyway.
func (b *Backend) sweepOrphans(s *session) {
	ctx, cancel := b.reqCtx(context.Background(), s)
	defer cancel()
	l := b.layout
	var kvs []*mvccpb.KeyValue
	for _, r := range l.TTLDirRanges() { // the served subtrees' only
		resp, err := s.cli.Get(ctx, r.Start, clientv3.WithRange(r.End), clientv3.WithKeysOnly())
		if err != nil {
			b.lg.Warn("looking for expired TTL directories failed", zap.Error(err))
			return
		}
		kvs = append(kvs, resp.Kvs...)
	}
	swept := 0
	for _, kv := range kvs {
		dir, ok := l.PathOfTTLDir(string(kv.Key))
		if !ok || !l.Serves(dir) {
			continue
		}
		if lists, _, ok := b.mirror.read([]translate.Read{{Key: l.MarkerKey(dir)}}, false); !ok || len(lists[0]) > 0 {
			continue // alive (or the copy cannot say)
		}
		if b.commitSweep(ctx, s, dir) > 0 {
			swept++
		}
	}
	if swept > 0 {
		b.lg.Info("swept TTL directories that expired while no bridge ran", zap.Int("directories", swept))
	}
}

// commitSweep sends the sweep transaction of the expired directory dir; it
// reports the transaction's revision, or 0 when it failed (logged). Its
// revision counts as acknowledged, like a write's: the expire event reaches
// watchers after the sweep, and a read a watcher sends then must not find
// the directory's remains in a mirror that has not applied the sweep yet.
// (When another bridge swept first, the compare fails and the header's
// revision, which follows that sweep, is the one to wait for.)
func (b *Backend) commitSweep(ctx context.Context, s *session, dir string) int64 {
	var resp *clientv3.TxnResponse
	var ops []translate.Op
	err := rpctypes.ErrLeaseNotFound
	for try := 0; try < 2 && errors.Is(err, rpctypes.ErrLeaseNotFound); try++ { // a journal lease revoked: take another
		var jl clientv3.LeaseID
		if jl, err = b.journalLease(ctx, s); err != nil {
			break
		}
		var cmps []translate.Cmp
		cmps, ops = b.layout.SweepTxn(dir, int64(jl))
		if resp, err = s.cli.Txn(ctx).If(toCmps(cmps)...).Then(toOps(ops, 0)...).Commit(); errors.Is(err, rpctypes.ErrLeaseNotFound) {
			b.journalPool.forget(journalTTL, jl)
		}
	}
	if err != nil {
		b.lg.Warn("sweeping an expired directory failed", zap.String("dir", dir), zap.Error(err))
		return 0
	}
	b.noteAcked(ops, resp.Header.Revision)
	return resp.Header.Revision
}

// sweep removes what is left below a directory whose TTL ran out and reports
// what the expiry removed (whichever bridge swept): the subtree as it was at
// the expiry's revision, nil if unknown.
func (b *Backend) sweep(s *session, dir string, rev int64) map[string]bool {
	l := b.layout
	ctx, cancel := b.reqCtx(context.Background(), s)
	defer cancel()
	b.commitSweep(ctx, s, dir)
	var deleted []string
	for _, pfx := range []string{l.DataChildPrefix(dir), l.MarkerChildPrefix(dir)} {
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

// decodeRevision turns one revision's v3 events into v2 events, resolving
// the expirations of the leases they carry (bounded to a second, so a slow
// lookup shows a key as permanent rather than stall the watch).
func (b *Backend) decodeRevision(s *session, rev int64, evs []translate.V3Event, leased []*translate.KV) ([]*translate.Event, []string) {
	var ls translate.Leases
	if len(leased) > 0 {
		lctx, cancel := context.WithTimeout(s.ctx, time.Second)
		ls = b.resolveLeasesAt(lctx, s, translate.LeasesOf(leased), rev)
		cancel()
	}
	out, sweeps, forged := b.layout.DecodeRevision(rev, evs, ls, time.Now())
	if forged {
		b.metrics.forgedJournals.Inc()
		if n := b.forged.Add(1); n == 1 || n%100 == 0 {
			b.lg.Warn("ignored a journal record that does not match the changes of its revision (written by a v3 client?); the revision is decoded by rule",
				zap.Int64("revision", rev), zap.Int64("ignoredSoFar", n), zap.Any("events", evs))
		}
	}
	return out, sweeps
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

// toV3Events converts one revision's events.
func toV3Events(g []*clientv3.Event) []translate.V3Event {
	evs := make([]translate.V3Event, len(g))
	for i, e := range g {
		evs[i] = translate.V3Event{Delete: e.Type == mvccpb.DELETE, KV: *toKV(e.Kv)}
		if e.PrevKv != nil {
			evs[i].Prev = toKV(e.PrevKv)
		}
	}
	return evs
}

// leasedKVs lists the key-values of a revision's events (and their previous
// values) whose leases the decoded events show: the data keys and directory
// markers that carry one. Other keys' leases are never looked up: a journal
// record's, above all, is on a journal lease, which has no lease record and
// is in no cache, so resolving it would cost the feed round trips in every
// revision a bridge wrote, and the mirror would trail the writes.
func leasedKVs(l translate.Layout, evs []translate.V3Event) []*translate.KV {
	var leased []*translate.KV
	shown := func(kv *translate.KV) bool {
		if kv == nil || kv.Lease == 0 {
			return false
		}
		_, data := l.PathOfData(kv.Key)
		_, marker := l.PathOfMarker(kv.Key)
		return data || marker
	}
	for i := range evs {
		if p := evs[i].Prev; shown(p) {
			leased = append(leased, p)
		}
		if shown(&evs[i].KV) {
			leased = append(leased, &evs[i].KV)
		}
	}
	return leased
}

// nudge asks etcd for a progress notification on the shared watch, so the
// mirror learns that it is current even when nothing in the bridge's key
// space changed. Waiters call it at most every millisecond between them.
func (b *Backend) nudge() {
	f := b.shared.Load()
	if f == nil || !f.askProgress {
		return
	}
	now := time.Now().UnixNano()
	last := f.lastNudge.Load()
	if now-last < int64(time.Millisecond) || !f.lastNudge.CompareAndSwap(last, now) {
		return
	}
	ctx, cancel := b.reqCtx(context.Background(), f.s)
	defer cancel()
	_ = f.w.RequestProgress(clientv3.WithRequireLeader(ctx)) // the watch's stream is keyed by its metadata
}

// covering is the one range from the first of rs to the last.
func covering(rs []translate.KeyRange) translate.KeyRange {
	c := rs[0]
	for _, r := range rs[1:] {
		c.Start = min(c.Start, r.Start)
		if c.End != "\x00" {
			c.End = max(c.End, r.End)
		}
		if r.End == "\x00" { // every key from Start on
			c.End = r.End
		}
	}
	return c
}

// within keeps the events whose keys are in one of rs.
func within(evs []*clientv3.Event, rs []translate.KeyRange) []*clientv3.Event {
	var out []*clientv3.Event
	for _, e := range evs {
		k := string(e.Kv.Key)
		for _, r := range rs {
			if k >= r.Start && (k < r.End || r.End == "\x00") {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

// newWatcher opens a watch stream of its own on s (closing it ends only this
// feed's watches).
func (b *Backend) newWatcher(s *session) clientv3.Watcher {
	if m := b.cfg.Member; m != nil {
		return clientv3.NewWatchFromWatchClient(adapter.WatchServerToWatchClient(v3rpc.NewWatchServer(m)), s.cli)
	}
	return clientv3.NewWatcher(s.cli)
}
