// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// TestAWriteExpiresWhatItsSnapshotFindsExpired: with no expirer running, a
// write after a key's expiration finds it absent (a create succeeds, an
// update fails with 100) though etcd still holds its lease: the write
// revokes it first, so etcd's history has the key's deletion (its expire
// event) before the create.
func TestAWriteExpiresWhatItsSnapshotFindsExpired(t *testing.T) {
	tick := expiryTick
	expiryTick = time.Hour
	t.Cleanup(func() { expiryTick = tick })
	ep := startMember(t, nil)
	b := newBackend(t, ep, nil)
	ctx := context.Background()
	var exp time.Time
	var first int64
	for _, p := range []string{"/e/k", "/e/u"} {
		ev, _, err := b.Write(ctx, request(t, "PUT", p, url.Values{"value": {"v"}, "ttl": {"1"}}))
		if err != nil || ev.Node.Expiration == nil {
			t.Fatalf("TTL write of %s: %v %v", p, ev, err)
		}
		exp = *ev.Node.Expiration
		if first == 0 {
			first = int64(ev.Node.ModifiedIndex / translate.IndexesPerRevision)
		}
	}
	time.Sleep(time.Until(exp.Add(20 * time.Millisecond)))

	ev, _, err := b.Write(ctx, request(t, "PUT", "/e/k", url.Values{"value": {"new"}, "prevExist": {"false"}}))
	if err != nil || ev.Action != translate.ActionCreate || ev.PrevNode != nil || *ev.Node.Value != "new" {
		t.Fatalf("create over the expired key: %+v %v", ev, err)
	}
	created := int64(ev.Node.ModifiedIndex / translate.IndexesPerRevision)
	_, _, err = b.Write(ctx, request(t, "PUT", "/e/u", url.Values{"value": {"x"}, "prevExist": {"true"}}))
	var verr *translate.Error
	if !errors.As(err, &verr) || verr.Code != translate.EcodeKeyNotFound || verr.Cause != "/e/u" {
		t.Fatalf("update of the expired key: %v, want 100 on /e/u", err)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var deleted int64
	for resp := range cli.Watch(wctx, "/e/k", clientv3.WithRev(first+1)) {
		for _, e := range resp.Events {
			if e.Type == mvccpb.DELETE && deleted == 0 {
				deleted = e.Kv.ModRevision
			}
			if e.Type == mvccpb.PUT && e.Kv.ModRevision == created {
				cancel()
			}
		}
	}
	if deleted == 0 || deleted >= created {
		t.Errorf("the expired key deleted at revision %d, created again at %d: want its deletion first", deleted, created)
	}
}
