// SPDX-License-Identifier: Apache-2.0

package v3backend

// Group commit of concurrent writes. A write that finds no batch in flight
// sends its guarded transaction alone, as it always did; the writes that
// arrive meanwhile wait, and when the transaction in flight returns, the
// first of them sends them all as one v3 transaction whose Then branch holds
// each write's own guarded transaction. etcd then proposes, applies and
// answers many writes for the cost of one, and each write still succeeds or
// fails on its own guards.
//
// Two things make a batch mean the same as the writes sent one after the
// other, in batch order:
//   - etcd evaluates every nested compare against the store as it was before
//     the whole transaction, so a write joins a batch only if none of the keys
//     it compares is written by a write already in it, and none of the keys
//     it writes is compared or written by one (etcd also refuses two writes
//     of one key in a transaction);
//   - only writes whose revision decodes into exactly their own event are
//     batched (translate.Plan.Batchable: not a refresh, not an in-order
//     create), and a batch holds either writes without a journal record,
//     which decode by rule, or journaled writes only, each putting its record
//     at the slot of its place after its own changes, which decode record by
//     record; so the batch's revision decodes into one event per successful
//     write, in batch order, and each write answers with the index of its
//     place (translate.EventIndex), the one its watchers see.

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/v2bridge/v2bridge/translate"
)

// DefaultWriteBatch is how many writes one transaction carries at most by
// default (etcd's default --max-txn-ops is 128).
const DefaultWriteBatch = 64

// maxBatchBytes bounds the values and keys (compared and written) of one
// batch, well under etcd's default request limit of 1.5 MiB; a larger write
// goes alone.
const maxBatchBytes = 512 << 10

// maxQueueWait bounds how long the writes in the queue wait for the
// transaction in flight before they go alone (dissolve). A transaction
// waits as long as etcd has no leader, or until its member is declared lost
// (2–3 s), and the writes that arrive meanwhile must not all wait for it:
// alone, each would have been answered as soon as the cluster could.
const maxQueueWait = 100 * time.Millisecond

// maxTxnOps is etcd's default --max-txn-ops. etcd allows a transaction
// nested in another only what the outer one leaves of it: a batch of n
// writes whose largest has m compares or operations needs n + m of it. (An
// etcd with a lower limit refuses larger batches, whose writes then go
// alone.)
const maxTxnOps = 128

// errBatchRefused tells the writes of a batch etcd refused as a whole that
// they must be sent alone.
var errBatchRefused = errors.New("v2bridge: batched transaction refused")

// errBatchPanicked is the result of the writes of a batch whose sender
// panicked.
var errBatchPanicked = errors.New("v2bridge: the batched transaction was not sent (its sender failed)")

// batchWrite is one write waiting for, or in, a batch.
type batchWrite struct {
	cmps  []clientv3.Cmp
	plan  *translate.Plan
	lease clientv3.LeaseID
	size  int
	ops   int           // of etcd's --max-txn-ops, nested in a batch
	wake  chan struct{} // receives once: the result is in, this write leads its batch, or it goes alone
	batch []*batchWrite // set with lead: the batch this write sends

	// Set before wake (by the sender of its batch, or by dissolve).
	lead      bool
	alone     bool // the transaction in flight took too long: this write goes alone
	succeeded bool
	rev       int64 // the batch's revision
	pos, n    int   // position among the batch's successful writes, and how many there were
	header    *pb.ResponseHeader
	err       error
}

// batcher queues the writes that arrive while a batch is in flight.
type batcher struct {
	b   *Backend
	max int // writes per batch
	// queueWait is maxQueueWait; the tests that hold a transaction on
	// purpose, to queue writes behind it, raise it.
	queueWait time.Duration

	// mu guards queue, flying and stuck; it is never held across a backend
	// call.
	mu     sync.Mutex
	queue  []*batchWrite
	flying bool // a batch is in flight: its sender hands the queue on
	stuck  bool // it has had no answer for maxQueueWait: writes go alone until it ends
}

func newBatchWrite(plan *translate.Plan, lease clientv3.LeaseID) *batchWrite {
	w := &batchWrite{cmps: toCmps(plan.Cmps), plan: plan, lease: lease, wake: make(chan struct{}, 1)}
	for _, o := range plan.Ops {
		w.size += len(o.Key) + len(o.End) + len(o.Value)
	}
	for _, c := range plan.Cmps {
		w.size += len(c.Key) + len(c.End)
	}
	w.ops = max(len(plan.Cmps), len(plan.Ops))
	return w
}

