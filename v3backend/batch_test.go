// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

	"github.com/v2bridge/v2bridge/translate"
)

// holdFirstTxn arms ic to hold the first write transaction (one with
// compares) until release is closed, and reports through held that it is
// holding it.
func holdFirstTxn(ic *interceptor) (held <-chan struct{}, release chan struct{}) {
	h, r := make(chan struct{}), make(chan struct{})
	var taken atomic.Bool // only the first is held; the others pass
	ic.before = func(ctx context.Context, method string, req any) {
		txn, ok := req.(*etcdserverpb.TxnRequest)
		if method != "/etcdserverpb.KV/Txn" || !ok || len(txn.Compare) == 0 || !taken.CompareAndSwap(false, true) {
			return
		}
		close(h)
		select {
		case <-r:
		case <-ctx.Done():
		}
	}
	ic.armed.Store(true)
	return h, r
}

// queued waits until n writes wait in the batcher's queue.
func queued(t *testing.T, b *Backend, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.batch.mu.Lock()
		got := len(b.batch.queue)
		b.batch.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond) // poll
	}
}

type writeResult struct {
	ev  *translate.Event
	err error
}

// writeAll sends the writes at once and returns their results in order.
func writeAll(b *Backend, reqs []*translate.Request) []writeResult {
	out := make([]writeResult, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out[i].ev, _, out[i].err = b.Write(ctx, r)
		})
	}
	wg.Wait()
	return out
}

// batchBackend starts a member and a backend whose unary calls go through
// the interceptor it returns, with a file (value "old") at each of files.
func batchBackend(t *testing.T, files ...string) (*Backend, *interceptor) {
	t.Helper()
	ic := &interceptor{}
	b := newBackend(t, startMember(t, nil), ic)
	for _, k := range files {
		if _, _, err := b.Write(context.Background(), request(t, "PUT", k, url.Values{"value": {"old"}})); err != nil {
			t.Fatal(err)
		}
	}
	return b, ic
}

// behindAHeldWrite holds first's transaction (the first one with compares)
// in flight, queues reqs behind it, lets it go and returns what reqs
// answered. The queue does not give up on the held transaction meanwhile:
// on a busy machine, deciding the writes it queues can take longer than
// maxQueueWait (that bound has a test of its own).
func behindAHeldWrite(t *testing.T, b *Backend, ic *interceptor, first *translate.Request, reqs []*translate.Request) []writeResult {
	t.Helper()
	b.batch.queueWait = time.Minute
	defer func() { b.batch.queueWait = maxQueueWait }()
	held, release := holdFirstTxn(ic)
	done := make(chan error, 1)
	go func() {
		_, _, err := b.Write(context.Background(), first)
		done <- err
	}()
	<-held
	results := make(chan []writeResult, 1)
	go func() { results <- writeAll(b, reqs) }()
	queued(t, b, len(reqs))
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return <-results
}

