// SPDX-License-Identifier: Apache-2.0

package v3backend

// The request path: v2 reads, writes and watch registrations, each bound to
// the session it runs on and to the request deadline, and the leases behind
// v2 TTLs.

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v3backend/hub"
)

// Watch registers a v2 watch with the hub. Its start (the response's
// X-Etcd-Index) is the index of the mirror's revision once it has every write this
// bridge acknowledged — the store as the hub is about to see it, with no
// round trip; when the mirror cannot say, the current revision is read, by
// a read shared with the watch requests that arrive meanwhile.
func (b *Backend) Watch(ctx context.Context, r *translate.Request) (*hub.Watcher, Meta, error) {
	s, err := b.client()
	if err != nil {
		return nil, b.Meta(), err
	}
	// Registering makes no call on s itself (the shared read of the
	// current revision has a deadline and a session of its own), so the
	// deadline bounds every wait without tying the request to s: a watch
	// registration is the one request every event brings back from every
	// watcher at once, and binding each to the session's context
	// serialised them on its lock.
	rctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	var cur int64
	meta := b.Meta()
	if b.mirror.waitFor(rctx, b.acked.Load(), mirrorWait, b.nudge) {
		cur, _ = b.mirror.Rev()
	}
	if cur == 0 {
		resp, err := b.cur.get(rctx, b, s)
		if err != nil {
			return nil, meta, b.mapErr(s, err)
		}
		meta, cur = b.noteHeader(resp.Header), resp.Header.Revision
	}
	w, err := b.hub.Watch(rctx, r.Path, r.Recursive, r.Stream, r.WaitIndex, translate.Index(cur))
	if errors.Is(err, hub.ErrNotLive) {
		err = ErrUnavailable
	}
	return w, meta, err
}

func toKV(kv *mvccpb.KeyValue) *translate.KV {
	return &translate.KV{Key: string(kv.Key), Value: kv.Value, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Lease: kv.Lease}
}

func getOpts(serializable bool, rev int64, opts ...clientv3.OpOption) []clientv3.OpOption {
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	return opts
}

// readSnapshot reads a write's snapshot of p at revision rev (0: now) from
// the backend, in one transaction. Its keys take the event indexes the
// mirror keeps for them (fillIndexes): a write decided on it answers with
// the prevNode and createdIndex its watchers see, which are decoded on the
// mirror.
func (b *Backend) readSnapshot(ctx context.Context, s *session, p string, withSeq bool, rev int64) (*translate.Snapshot, error) {
	lists, at, err := b.readBackend(ctx, s, b.layout.SnapshotReads(p, withSeq), true, rev, true)
	if err != nil {
		return nil, err
	}
	b.fillIndexes(ctx, lists)
	return b.layout.NewSnapshot(p, at, withSeq, firsts(lists)), nil
}

// fillIndexes gives the keys of lists, read from the backend, the event
// indexes the mirror keeps for them (mirror.fillIndexes), once the mirror
// has their versions: it waits mirrorWait at most for that, when the
// mirror is valid.
func (b *Backend) fillIndexes(ctx context.Context, lists [][]*translate.KV) {
	var newest int64
	for _, l := range lists {
		for _, kv := range l {
			newest = max(newest, kv.ModRevision)
		}
	}
	if mrev, valid := b.mirror.Rev(); valid && mrev < newest {
		b.mirror.waitFor(ctx, newest, mirrorWait, b.nudge)
	}
	b.mirror.fillIndexes(lists)
}

// mirroredSnapshot takes a write's snapshot of p from the mirror once it has
// revision need; nil when the mirror cannot say (the caller reads the
// backend).
func (b *Backend) mirroredSnapshot(ctx context.Context, p string, withSeq bool, need int64) *translate.Snapshot {
	if !b.mirror.waitFor(ctx, need, mirrorWait, b.nudge) {
		return nil
	}
	kvs, rev, ok := b.mirror.firsts(b.layout.SnapshotReads(p, withSeq))
	if !ok {
		return nil
	}
	return b.layout.NewSnapshot(p, rev, withSeq, kvs)
}

func firsts(lists [][]*translate.KV) []*translate.KV {
	kvs := make([]*translate.KV, len(lists))
	for i, l := range lists {
		if len(l) > 0 {
			kvs[i] = l[0]
		}
	}
	return kvs
}