// commit sends w, alone or in a batch, and waits for its result. When ctx
// ends while w still waits in the queue it leaves it; once w is in a batch
// it waits for that batch, which has a deadline of its own.
func (bt *batcher) commit(ctx context.Context, s *session, w *batchWrite) {
	bt.mu.Lock()
	if !bt.flying && w.size <= maxBatchBytes {
		bt.flying = true
		bt.mu.Unlock()
		bt.send(ctx, s, []*batchWrite{w})
		return
	}
	if w.size > maxBatchBytes || bt.stuck {
		bt.mu.Unlock()
		bt.sendAlone(ctx, s, w)
		return
	}
	bt.queue = append(bt.queue, w)
	bt.mu.Unlock()
	select {
	case <-w.wake:
	case <-ctx.Done():
		if bt.leave(w) {
			w.err = ctx.Err()
			return
		}
		<-w.wake // taken into a batch, or dissolved, meanwhile
	}
	switch {
	case w.alone:
		bt.sendAlone(ctx, s, w)
	case w.lead:
		bt.send(ctx, s, w.batch)
	}
}

// dissolve sends every write waiting in the queue alone, and the writes
// that come until the transaction in flight ends: it has had no answer for
// maxQueueWait.
func (bt *batcher) dissolve() {
	bt.mu.Lock()
	waiting := bt.queue
	bt.queue, bt.stuck = nil, true
	bt.mu.Unlock()
	for _, w := range waiting {
		w.alone = true
		w.wake <- struct{}{}
	}
}

// leave takes w out of the queue and reports whether it was still there
// (false: a batch has taken it).
func (bt *batcher) leave(w *batchWrite) bool {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	for i, q := range bt.queue {
		if q == w {
			bt.queue = append(bt.queue[:i], bt.queue[i+1:]...)
			return true
		}
	}
	return false
}

// send commits batch (its first write is the caller's, ctx its request's)
// and hands off (handOff), even when sending panics.
func (bt *batcher) send(ctx context.Context, s *session, batch []*batchWrite) {
	// One timer per transaction in flight, not per waiting write: under
	// load a transaction carries dozens of writes and takes milliseconds.
	stuck := time.AfterFunc(bt.queueWait, bt.dissolve)
	sent := false
	defer func() {
		stuck.Stop() // before the hand-off: the queue is the next transaction's then
		if !sent {
			// sendBatch panicked: the batch's writes fail and the queue
			// goes on, so that no write waits for a sender that is gone;
			// the panic goes on too.
			for _, w := range batch {
				w.err = errBatchPanicked
			}
		}
		bt.handOff(batch)
	}()
	bt.sendBatch(ctx, s, batch)
	sent = true
}

// handOff gives the writes of batch after the first their results, then
// hands the queue to its next batch's first write, or ends the flight.
func (bt *batcher) handOff(batch []*batchWrite) {
	bt.mu.Lock()
	next := bt.take()
	if next == nil {
		bt.flying = false
	}
	bt.stuck = false // the next transaction, if any, has its own timer
	bt.mu.Unlock()
	for _, w := range batch[1:] {
		w.wake <- struct{}{}
	}
	if next != nil {
		next[0].lead, next[0].batch = true, next
		next[0].wake <- struct{}{}
	}
}

// take removes the next batch from the queue: its first write, then the
// writes in queue order that do not touch what the batch's earlier writes
// touch, up to the batch's limits; nil when the queue is empty.
func (bt *batcher) take() []*batchWrite {
	if len(bt.queue) == 0 {
		return nil
	}
	var batch []*batchWrite
	var keys batchKeys
	size, nested := 0, 0 // nested: the most compares or operations of a write in batch
	journaled := bt.queue[0].plan.Journaled()
	alone := false // the first write admits no other (a range delete)
	rest := bt.queue[:0]
	for _, w := range bt.queue {
		ok := !alone && len(batch) < bt.max && size+w.size <= maxBatchBytes &&
			len(batch)+1+max(nested, w.ops) <= maxTxnOps && w.plan.Journaled() == journaled &&
			keys.admit(bt.b.layout, w.plan)
		switch {
		case ok:
			batch = append(batch, w)
			size += w.size
			nested = max(nested, w.ops)
		case len(batch) == 0:
			batch, alone = append(batch, w), true
		default:
			rest = append(rest, w)
		}
	}
	clear(bt.queue[len(rest):])
	bt.queue = rest
	return batch
}

