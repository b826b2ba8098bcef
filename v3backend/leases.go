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
// refresh moves the key to another lease); a v3 client's lease may be kept
// alive, so its entry is trusted only briefly.
type leaseCache struct {
	mu sync.Mutex // guards m
	m  map[int64]leaseEntry
}

type leaseEntry struct {
	exp     time.Time
	fixed   bool      // bridge-granted: expiration known (never kept alive)
	fetched time.Time // for v3 clients' leases
}

const (
	leaseCacheMax    = 1 << 16
	nativeLeaseTrust = time.Second
)

func newLeaseCache() *leaseCache { return &leaseCache{m: map[int64]leaseEntry{}} }

func (c *leaseCache) put(id int64, exp time.Time) {
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
	c.m[id] = leaseEntry{exp: exp, fixed: true}
}

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

// granted reports whether lease id is one a bridge granted (its expiration
// known from its record), which bridges revoke once it passed.
func (c *leaseCache) granted(id int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id].fixed
}

// resolveLeases finds the expiration of each lease: from the cache, then from
// the bridge's lease records (one transaction), then, for leases granted by
// v3 clients, from TimeToLive. A lease it cannot resolve is shown permanent.
func (b *Backend) resolveLeases(ctx context.Context, s *session, ids []int64) translate.Leases {
	return b.resolveLeasesAt(ctx, s, ids, 0)
}

// resolveLeasesAt is resolveLeases for the changes of revision rev (0: for
// the present), where a lease that has run out is looked up in its record
// as of the revision before rev (goneLeaseRecords).
func (b *Backend) resolveLeasesAt(ctx context.Context, s *session, ids []int64, rev int64) translate.Leases {
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
					b.leases.put(miss[i], exp)
					out[miss[i]] = exp
					continue
				}
			}
			native = append(native, miss[i])
		}
	}
	var gone []int64
	for _, id := range native {
		ttl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(id))
		if err != nil || ttl.TTL < 0 {
			gone = append(gone, id)
			continue
		}
		exp := time.Now().Add(time.Duration(ttl.TTL) * time.Second)
		b.leases.putNative(id, exp)
		out[id] = exp
	}
	if rev > 1 && len(gone) > 0 {
		b.goneLeaseRecords(ctx, s, gone, rev-1, out)
	}
	return out
}

// goneLeaseRecords looks up, in the lease records as of revision rev, the
// expirations of leases that no longer exist: a lease that ran out took its
// record with it, so the changes of its expiry, decoded by a bridge whose
// cache never held the lease (it started since, or replays history), find
// the record only at the revision before. A lease without one (a v3
// client's), or a revision compacted away, stays unresolved.
func (b *Backend) goneLeaseRecords(ctx context.Context, s *session, ids []int64, rev int64, out translate.Leases) {
	ops := make([]clientv3.Op, len(ids))
	for i, id := range ids {
		ops[i] = clientv3.OpGet(b.layout.LeaseKey(id), clientv3.WithSerializable(), clientv3.WithRev(rev))
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return
	}
	for i, r := range resp.Responses {
		if kvs := r.GetResponseRange().Kvs; len(kvs) == 1 {
			if ns, err := strconv.ParseInt(string(kvs[0].Value), 10, 64); err == nil {
				exp := time.Unix(0, ns)
				b.leases.put(ids[i], exp)
				out[ids[i]] = exp
			}
		}
	}
}
