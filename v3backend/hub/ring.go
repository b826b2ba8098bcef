// SPDX-License-Identifier: Apache-2.0

package hub

import (
	"sort"

	"github.com/v2bridge/v2bridge/translate"
)

// ring holds the most recent v2 events in index order. Not safe for
// concurrent use: the hub guards it with Hub.mu.
type ring struct {
	buf  []*translate.Event // circular
	head int                // position of the oldest event
	n    int
}

func newRing(size int) ring { return ring{buf: make([]*translate.Event, size)} }

func (r *ring) full() bool { return r.n == len(r.buf) }

// free is how many events fit before the oldest is evicted.
func (r *ring) free() int { return len(r.buf) - r.n }

// push appends ev; it returns the evicted oldest event, if the ring was full.
func (r *ring) push(ev *translate.Event) (evicted *translate.Event) {
	if r.full() {
		evicted = r.buf[r.head]
		r.buf[r.head] = nil
		r.head = (r.head + 1) % len(r.buf)
		r.n--
	}
	r.buf[(r.head+r.n)%len(r.buf)] = ev
	r.n++
	return evicted
}

// prepend puts older events (in index order, all older than the ring's
// oldest) in front of it; the caller makes sure they fit.
func (r *ring) prepend(evs []*translate.Event) {
	for i := len(evs) - 1; i >= 0; i-- {
		r.head = (r.head - 1 + len(r.buf)) % len(r.buf)
		r.buf[r.head] = evs[i]
		r.n++
	}
}

// at is the i-th oldest event.
func (r *ring) at(i int) *translate.Event { return r.buf[(r.head+i)%len(r.buf)] }

// from is the position of the oldest event whose index is index or more
// (n: none is). The events are in index order: a re-watch, which wants
// only the newest few, looks at those alone instead of the whole ring.
func (r *ring) from(index uint64) int {
	return sort.Search(r.n, func(i int) bool { return r.at(i).Index() >= index })
}

func (r *ring) reset() {
	for i := range r.buf {
		r.buf[i] = nil
	}
	r.head, r.n = 0, 0
}
