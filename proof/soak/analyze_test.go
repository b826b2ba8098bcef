// SPDX-License-Identifier: Apache-2.0

package soak

import (
	"fmt"
	"sort"
	"time"
)

// delivered is one event a watcher received.
type delivered struct {
	id     identity
	action string
	index  uint64 // its modifiedIndex: only compared with other indexes of the same watcher
	at     time.Time
}

// resync is a 401 (history cleared) that a watcher answered by listing its
// scope again and resuming after the listing's X-Etcd-Index: the events
// between the last one it delivered and the listing were legitimately
// skipped.
type resync struct {
	after    *identity // the last event delivered before the 401; nil when none since the watcher started
	listedAt time.Time // when the listing it resumed from was answered
}

// watchRecord is what one watcher received.
type watchRecord struct {
	name, scope string
	started     time.Time // when its first listing was answered: every expected event came later
	events      []delivered
	resyncs     []resync
}

// watchReport is the verdict on one watcher.
type watchReport struct {
	name, scope string
	expected    int // expected events in its scope
	expectedBy  [numOrigins]int
	delivered   int // of those, delivered
	lost        [numOrigins]int
	resynced    int // expected events skipped by a 401 and a new listing (not losses)
	duplicates  int // an event delivered twice
	reordered   int // a key's events delivered out of their commit order
	regressions int // a modifiedIndex not above the one before it
	wrongAction int // an expected event delivered with another action
	unexplained int // an event no write explains
	maybes      int // events of writes whose answer was lost
	samples     []string
}

const maxSamples = 5

func (r *watchReport) sample(format string, args ...any) {
	if len(r.samples) < maxSamples {
		r.samples = append(r.samples, fmt.Sprintf(format, args...))
	}
}

func (r *watchReport) lostTotal() int {
	n := 0
	for _, c := range r.lost {
		n += c
	}
	return n
}

// analyze compares what a watcher received with what it was owed.
// Events are matched by identity (key, put or removal, value), never by
// index: the soak does not assume how v2 indexes relate to v3 revisions.
func analyze(v ledgerView, w watchRecord) watchReport {
	r := watchReport{name: w.name, scope: w.scope}
	seen := map[identity]bool{}
	lastPos := map[string]int{}
	var prevIndex uint64
	for i, d := range w.events {
		if i > 0 && d.index <= prevIndex {
			r.regressions++
			r.sample("index %d after %d: %s", d.index, prevIndex, d.id)
		}
		prevIndex = d.index
		if seen[d.id] {
			r.duplicates++
			r.sample("duplicate: %s %s", d.action, d.id)
			continue
		}
		seen[d.id] = true
		e, ok := v.events[d.id]
		switch {
		case ok:
			if d.action != e.action {
				r.wrongAction++
				r.sample("action %s, want %s: %s", d.action, e.action, d.id)
			}
			if p, ok := lastPos[d.id.key]; ok && e.pos < p {
				r.reordered++
				r.sample("out of order on its key: %s", d.id)
			}
			lastPos[d.id.key] = max(lastPos[d.id.key], e.pos)
		case v.explainsMaybe(d.id):
			r.maybes++
		default:
			r.unexplained++
			r.sample("unexplained: %s %s", d.action, d.id)
		}
	}
	var missing []*expected
	for _, e := range v.events {
		if !inScope(w.scope, e.id.key) {
			continue
		}
		r.expected++
		r.expectedBy[e.origin]++
		if seen[e.id] {
			r.delivered++
		} else if excused(v, w, e) {
			r.resynced++
		} else {
			missing = append(missing, e)
		}
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i].sent.Before(missing[j].sent) })
	for _, e := range missing {
		r.lost[e.origin]++
		r.sample("lost (%s): %s %s", originNames[e.origin], e.action, e.id)
	}
	return r
}

// excused reports whether e may have been skipped by one of the watcher's
// resyncs: it was committed after the last event delivered before the 401
// and before the listing the watcher resumed from. Commit times are only
// known as windows (sent..acked), so the test is conservative: it may excuse
// an event just outside the gap, never count one inside it as lost.
func excused(v ledgerView, w watchRecord, e *expected) bool {
	for _, rs := range w.resyncs {
		from := w.started
		if rs.after != nil {
			if a, ok := v.events[*rs.after]; ok {
				from = a.sent
			}
		}
		if (e.acked.IsZero() || e.acked.After(from)) && e.sent.Before(rs.listedAt) {
			return true
		}
	}
	return false
}
