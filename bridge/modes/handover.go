// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"context"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/v3backend"
)

// handover is the etcd v3 client of a dual-mode bridge's auth, member list
// and agent: the control client until the v3 side connects (the v2 server
// is served meanwhile), then the v3 side's checked session
// (v3backend.Conn), so that from then on they move with the bridge's
// member, as a v3-mode bridge's do. Its watches and lease keep-alives on
// the control client end at the handover: no stream stays on a member the
// session does not check. Unary calls have deadlines of their own.
type handover struct {
	ctl  *clientv3.Client
	conn atomic.Pointer[v3backend.Conn] // nil until the handover
	// moved ends at the handover, after conn is set.
	moved  context.Context
	toConn context.CancelFunc
}

var _ etcdClient = (*handover)(nil)

func newHandover(ctl *clientv3.Client) *handover {
	h := &handover{ctl: ctl}
	h.moved, h.toConn = context.WithCancel(context.Background())
	return h
}

// to hands every call over to conn, once.
func (h *handover) to(conn v3backend.Conn) {
	h.conn.Store(&conn)
	h.toConn()
}

// client is the client a call made now goes to.
func (h *handover) client() etcdClient {
	if c := h.conn.Load(); c != nil {
		return *c
	}
	return h.ctl
}

// Live is the session's Live once handed over; until then the control
// client counts as up, and the handover as a change.
func (h *handover) Live() (bool, <-chan struct{}) {
	if c := h.conn.Load(); c != nil {
		return c.Live()
	}
	return true, h.moved.Done()
}

// stream is ctx, ended also at the handover, for a stream on the control
// client.
func (h *handover) stream(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(h.moved, cancel)
	context.AfterFunc(ctx, func() { stop() }) // nothing stays registered once the stream ends
	return ctx
}

func (h *handover) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	return h.client().Put(ctx, key, val, opts...)
}

func (h *handover) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return h.client().Get(ctx, key, opts...)
}

func (h *handover) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	return h.client().Delete(ctx, key, opts...)
}

func (h *handover) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	return h.client().Compact(ctx, rev, opts...)
}

func (h *handover) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	return h.client().Do(ctx, op)
}

func (h *handover) Txn(ctx context.Context) clientv3.Txn { return h.client().Txn(ctx) }

// Watch implements clientv3.Watcher: on the control client, the watch ends
// at the handover, and its follower watches again on the session.
func (h *handover) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	if c := h.conn.Load(); c != nil {
		return c.Watch(ctx, key, opts...)
	}
	return h.ctl.Watch(h.stream(ctx), key, opts...)
}

func (h *handover) RequestProgress(ctx context.Context) error {
	return h.client().RequestProgress(ctx)
}

// Close implements clientv3.Watcher and clientv3.Lease: the clients are
// closed by their owners.
func (h *handover) Close() error { return nil }

func (h *handover) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	return h.client().Grant(ctx, ttl)
}

func (h *handover) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	return h.client().Revoke(ctx, id)
}

func (h *handover) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	return h.client().TimeToLive(ctx, id, opts...)
}

func (h *handover) Leases(ctx context.Context) (*clientv3.LeaseLeasesResponse, error) {
	return h.client().Leases(ctx)
}

// KeepAlive implements clientv3.Lease: on the control client, the
// keep-alive ends at the handover.
func (h *handover) KeepAlive(ctx context.Context, id clientv3.LeaseID) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	if c := h.conn.Load(); c != nil {
		return c.KeepAlive(ctx, id)
	}
	return h.ctl.KeepAlive(h.stream(ctx), id)
}

func (h *handover) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	return h.client().KeepAliveOnce(ctx, id)
}
