// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// Every key on a bridge-granted lease expires at once, at the expiration its
// lease record holds (leasePool), a little before etcd would expire the
// lease. Reads hide such keys from then on; the expirer revokes the lease,
// which deletes its keys in one revision that decodes as their expire events,
// as etcd's own expiry would. Every bridge revokes what it finds due: racing
// is harmless (a lease already gone is not found), and etcd's expiry remains
// for when no bridge runs. Expirations come from the granting bridge's clock:
// bridges' clocks are assumed synchronised (NTP), each second of skew ending
// keys that much early or late.

// expiryTick is how often the expirer looks for leases that ran out (a
// variable for tests, set before a backend starts).
var expiryTick = 50 * time.Millisecond

// expiryRetry is how long the expirer waits before revoking a lease again
// whose record is still there.
const expiryRetry = time.Second

// expireLeases revokes the bridge-granted leases whose expiration passed,
// found in the mirror's lease records, until the backend closes.
func (b *Backend) expireLeases() {
	defer b.wg.Done()
	tried := map[int64]time.Time{} // when a lease was last revoked
	b.everyTick(expiryTick, func(s *session) {
		now := time.Now()
		var due []int64
		for _, id := range b.dueLeases(s, now) {
			if at, ok := tried[id]; !ok || now.Sub(at) >= expiryRetry {
				tried[id] = now
				due = append(due, id)
			}
		}
		for id, at := range tried {
			if now.Sub(at) >= 2*expiryRetry {
				delete(tried, id)
			}
		}
		if len(due) == 0 {
			return
		}
		ctx, cancel := b.reqCtx(b.ctx, s)
		// Another tenant's lease (a key this bridge may not write) is
		// left to etcd's expiry.
		if _, err := b.revoke(ctx, s, due); err != nil && b.ctx.Err() == nil && !errors.Is(err, rpctypes.ErrPermissionDenied) {
			b.lg.Warn("revoking expired leases failed", zap.Int("leases", len(due)), zap.Error(err))
		}
		cancel()
	})
}

// dueLeases lists the leases whose records in the mirror hold an
// expiration at or before now. A bridge serving subtrees watches no lease
// record (each tenant's bridges write theirs to one range): it takes the
// leases of the keys it mirrors, their expirations from its lease cache or
// their records, read once (resolveLeases).
func (b *Backend) dueLeases(s *session, now time.Time) []int64 {
	if b.layout.Scoped() {
		return b.dueServedLeases(s, now)
	}
	start, end := b.layout.LeaseRecordRange()
	lists, _, ok := b.mirror.read([]translate.Read{{Key: start, End: end}}, false)
	if !ok {
		return nil
	}
	var due []int64
	for _, kv := range lists[0] {
		if id, exp, ok := b.layout.ParseLeaseRecord(kv); ok && !exp.After(now) {
			due = append(due, id)
		}
	}
	return due
}

// dueServedLeases is dueLeases for a bridge serving subtrees.
func (b *Backend) dueServedLeases(s *session, now time.Time) []int64 {
	var reads []translate.Read
	for _, p := range b.layout.Served {
		reads = append(reads, b.layout.GetReads(p)...)
	}
	lists, _, ok := b.mirror.read(reads, false)
	if !ok {
		return nil
	}
	var ids, unknown []int64
	for _, kvs := range lists {
		for _, kv := range kvs {
			if kv.Lease == 0 || containsID(ids, kv.Lease) {
				continue
			}
			ids = append(ids, kv.Lease)
			if _, ok := b.leases.get(kv.Lease); !ok {
				unknown = append(unknown, kv.Lease)
			}
		}
	}
	ls := translate.Leases{}
	if len(unknown) > 0 {
		ctx, cancel := b.reqCtx(b.ctx, s)
		ls = b.resolveLeases(ctx, s, unknown)
		cancel()
	}
	var due []int64
	for _, id := range ids {
		exp, ok := b.leases.get(id)
		if !ok {
			exp, ok = ls[id]
		}
		if ok && b.leases.granted(id) && !exp.After(now) {
			due = append(due, id)
		}
	}
	return due
}

// expiredLeases lists the bridge-granted leases of kvs that expired at now
// (ls resolves them).
func (b *Backend) expiredLeases(kvs []*translate.KV, ls translate.Leases, now time.Time) []int64 {
	var out []int64
	for _, kv := range kvs {
		if kv == nil || kv.Lease == 0 || !b.leases.granted(kv.Lease) || !ls.Expired(kv, false, now) {
			continue
		}
		if !containsID(out, kv.Lease) {
			out = append(out, kv.Lease)
		}
	}
	return out
}

