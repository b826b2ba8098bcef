// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// lookupsKV is a KV whose read-only transactions find nothing; it counts
// them.
type lookupsKV struct {
	clientv3.KV
	txns atomic.Int64
}

func (k *lookupsKV) Txn(context.Context) clientv3.Txn { k.txns.Add(1); return &emptyTxn{} }

type emptyTxn struct{ ops []clientv3.Op }

func (t *emptyTxn) If(...clientv3.Cmp) clientv3.Txn      { return t }
func (t *emptyTxn) Else(...clientv3.Op) clientv3.Txn     { return t }
func (t *emptyTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.ops = append(t.ops, ops...); return t }

func (t *emptyTxn) Commit() (*clientv3.TxnResponse, error) {
	resp := &pb.TxnResponse{Header: &pb.ResponseHeader{Revision: 30}, Succeeded: true}
	for range t.ops {
		resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: &pb.RangeResponse{}}})
	}
	return (*clientv3.TxnResponse)(resp), nil
}

// lookupsLeases is a Lease API whose leases have all run out; it counts
// the TimeToLive calls.
type lookupsLeases struct {
	clientv3.Lease
	calls atomic.Int64
}

func (l *lookupsLeases) TimeToLive(context.Context, clientv3.LeaseID, ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	l.calls.Add(1)
	return &clientv3.LeaseTimeToLiveResponse{TTL: -1}, nil
}

// TestDecodingABridgeWriteLooksUpNoJournalLease: the feed decodes the
// revision of a bridge write without a backend call, though its journal
// record is on a journal lease, which has no lease record and is in no
// cache: not live (the shared feed), nor from history, where the record's
// previous value is on a journal lease that has run out. Each lookup there
// held up the feed, and with it the mirror, behind the writes.
func TestDecodingABridgeWriteLooksUpNoJournalLease(t *testing.T) {
	l, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	kv, leases := &lookupsKV{}, &lookupsLeases{}
	b := &Backend{layout: l, leases: newLeaseCache(), lg: zap.NewNop(), metrics: newMetrics(prometheus.NewRegistry())}
	s := &session{cli: &clientv3.Client{KV: kv, Lease: leases}, ctx: context.Background()}

	// A compare-and-swap of /f (written at revision 4), its record on the
	// journal lease 0x77; the record of /f's last write, on the journal
	// lease 0x66, is there before it.
	const rev, journalLease, oldJournalLease = 21, 0x77, 0x66
	now := time.Now()
	f := &translate.KV{Key: l.DataKey("/f"), Value: []byte("1"), CreateRevision: 4, ModRevision: 4}
	oldRecord := &translate.KV{Key: l.RecordKey("/f"), Value: []byte(`{"action":"set","node":{"key":"/f"}}`),
		CreateRevision: 4, ModRevision: 4, Lease: oldJournalLease}
	req := translate.Request{Method: "PUT", Path: "/f", Value: "2", PrevValue: "1"}
	reads := l.SnapshotReads(req.Path, false)
	vals := make([]*translate.KV, len(reads))
	vals[0] = f
	p, verr := l.PlanWrite(&req, l.NewSnapshot(req.Path, 20, false, vals), nil, now)
	if verr != nil {
		t.Fatal(verr)
	}
	if !p.NeedsRecord() {
		t.Fatal("the write puts no journal record")
	}
	p.SetJournalLease(journalLease)
	p.Bind(0, time.Time{}, now, false)
	prev := map[string]*translate.KV{f.Key: f, oldRecord.Key: oldRecord}
	var live, history []translate.V3Event
	records := 0
	for _, o := range p.Ops {
		if o.Type != translate.OpPut {
			t.Fatalf("the write has an op %+v; this test puts only", o)
		}
		put := translate.KV{Key: o.Key, Value: o.Value, CreateRevision: rev, ModRevision: rev, Lease: o.Lease}
		if old := prev[o.Key]; old != nil {
			put.CreateRevision = old.CreateRevision
		}
		if o.Key == l.RecordKey("/f") {
			records++
			if o.Lease != journalLease {
				t.Fatalf("the journal record is on lease %d, want %d", o.Lease, journalLease)
			}
		}
		// The shared feed has the previous values from the mirror, which
		// keeps no journal record; a history feed has them from etcd.
		live = append(live, translate.V3Event{KV: put})
		if o.Key != l.RecordKey("/f") {
			live[len(live)-1].Prev = prev[o.Key]
		}
		history = append(history, translate.V3Event{KV: put, Prev: prev[o.Key]})
	}
	if records != 1 {
		t.Fatalf("the write puts %d journal records at %s, want 1", records, l.RecordKey("/f"))
	}
	want := strings.TrimSuffix(string(p.Result(rev).JSON()), "\n")
	for name, evs := range map[string][]translate.V3Event{"live": live, "from history": history} {
		t.Run(name, func(t *testing.T) {
			kv.txns.Store(0)
			leases.calls.Store(0)
			out, sweeps := b.decodeRevision(s, rev, evs, leasedKVs(l, evs))
			if len(out) != 1 || len(sweeps) != 0 {
				t.Fatalf("decoded %d events and sweeps %v, want 1 event", len(out), sweeps)
			}
			if got := strings.TrimSuffix(string(out[0].JSON()), "\n"); got != want {
				t.Errorf("decoded %s\nwant    %s", got, want)
			}
			if n, m := kv.txns.Load(), leases.calls.Load(); n != 0 || m != 0 {
				t.Errorf("decoding made %d transactions and %d TimeToLive calls, want none", n, m)
			}
		})
	}
}
