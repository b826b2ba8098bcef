// SPDX-License-Identifier: Apache-2.0

package hub

import (
	"slices"
	"sort"

	"github.com/v2bridge/v2bridge/translate"
)

// keeper keeps the newest events a replay read in full, at most max of
// them, and the spans it skimmed, so that the watchers arriving behind the
// replay are answered from memory. Not safe for concurrent use: the hub
// guards it with Hub.mu.
type keeper struct {
	max int
	evs []*translate.Event // in index order
	// Every event with an index from lo up to the replay's position is in
	// evs, except within the gaps.
	lo   uint64
	gaps []gap // oldest first, each above lo
}

// gap is a span of indexes [lo, hi) a replay skimmed: it looked only for
// events that may concern a watcher on one of keys or below them, and
// found none.
type gap struct {
	lo, hi uint64
	keys   []string
}

// maxGaps bounds the gaps a keeper tracks; beyond it, the oldest part of
// what it kept stops counting.
const maxGaps = 64

func newKeeper(limit int, from uint64) *keeper { return &keeper{max: limit, lo: from} }

// add keeps the events of the next revision read in full, dropping the
// oldest beyond max.
func (k *keeper) add(evs []*translate.Event) {
	k.evs = append(k.evs, evs...)
	if over := len(k.evs) - k.max; over > 0 {
		k.raise(k.evs[over-1].Index() + 1)
		// The array behind the slice is replaced (and what was dropped
		// freed) when append next outgrows it.
		k.evs = k.evs[over:]
	}
}

// raise moves lo up to at least lo, forgetting the gaps below it.
func (k *keeper) raise(lo uint64) {
	k.lo = max(k.lo, lo)
	i := 0
	for i < len(k.gaps) && k.gaps[i].hi <= k.lo {
		i++
	}
	k.gaps = k.gaps[i:]
}

// skimmed records that the replay skimmed [from, to) for keys.
func (k *keeper) skimmed(keys []string, from, to uint64) {
	if n := len(k.gaps); n > 0 && k.gaps[n-1].hi == from && slices.Equal(k.gaps[n-1].keys, keys) {
		k.gaps[n-1].hi = to
		return
	}
	k.gaps = append(k.gaps, gap{lo: from, hi: to, keys: keys})
	if len(k.gaps) > maxGaps {
		k.raise(k.gaps[0].hi)
	}
}

// knownUntil is how far, from next up to pos (the replay's position), every
// event that concerns a watcher on key is kept: pos, or the start of the
// first gap that did not look for key. 0 when next is not within what the
// replay read.
func (k *keeper) knownUntil(key string, next, pos uint64) uint64 {
	if next < k.lo || next >= pos {
		return 0
	}
	for _, g := range k.gaps {
		if g.hi > next && !covered(key, g.keys) {
			return max(next, g.lo)
		}
	}
	return pos
}

// covers reports whether every event concerning a watcher on key with an
// index from next up to pos (the replay's position) is kept.
func (k *keeper) covers(key string, next, pos uint64) bool {
	return next < pos && k.knownUntil(key, next, pos) == pos
}

// complete is the lowest index from which every event up to the replay's
// position is kept, whatever its key.
func (k *keeper) complete() uint64 {
	c := k.lo
	if n := len(k.gaps); n > 0 {
		c = max(c, k.gaps[n-1].hi)
	}
	return c
}

// from returns the kept events with an index of i or above.
func (k *keeper) from(i uint64) []*translate.Event {
	j := sort.Search(len(k.evs), func(j int) bool { return k.evs[j].Index() >= i })
	return k.evs[j:]
}

// countFrom is how many kept events have an index of i or above.
func (k *keeper) countFrom(i uint64) int { return len(k.from(i)) }

// forRing returns what the ring, whose lower edge is floor, can take in
// front of it when the replay's position pos is past floor: the newest n
// (at most free) kept events up to floor, and the new floor below them.
// False when nothing below floor is known in full.
func (k *keeper) forRing(floor, pos uint64, free int) ([]*translate.Event, uint64, bool) {
	c := k.complete()
	if pos <= floor || c > floor {
		return nil, 0, false
	}
	evs := k.from(c)
	evs = evs[:sort.Search(len(evs), func(j int) bool { return evs[j].Index() > floor })]
	if n := len(evs); n > free {
		return evs[n-free:], evs[n-free-1].Index(), true
	}
	return evs, c - 1, true
}