func containsID(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// revoke revokes the leases ids, whose expiration passed; one already gone
// is no error. It reports the first error, having tried them all, and the
// revision of the last revoke.
func (b *Backend) revoke(ctx context.Context, s *session, ids []int64) (int64, error) {
	var first error
	var rev int64
	for _, id := range ids {
		resp, err := s.cli.Revoke(ctx, clientv3.LeaseID(id))
		switch {
		case err == nil:
			rev = max(rev, resp.Header.Revision)
		case !errors.Is(err, rpctypes.ErrLeaseNotFound) && first == nil:
			first = err
		}
	}
	return rev, first
}

// expireBefore makes a write's snapshot hold no node that expired at now:
// it revokes their leases and sweeps below the expired directories, so
// their expire events come before the write, as in v2, and the directory's
// children cannot outlive it under a directory the write creates again.
// It reports a revision that has the expiry, or 0 when nothing had
// expired. swept holds the directories the write swept (sweepExpiredDirs).
func (b *Backend) expireBefore(ctx context.Context, s *session, snap *translate.Snapshot, ls translate.Leases, now time.Time, swept map[string]int64) (int64, error) {
	kvs := snap.KVs()
	gone := b.expiredLeases(kvs, ls, now)
	if len(gone) == 0 {
		return b.sweepExpiredDirs(ctx, s, snap, swept)
	}
	rev, err := b.revoke(ctx, s, gone)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		// Revoked by another: a linearizable read's revision has it.
		resp, err := b.quorum.get(ctx, b, s)
		if err != nil {
			return 0, err
		}
		b.noteHeader(resp.Header)
		rev = resp.Header.Revision
	}
	for _, kv := range kvs {
		if kv == nil || !containsID(gone, kv.Lease) {
			continue
		}
		if dir, ok := b.layout.PathOfMarker(kv.Key); ok {
			b.commitSweep(ctx, s, dir)
		}
	}
	return rev, nil
}

// sweepExpiredDirs sweeps, before a write decides, the TTL directories at,
// above or below its path whose lease took their marker but whose remains
// the feed's sweep has not removed yet: the write must not see them, nor
// leave them under a directory it creates again. The records come from the
// mirror; the snapshot tells whether the path and the directories above it
// still have their marker, the mirror whether those below do (only when
// the snapshot found something below the path). swept maps the directories
// the write swept to the sweep's revision: a snapshot at or after it has
// the sweep, though the mirror may still hold the record. It reports the
// last sweep's revision, or 0 when there was nothing to sweep.
func (b *Backend) sweepExpiredDirs(ctx context.Context, s *session, snap *translate.Snapshot, swept map[string]int64) (int64, error) {
	l := b.layout
	lists, _, ok := b.mirror.readWithTTLDirs(nil, func() []translate.Read { return l.TTLDirReads(snap.Path) })
	if !ok {
		return 0, nil
	}
	records := slices.Concat(lists...)
	if len(records) == 0 {
		return 0, nil
	}
	markers := []*translate.KV{snap.Marker}
	for _, a := range snap.Ancestors {
		markers = append(markers, a.Marker)
	}
	var below []translate.Read
	for _, r := range records {
		if d, ok := l.PathOfTTLDir(r.Key); ok && d != snap.Path && translate.Within(snap.Path, d) {
			below = append(below, translate.Read{Key: l.MarkerKey(d)})
		}
	}
	if len(below) > 0 && (snap.DataChild != nil || snap.MarkerChild != nil) {
		ms, _, ok := b.mirror.read(below, false)
		if !ok {
			return 0, nil
		}
		markers = append(markers, slices.Concat(ms...)...)
	} else {
		records = slices.DeleteFunc(records, func(r *translate.KV) bool {
			d, _ := l.PathOfTTLDir(r.Key)
			return d != snap.Path && translate.Within(snap.Path, d)
		})
	}
	var rev int64
	for _, dir := range l.ExpiredDirs(records, markers) {
		if at, ok := swept[dir]; ok && at <= snap.Rev {
			continue
		}
		r := b.commitSweep(ctx, s, dir)
		if r == 0 {
			return 0, errors.New("v3backend: sweeping an expired directory failed")
		}
		swept[dir] = r
		rev = max(rev, r)
	}
	return rev, nil
}
