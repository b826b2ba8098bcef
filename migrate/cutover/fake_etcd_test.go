// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fakeEtcd is an in-memory etcd v3 with what the agent and the commands
// use: gets (one key, a prefix, count-only), puts, deletes, compare-and-swap
// transactions on a key's mod or create revision, leases, and watches from
// a revision with a progress request. Options of a Put it cannot read (the
// lease) it takes from the key: a registration's lease is named by its key.
// The methods the tests do not need are left to the nil interfaces.
type fakeEtcd struct {
	clientv3.KV
	clientv3.Lease
	clientv3.Watcher

	keys Keys

	mu        sync.Mutex // guards everything below
	rev       int64
	kvs       map[string]*mvccpb.KeyValue
	history   []*clientv3.Event
	watches   []*fakeWatch
	leases    map[clientv3.LeaseID]int64 // TTL in seconds
	nextLease clientv3.LeaseID
	renewals  int
	// txnGate, when set, holds every transaction until it is closed.
	txnGate chan struct{}
	// afterTxn runs after every committed transaction, unlocked.
	afterTxn func()
	// onList runs before every prefix get, unlocked, with its prefix.
	onList func(prefix string)
	// earlyProgress makes it answer progress requests like etcd before
	// 3.4.25 and 3.5.8: a watch from a revision holds its replay of the
	// history back until the next commit or progress request, and a
	// progress request is answered at once with the current revision,
	// ahead of that replay.
	earlyProgress bool
}

type fakeWatch struct {
	ctx        context.Context
	start, end string // end "": the one key start
	ch         chan clientv3.WatchResponse
	held       []clientv3.WatchResponse // the replay earlyProgress holds back
}

// releaseLocked sends the replay w holds back (f.mu held).
func (w *fakeWatch) releaseLocked() {
	for _, r := range w.held {
		w.ch <- r
	}
	w.held = nil
}

func newFakeEtcd(keys Keys) *fakeEtcd {
	return &fakeEtcd{keys: keys, rev: 1, kvs: map[string]*mvccpb.KeyValue{}, leases: map[clientv3.LeaseID]int64{},
		nextLease: 0x100}
}

func (f *fakeEtcd) Close() error { return nil }

func (f *fakeEtcd) header() *pb.ResponseHeader { return &pb.ResponseHeader{Revision: f.rev} }

func (w *fakeWatch) matches(key string) bool {
	if w.end == "" {
		return key == w.start
	}
	return key >= w.start && (w.end == "\x00" || key < w.end)
}

// commit applies changes as one revision (f.mu held) and tells the
// watches.
func (f *fakeEtcd) commitLocked(changes []change) {
	if len(changes) == 0 {
		return
	}
	f.rev++
	var evs []*clientv3.Event
	for _, c := range changes {
		prev := f.kvs[c.key]
		if c.del {
			if prev == nil {
				continue
			}
			delete(f.kvs, c.key)
			evs = append(evs, &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(c.key), ModRevision: f.rev},
				PrevKv: prev})
			continue
		}
		kv := &mvccpb.KeyValue{Key: []byte(c.key), Value: []byte(c.val), ModRevision: f.rev, CreateRevision: f.rev,
			Version: 1, Lease: c.lease}
		if prev != nil {
			kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
		}
		f.kvs[c.key] = kv
		evs = append(evs, &clientv3.Event{Type: mvccpb.PUT, Kv: kv, PrevKv: prev})
	}
	f.history = append(f.history, evs...)
	f.tellLocked(evs)
}

func (f *fakeEtcd) tellLocked(evs []*clientv3.Event) {
	live := f.watches[:0]
	for _, w := range f.watches {
		if w.ctx.Err() != nil {
			continue
		}
		live = append(live, w)
		w.releaseLocked()
		var mine []*clientv3.Event
		for _, ev := range evs {
			if w.matches(string(ev.Kv.Key)) {
				mine = append(mine, ev)
			}
		}
		if len(mine) > 0 {
			w.ch <- clientv3.WatchResponse{Header: *f.header(), Events: mine}
		}
	}
	f.watches = live
}

type change struct {
	key, val string
	lease    int64
	del      bool
}

