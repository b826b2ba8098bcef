// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// historyKV is a KV with a history of values: each version of a key from
// the revision that put it to the one that deleted it (0: never). Only the
// read-only transactions of the lease lookups are served.
type historyKV struct {
	clientv3.KV
	head     int64
	versions map[string][]version
}

type version struct {
	value          string
	created, until int64
	lease          int64
}

func (h *historyKV) Txn(context.Context) clientv3.Txn { return &historyTxn{h: h} }

type historyTxn struct {
	h   *historyKV
	ops []clientv3.Op
}

func (t *historyTxn) If(...clientv3.Cmp) clientv3.Txn      { return t }
func (t *historyTxn) Else(...clientv3.Op) clientv3.Txn     { return t }
func (t *historyTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.ops = append(t.ops, ops...); return t }

func (t *historyTxn) Commit() (*clientv3.TxnResponse, error) {
	resp := &pb.TxnResponse{Header: &pb.ResponseHeader{Revision: t.h.head}, Succeeded: true}
	for _, op := range t.ops {
		if !op.IsGet() || len(op.RangeBytes()) > 0 {
			panic("historyKV serves point reads only")
		}
		at := op.Rev()
		if at == 0 {
			at = t.h.head
		}
		rr := &pb.RangeResponse{Header: resp.Header}
		for _, v := range t.h.versions[string(op.KeyBytes())] {
			if v.created <= at && (v.until == 0 || at < v.until) {
				rr.Kvs = []*mvccpb.KeyValue{{Key: op.KeyBytes(), Value: []byte(v.value), CreateRevision: v.created,
					ModRevision: v.created, Version: 1, Lease: v.lease}}
				rr.Count = 1
			}
		}
		resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}})
	}
	return (*clientv3.TxnResponse)(resp), nil
}

// goneLeases is a Lease API whose leases have all run out.
type goneLeases struct{ clientv3.Lease }

func (goneLeases) TimeToLive(context.Context, clientv3.LeaseID, ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	return &clientv3.LeaseTimeToLiveResponse{TTL: -1}, nil
}

// TestAnExpiredLeasesRecordIsReadAsOfTheRevisionBefore: the expiry of a
// key, decoded by a bridge that never had its lease in its cache (a replay
// of history, or a bridge started since), shows prevNode.expiration from
// the lease's record as of the revision before the expiry: the record went
// with the lease. A lease that had no record (a v3 client's) shows no
// expiration.
func TestAnExpiredLeasesRecordIsReadAsOfTheRevisionBefore(t *testing.T) {
	l, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	const bridgeLease, clientLease = 0x1234, 0x5678
	exp := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	kv := &historyKV{head: 12, versions: map[string][]version{
		// The bridge's record of its lease, put with the key at revision 5,
		// gone with the lease at revision 9.
		l.LeaseKey(bridgeLease): {{value: strconv.FormatInt(exp.UnixNano(), 10), created: 5, until: 9, lease: bridgeLease}},
	}}
	b := &Backend{layout: l, leases: newLeaseCache(), lg: zap.NewNop(), metrics: newMetrics(prometheus.NewRegistry())}
	s := &session{cli: &clientv3.Client{KV: kv, Lease: goneLeases{}}, ctx: context.Background()}

	for _, c := range []struct {
		name string
		rev  int64
		evs  []translate.V3Event
		want string
	}{
		{"a bridge's lease", 9, []translate.V3Event{
			{Delete: true, KV: translate.KV{Key: l.DataKey("/t"), ModRevision: 9},
				Prev: &translate.KV{Key: l.DataKey("/t"), Value: []byte("x"), CreateRevision: 5, ModRevision: 5, Lease: bridgeLease}},
			{Delete: true, KV: translate.KV{Key: l.LeaseKey(bridgeLease), ModRevision: 9},
				Prev: &translate.KV{Key: l.LeaseKey(bridgeLease), Value: []byte(strconv.FormatInt(exp.UnixNano(), 10)),
					CreateRevision: 5, ModRevision: 5, Lease: bridgeLease}},
		}, `{"action":"expire","node":{"key":"/t","modifiedIndex":9000000,"createdIndex":5000000},` +
			`"prevNode":{"key":"/t","value":"x","expiration":"2026-01-02T03:04:05.123456789Z",` +
			`"modifiedIndex":5000000,"createdIndex":5000000}}`},
		{"a v3 client's lease", 11, []translate.V3Event{
			{Delete: true, KV: translate.KV{Key: l.DataKey("/c"), ModRevision: 11},
				Prev: &translate.KV{Key: l.DataKey("/c"), Value: []byte("y"), CreateRevision: 10, ModRevision: 10, Lease: clientLease}},
		}, `{"action":"expire","node":{"key":"/c","modifiedIndex":11000000,"createdIndex":10000000},` +
			`"prevNode":{"key":"/c","value":"y","modifiedIndex":10000000,"createdIndex":10000000}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, sweeps := b.decodeRevision(s, c.rev, c.evs, leasedKVs(l, c.evs))
			var lines []string
			for _, ev := range out {
				lines = append(lines, strings.TrimSuffix(string(ev.JSON()), "\n"))
			}
			if got := strings.Join(lines, "\n"); got != c.want || len(sweeps) != 0 {
				t.Fatalf("revision %d decoded to\n%s\nsweeps %v; want\n%s", c.rev, got, sweeps, c.want)
			}
		})
	}
}

// keptAliveLeases is a Lease API whose one lease a v3 client keeps alive:
// each TimeToLive answers a longer TTL than the one before.
type keptAliveLeases struct {
	clientv3.Lease
	ttl atomic.Int64
}

func (k *keptAliveLeases) TimeToLive(context.Context, clientv3.LeaseID, ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	return &clientv3.LeaseTimeToLiveResponse{TTL: k.ttl.Add(100)}, nil
}

// TestAV3ClientsLeaseIsAskedAgainAfterABriefTrust: a key on a lease a v3
// client keeps alive shows an expiration the bridge asked etcd for, trusted
// for a second at most: later reads show the one the keep-alives moved.
func TestAV3ClientsLeaseIsAskedAgainAfterABriefTrust(t *testing.T) {
	l, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	const id = 0x5678
	leases := &keptAliveLeases{}
	b := &Backend{layout: l, leases: newLeaseCache(), lg: zap.NewNop(), metrics: newMetrics(prometheus.NewRegistry())}
	s := &session{cli: &clientv3.Client{KV: &historyKV{head: 12}, Lease: leases}, ctx: context.Background()}
	asked := time.Now()
	first := b.resolveLeases(context.Background(), s, []int64{id})
	again := b.resolveLeases(context.Background(), s, []int64{id})
	if !again[id].Equal(first[id]) && time.Since(asked) < nativeLeaseTrust {
		t.Fatalf("asked again at once, the expiration moved from %v to %v: not taken from the cache", first[id], again[id])
	}
	time.Sleep(nativeLeaseTrust + 100*time.Millisecond) // past the trust, whatever the machine's load
	later := b.resolveLeases(context.Background(), s, []int64{id})
	if got := later[id].Sub(first[id]); got < 100*time.Second {
		t.Fatalf("after %v, the expiration moved by %v, want by the keep-alives' 100 s or more", nativeLeaseTrust, got)
	}
}
