// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
)

// leasePool shares leases between the TTL writes of this process that ask
// for the same TTL within poolWindow of each other. Every key on a lease
// shares its expiration (its record's): the grant's time plus the TTL plus
// poolWindow, so a key never expires before its TTL and at most poolWindow
// after. A grant is a raft proposal, so sharing turns one per TTL write into
// at most one per poolWindow per TTL in use.
//
// A lease is granted for the TTL plus poolSlack, outliving that expiration:
// bridges revoke it once the expiration passes (expiry.go), and etcd's own
// expiry is the backstop. It is never kept alive (that would keep every key
// on it): a key that is written again moves to the pool's current lease,
// and the old one goes with whatever is still on it.
type leasePool struct {
	layout translate.Layout // where lease records go
	window time.Duration    // how long after its grant a lease takes new keys (poolWindow)
	record bool             // whether a grant puts the lease's record (LeaseKey)
	mu     sync.Mutex       // guards slots
	slots  map[int64]*poolSlot
}

// poolSlot is the current lease for one asked TTL.
type poolSlot struct {
	id       clientv3.LeaseID
	granted  int64         // TTL etcd granted (asked + slack, or its minimum)
	shown    time.Time     // the expiration of its keys, before etcd's
	until    time.Time     // the last moment it takes keys
	recorded bool          // a committed write holds the lease's record
	granting chan struct{} // non-nil while a grant is in flight; closed when it ends
}

// poolWindow is how long after its grant a shared lease takes new keys:
// how much later than its TTL a key may expire.
const poolWindow = translate.LeaseWindow

// poolSlack is how long a lease is granted beyond its TTL (whole seconds,
// as etcd grants), at least poolWindow: its keys expire by the bridges
// before etcd expires it.
const poolSlack = time.Second

// poolMaxSlots bounds the TTLs remembered; beyond it the slots of TTLs
// whose lease can take no more keys are forgotten.
const poolMaxSlots = 1024

func newLeasePool(l translate.Layout, window time.Duration, record bool) *leasePool {
	return &leasePool{layout: l, window: window, record: record, slots: map[int64]*poolSlot{}}
}

// Journal records (translate.Layout.RecordKey) matter only in their own
// revision: each goes on a lease of journalTTL seconds that takes records
// for journalWindow (the journal pool), so a path written once does not
// keep its record, and a grant is made at most every journalWindow. Such a
// lease has no record: no key it holds is ever served, and etcd expires it.
const (
	journalTTL    = 60
	journalWindow = 30 * time.Second
)

// pooledLease is the lease a TTL write attaches its key to.
type pooledLease struct {
	id      clientv3.LeaseID
	granted int64
	// shown is the expiration the write reports and records: the lease's
	// less the slack, plus poolWindow.
	shown    time.Time
	fresh    bool // this call granted it
	recorded bool // its lease record is written already
}

// acquire returns the shared lease for a write asking for ttl seconds at
// now, granting a new one when the current one is too old to take the key
// (concurrent callers wait for one grant rather than each making one).
func (p *leasePool) acquire(ctx context.Context, cli *clientv3.Client, ttl int64, now time.Time) (pooledLease, error) {
	for {
		p.mu.Lock()
		s := p.slots[ttl]
		if s == nil {
			p.pruneLocked(now)
			s = &poolSlot{}
			p.slots[ttl] = s
		}
		if s.granting == nil && s.id != 0 && !now.After(s.until) {
			l := pooledLease{id: s.id, granted: s.granted, shown: s.shown, recorded: s.recorded}
			p.mu.Unlock()
			return l, nil
		}
		if wait := s.granting; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return pooledLease{}, ctx.Err()
			}
		}
		done := make(chan struct{})
		s.granting = done
		p.mu.Unlock()

		// etcd's longest lease leaves no room for slack: such a lease
		// takes the keys of the writes that find it just granted only.
		slack, window := poolSlack, p.window
		if ttl > translate.MaxLeaseTTL-int64(slack/time.Second) {
			slack, window = 0, 0
		}
		g, err := cli.Grant(ctx, ttl+int64(slack/time.Second))
		// From now, before the grant was sent: before the expiration etcd
		// counts from when it applies the grant, which is at least
		// poolSlack later.
		shown := now.Add(time.Duration(ttl)*time.Second + window)
		recorded := false
		if err == nil && p.record {
			// The record goes at once, not with the lease's first writes:
			// writes that each put it could not share a transaction.
			// Failing, the writes put it.
			_, perr := cli.Put(ctx, p.layout.LeaseKey(int64(g.ID)), strconv.FormatInt(shown.UnixNano(), 10),
				clientv3.WithLease(g.ID))
			recorded = perr == nil
		}
		p.mu.Lock()
		s.granting = nil
		if err == nil {
			s.id, s.granted, s.shown, s.until, s.recorded = g.ID, g.TTL, shown, now.Add(window), recorded
		}
		close(done)
		p.mu.Unlock()
		if err != nil {
			return pooledLease{}, fmt.Errorf("grant lease: %w", err)
		}
		return pooledLease{id: g.ID, granted: g.TTL, shown: shown, fresh: true, recorded: recorded}, nil
	}
}

// recorded notes that a committed write of a ttl-second key put the record
// of lease id, so the writes that share it after that leave it out.
func (p *leasePool) recorded(ttl int64, id clientv3.LeaseID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.slots[ttl]; s != nil && s.id == id {
		s.recorded = true
	}
}

// forget drops lease id as the current lease for ttl (etcd no longer has
// it), so the next write grants another.
func (p *leasePool) forget(ttl int64, id clientv3.LeaseID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.slots[ttl]; s != nil && s.id == id && s.granting == nil {
		s.id = 0
	}
}

// pruneLocked forgets the slots whose lease can take no new key, once
// there are many.
func (p *leasePool) pruneLocked(now time.Time) {
	if len(p.slots) < poolMaxSlots {
		return
	}
	for ttl, s := range p.slots {
		if s.granting == nil && s.until.Before(now) {
			delete(p.slots, ttl)
		}
	}
}