// leaseOf is the lease a put of key carries: a registration's is in its
// name.
func (f *fakeEtcd) leaseOf(key string) (int64, error) {
	if !strings.HasPrefix(key, f.keys.Bridges) {
		return 0, nil
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(key, f.keys.Bridges), 16, 64)
	if err != nil {
		return 0, err
	}
	if _, ok := f.leases[clientv3.LeaseID(id)]; !ok {
		return 0, rpctypes.ErrLeaseNotFound
	}
	return id, nil
}

// put writes key as a client would, outside the client API (for tests).
func (f *fakeEtcd) put(key, val string, lease int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commitLocked([]change{{key: key, val: val, lease: lease}})
}

// apply commits changes as one revision, outside the client API.
func (f *fakeEtcd) apply(changes ...change) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commitLocked(changes)
}

func (f *fakeEtcd) value(key string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	kv := f.kvs[key]
	if kv == nil {
		return "", false
	}
	return string(kv.Value), true
}

func (f *fakeEtcd) renewed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.renewals
}

func (f *fakeEtcd) rangeLocked(op clientv3.Op) []*mvccpb.KeyValue {
	key, end := string(op.KeyBytes()), string(op.RangeBytes())
	var out []*mvccpb.KeyValue
	for k, kv := range f.kvs {
		if k == key || end != "" && k >= key && (end == "\x00" || k < end) {
			out = append(out, kv)
		}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Key, out[j].Key) < 0 })
	return out
}

func (f *fakeEtcd) getLocked(op clientv3.Op) *pb.RangeResponse {
	kvs := f.rangeLocked(op)
	resp := &pb.RangeResponse{Header: f.header(), Count: int64(len(kvs))}
	if !op.IsCountOnly() {
		resp.Kvs = kvs
	}
	return resp
}

func (f *fakeEtcd) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	op := clientv3.OpGet(key, opts...)
	if op.RangeBytes() != nil && f.onList != nil {
		f.onList(key)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return (*clientv3.GetResponse)(f.getLocked(op)), nil
}

func (f *fakeEtcd) Put(ctx context.Context, key, val string, _ ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	lease, err := f.leaseOf(key)
	if err != nil {
		return nil, err
	}
	f.commitLocked([]change{{key: key, val: val, lease: lease}})
	return &clientv3.PutResponse{Header: f.header()}, nil
}

func (f *fakeEtcd) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	op := clientv3.OpDelete(key, opts...)
	f.mu.Lock()
	defer f.mu.Unlock()
	var changes []change
	for _, kv := range f.rangeLocked(op) {
		changes = append(changes, change{key: string(kv.Key), del: true})
	}
	f.commitLocked(changes)
	return &clientv3.DeleteResponse{Header: f.header(), Deleted: int64(len(changes))}, nil
}

func (f *fakeEtcd) Txn(ctx context.Context) clientv3.Txn { return &fakeTxn{f: f, ctx: ctx} }

type fakeTxn struct {
	f         *fakeEtcd
	ctx       context.Context
	cmps      []clientv3.Cmp
	then, els []clientv3.Op
}

func (t *fakeTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.cmps = append(t.cmps, cs...); return t }
func (t *fakeTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.then = append(t.then, ops...); return t }
func (t *fakeTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.els = append(t.els, ops...); return t }

func (t *fakeTxn) Commit() (*clientv3.TxnResponse, error) {
	f := t.f
	f.mu.Lock()
	gate := f.txnGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-t.ctx.Done():
			return nil, t.ctx.Err()
		}
	}
	f.mu.Lock()
	ok := true
	for _, c := range t.cmps {
		var got int64
		if kv := f.kvs[string(c.Key)]; kv != nil {
			switch c.Target {
			case pb.Compare_MOD:
				got = kv.ModRevision
			case pb.Compare_CREATE:
				got = kv.CreateRevision
			default:
				f.mu.Unlock()
				return nil, errors.New("fake etcd: unsupported compare")
			}
		}
		var want int64
		switch u := c.TargetUnion.(type) {
		case *pb.Compare_ModRevision:
			want = u.ModRevision
		case *pb.Compare_CreateRevision:
			want = u.CreateRevision
		}
		if c.Result != pb.Compare_EQUAL {
			f.mu.Unlock()
			return nil, errors.New("fake etcd: unsupported compare result")
		}
		ok = ok && got == want
	}
	ops := t.then
	if !ok {
		ops = t.els
	}
	resp := &clientv3.TxnResponse{Succeeded: ok}
	var changes []change
	for _, op := range ops {
		switch {
		case op.IsGet():
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{
				ResponseRange: f.getLocked(op)}})
		case op.IsPut():
			lease, err := f.leaseOf(string(op.KeyBytes()))
			if err != nil {
				f.mu.Unlock()
				return nil, err
			}
			changes = append(changes, change{key: string(op.KeyBytes()), val: string(op.ValueBytes()), lease: lease})
		default:
			f.mu.Unlock()
			return nil, errors.New("fake etcd: unsupported op in a transaction")
		}
	}
	f.commitLocked(changes)
	resp.Header = f.header()
	after := f.afterTxn
	f.mu.Unlock()
	if after != nil && ok {
		after()
	}
	return resp, nil
}

