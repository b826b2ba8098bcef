// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
)

// countingKV answers every get at revision rev and notes the last one.
type countingKV struct {
	clientv3.KV
	rev  int64
	last clientv3.Op
	dl   bool // the get had a deadline
}

func (k *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	k.last = clientv3.OpGet(key, opts...)
	_, k.dl = ctx.Deadline()
	return &clientv3.GetResponse{Header: &pb.ResponseHeader{Revision: k.rev}}, nil
}

func TestV3IndexIsTheIndexOfTheRevisionACountOnlyReadSees(t *testing.T) {
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	kv := &countingKV{rev: 57}
	idx, err := countIndex(kv, layout, time.Second)(context.Background())
	if err != nil || idx != translate.Index(57) {
		t.Fatalf("index %d (%v), want %d", idx, err, translate.Index(57))
	}
	if !kv.last.IsCountOnly() || kv.last.IsSerializable() || kv.last.RangeBytes() != nil || !kv.dl {
		t.Errorf("the read: count-only %v, serializable %v, range end %q, deadline %v; want a linearizable count-only "+
			"read of one key with a deadline", kv.last.IsCountOnly(), kv.last.IsSerializable(), kv.last.RangeBytes(), kv.dl)
	}
}