// Get serves a v2 GET (quorum=true: linearizable; otherwise serializable,
// as v2 served plain GETs from the local member).
func (b *Backend) Get(ctx context.Context, r *translate.Request) (*translate.Event, Meta, error) {
	s, err := b.client()
	if err != nil {
		return nil, b.Meta(), err
	}
	ctx, cancel := b.reqCtx(ctx, s)
	defer cancel()
	ev, err := b.get(ctx, s, r)
	return ev, b.Meta(), b.mapErr(s, err)
}

func (b *Backend) get(ctx context.Context, s *session, r *translate.Request) (*translate.Event, error) {
	p, l := r.Path, b.layout
	// The markers above p tell whether p went with an expired directory,
	// as do the TTL directory records (with the markers) once the lease
	// has taken the marker.
	reads := append(l.GetReads(p), l.AncestorMarkerReads(p)...)
	nr := len(reads)
	lists, rev, err := b.readMirrored(ctx, s, reads, r.Quorum, func() []translate.Read { return l.TTLDirReads(p) })
	if err != nil {
		return nil, err
	}
	point := firsts(lists[:2])
	file, marker := point[0], point[1]
	above := firsts(lists[4:nr])
	var gone []string
	if len(lists) > nr { // the mirror held TTL directory records
		gone = l.ExpiredDirs(slices.Concat(lists[nr:]...), slices.Concat(point[1:], above, lists[3]))
	}
	ls := b.resolveLeases(ctx, s, translate.LeasesOf(lists[:nr]...))
	now := time.Now()
	var node *translate.Node
	if !translate.ExpiredAbove(above, ls, now) && !translate.WithinAny(gone, p) {
		node = l.BuildGet(p, file, marker, l.DropWithin(lists[2], gone), l.DropWithin(lists[3], gone), r.Recursive, ls, now)
	}
	if node == nil {
		if afterMissTest != nil {
			afterMissTest()
		}
		// The error names the revision the read saw, and what was missing
		// then: a copy that has moved on may hold the key by now.
		snap := b.mirroredSnapshot(ctx, p, false, rev)
		if snap == nil || snap.Rev != rev {
			var err error
			if snap, err = b.readSnapshot(ctx, s, p, false, rev); err != nil {
				return nil, err
			}
		}
		snap.DropExpired(b.resolveLeases(ctx, s, translate.LeasesOf(snap.KVs())), now)
		snap.DropWithin(gone)
		return nil, snap.MissError()
	}
	return &translate.Event{Action: translate.ActionGet, Node: node, EtcdIndex: translate.Index(rev)}, nil
}

// afterMissTest, when a test sets it, runs between a GET's read that found
// nothing and the read of what its error names.
var afterMissTest func()

// mirrorWait is how long a read waits for the mirror to catch up (with the
// bridge's own last write, or with the present for a quorum read) before it
// asks the backend instead.
const mirrorWait = 100 * time.Millisecond

// readMirrored answers reads from the mirror once it has every write this
// bridge acknowledged (linearizable: every write committed before the read
// began, learnt by one cheap linearizable read), and from the backend when
// the mirror cannot say, its keys given the mirror's event indexes
// (fillIndexes). ttlDirs' reads follow reads' where a TTL
// directory record may answer them: always on the backend, on the mirror
// only while it holds one (readWithTTLDirs).
func (b *Backend) readMirrored(ctx context.Context, s *session, reads []translate.Read, linearizable bool, ttlDirs func() []translate.Read) ([][]*translate.KV, int64, error) {
	need := b.acked.Load()
	if linearizable {
		resp, err := b.quorum.get(ctx, b, s)
		if err != nil {
			return nil, 0, err
		}
		b.noteHeader(resp.Header)
		need = max(need, resp.Header.Revision)
	}
	if b.mirror.waitFor(ctx, need, mirrorWait, b.nudge) {
		if lists, rev, ok := b.mirror.readWithTTLDirs(reads, ttlDirs); ok {
			b.metrics.mirrorReads.Inc()
			return lists, rev, nil
		}
	}
	b.metrics.backendReads.Inc()
	lists, rev, err := b.readBackend(ctx, s, append(slices.Clip(reads), ttlDirs()...), !linearizable, 0, false)
	if err != nil {
		return nil, 0, err
	}
	b.fillIndexes(ctx, lists)
	return lists, rev, nil
}

