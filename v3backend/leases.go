// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
)

// leaseCache remembers lease expirations so TTL keys can be shown without a
// round trip per key. A bridge-granted lease never changes its expiration (a
// refresh grants a new lease); a v3 client's lease may be kept alive, so its
// entry is trusted only briefly.
type leaseCache struct {
	mu sync.Mutex // guards m
	m  map[int64]leaseEntry
}

type leaseEntry struct {
	exp     time.Time
	fixed   bool      // bridge-granted: expiration known (changed only by this process's renewals)
	owned   bool      // granted by this process
	fetched time.Time // for v3 clients' leases
	// For leases this process granted: the TTL the v2 write asked for and
	// the one etcd granted (at least its minimum), so a later write asking
	// for the same TTL can renew the lease instead of granting another.
	asked, granted int64
}

const (
	leaseCacheMax    = 1 << 16
	nativeLeaseTrust = time.Second
)

func newLeaseCache() *leaseCache { return &leaseCache{m: map[int64]leaseEntry{}} }

func (c *leaseCache) put(id int64, exp time.Time, owned bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= leaseCacheMax {
		now := time.Now()
		for k, e := range c.m {
			if e.exp.Before(now) || !e.fixed {
				delete(c.m, k)
			}
		}
	}
	c.m[id] = leaseEntry{exp: exp, fixed: true, owned: owned}
}

// putGranted records a lease this process granted (or renewed) for a v2
// TTL of asked seconds.
func (c *leaseCache) putGranted(id int64, exp time.Time, asked, granted int64) {
	c.put(id, exp, true)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[id]
	e.asked, e.granted = asked, granted
	c.m[id] = e
}

// renewable reports whether lease id, granted by this process for a TTL of
// asked seconds, can be renewed for a write asking for that TTL again: a
// keep-alive resets it to the TTL it was granted with, which is what the
// write asks for. One that is about to run out is not renewed (the keys on
// it may be gone before the keep-alive lands). It returns the granted TTL.
func (c *leaseCache) renewable(id, asked int64, now time.Time) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok || !e.owned || e.asked != asked || e.exp.Sub(now) < renewMargin {
		return 0, false
	}
	return e.granted, true
}

// renewMargin: a lease with less time left than this is replaced, not renewed.
const renewMargin = time.Second

func (c *leaseCache) putNative(id int64, exp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) < leaseCacheMax {
		c.m[id] = leaseEntry{exp: exp, fetched: time.Now()}
	}
}

func (c *leaseCache) get(id int64) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok || (!e.fixed && time.Since(e.fetched) > nativeLeaseTrust) {
		return time.Time{}, false
	}
	return e.exp, true
}

func (c *leaseCache) owned(id int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id].owned
}

func (c *leaseCache) drop(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

// resolveLeases finds the expiration of each lease: from the cache, then from
// the bridge's lease records (one transaction), then, for leases granted by
// v3 clients, from TimeToLive. A lease it cannot resolve is shown permanent.
func (b *Backend) resolveLeases(ctx context.Context, s *session, ids []int64) translate.Leases {
	out := translate.Leases{}
	var miss []int64
	for _, id := range ids {
		if exp, ok := b.leases.get(id); ok {
			out[id] = exp
		} else {
			miss = append(miss, id)
		}
	}
	if len(miss) == 0 {
		return out
	}
	ops := make([]clientv3.Op, len(miss))
	for i, id := range miss {
		ops[i] = clientv3.OpGet(b.layout.LeaseKey(id), clientv3.WithSerializable())
	}
	var native []int64
	if resp, err := s.cli.Txn(ctx).Then(ops...).Commit(); err == nil {
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().Kvs
			if len(kvs) == 1 {
				if ns, err := strconv.ParseInt(string(kvs[0].Value), 10, 64); err == nil {
					exp := time.Unix(0, ns)
					b.leases.put(miss[i], exp, false)
					out[miss[i]] = exp
					continue
				}
			}
			native = append(native, miss[i])
		}
	}
	for _, id := range native {
		ttl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(id))
		if err != nil || ttl.TTL < 0 {
			continue
		}
		exp := time.Now().Add(time.Duration(ttl.TTL) * time.Second)
		b.leases.putNative(id, exp)
		out[id] = exp
	}
	return out
}