// sendBatch commits the writes of batch in one transaction (one alone: its
// own transaction, as if never batched, under its request's ctx; several:
// under a deadline of their own, as none of their requests may cut the
// others') and sets their results.
func (bt *batcher) sendBatch(ctx context.Context, s *session, batch []*batchWrite) {
	if len(batch) == 1 {
		bt.sendAlone(ctx, s, batch[0])
		return
	}
	b := bt.b
	ctx, cancel := b.reqCtx(context.Background(), s)
	defer cancel()
	ops := make([]clientv3.Op, len(batch))
	for i, w := range batch {
		wops := w.plan.Ops
		if w.plan.Journaled() {
			wops = w.plan.OpsInSlot(i)
		}
		ops[i] = clientv3.OpTxn(w.cmps, toOps(wops, w.lease), nil)
	}
	b.metrics.writeBatches.Inc()
	b.metrics.batchedWrites.Add(float64(len(batch)))
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		if ctx.Err() == nil && s.ctx.Err() == nil && refusedUnapplied(err) {
			// Refused as a whole, with nothing applied (a shared lease
			// revoked meanwhile, a limit of this etcd, a conflict the
			// admission missed): each write goes alone, and meets its own
			// error. Any other failure may come after etcd applied the
			// batch: its writes fail, as a write alone does, rather than
			// apply twice.
			err = errors.Join(errBatchRefused, err)
		}
		if s.ctx.Err() != nil {
			// The session the batch went on was lost: its writes, some
			// of which began on the next one, fail as a write alone on a
			// lost session does.
			err = ErrUnavailable
		}
		for _, w := range batch {
			w.err = err
		}
		return
	}
	n := 0
	for i, w := range batch {
		w.rev, w.header = resp.Header.Revision, resp.Header
		if r := resp.Responses[i].GetResponseTxn(); r != nil && r.Succeeded {
			w.succeeded, w.pos = true, n
			n++
		}
	}
	for _, w := range batch {
		w.n = n
	}
}

// refusedUnapplied reports whether err is etcd refusing a transaction
// before applying any of it: checked before it is proposed (too many
// operations, a key written twice, too large, too many requests pending),
// or at apply, where a missing lease fails the whole transaction.
func refusedUnapplied(err error) bool {
	for _, e := range []error{rpctypes.ErrLeaseNotFound, rpctypes.ErrTooManyOps, rpctypes.ErrDuplicateKey,
		rpctypes.ErrRequestTooLarge, rpctypes.ErrTooManyRequests} {
		if errors.Is(err, e) {
			return true
		}
	}
	// The client's or the server's message size limit: never sent on.
	return status.Code(err) == codes.ResourceExhausted
}

// sendAlone commits w in a transaction of its own.
func (bt *batcher) sendAlone(ctx context.Context, s *session, w *batchWrite) {
	resp, err := s.cli.Txn(ctx).If(w.cmps...).Then(toOps(w.plan.Ops, w.lease)...).Commit()
	if err != nil {
		w.err = err
		return
	}
	w.succeeded, w.rev, w.header, w.pos, w.n = resp.Succeeded, resp.Header.Revision, resp.Header, 0, 1
}

// batchKeys are the keys a batch's writes compare and write.
type batchKeys struct {
	written  map[string]bool
	compared map[string]bool
	ranges   [][2]string // compared ranges [from, end)
}

// admit adds p's keys and reports true when p touches nothing the batch's
// writes touch as described above; otherwise it changes nothing. The
// journal record is not counted: in a batch each write puts it at a slot of
// its own.
func (k *batchKeys) admit(l translate.Layout, p *translate.Plan) bool {
	if k.written == nil {
		k.written, k.compared = map[string]bool{}, map[string]bool{}
	}
	jk := l.JournalKey()
	for _, o := range p.Ops {
		if o.Key == jk {
			continue
		}
		if o.End != "" || k.written[o.Key] || k.compared[o.Key] || k.inRange(o.Key) {
			return false
		}
	}
	for _, c := range p.Cmps {
		if c.End == "" {
			if k.written[c.Key] {
				return false
			}
			continue
		}
		for w := range k.written {
			if w >= c.Key && w < c.End {
				return false
			}
		}
	}
	for _, o := range p.Ops {
		if o.Key != jk {
			k.written[o.Key] = true
		}
	}
	for _, c := range p.Cmps {
		if c.End == "" {
			k.compared[c.Key] = true
		} else {
			k.ranges = append(k.ranges, [2]string{c.Key, c.End})
		}
	}
	return true
}

func (k *batchKeys) inRange(key string) bool {
	for _, r := range k.ranges {
		if key >= r[0] && key < r[1] {
			return true
		}
	}
	return false
}
