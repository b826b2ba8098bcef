// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"strconv"
	"testing"
	"time"
)

// TestSetExpirationShowsTheTTLAsked: ttl is the time left rounded up, less
// the lease window a key may have been given beyond its TTL; at least 1
// before the expiration, none after it.
func TestSetExpirationShowsTheTTLAsked(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		left time.Duration
		ttl  int64
	}{
		{2*time.Second + LeaseWindow, 2}, // written just after its lease's grant
		{2*time.Second + LeaseWindow/2, 2},
		{2 * time.Second, 2}, // written at the end of the window
		{2*time.Second + LeaseWindow + time.Millisecond, 3},
		{time.Second + LeaseWindow - time.Millisecond, 1},
		{LeaseWindow, 1},
		{time.Millisecond, 1},
		{0, 0},
		{-time.Second, 0},
	} {
		var n Node
		n.SetExpiration(now.Add(c.left), now)
		if n.TTL != c.ttl || !n.Expiration.Equal(now.Add(c.left)) {
			t.Errorf("%v left: ttl %d expiration %v, want ttl %d", c.left, n.TTL, n.Expiration, c.ttl)
		}
	}
}

// TestDropExpired: a snapshot without what expired: an expired file, an
// expired directory and everything below it, an expired ancestor and
// everything below that.
func TestDropExpired(t *testing.T) {
	l, _ := NewLayout("", "_m/")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ls := Leases{1: now, 2: now.Add(time.Second)}
	kv := func(key string, lease int64) *KV { return &KV{Key: key, Lease: lease, ModRevision: 5} }
	snap := func(aMarker, file, marker, child *KV) *Snapshot {
		return &Snapshot{Path: "/a/b", Rev: 9, File: file, Marker: marker, DataChild: child,
			Ancestors: []Ancestor{{Path: "/a", Marker: aMarker}}}
	}
	live, gone := kv(l.DataKey("/a/b"), 2), kv(l.DataKey("/a/b"), 1)
	child := kv(l.DataKey("/a/b/c"), 0)
	liveDir := kv(l.MarkerKey("/a"), 2)
	for _, c := range []struct {
		name     string
		in, want *Snapshot
	}{
		{"nothing expired", snap(liveDir, live, nil, nil), snap(liveDir, live, nil, nil)},
		{"an expired file", snap(nil, gone, nil, nil), snap(nil, nil, nil, nil)},
		{"an expired directory, its children with it", snap(nil, nil, kv(l.MarkerKey("/a/b"), 1), child),
			snap(nil, nil, nil, nil)},
		{"an expired ancestor, all below it", snap(kv(l.MarkerKey("/a"), 1), nil, kv(l.MarkerKey("/a/b"), 0), child),
			snap(nil, nil, nil, nil)},
		{"an expired marker's value when its lease is unknown",
			snap(&KV{Key: l.MarkerKey("/a"), Lease: 3, Value: []byte(strconv.FormatInt(now.UnixNano(), 10))}, nil, nil, child),
			snap(nil, nil, nil, nil)},
	} {
		c.in.DropExpired(ls, now)
		if c.in.File != c.want.File || c.in.Marker != c.want.Marker || c.in.DataChild != c.want.DataChild ||
			c.in.Ancestors[0].Marker != c.want.Ancestors[0].Marker {
			t.Errorf("%s: got %+v, want %+v", c.name, c.in, c.want)
		}
	}
}
