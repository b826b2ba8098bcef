// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"strconv"
	"strings"
	"time"
)

// A node whose expiration has passed is gone in v2 even before its server
// sweeps it: the bridge never serves one. Its v3 key may outlive the
// expiration by the time it takes a bridge to revoke its lease.

// Expired reports whether kv, the key of a file or (marker) a directory's
// marker, carries a TTL that ran out at now. A marker's own value records
// its expiration when its lease is unknown.
func (ls Leases) Expired(kv *KV, marker bool, now time.Time) bool {
	if kv == nil || kv.Lease == 0 {
		return false
	}
	exp, ok := ls[kv.Lease]
	if !ok && marker {
		ns, err := strconv.ParseInt(string(kv.Value), 10, 64)
		exp, ok = time.Unix(0, ns), err == nil
	}
	return ok && !exp.After(now)
}

// AncestorMarkerReads are the markers of the directories above p, for
// ExpiredAbove.
func (l Layout) AncestorMarkerReads(p string) []Read {
	var rs []Read
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			rs = append(rs, Read{Key: l.MarkerKey(p[:i])})
		}
	}
	return rs
}

// ExpiredAbove reports whether one of the markers (of directories above a
// path) belongs to a TTL directory that expired at now: everything below it
// went with it.
func ExpiredAbove(markers []*KV, ls Leases, now time.Time) bool {
	for _, m := range markers {
		if ls.Expired(m, true, now) {
			return true
		}
	}
	return false
}

// DropExpired removes from the snapshot what expired at now: files and
// markers whose TTL ran out, and everything below an expired directory.
func (s *Snapshot) DropExpired(ls Leases, now time.Time) {
	gone := false // an ancestor expired: nothing below it is left
	for i := range s.Ancestors {
		a := &s.Ancestors[i]
		if gone || ls.Expired(a.Marker, true, now) {
			gone = true
			a.File, a.Marker = nil, nil
			continue
		}
		if ls.Expired(a.File, false, now) {
			a.File = nil
		}
	}
	if gone || ls.Expired(s.Marker, true, now) {
		s.File, s.Marker, s.DataChild, s.MarkerChild = nil, nil, nil, nil
		return
	}
	if ls.Expired(s.File, false, now) {
		s.File = nil
	}
	if ls.Expired(s.DataChild, false, now) {
		s.DataChild = nil
	}
	if ls.Expired(s.MarkerChild, true, now) {
		s.MarkerChild = nil
	}
}

// KVs lists the keys the snapshot holds.
func (s *Snapshot) KVs() []*KV {
	kvs := []*KV{s.File, s.Marker, s.DataChild, s.MarkerChild}
	for _, a := range s.Ancestors {
		kvs = append(kvs, a.File, a.Marker)
	}
	return kvs
}

// LeaseRecordRange is the v3 range of the lease records.
func (l Layout) LeaseRecordRange() (start, end string) {
	start = l.MetaPrefix + leaseTag
	return start, PrefixEnd(start)
}

// ParseLeaseRecord reads a lease record: the lease and its expiration.
func (l Layout) ParseLeaseRecord(kv *KV) (id int64, exp time.Time, ok bool) {
	hex, found := strings.CutPrefix(kv.Key, l.MetaPrefix+leaseTag)
	if !found {
		return 0, time.Time{}, false
	}
	id, err := strconv.ParseInt(hex, 16, 64)
	if err != nil {
		return 0, time.Time{}, false
	}
	ns, err := strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil {
		return 0, time.Time{}, false
	}
	return id, time.Unix(0, ns), true
}
