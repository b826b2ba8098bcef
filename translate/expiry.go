// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"slices"
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

// A TTL directory's lease takes its marker, not what is below it: until
// the sweep (SweepTxn) that follows, its record (TTLDirKey) outlives the
// marker, and what is left below must not be served either.

// TTLDirReads are the reads of the TTL directory records of p and of the
// directories above it (point reads), then of those below p (a range), for
// ExpiredDirs: the served ones only, which the mirror holds.
func (l Layout) TTLDirReads(p string) []Read {
	var rs []Read
	for _, d := range append(Ancestors(p), p) {
		if l.Serves(d) {
			rs = append(rs, Read{Key: l.TTLDirKey(d)})
		}
	}
	if l.Serves(p) {
		k := l.TTLDirKey(childPath(p))
		rs = append(rs, Read{Key: k, End: PrefixEnd(k)})
	}
	return rs
}

// ExpiredDirs lists the TTL directories whose record is among records and
// whose marker is not among markers: their lease ran out, and what was
// below them waits for its sweep.
func (l Layout) ExpiredDirs(records, markers []*KV) []string {
	var dirs []string
	for _, r := range records {
		d, ok := l.PathOfTTLDir(r.Key)
		if !ok || slices.ContainsFunc(markers, func(m *KV) bool { return m != nil && m.Key == l.MarkerKey(d) }) {
			continue
		}
		dirs = append(dirs, d)
	}
	return dirs
}

// WithinAny reports whether p is one of dirs or below one.
func WithinAny(dirs []string, p string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool { return Within(d, p) })
}

// DropWithin leaves out of kvs (data keys or markers) those of the paths
// at or below one of dirs.
func (l Layout) DropWithin(kvs []*KV, dirs []string) []*KV {
	if len(dirs) == 0 {
		return kvs
	}
	return slices.DeleteFunc(slices.Clone(kvs), func(kv *KV) bool {
		p, ok := l.PathOfData(kv.Key)
		if !ok {
			p, ok = l.PathOfMarker(kv.Key)
		}
		return ok && WithinAny(dirs, p)
	})
}

// DropWithin removes from the snapshot the directories at or below one of
// dirs (a miss then names the first missing one), with what is below
// them.
func (s *Snapshot) DropWithin(dirs []string) {
	for i := range s.Ancestors {
		if a := &s.Ancestors[i]; WithinAny(dirs, a.Path) {
			a.File, a.Marker = nil, nil
		}
	}
	if WithinAny(dirs, s.Path) {
		s.File, s.Marker, s.DataChild, s.MarkerChild = nil, nil, nil, nil
	}
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