func (f *fakeEtcd) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextLease++
	f.leases[f.nextLease] = ttl
	return &clientv3.LeaseGrantResponse{ResponseHeader: f.header(), ID: f.nextLease, TTL: ttl}, nil
}

// revokeLocked ends a lease and the registration on it.
func (f *fakeEtcd) revokeLocked(id clientv3.LeaseID) {
	delete(f.leases, id)
	key := f.keys.Bridges + strconv.FormatInt(int64(id), 16)
	if f.kvs[key] != nil {
		f.commitLocked([]change{{key: key, del: true}})
	}
}

// expire ends every lease, as when they run out.
func (f *fakeEtcd) expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.leases {
		f.revokeLocked(id)
	}
}

func (f *fakeEtcd) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.leases[id]; !ok {
		return nil, rpctypes.ErrLeaseNotFound
	}
	f.revokeLocked(id)
	return &clientv3.LeaseRevokeResponse{Header: f.header()}, nil
}

func (f *fakeEtcd) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewals++
	ttl, ok := f.leases[id]
	if !ok {
		return nil, rpctypes.ErrLeaseNotFound
	}
	return &clientv3.LeaseKeepAliveResponse{ResponseHeader: f.header(), ID: id, TTL: ttl}, nil
}

// KeepAlive renews the lease at once, then, as clientv3's, keeps its
// channel open until ctx ends or the lease is gone (revoked or expired);
// its goroutine ends then.
func (f *fakeEtcd) KeepAlive(ctx context.Context, id clientv3.LeaseID) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	first, err := f.KeepAliveOnce(ctx, id)
	if err != nil {
		return nil, err
	}
	ch := make(chan *clientv3.LeaseKeepAliveResponse, 1)
	ch <- first
	go func() {
		defer close(ch)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			f.mu.Lock()
			_, ok := f.leases[id]
			f.mu.Unlock()
			if !ok {
				return
			}
		}
	}()
	return ch, nil
}

// Watch replays the history from the revision asked for, then tells every
// change as it commits. Its channel is never closed: the callers stop
// reading when they cancel.
func (f *fakeEtcd) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	op := clientv3.OpGet(key, opts...)
	w := &fakeWatch{ctx: ctx, start: key, end: string(op.RangeBytes()), ch: make(chan clientv3.WatchResponse, 1024)}
	f.mu.Lock()
	defer f.mu.Unlock()
	if from := op.Rev(); from > 0 {
		var byRev [][]*clientv3.Event
		for _, ev := range f.history {
			if ev.Kv.ModRevision < from || !w.matches(string(ev.Kv.Key)) {
				continue
			}
			if n := len(byRev); n > 0 && byRev[n-1][0].Kv.ModRevision == ev.Kv.ModRevision {
				byRev[n-1] = append(byRev[n-1], ev)
			} else {
				byRev = append(byRev, []*clientv3.Event{ev})
			}
		}
		for _, evs := range byRev {
			r := clientv3.WatchResponse{Header: *f.header(), Events: evs}
			if f.earlyProgress {
				w.held = append(w.held, r)
			} else {
				w.ch <- r
			}
		}
	}
	f.watches = append(f.watches, w)
	return w.ch
}

func (f *fakeEtcd) RequestProgress(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.watches {
		if w.ctx.Err() == nil && len(w.ch) < cap(w.ch) {
			w.ch <- clientv3.WatchResponse{Header: *f.header()}
		}
		w.releaseLocked()
	}
	return nil
}