// TestWritesThatArriveDuringAWriteShareOneTransaction: writes that arrive
// while a write is in flight go together in the next transaction (writes
// with a journal record apart from those without); each gets its own index,
// which is what its watchers see and what a read shows.
func TestWritesThatArriveDuringAWriteShareOneTransaction(t *testing.T) {
	type write struct {
		method, path string
		form         url.Values
		action       string
	}
	set := func(p string) write { return write{"PUT", p, url.Values{"value": {"new"}}, translate.ActionSet} }
	for _, tc := range []struct {
		name    string
		writes  []write
		batches int // transactions of several writes
	}{
		{"sets over files and a create, without a journal record", []write{
			set("/d/k0"), set("/d/k1"), set("/d/k2"), set("/d/k3"), set("/d/k4"), set("/d/k5"), set("/d/k6"),
			{"PUT", "/d/new/k", url.Values{"value": {"v"}, "prevExist": {"false"}}, translate.ActionCreate},
		}, 1},
		{"journaled writes, and two sets apart", []write{
			{"PUT", "/d/k0", url.Values{"value": {"new"}, "prevValue": {"old"}}, translate.ActionCompareAndSwap},
			set("/d/k4"),
			{"PUT", "/d/k1", url.Values{"value": {"new"}, "prevExist": {"true"}}, translate.ActionUpdate},
			{"PUT", "/d/k2", url.Values{"value": {"new"}, "ttl": {"30"}}, translate.ActionSet},
			// Another TTL, so another lease: two writes that would each
			// put the record of one new lease never share a transaction.
			{"PUT", "/d/new/k", url.Values{"value": {"v"}, "prevExist": {"false"}, "ttl": {"40"}}, translate.ActionCreate},
			{"DELETE", "/d/k3", url.Values{"prevValue": {"old"}}, translate.ActionCompareAndDelete},
			{"PUT", "/d/sub", url.Values{"dir": {"true"}}, translate.ActionSet},
			set("/d/k5"),
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkSharedTransactions(t, tc.batches, func(t *testing.T) []*translate.Request {
				var reqs []*translate.Request
				for _, w := range tc.writes {
					reqs = append(reqs, request(t, w.method, w.path, w.form))
				}
				return reqs
			}, func(i int) string { return tc.writes[i].action })
		})
	}
}

