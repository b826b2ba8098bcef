// SPDX-License-Identifier: Apache-2.0

package soak

import (
	"context"
	"sync"
	"time"
)

// stuck is one stuck-watch episode.
type stuck struct {
	watcher string
	kind    string // "request": one watch open too long; "watcher": no event for too long
	since   time.Time
	at      time.Time // when it was noticed
}

// monitor looks for stuck watches while the soak runs: a watch request
// open longer than stuckAfter although an event in its scope was written
// after it was sent and acknowledged stuckAfter ago, or a watcher that has
// delivered nothing for stallAfter although such an event is owed to it
// (it keeps failing, or never comes back after a fault is healed).
type monitor struct {
	led        *ledger
	ws         []*watcher
	stuckAfter time.Duration
	stallAfter time.Duration

	mu       sync.Mutex // guards episodes
	episodes []stuck
}

func (m *monitor) run(ctx context.Context) {
	lastReq := map[*watcher]time.Time{} // the request already reported, per watcher
	lastStall := map[*watcher]time.Time{}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		for _, w := range m.ws {
			inflight, progress := w.state()
			if !inflight.IsZero() && now.Sub(inflight) > m.stuckAfter && !lastReq[w].Equal(inflight) &&
				m.led.owed(w.scope, inflight, now.Add(-m.stuckAfter)) {
				lastReq[w] = inflight
				m.add(stuck{watcher: w.name, kind: "request", since: inflight, at: now})
			}
			if !progress.IsZero() && now.Sub(progress) > m.stallAfter && !lastStall[w].Equal(progress) &&
				m.led.owed(w.scope, progress, now.Add(-m.stallAfter)) {
				lastStall[w] = progress
				m.add(stuck{watcher: w.name, kind: "watcher", since: progress, at: now})
			}
		}
	}
}

func (m *monitor) add(s stuck) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.episodes = append(m.episodes, s)
}

func (m *monitor) stuck() []stuck {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]stuck(nil), m.episodes...)
}
