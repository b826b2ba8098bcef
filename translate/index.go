// SPDX-License-Identifier: Apache-2.0

package translate

// v2 gives every event an index of its own; v3 gives every transaction a
// revision, and one transaction of a v3 client can change many keys. A v2
// client resumes a watch at modifiedIndex + 1, so events that shared an
// index would be skipped after the first. v2 indexes therefore number the
// events within a revision: revision r owns the IndexesPerRevision indexes
// up to r × IndexesPerRevision, and its events take the last ones, in
// order. A revision with one event (a bridge write sent alone) gets
// r × IndexesPerRevision, which is also what a read of that revision reports
// (Index), so an index always tells its revision (Revision) without a
// lookup, and X-Etcd-Index + 1 is the first index of the next revision.
//
// Written as decimal, a revision's index is the revision followed by six
// zeros: revision 1234 is index 1234000000, and a three-event revision 1234
// numbers its events 1233999998, 1233999999 and 1234000000.

// IndexesPerRevision is how many v2 indexes one v3 revision owns: the most
// events of one revision that keep indexes of their own. Beyond that (a v3
// range delete of over a million keys), the first events share the block's
// first index.
const IndexesPerRevision = 1_000_000

// Index is the v2 index of revision rev as a whole: its last event's
// index, the modifiedIndex of a key last changed at rev, and the
// X-Etcd-Index of a read at rev. Index(0) is 0 (no revision: no index).
func Index(rev int64) uint64 {
	if rev <= 0 {
		return 0
	}
	return uint64(rev) * IndexesPerRevision
}

// FirstIndex is the lowest index of revision rev's block.
func FirstIndex(rev int64) uint64 {
	if rev <= 0 {
		return 0
	}
	return Index(rev) - IndexesPerRevision + 1
}

// EventIndex is the index of the event at position pos (from 0) of the n
// v2 events decoded from revision rev.
func EventIndex(rev int64, pos, n int) uint64 {
	back := n - 1 - pos // events after this one in the revision
	if back >= IndexesPerRevision {
		back = IndexesPerRevision - 1
	}
	return Index(rev) - uint64(back)
}

// Revision is the v3 revision index belongs to.
func Revision(index uint64) int64 {
	return int64(index/IndexesPerRevision) + int64(min(index%IndexesPerRevision, 1))
}

// NumberEvents gives the events decoded from revision rev their indexes:
// modifiedIndex by position, and createdIndex likewise for the events that
// create their node.
func NumberEvents(rev int64, evs []*Event) {
	for i, ev := range evs {
		if ev.Node == nil {
			continue
		}
		idx := EventIndex(rev, i, len(evs))
		if ev.Node.CreatedIndex == ev.Node.ModifiedIndex || ev.Node.CreatedIndex == 0 {
			ev.Node.CreatedIndex = idx
		}
		ev.Node.ModifiedIndex = idx
	}
}

// Numbering is this numbering as a value, for code that is given one (the
// watch hub; its tests give it one index per revision).
type Numbering struct{}

// Index is Index.
func (Numbering) Index(rev int64) uint64 { return Index(rev) }

// FirstIndex is FirstIndex.
func (Numbering) FirstIndex(rev int64) uint64 { return FirstIndex(rev) }

// Revision is Revision.
func (Numbering) Revision(index uint64) int64 { return Revision(index) }
