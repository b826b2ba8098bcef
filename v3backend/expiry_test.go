// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
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

// TestAnExpiredDirectorysRemainsAreGoneBeforeItsSweep: once a TTL
// directory's lease is revoked, which takes its marker but not what is
// below it, and before the sweep of that (held back here, on both
// bridges), no read on either bridge finds the directory or anything that
// was below it, and a write finds them absent: an update below fails with
// 100, the directory is created again empty, and a directory that only
// held the expired one is empty.
func TestAnExpiredDirectorysRemainsAreGoneBeforeItsSweep(t *testing.T) {
	tick := expiryTick
	expiryTick = time.Hour
	t.Cleanup(func() { expiryTick = tick })
	ep := startMember(t, nil)
	type writeKey struct{}
	var hold atomic.Pointer[chan struct{}] // the feeds' sweeps wait for it to close
	reached := make(chan struct{}, 2)
	ic := &interceptor{}
	ic.before = func(ctx context.Context, method string, req any) {
		txn, ok := req.(*etcdserverpb.TxnRequest)
		if !ok || len(txn.Compare) != 1 || txn.Compare[0].Target != etcdserverpb.Compare_CREATE || ctx.Value(writeKey{}) != nil {
			return
		}
		if h := hold.Load(); h != nil {
			reached <- struct{}{}
			select {
			case <-*h:
			case <-ctx.Done():
			}
		}
	}
	ic.armed.Store(true)
	a := newBackend(t, ep, ic)
	b := newBackend(t, ep, ic)
	release := func() {
		if h := hold.Swap(nil); h != nil {
			close(*h)
		}
	}
	t.Cleanup(release)
	ctx := context.WithValue(context.Background(), writeKey{}, true)
	write := func(method, p string, f url.Values) (*translate.Event, error) {
		t.Helper()
		ev, _, err := a.Write(ctx, request(t, method, p, f))
		return ev, err
	}
	for _, w := range []struct {
		p string
		f url.Values
	}{
		{"/t/k", url.Values{"value": {"k"}}},
		{"/t/d", url.Values{"dir": {"true"}, "ttl": {"100"}}},
		{"/t/d/c", url.Values{"value": {"c"}}},
		{"/t/d/e/f", url.Values{"value": {"f"}}},
		{"/p/q", url.Values{"dir": {"true"}, "ttl": {"200"}}},
		{"/p/q/x", url.Values{"value": {"x"}}},
	} {
		if _, err := write("PUT", w.p, w.f); err != nil {
			t.Fatalf("PUT %s: %v", w.p, err)
		}
	}
	get := func(be *Backend, p string, recursive bool) (*translate.Event, error) {
		t.Helper()
		f := url.Values{"quorum": {"true"}}
		if recursive {
			f.Set("recursive", "true")
		}
		ev, _, err := be.Get(ctx, request(t, "GET", p, f))
		return ev, err
	}
	before, err := get(a, "/t", true)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	// expire revokes dir's lease with the feeds' sweeps held back; it
	// reports the revoke's revision.
	expire := func(dir string) int64 {
		t.Helper()
		m, err := cli.Get(ctx, a.layout.MarkerKey(dir))
		if err != nil || len(m.Kvs) != 1 || m.Kvs[0].Lease == 0 {
			t.Fatalf("the marker of %s: %v %v", dir, m, err)
		}
		h := make(chan struct{})
		hold.Store(&h)
		resp, err := cli.Revoke(ctx, clientv3.LeaseID(m.Kvs[0].Lease))
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			select {
			case <-reached:
			case <-time.After(10 * time.Second):
				t.Fatal("no sweep of the expired directory")
			}
		}
		return resp.Header.Revision
	}

	rev := expire("/t/d")
	want := *before.Node
	want.Nodes = slices.DeleteFunc(slices.Clone(want.Nodes), func(n *translate.Node) bool { return n.Key == "/t/d" })
	if len(want.Nodes) != 1 {
		t.Fatalf("before the expiry: %+v", before.Node)
	}
	wantListing := &translate.Event{Action: translate.ActionGet, Node: &want, EtcdIndex: translate.Index(rev)}
	shallow := want
	shallow.Nodes = []*translate.Node{{Key: "/t/k", Value: want.Nodes[0].Value,
		ModifiedIndex: want.Nodes[0].ModifiedIndex, CreatedIndex: want.Nodes[0].CreatedIndex}}
	for name, be := range map[string]*Backend{"a": a, "b": b} {
		for _, p := range []string{"/t/d", "/t/d/c", "/t/d/e", "/t/d/e/f"} {
			ev, err := get(be, p, true)
			var verr *translate.Error
			if !errors.As(err, &verr) || !reflect.DeepEqual(verr, translate.NewError(translate.EcodeKeyNotFound, "/t/d", translate.Index(rev))) {
				t.Errorf("bridge %s: GET %s: %s %v, want 100 on /t/d at %d", name, p, asJSON(ev), err, translate.Index(rev))
			}
		}
		if ev, err := get(be, "/t", true); err != nil || !reflect.DeepEqual(ev, wantListing) {
			t.Errorf("bridge %s: GET /t recursive: %s %v, want %s", name, asJSON(ev), err, asJSON(wantListing))
		}
		wantShallow := &translate.Event{Action: translate.ActionGet, Node: &shallow, EtcdIndex: translate.Index(rev)}
		if ev, err := get(be, "/t", false); err != nil || !reflect.DeepEqual(ev, wantShallow) {
			t.Errorf("bridge %s: GET /t: %s %v, want %s", name, asJSON(ev), err, asJSON(wantShallow))
		}
	}

	// Writes, the feeds' sweeps still held back.
	_, err = write("PUT", "/t/d/c", url.Values{"value": {"y"}, "prevExist": {"true"}})
	var verr *translate.Error
	if !errors.As(err, &verr) || verr.Code != translate.EcodeKeyNotFound || verr.Cause != "/t/d" {
		t.Errorf("update below the expired directory: %v, want 100 on /t/d", err)
	}
	ev, err := write("PUT", "/t/d", url.Values{"dir": {"true"}, "prevExist": {"false"}})
	if err != nil || ev.Action != translate.ActionCreate || ev.PrevNode != nil || ev.Node.Key != "/t/d" || !ev.Node.Dir {
		t.Fatalf("creating the expired directory again: %s %v", asJSON(ev), err)
	}
	created := ev.Node.ModifiedIndex
	ev, err = get(b, "/t/d", true)
	wantDir := &translate.Node{Key: "/t/d", Dir: true, ModifiedIndex: created, CreatedIndex: created}
	if err != nil || !reflect.DeepEqual(ev.Node, wantDir) {
		t.Errorf("the directory created again: %s %v, want %s", asJSON(ev), err, asJSON(wantDir))
	}
	release()

	expire("/p/q")
	ev, err = write("DELETE", "/p", url.Values{"dir": {"true"}})
	if err != nil || ev.Action != translate.ActionDelete || ev.Node.Key != "/p" || !ev.Node.Dir {
		t.Errorf("deleting the directory that held only the expired one: %s %v", asJSON(ev), err)
	}
	release()
}

// asJSON shows v (an event or a node) as a v2 client would see it.
func asJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
