package v3backend

// The request path: v2 reads, writes and watch registrations, each bound to
// the session it runs on and to the request deadline, and the leases behind
// v2 TTLs.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v3backend/hub"
)

// Watch registers a v2 watch with the hub. The current revision (the
// response's X-Etcd-Index) is read first, by a read shared with the watch
// requests that arrive meanwhile.
func (b *Backend) Watch(ctx context.Context, r *translate.Request) (*hub.Watcher, Meta, error) {
	s, err := b.client()
	if err != nil {
		return nil, b.Meta(), err
	}
	rctx, cancel := b.reqCtx(ctx, s)
	defer cancel()
	resp, err := b.cur.get(rctx, b, s)
	if err != nil {
		return nil, b.Meta(), b.mapErr(s, err)
	}
	meta := b.noteHeader(resp.Header)
	w, err := b.hub.Watch(rctx, r.Path, r.Recursive, r.Stream, r.WaitIndex, uint64(resp.Header.Revision))
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

// readSnapshot reads a write's snapshot of p in one transaction.
func (b *Backend) readSnapshot(ctx context.Context, s *session, p string, withSeq, serializable bool, rev int64) (*translate.Snapshot, error) {
	reads := b.layout.SnapshotReads(p, withSeq)
	ops := make([]clientv3.Op, len(reads))
	for i, r := range reads {
		if r.End != "" {
			ops[i] = clientv3.OpGet(r.Key, getOpts(serializable, rev, clientv3.WithRange(r.End), clientv3.WithLimit(1))...)
		} else {
			ops[i] = clientv3.OpGet(r.Key, getOpts(serializable, rev)...)
		}
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	b.noteHeader(resp.Header)
	kvs := make([]*translate.KV, len(reads))
	for i, r := range resp.Responses {
		if rr := r.GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
			kvs[i] = toKV(rr.Kvs[0])
		}
	}
	return b.layout.NewSnapshot(p, resp.Header.Revision, withSeq, kvs), nil
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
	ser := !r.Quorum
	reads := l.GetReads(p)
	ops := make([]clientv3.Op, len(reads))
	for i, rd := range reads {
		if rd.End != "" {
			ops[i] = clientv3.OpGet(rd.Key, getOpts(ser, 0, clientv3.WithRange(rd.End))...)
		} else {
			ops[i] = clientv3.OpGet(rd.Key, getOpts(ser, 0)...)
		}
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	b.noteHeader(resp.Header)
	rev := resp.Header.Revision
	lists := make([][]*translate.KV, len(reads))
	for i, rr := range resp.Responses {
		for _, kv := range rr.GetResponseRange().Kvs {
			lists[i] = append(lists[i], toKV(kv))
		}
	}
	first := func(l []*translate.KV) *translate.KV {
		if len(l) == 0 {
			return nil
		}
		return l[0]
	}
	file, marker := first(lists[0]), first(lists[1])
	ls := b.resolveLeases(ctx, s, translate.LeasesOf(lists...))
	node := l.BuildGet(p, file, marker, lists[2], lists[3], r.Recursive, ls, time.Now())
	if node == nil {
		snap, err := b.readSnapshot(ctx, s, p, false, true, rev)
		if err != nil {
			return nil, err
		}
		return nil, snap.MissError()
	}
	return &translate.Event{Action: translate.ActionGet, Node: node, EtcdIndex: uint64(rev)}, nil
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
	ev, err := b.write(ctx, s, r)
	return ev, b.Meta(), b.mapErr(s, err)
}

const maxWriteAttempts = 64

func (b *Backend) write(ctx context.Context, s *session, r *translate.Request) (*translate.Event, error) {
	for attempt := 0; attempt < maxWriteAttempts; attempt++ {
		snap, err := b.readSnapshot(ctx, s, r.Path, r.Method == "POST", attempt == 0, 0)
		if err != nil {
			return nil, err
		}
		var kvs []*translate.KV
		if snap.File != nil {
			kvs = append(kvs, snap.File)
		}
		if snap.Marker != nil {
			kvs = append(kvs, snap.Marker)
		}
		now := time.Now()
		ls := b.resolveLeases(ctx, s, translate.LeasesOf(kvs))
		plan, verr := b.layout.PlanWrite(r, snap, ls, now)
		if verr != nil {
			return nil, verr
		}
		var lease clientv3.LeaseID
		var exp time.Time
		if plan.TTL > 0 {
			g, err := s.cli.Grant(ctx, plan.TTL)
			if err != nil {
				return nil, fmt.Errorf("grant lease: %w", err)
			}
			lease, exp = g.ID, now.Add(time.Duration(g.TTL)*time.Second)
		}
		plan.Bind(int64(lease), exp, now)
		resp, err := s.cli.Txn(ctx).If(toCmps(plan.Cmps)...).Then(toOps(plan.Ops, lease)...).Commit()
		if err != nil || !resp.Succeeded {
			if lease != 0 {
				b.revokeLater(s, lease)
			}
			if err != nil {
				return nil, err
			}
			b.metrics.writeRetries.Inc()
			// Back off a little so contending bridges do not lock-step.
			time.Sleep(time.Duration(rand.IntN(1+attempt)) * time.Millisecond)
			continue
		}
		b.noteHeader(resp.Header)
		if lease != 0 {
			b.leases.put(int64(lease), exp, true)
		}
		// A replaced node's lease, if this bridge granted it, holds nothing now.
		for _, kv := range kvs {
			if kv.Lease != int64(lease) && b.leases.owned(kv.Lease) && plan.Releases(kv.Lease) {
				b.revokeLater(s, clientv3.LeaseID(kv.Lease))
			}
		}
		return plan.Result(resp.Header.Revision), nil
	}
	return nil, errors.New("v2bridge: write gave up after too many conflicting concurrent writes")
}

type revokeReq struct {
	s  *session
	id clientv3.LeaseID
}

// revokeLater queues the revocation of a lease that holds nothing any more.
// A revoke is a raft proposal that costs etcd more than the write that freed
// the lease, so one worker does them one at a time and, when it falls
// behind, the rest are dropped: such a lease holds no key and simply lapses
// at its TTL.
func (b *Backend) revokeLater(s *session, id clientv3.LeaseID) {
	select {
	case b.revokes <- revokeReq{s, id}:
	default:
		b.leases.drop(int64(id))
	}
}

func (b *Backend) revoker() {
	defer b.wg.Done()
	for {
		select {
		case <-b.closeCh:
			return
		case r := <-b.revokes:
			if r.s.ctx.Err() == nil {
				ctx, cancel := b.reqCtx(context.Background(), r.s)
				_, _ = r.s.cli.Revoke(ctx, r.id)
				cancel()
			}
			b.leases.drop(int64(r.id))
		}
	}
}

func toCmps(cs []translate.Cmp) []clientv3.Cmp {
	out := make([]clientv3.Cmp, len(cs))
	for i, c := range cs {
		var cmp clientv3.Cmp
		if c.Target == translate.CmpCreate {
			cmp = clientv3.Compare(clientv3.CreateRevision(c.Key), c.Result, c.Value)
		} else {
			cmp = clientv3.Compare(clientv3.ModRevision(c.Key), c.Result, c.Value)
		}
		if c.End != "" {
			cmp = cmp.WithRange(c.End)
		}
		out[i] = cmp
	}
	return out
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
		default:
			out[i] = clientv3.OpPut(o.Key, string(o.Value))
		}
	}
	return out
}
