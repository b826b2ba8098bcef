// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestConnMovesWithTheSession: a Conn's calls go to the live session; its
// watches and lease renewals end when the session is lost, Live tells each
// change, and on the next session the calls work again (the lease lived
// on); while none is live every call fails at once with ErrUnavailable.
func TestConnMovesWithTheSession(t *testing.T) {
	ep, stop := startEtcd(t, nil)
	b := newBackend(t, ep, nil)
	c := b.Conn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	up, changed := c.Live()
	if !up {
		t.Fatal("Live: not up on a connected backend")
	}
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get: %+v, %v", resp, err)
	}
	tr, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Value("k"), "=", "v")).Then(clientv3.OpPut("k", "w")).Commit()
	if err != nil || !tr.Succeeded {
		t.Fatalf("Txn: %+v, %v", tr, err)
	}
	g, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := c.KeepAlive(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	wch := c.Watch(ctx, "k", clientv3.WithCreatedNotify())
	if wr := <-wch; !wr.Created {
		t.Fatalf("watch: %+v", wr)
	}

	s, _ := b.client()
	b.lose(s, "the test")
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("Live's channel not closed at the loss")
	}
	for wr := range wch {
		if len(wr.Events) > 0 {
			t.Fatalf("an event after the loss: %+v", wr)
		}
	}
	for ok := true; ok; { // drained: closed at the loss
		_, ok = <-kept
	}
	for up, changed := c.Live(); !up; up, changed = c.Live() {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("no session again")
		}
	}
	if _, err := c.KeepAliveOnce(ctx, g.ID); err != nil {
		t.Errorf("the lease on the next session: %v", err)
	}
	resp, err = c.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "w" {
		t.Fatalf("Get on the next session: %+v, %v", resp, err)
	}

	stop() // the member gone: no session again
	for up, changed := c.Live(); up; up, changed = c.Live() {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("the stopped member's session is not lost")
		}
	}
	if _, err := c.Get(ctx, "k"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Get without a session: %v, want ErrUnavailable", err)
	}
	if _, err := c.Txn(ctx).Then(clientv3.OpPut("k", "x")).Commit(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Txn without a session: %v, want ErrUnavailable", err)
	}
	if _, err := c.KeepAlive(ctx, g.ID); !errors.Is(err, ErrUnavailable) {
		t.Errorf("KeepAlive without a session: %v, want ErrUnavailable", err)
	}
	if _, ok := <-c.Watch(ctx, "k"); ok {
		t.Error("Watch without a session: a channel that is not closed")
	}
}