// readBackend reads in one read-only transaction (at revision rev if > 0;
// first: only the first key of each range).
func (b *Backend) readBackend(ctx context.Context, s *session, reads []translate.Read, serializable bool, rev int64, first bool) ([][]*translate.KV, int64, error) {
	ops := make([]clientv3.Op, len(reads))
	for i, rd := range reads {
		switch {
		case rd.End != "" && first:
			ops[i] = clientv3.OpGet(rd.Key, getOpts(serializable, rev, clientv3.WithRange(rd.End), clientv3.WithLimit(1))...)
		case rd.End != "":
			ops[i] = clientv3.OpGet(rd.Key, getOpts(serializable, rev, clientv3.WithRange(rd.End))...)
		default:
			ops[i] = clientv3.OpGet(rd.Key, getOpts(serializable, rev)...)
		}
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, 0, err
	}
	b.noteHeader(resp.Header)
	lists := make([][]*translate.KV, len(reads))
	for i, rr := range resp.Responses {
		for _, kv := range rr.GetResponseRange().Kvs {
			lists[i] = append(lists[i], toKV(kv))
		}
	}
	if rev > 0 {
		return lists, rev, nil // the header names the member's present, not the revision read
	}
	return lists, resp.Header.Revision, nil
}

// Write serves a v2 PUT, POST or DELETE as one guarded v3 transaction,
// re-reading and re-deciding when a concurrent write changed what the
// decision depended on.
func (b *Backend) Write(ctx context.Context, r *translate.Request) (*translate.Event, Meta, error) {
	s, err := b.client()
	if err != nil {
		return nil, b.Meta(), err
	}
	ctx, cancel := b.reqCtx(ctx, s)
	defer cancel()
	// This bridge's writes to one path (a POST: to one directory) take
	// turns: they would only conflict with each other and retry. Writes
	// through other bridges still meet the guarded transaction.
	slot := &b.writeSlots[recentSlot(r.Path)%len(b.writeSlots)]
	var present int64 // a revision the decision must include (0: this bridge's own writes)
	// A write with a precondition that finds another write to its path in
	// flight decides first without a turn, and again once that write has
	// ended: under contention (many clients swapping one key) most such
	// decisions are errors (a compare the node has moved past), which
	// commit nothing and so need no turn, instead of taking turns one
	// after another behind the write that beat them. A decision to commit
	// queues for the turn.
	probes := 0
	if (r.HasCompare() || r.PrevExist != nil) && slot.busy() {
		probes = 2
	}
	for {
		if probes == 0 {
			if err := slot.take(ctx); err != nil {
				return nil, b.Meta(), b.mapErr(s, err)
			}
		}
		ev, err := b.write(ctx, s, r, present, probes > 0)
		if probes == 0 {
			slot.give()
		} else if errors.Is(err, errWouldCommit) {
			if probes--; probes > 0 {
				slot.awaitGiven(ctx)
			}
			continue
		} else {
			probes = 0
		}
		var early *earlyError
		if !errors.As(err, &early) {
			return ev, b.Meta(), b.mapErr(s, err)
		}
		// A v2 error decided on a copy that may trail writes made
		// through other bridges or by v3 clients: a committed write
		// would only fail its guards, but an error commits nothing. So
		// it stands only once the decision has seen every write
		// committed before it was made, learnt by a linearizable read
		// (shared with concurrent ones, and made without holding the
		// path's turn, which the writes that would win need).
		resp, qerr := b.quorum.get(ctx, b, s)
		if qerr != nil {
			return nil, b.Meta(), b.mapErr(s, qerr)
		}
		b.noteHeader(resp.Header)
		if resp.Header.Revision <= early.rev {
			return nil, b.Meta(), early.err
		}
		present = resp.Header.Revision
	}
}

// earlyError is a v2 error decided on a snapshot at revision rev without a
// linearizable read before it.
type earlyError struct {
	err *translate.Error
	rev int64
}

func (e *earlyError) Error() string { return e.err.Error() }

const maxWriteAttempts = 64

// errWouldCommit is what a write's probe (a decision made without the
// path's turn) answers when the decision is to commit.
var errWouldCommit = errors.New("v3backend: the write would commit")

