// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Conn is a clientv3 KV, Watcher and Lease over the bridge's checked
// session, for what follows etcd v3 beside the feed (the auth data, the
// registrations): each call goes to the member the session reaches and
// ends when that session is lost; while none is live, a call fails at once
// with ErrUnavailable, and a watch channel is closed at once. A follower on
// it needs no liveness of its own: it moves with the bridge's member, and
// Live tells it when to follow again.
type Conn struct{ b *Backend }

var (
	_ clientv3.KV      = Conn{}
	_ clientv3.Watcher = Conn{}
	_ clientv3.Lease   = Conn{}
)

// Conn is the client of the backend's checked session.
func (b *Backend) Conn() Conn { return Conn{b} }

// Live reports whether a session is live now, and returns a channel
// closed at the next change (a loss, a reconnection).
func (c Conn) Live() (up bool, changed <-chan struct{}) {
	s, ch := c.b.sessionChanged()
	return s != nil, ch
}

// on is the live session and ctx, ended also when that session is lost;
// cancel releases it.
func (c Conn) on(ctx context.Context) (*session, context.Context, context.CancelFunc, error) {
	s, err := c.b.client()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	context.AfterFunc(ctx, func() { stop() }) // nothing stays registered on the session
	return s, ctx, cancel, nil
}

// lost is err, or ErrUnavailable if s was lost meanwhile.
func lost(s *session, err error) error {
	if err != nil && s.ctx.Err() != nil {
		return ErrUnavailable
	}
	return err
}

// call runs f on the live session's client, bound to the session.
func call[T any](ctx context.Context, c Conn, f func(context.Context, *clientv3.Client) (T, error)) (T, error) {
	s, ctx, cancel, err := c.on(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	defer cancel()
	r, err := f(ctx, s.cli)
	return r, lost(s, err)
}

// Put implements clientv3.KV.
func (c Conn) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	return call(ctx, c, func(ctx context.Context, cli *clientv3.Client) (*clientv3.PutResponse, error) {
		return cli.Put(ctx, key, val, opts...)
	})
}

// Get implements clientv3.KV.
func (c Conn) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return call(ctx, c, func(ctx context.Context, cli *clientv3.Client) (*clientv3.GetResponse, error) {
		return cli.Get(ctx, key, opts...)
	})
}

// Delete implements clientv3.KV.
func (c Conn) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	return call(ctx, c, func(ctx context.Context, cli *clientv3.Client) (*clientv3.DeleteResponse, error) {
		return cli.Delete(ctx, key, opts...)
	})
}

// Compact implements clientv3.KV.
func (c Conn) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	return call(ctx, c, func(ctx context.Context, cli *clientv3.Client) (*clientv3.CompactResponse, error) {
		return cli.Compact(ctx, rev, opts...)
	})
}

// Do implements clientv3.KV.
func (c Conn) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	return call(ctx, c, func(ctx context.Context, cli *clientv3.Client) (clientv3.OpResponse, error) {
		return cli.Do(ctx, op)
	})
}

// Txn implements clientv3.KV: the session is chosen now, and Commit runs on
// it.
func (c Conn) Txn(ctx context.Context) clientv3.Txn {
	s, ctx, cancel, err := c.on(ctx)
	if err != nil {
		return &connTxn{err: err}
	}
	return &connTxn{s: s, txn: s.cli.Txn(ctx), cancel: cancel}
}

// connTxn is a Txn of Conn: one on a session, or one that fails (err).
type connTxn struct {
	s      *session
	txn    clientv3.Txn
	cancel context.CancelFunc
	err    error
}

func (t *connTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	if t.txn != nil {
		t.txn = t.txn.If(cs...)
	}
	return t
}

func (t *connTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	if t.txn != nil {
		t.txn = t.txn.Then(ops...)
	}
	return t
}

func (t *connTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	if t.txn != nil {
		t.txn = t.txn.Else(ops...)
	}
	return t
}

func (t *connTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.err != nil {
		return nil, t.err
	}
	defer t.cancel()
	resp, err := t.txn.Commit()
	return resp, lost(t.s, err)
}

// Watch implements clientv3.Watcher: the channel closes when the session
// is lost, at once while none is live.
func (c Conn) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	s, ctx, cancel, err := c.on(ctx)
	if err != nil {
		ch := make(chan clientv3.WatchResponse)
		close(ch)
		return ch
	}
	_ = cancel // the watch ends with ctx, which ends with the caller's or the session's
	return s.cli.Watch(ctx, key, opts...)
}

// RequestProgress implements clientv3.Watcher.
func (c Conn) RequestProgress(ctx context.Context) error {
	_, err := call(ctx, c, func(ctx context.Context, cli *clientv3.Client) (struct{}, error) {
		return struct{}{}, cli.RequestProgress(ctx)
	})
	return err
}

// Close implements clientv3.Watcher and clientv3.Lease: the session's
// client is the backend's, which closes it.
func (c Conn) Close() error { return nil }

// Grant implements clientv3.Lease.
func (c Conn) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	return call(ctx, c, func(ctx context.Context, cli *clientv3.Client) (*clientv3.LeaseGrantResponse, error) {
		return cli.Grant(ctx, ttl)
	})
}

// Revoke implements clientv3.Lease.
func (c Conn) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	return call(ctx, c, func(ctx context.Context, cli *clientv3.Client) (*clientv3.LeaseRevokeResponse, error) {
		return cli.Revoke(ctx, id)
	})
}

// TimeToLive implements clientv3.Lease.
func (c Conn) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	return call(ctx, c, func(ctx context.Context, cli *clientv3.Client) (*clientv3.LeaseTimeToLiveResponse, error) {
		return cli.TimeToLive(ctx, id, opts...)
	})
}

// Leases implements clientv3.Lease.
func (c Conn) Leases(ctx context.Context) (*clientv3.LeaseLeasesResponse, error) {
	return call(ctx, c, func(ctx context.Context, cli *clientv3.Client) (*clientv3.LeaseLeasesResponse, error) {
		return cli.Leases(ctx)
	})
}

// KeepAlive implements clientv3.Lease: the channel closes when the session
// is lost (the lease itself may live on: KeepAliveOnce on the next session
// tells).
func (c Conn) KeepAlive(ctx context.Context, id clientv3.LeaseID) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	s, ctx, cancel, err := c.on(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := s.cli.KeepAlive(ctx, id)
	if err != nil {
		cancel()
		return nil, lost(s, err)
	}
	return ch, nil // it ends with ctx, which ends with the caller's or the session's
}

// KeepAliveOnce implements clientv3.Lease.
func (c Conn) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	return call(ctx, c, func(ctx context.Context, cli *clientv3.Client) (*clientv3.LeaseKeepAliveResponse, error) {
		return cli.KeepAliveOnce(ctx, id)
	})
}
