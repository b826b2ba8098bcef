// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	clientv3 "go.etcd.io/etcd/client/v3"
)

// merger joins the watches of several key ranges (a bridge serving some
// subtrees watches each of their ranges, not the whole key space) into one
// stream of whole revisions. Each watch delivers its own changes in
// revision order, but nothing orders one watch's against another's, and a
// watch with nothing in a revision says nothing of it: a revision is
// complete once every watch has shown it, with a change of that revision
// or a later one, or a progress notification at or past it. With one
// range, every revision received is complete.
//
// It is owned by the goroutine reading the feed.
type merger struct {
	q    [][][]*clientv3.Event // per range: its changes not yet merged, revision by revision
	done []int64               // per range: every revision up to done has been received
	told int64                 // the last revision handed on, or told as progress
}

// newMerger merges n ranges whose watches start at revision from.
func newMerger(n int, from int64) *merger {
	m := &merger{q: make([][][]*clientv3.Event, n), done: make([]int64, n), told: max(from-1, 0)}
	for i := range m.done {
		m.done[i] = m.told
	}
	return m
}

// add takes range i's events of one watch response.
func (m *merger) add(i int, evs []*clientv3.Event) {
	for _, g := range groupByRevision(evs) {
		m.q[i] = append(m.q[i], g)
		m.done[i] = max(m.done[i], g[0].Kv.ModRevision)
	}
}

// progress records that range i has received every revision up to rev.
func (m *merger) progress(i int, rev int64) { m.done[i] = max(m.done[i], rev) }

// complete is the revision up to which every range has been received.
func (m *merger) complete() int64 { return minOf(m.done) }

// next returns the next complete revision's changes, range by range (nil:
// none is complete yet).
func (m *merger) next() []*clientv3.Event {
	rev := int64(-1)
	for _, q := range m.q {
		if len(q) > 0 && (rev < 0 || q[0][0].Kv.ModRevision < rev) {
			rev = q[0][0].Kv.ModRevision
		}
	}
	if rev < 0 || rev > m.complete() {
		return nil
	}
	var g []*clientv3.Event
	for i, q := range m.q {
		if len(q) > 0 && q[0][0].Kv.ModRevision == rev {
			g = append(g, q[0]...)
			m.q[i] = q[1:]
		}
	}
	m.told = rev
	return g
}

// waiting reports whether a revision has been received that is not yet
// complete: some range has yet to show it (a progress request tells).
func (m *merger) waiting() bool {
	for _, q := range m.q {
		if len(q) > 0 {
			return true
		}
	}
	return false
}

// progressed returns the revision up to which everything has been handed
// on, when that is past what was last told and nothing is left to hand on.
func (m *merger) progressed() (int64, bool) {
	if m.waiting() {
		return 0, false
	}
	if c := m.complete(); c > m.told {
		m.told = c
		return c, true
	}
	return 0, false
}

func minOf(xs []int64) int64 {
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}