// write decides and commits r; present > 0 is a revision the decision must
// include (a linearizable read's), and a v2 error decided without one comes
// back as an earlyError. probe: decide only, answering errWouldCommit in
// place of committing.
func (b *Backend) write(ctx context.Context, s *session, r *translate.Request, present int64, probe bool) (*translate.Event, error) {
	need := max(b.recentAt(r.Path), present)
	if r.Method == "POST" {
		// An in-order name is the decision's revision + 1: on a copy with
		// every acknowledged write it is the created index, as in v2,
		// unless another writer gets in between.
		need = max(need, b.acked.Load())
	}
	expired := false            // the last snapshot held expired nodes, now gone
	swept := map[string]int64{} // expired directories this write swept, at their sweep's revision
	for attempt := 0; attempt < maxWriteAttempts; attempt++ {
		// Decide on the mirror (one round trip in all: the guarded Txn,
		// whose compares reject a decision taken on a stale copy), or on
		// a snapshot read when the mirror cannot say. After a conflict the
		// snapshot is read from the member, which has applied the write
		// that won: under contention, a decision on a copy that trails the
		// watch by a few milliseconds would lose again and again.
		withSeq := r.Method == "POST"
		var snap *translate.Snapshot
		if attempt == 0 || expired {
			snap = b.mirroredSnapshot(ctx, r.Path, withSeq, need)
		}
		expired = false
		if snap == nil {
			var err error
			if snap, err = b.readSnapshot(ctx, s, r.Path, withSeq, 0); err != nil {
				return nil, err
			}
		}
		now := time.Now()
		ls := b.resolveLeases(ctx, s, translate.LeasesOf(snap.KVs()))
		// v2 removed an expired node before any later write: its expiry
		// comes first, then the write decides without it.
		if rev, err := b.expireBefore(ctx, s, snap, ls, now, swept); err != nil {
			return nil, err
		} else if rev > 0 {
			// Decide again on a copy that has the expiry.
			need, expired = max(need, rev), true
			continue
		}
		plan, verr := b.layout.PlanWrite(r, snap, ls, now)
		if verr != nil {
			if acked := b.acked.Load(); snap.Rev < acked && need < acked {
				// An error carries the index of the store it was decided
				// on: decide again on a copy with every acknowledged write.
				need = acked
				attempt--
				continue
			}
			// Even a compare on an index the node has moved past: its
			// answer (code, cause, index) is the snapshot's, and the
			// node may have changed or gone since.
			if present == 0 {
				return nil, &earlyError{err: verr, rev: snap.Rev}
			}
			return nil, verr // decided on a copy that waited for present (at most mirrorWait)
		}
		if probe {
			return nil, errWouldCommit
		}
		var lease clientv3.LeaseID
		var exp time.Time
		var recorded bool
		if plan.TTL > 0 {
			// The key's TTL counts from now, after the reads above: a
			// lease chosen against an earlier time could end its key
			// that much early.
			now = time.Now()
			pl, err := b.pool.acquire(ctx, s.cli, plan.TTL, now)
			if err != nil {
				return nil, err
			}
			if pl.fresh {
				b.metrics.leaseGrants.Inc()
			}
			lease, exp, recorded = pl.id, pl.shown, pl.recorded
			b.leases.put(int64(lease), exp)
		}
		var journalLease clientv3.LeaseID
		if plan.NeedsRecord() {
			var err error
			if journalLease, err = b.journalLease(ctx, s); err != nil {
				return nil, err
			}
			plan.SetJournalLease(int64(journalLease))
		}
		plan.Bind(int64(lease), exp, now, recorded)
		w := newBatchWrite(plan, lease)
		if plan.Batchable() && b.batch.max > 1 {
			b.batch.commit(ctx, s, w)
			if errors.Is(w.err, errBatchRefused) {
				w.err = nil
				b.batch.sendAlone(ctx, s, w)
			}
		} else {
			b.batch.sendAlone(ctx, s, w)
		}
		if w.err != nil && (lease != 0 || journalLease != 0) && errors.Is(w.err, rpctypes.ErrLeaseNotFound) {
			// A shared lease is gone (revoked by someone else): the
			// next attempt takes a new one.
			b.pool.forget(plan.TTL, lease)
			b.journalPool.forget(journalTTL, journalLease)
			continue
		}
		if w.err != nil {
			return nil, w.err
		}
		if !w.succeeded {
			b.metrics.writeRetries.Inc()
			// Back off a little so contending bridges do not lock-step.
			time.Sleep(time.Duration(rand.IntN(1+attempt)) * time.Millisecond) //nolint:gosec // G404: jitter, not a secret
			continue
		}
		b.noteHeader(w.header)
		b.noteAcked(plan.Ops, w.rev)
		if lease != 0 && !recorded {
			b.pool.recorded(plan.TTL, lease)
		}
		return plan.ResultAt(translate.EventIndex(w.rev, w.pos, w.n)), nil
	}
	return nil, errors.New("v2bridge: write gave up after too many conflicting concurrent writes")
}