// checkSharedTransactions writes /d/k0../d/k6 and /d/first, holds a write
// of /d/first in flight while the writes of reqs queue, lets it go, and
// checks what the writes answered, what a watcher of /d saw and what reads
// show.
func checkSharedTransactions(t *testing.T, batches int, reqs func(*testing.T) []*translate.Request, action func(int) string) {
	b, ic := batchBackend(t, "/d/k0", "/d/k1", "/d/k2", "/d/k3", "/d/k4", "/d/k5", "/d/k6", "/d/first")
	ctx := context.Background()
	w, _, err := b.Watch(ctx, request(t, "GET", "/d", url.Values{"wait": {"true"}, "recursive": {"true"}, "stream": {"true"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cancel()

	rs := reqs(t)
	n := len(rs)
	got := behindAHeldWrite(t, b, ic, request(t, "PUT", "/d/first", url.Values{"value": {"f"}}), rs)

	if v := counterValue(t, b.metrics.writeBatches); v != float64(batches) {
		t.Errorf("%v transactions of several writes, want %d", v, batches)
	}
	if v := counterValue(t, b.metrics.batchedWrites); v != float64(n) {
		t.Errorf("%v batched writes, want %d", v, n)
	}
	byKey := map[string]uint64{}
	perRev := map[int64][]uint64{}
	for i, r := range got {
		if r.err != nil {
			t.Fatalf("write %d: %v", i, r.err)
		}
		if r.ev.Action != action(i) {
			t.Errorf("write %d (%s) answered %s, want %s", i, r.ev.Node.Key, r.ev.Action, action(i))
		}
		idx := r.ev.Node.ModifiedIndex
		if r.ev.EtcdIndex != idx {
			t.Errorf("write %d: X-Etcd-Index %d, want its own index %d", i, r.ev.EtcdIndex, idx)
		}
		if r.ev.Action == translate.ActionSet || r.ev.Action == translate.ActionCreate {
			if r.ev.Node.CreatedIndex != idx { // v2's set makes a new node
				t.Errorf("write %d created %s at %d, modified at %d", i, r.ev.Node.Key, r.ev.Node.CreatedIndex, idx)
			}
		}
		byKey[r.ev.Node.Key] = idx
		perRev[translate.Revision(idx)] = append(perRev[translate.Revision(idx)], idx)
	}
	// The batch's order is the queue's: the writes of one revision take
	// its last indexes, one each.
	for rev, idxs := range perRev {
		seen := map[uint64]bool{}
		for _, idx := range idxs {
			if seen[idx] || idx < translate.EventIndex(rev, 0, len(idxs)) || idx > translate.Index(rev) {
				t.Errorf("revision %d: indexes %v, want each of its last %d once", rev, idxs, len(idxs))
				break
			}
			seen[idx] = true
		}
	}

	// The watcher sees the first write, then every batched one with the
	// action and index its write answered.
	seen := map[string]bool{}
	timeout := time.After(10 * time.Second)
	for len(seen) < n+1 {
		select {
		case ev := <-w.Events():
			seen[ev.Node.Key] = true
			if want, ok := byKey[ev.Node.Key]; ok && ev.Node.ModifiedIndex != want {
				t.Errorf("watch event %s %s at %d, its write answered %d", ev.Action, ev.Node.Key, ev.Node.ModifiedIndex, want)
			}
		case <-timeout:
			t.Fatalf("watch saw %v, want %d events", seen, n+1)
		}
	}
	// A read shows each key at its own index, as its write answered, and
	// the directory a create made at the create's.
	byKey["/d/new"] = byKey["/d/new/k"]
	for i, r := range got {
		k := r.ev.Node.Key
		if r.ev.Action == translate.ActionCompareAndDelete {
			continue
		}
		ev, _, err := b.Get(ctx, request(t, "GET", k, nil))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Node.ModifiedIndex != byKey[k] {
			t.Errorf("GET %s: modifiedIndex %d, its write answered %d", k, ev.Node.ModifiedIndex, byKey[k])
		}
		if action(i) == translate.ActionCreate && ev.Node.CreatedIndex != byKey[k] {
			t.Errorf("GET %s: createdIndex %d, want %d", k, ev.Node.CreatedIndex, byKey[k])
		}
	}
	if idx, ok := byKey["/d/new/k"]; ok {
		if ev, _, err := b.Get(ctx, request(t, "GET", "/d/new", nil)); err != nil || ev.Node.ModifiedIndex != idx ||
			ev.Node.CreatedIndex != idx {
			t.Errorf("GET /d/new: %+v, %v; want the index of the create below it, %d", ev.Node, err, idx)
		}
	}
	// prevIndex taken from a write's answer matches.
	if _, _, err := b.Write(ctx, request(t, "PUT", "/d/k1", url.Values{"value": {"w"}, "prevIndex": {fmt.Sprint(byKey["/d/k1"])}})); err != nil {
		t.Errorf("compare-and-swap on the batched write's index: %v", err)
	}
}

// TestBatchedWritesDecideAsIfSentOneAfterTheOther: two writes that depend
// on each other (a file, and a file below it) never share a transaction,
// whose compares etcd evaluates before any of its writes: exactly one of
// them succeeds, as when they are sent one after the other.
func TestBatchedWritesDecideAsIfSentOneAfterTheOther(t *testing.T) {
	b, ic := batchBackend(t)
	ctx := context.Background()
	for round := range 3 {
		// The directory exists, so the two writes have no key to write
		// in common (a marker both would create): only their compares
		// and writes cross.
		if _, _, err := b.Write(ctx, request(t, "PUT", fmt.Sprintf("/c%d", round), url.Values{"dir": {"true"}})); err != nil {
			t.Fatal(err)
		}
		p := fmt.Sprintf("/c%d/f", round)
		create := url.Values{"prevExist": {"false"}}
		reqs := []*translate.Request{request(t, "PUT", p, create), request(t, "PUT", p+"/g", create)}
		if round == 1 { // the other order
			reqs[0], reqs[1] = reqs[1], reqs[0]
		}
		got := behindAHeldWrite(t, b, ic, request(t, "PUT", fmt.Sprintf("/other%d", round), create), reqs)
		ok := 0
		for _, r := range got {
			var verr *translate.Error
			switch {
			case r.err == nil:
				ok++
			case errors.As(r.err, &verr) && (verr.Code == translate.EcodeNotDir || verr.Code == translate.EcodeNodeExist):
			default:
				t.Fatalf("round %d: %v", round, r.err)
			}
		}
		if ok != 1 {
			t.Errorf("round %d: %d of the two writes succeeded (%v, %v), want 1", round, ok, got[0].err, got[1].err)
		}
		if n := counterValue(t, b.metrics.writeBatches); n != 0 {
			t.Errorf("round %d: %v batched transactions, want none (the writes conflict)", round, n)
		}
	}
}

func TestBatchAdmitsOnlyWritesThatTouchNothingTheBatchTouches(t *testing.T) {
	l, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	put := func(k string) translate.Op { return translate.Op{Type: translate.OpPut, Key: k} }
	cmp := func(k string) translate.Cmp { return translate.Cmp{Key: k, Target: translate.CmpMod, Result: "="} }
	rng := func(k, end string) translate.Cmp {
		return translate.Cmp{Key: k, End: end, Target: translate.CmpCreate, Result: "="}
	}
	first := &translate.Plan{Cmps: []translate.Cmp{cmp("/a"), rng("/a/", "/a0")}, Ops: []translate.Op{put("/a"), put("m/a")}}
	for _, tc := range []struct {
		name string
		plan *translate.Plan
		want bool
	}{
		{"disjoint keys", &translate.Plan{Cmps: []translate.Cmp{cmp("/b")}, Ops: []translate.Op{put("/b")}}, true},
		{"compares what the batch only compares", &translate.Plan{Cmps: []translate.Cmp{cmp("/b"), cmp("/a/")}, Ops: []translate.Op{put("/b")}}, true},
		{"writes a key the batch writes", &translate.Plan{Cmps: []translate.Cmp{cmp("/b")}, Ops: []translate.Op{put("/b"), put("m/a")}}, false},
		{"compares a key the batch writes", &translate.Plan{Cmps: []translate.Cmp{cmp("/a")}, Ops: []translate.Op{put("/b")}}, false},
		{"writes a key the batch compares", &translate.Plan{Cmps: []translate.Cmp{cmp("/b")}, Ops: []translate.Op{put("/b"), put("/a")}}, false},
		{"writes into a range the batch compares", &translate.Plan{Cmps: []translate.Cmp{cmp("/a/x")}, Ops: []translate.Op{put("/a/x")}}, false},
		{"compares a range the batch writes into", &translate.Plan{Cmps: []translate.Cmp{rng("/", "0")}, Ops: []translate.Op{put("/c")}}, false},
		{"deletes a range", &translate.Plan{Ops: []translate.Op{{Type: translate.OpDelete, Key: "/z/", End: "/z0"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k batchKeys
			if !k.admit(l, first) {
				t.Fatal("an empty batch refused its first write")
			}
			if got := k.admit(l, tc.plan); got != tc.want {
				t.Errorf("admit = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAWriteThatAdmitsNoOtherGoesAlone: a recursive delete (a range no
// other write may share a transaction with) at the head of the queue goes
// alone, and the writes behind it in the next transaction; none waits out
// its deadline.
func TestAWriteThatAdmitsNoOtherGoesAlone(t *testing.T) {
	ep := startMember(t, nil)
	ic := &interceptor{}
	b := newBackendWith(t, ep, func(c *Config) {
		c.DialOptions = []grpc.DialOption{ic.option()}
		c.RequestTimeout = 3 * time.Second
	})
	ctx := context.Background()
	for _, k := range []string{"/r/a/x", "/s", "/t", "/first"} {
		if _, _, err := b.Write(ctx, request(t, "PUT", k, url.Values{"value": {"old"}})); err != nil {
			t.Fatal(err)
		}
	}
	held, release := holdFirstTxn(ic)
	done := make(chan error, 4)
	write := func(method, p string, form url.Values) {
		go func() {
			_, _, err := b.Write(ctx, request(t, method, p, form))
			done <- err
		}()
	}
	write("PUT", "/first", url.Values{"value": {"f"}})
	<-held
	write("DELETE", "/r", url.Values{"recursive": {"true"}})
	queued(t, b, 1)
	write("PUT", "/s", url.Values{"value": {"new"}})
	write("PUT", "/t", url.Values{"value": {"new"}})
	queued(t, b, 3)
	close(release)
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if v := counterValue(t, b.metrics.writeBatches); v != 1 {
		t.Errorf("%v transactions of several writes, want 1 (the two sets)", v)
	}
}

// isBatch reports whether req is a transaction of nested ones (a batch).
func isBatch(req any) bool {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	return ok && len(txn.Success) > 0 && txn.Success[0].GetRequestTxn() != nil
}

// TestABatchWhoseOutcomeIsUnknownIsNotSentAgain: when a batch fails in a
// way that does not tell whether etcd applied it (its answer lost, a
// timeout inside etcd), its writes fail as a write alone would; none is
// sent again, which would apply it twice (two events for one set) or
// answer a create that succeeded with "node exists".
func TestABatchWhoseOutcomeIsUnknownIsNotSentAgain(t *testing.T) {
	b, ic := batchBackend(t, "/d/b", "/first")
	var batched, after atomic.Int64
	ic.after = func(method string, req any, err error) error {
		txn, ok := req.(*etcdserverpb.TxnRequest)
		switch {
		case method != "/etcdserverpb.KV/Txn" || !ok:
		case isBatch(req):
			batched.Add(1)
			if err == nil {
				return rpctypes.ErrGRPCTimeout // applied, but the writer cannot know
			}
		case len(txn.Compare) > 0 && batched.Load() > 0:
			after.Add(1)
		}
		return err
	}
	reqs := []*translate.Request{
		request(t, "PUT", "/d/a", url.Values{"value": {"v"}, "prevExist": {"false"}}),
		request(t, "PUT", "/d/b", url.Values{"value": {"new"}}),
	}
	got := behindAHeldWrite(t, b, ic, request(t, "PUT", "/first", url.Values{"value": {"f"}}), reqs)
	ic.armed.Store(false)
	if batched.Load() != 1 {
		t.Fatalf("%d batches sent, want 1", batched.Load())
	}
	for i, r := range got {
		var verr *translate.Error
		switch {
		case r.err == nil:
			t.Errorf("write %d answered %s at %d: it was sent again", i, r.ev.Action, r.ev.Node.ModifiedIndex)
		case errors.As(r.err, &verr):
			t.Errorf("write %d answered v2 error %d (%s): it was decided again", i, verr.Code, verr.Cause)
		}
	}
	if n := after.Load(); n != 0 {
		t.Errorf("%d guarded transactions sent after the batch, want none", n)
	}
}

// TestAPanicWhileSendingABatchStrandsNoWrite: the writer sending a batch
// panics (a bug, recovered by the HTTP server): the other writes of its
// batch fail at once rather than wait for an answer that never comes, and
// the writes after them are still sent.
func TestAPanicWhileSendingABatchStrandsNoWrite(t *testing.T) {
	b, ic := batchBackend(t, "/s", "/t", "/u", "/first")
	ctx := context.Background()
	hold := &interceptor{}
	held, release := holdFirstTxn(hold)
	var panicked atomic.Bool
	ic.before = func(ctx context.Context, method string, req any) {
		if isBatch(req) && !panicked.Swap(true) {
			panic("test: sending a batch")
		}
		hold.before(ctx, method, req)
	}
	ic.armed.Store(true)
	type result struct {
		err       error
		recovered any
	}
	write := func(p string) <-chan result {
		out := make(chan result, 1)
		go func() {
			var r result
			defer func() {
				r.recovered = recover()
				out <- r
			}()
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, _, r.err = b.Write(wctx, request(t, "PUT", p, url.Values{"value": {"new"}}))
		}()
		return out
	}
	first := write("/first")
	<-held
	s := write("/s")
	queued(t, b, 1)
	tt := write("/t")
	queued(t, b, 2)
	close(release)
	if r := <-first; r.err != nil || r.recovered != nil {
		t.Fatalf("the first write: %v, %v", r.err, r.recovered)
	}
	recv := func(c <-chan result) result {
		select {
		case r := <-c:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("a write of the batch never returned")
			return result{}
		}
	}
	leader, other := recv(s), recv(tt)
	if leader.recovered == nil {
		leader, other = other, leader
	}
	if leader.recovered == nil || !panicked.Load() {
		t.Fatal("no write sent the batch")
	}
	if other.err == nil || errors.Is(other.err, context.DeadlineExceeded) {
		t.Errorf("the other write of the batch: %v, want an error at once", other.err)
	}
	start := time.Now()
	if _, _, err := b.Write(ctx, request(t, "PUT", "/u", url.Values{"value": {"new"}})); err != nil {
		t.Errorf("a write after the batch: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a write after the batch took %v", d)
	}
}

// TestWritesDecidedOnAReadOfTheMemberKeepTheBatchedIndexes: a write
// decided on a snapshot read from the member (after a conflict, or while
// the mirror cannot say) answers with the indexes the batched writes before
// it answered and their watchers saw — prevNode's modifiedIndex, the
// node's createdIndex — not with their revision's, and its watchers see
// the same.
func TestWritesDecidedOnAReadOfTheMemberKeepTheBatchedIndexes(t *testing.T) {
	b, ic := batchBackend(t, "/first")
	ctx := context.Background()
	// The directory exists: the creates below have no marker to write in
	// common, and share a transaction.
	if _, _, err := b.Write(ctx, request(t, "PUT", "/n", url.Values{"dir": {"true"}})); err != nil {
		t.Fatal(err)
	}
	w, _, err := b.Watch(ctx, request(t, "GET", "/n", url.Values{"wait": {"true"}, "recursive": {"true"}, "stream": {"true"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cancel()
	create := url.Values{"value": {"v"}, "prevExist": {"false"}}
	reqs := []*translate.Request{request(t, "PUT", "/n/a", create), request(t, "PUT", "/n/b", create),
		request(t, "PUT", "/n/c", create)}
	created := map[string]uint64{}
	for i, r := range behindAHeldWrite(t, b, ic, request(t, "PUT", "/first", url.Values{"value": {"f"}}), reqs) {
		if r.err != nil {
			t.Fatalf("write %d: %v", i, r.err)
		}
		created[r.ev.Node.Key] = r.ev.Node.ModifiedIndex
	}
	// The two keys whose creates did not take their revision's own index
	// (the first two of the batch, in queue order).
	var inside []string
	for _, k := range []string{"/n/a", "/n/b", "/n/c"} {
		if created[k] != translate.Index(translate.Revision(created[k])) {
			inside = append(inside, k)
		}
	}
	if len(inside) != 2 {
		t.Fatalf("the creates were not batched: %v", created)
	}
	// The watcher has seen the creates: the mirror has them.
	for range reqs {
		select {
		case <-w.Events():
		case <-time.After(10 * time.Second):
			t.Fatal("no watch event for the creates")
		}
	}

	b.mirror.invalidate() // the writes below decide on reads of the member
	answers := map[string]*translate.Event{}
	for _, r := range []*translate.Request{
		request(t, "DELETE", inside[0], nil),
		request(t, "PUT", inside[1], url.Values{"value": {"w"}, "prevValue": {"v"}}),
	} {
		ev, _, err := b.Write(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		answers[ev.Node.Key] = ev
		if ev.PrevNode == nil || ev.PrevNode.ModifiedIndex != created[ev.Node.Key] || ev.Node.CreatedIndex != created[ev.Node.Key] {
			t.Errorf("%s %s answered prevNode %+v, createdIndex %d; want both at %d, as its create answered", ev.Action,
				ev.Node.Key, ev.PrevNode, ev.Node.CreatedIndex, created[ev.Node.Key])
		}
	}
	for range answers {
		select {
		case ev := <-w.Events():
			want := answers[ev.Node.Key]
			if want == nil || ev.PrevNode == nil || ev.PrevNode.ModifiedIndex != want.PrevNode.ModifiedIndex ||
				ev.Node.CreatedIndex != want.Node.CreatedIndex {
				t.Errorf("watch event %s %s: prevNode %+v, createdIndex %d; its write answered %+v", ev.Action, ev.Node.Key,
					ev.PrevNode, ev.Node.CreatedIndex, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no watch event for the writes")
		}
	}
}

// TestDeepWritesShareTransactionsEtcdAccepts: etcd allows a transaction
// nested in one only what the outer one leaves of --max-txn-ops (128 less
// the outer one's operations), and a deep write compares two keys per
// ancestor: a batch of many deep writes is made no larger than etcd
// accepts, rather than refused and its writes sent one by one.
func TestDeepWritesShareTransactionsEtcdAccepts(t *testing.T) {
	b, ic := batchBackend(t, "/first")
	ctx := context.Background()
	dir := ""
	for i := range 40 { // 40 ancestors: 81 compares a write
		dir += fmt.Sprintf("/%d", i)
	}
	const n = 50
	var reqs []*translate.Request
	for i := range n {
		p := fmt.Sprintf("%s/f%d", dir, i)
		if _, _, err := b.Write(ctx, request(t, "PUT", p, url.Values{"value": {"old"}})); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, request(t, "PUT", p, url.Values{"value": {"new"}}))
	}
	var refused atomic.Int64
	ic.after = func(method string, req any, err error) error {
		if isBatch(req) && err != nil {
			refused.Add(1)
			t.Logf("batch refused: %v", err)
		}
		return err
	}
	for i, r := range behindAHeldWrite(t, b, ic, request(t, "PUT", "/first", url.Values{"value": {"f"}}), reqs) {
		if r.err != nil {
			t.Fatalf("write %d: %v", i, r.err)
		}
	}
	ic.armed.Store(false)
	if v := refused.Load(); v != 0 {
		t.Errorf("etcd refused %d batches", v)
	}
	if v := counterValue(t, b.metrics.writeBatches); v < 2 {
		t.Errorf("%v transactions of several writes, want at least 2", v)
	}
}

// TestWritesDoNotWaitLongForAStuckTransaction: while the transaction in
// flight gets no answer (a member without a leader), the writes behind it
// stop waiting for it after maxQueueWait and go alone.
func TestWritesDoNotWaitLongForAStuckTransaction(t *testing.T) {
	b, ic := batchBackend(t, "/first", "/a", "/b")
	ctx := context.Background()
	held, release := holdFirstTxn(ic)
	first := make(chan error, 1)
	go func() {
		_, _, err := b.Write(ctx, request(t, "PUT", "/first", url.Values{"value": {"f"}}))
		first <- err
	}()
	<-held
	// The writes waiting when the transaction is found stuck, then those
	// that come while it still is.
	for round := range 2 {
		start := time.Now()
		for i, r := range writeAll(b, []*translate.Request{request(t, "PUT", "/a", url.Values{"value": {"new"}}),
			request(t, "PUT", "/b", url.Values{"value": {"new"}})}) {
			if r.err != nil {
				t.Errorf("round %d, write %d: %v", round, i, r.err)
			}
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("round %d: the writes behind a stuck transaction took %v", round, d)
		}
	}
	select {
	case err := <-first:
		t.Fatalf("the held write ended (%v) before it was let go", err)
	default:
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if v := counterValue(t, b.metrics.writeBatches); v != 0 {
		t.Errorf("%v transactions of several writes, want none (each went alone)", v)
	}
}