// journalLease is the lease journal records go on now (journalPool).
func (b *Backend) journalLease(ctx context.Context, s *session) (clientv3.LeaseID, error) {
	jl, err := b.journalPool.acquire(ctx, s.cli, journalTTL, time.Now())
	if err != nil {
		return 0, err
	}
	if jl.fresh {
		b.metrics.leaseGrants.Inc()
	}
	return jl.id, nil
}

// toCmps builds the v3 compares (as clientv3.Compare would, without boxing
// each value in an interface: a write sends one per key it read).
func toCmps(cs []translate.Cmp) []clientv3.Cmp {
	out := make([]clientv3.Cmp, len(cs))
	for i, c := range cs {
		cmp := &out[i]
		cmp.Key = []byte(c.Key)
		if c.End != "" {
			cmp.RangeEnd = []byte(c.End)
		}
		cmp.Result = cmpResult(c.Result)
		if c.Target == translate.CmpCreate {
			cmp.Target = pb.Compare_CREATE
			cmp.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: c.Value}
		} else {
			cmp.Target = pb.Compare_MOD
			cmp.TargetUnion = &pb.Compare_ModRevision{ModRevision: c.Value}
		}
	}
	return out
}

func cmpResult(r string) pb.Compare_CompareResult {
	switch r {
	case "=":
		return pb.Compare_EQUAL
	case "!=":
		return pb.Compare_NOT_EQUAL
	case ">":
		return pb.Compare_GREATER
	case "<":
		return pb.Compare_LESS
	}
	panic("v2bridge: unknown compare result " + r)
}

func toOps(ops []translate.Op, lease clientv3.LeaseID) []clientv3.Op {
	out := make([]clientv3.Op, len(ops))
	for i, o := range ops {
		switch {
		case o.Type == translate.OpDelete && o.End != "":
			out[i] = clientv3.OpDelete(o.Key, clientv3.WithRange(o.End))
		case o.Type == translate.OpDelete:
			out[i] = clientv3.OpDelete(o.Key)
		case o.WithLease && lease != 0:
			out[i] = clientv3.OpPut(o.Key, string(o.Value), clientv3.WithLease(lease))
		case o.Lease != 0:
			out[i] = clientv3.OpPut(o.Key, string(o.Value), clientv3.WithLease(clientv3.LeaseID(o.Lease)))
		default:
			out[i] = clientv3.OpPut(o.Key, string(o.Value))
		}
	}
	return out
}

// noteAcked records a write this bridge acknowledged at revision rev: the
// v2 paths whose own keys (file or directory marker) it changed.
func (b *Backend) noteAcked(ops []translate.Op, rev int64) {
	raise(&b.acked, rev)
	for _, o := range ops {
		p, ok := b.layout.PathOfData(o.Key)
		if !ok {
			p, ok = b.layout.PathOfMarker(o.Key)
		}
		if ok {
			raise(&b.recent[recentSlot(p)], rev)
		}
	}
}

// recentAt is the newest acknowledged write to p or to one of its
// ancestors (or to a path sharing their slots), for a decision about p.
func (b *Backend) recentAt(p string) int64 {
	need := b.recent[recentSlot(p)].Load()
	for i := 1; i < len(p); i++ {
		if p[i] == '/' { // the ancestor p[:i]
			need = max(need, b.recent[recentSlot(p[:i])].Load())
		}
	}
	return need
}

const recentSlots = 4096

// recentSlot is FNV-1a of p (hash/fnv's, without its allocations: every
// write hashes its path and each ancestor) modulo recentSlots.
func recentSlot(p string) int {
	h := uint32(2166136261)
	for i := 0; i < len(p); i++ {
		h ^= uint32(p[i])
		h *= 16777619
	}
	return int(h % recentSlots)
}

func raise(v *atomic.Int64, rev int64) {
	for {
		cur := v.Load()
		if rev <= cur || v.CompareAndSwap(cur, rev) {
			return
		}
	}
}
