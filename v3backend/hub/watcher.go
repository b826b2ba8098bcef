// SPDX-License-Identifier: Apache-2.0

package hub

import (
	"sync"
	"sync/atomic"

	"github.com/v2bridge/v2bridge/translate"
)

// where a watcher is registered; guarded by Hub.mu.
type place int

const (
	placeNone   place = iota // not registered (answered, ended, or not yet added)
	placeLive                // Hub.byKey: served from the shared feed
	placeReplay              // replay.members (of Watcher.replay): served from a history feed
	placeQueued              // Hub.queued: waiting for the next replay
)

// Watcher is one v2 watch request.
type Watcher struct {
	key       string
	recursive bool
	stream    bool
	start     uint64 // X-Etcd-Index of the response; fixed at creation
	ch        chan *translate.Event
	done      chan struct{}
	hub       *Hub

	// Guarded by Hub.mu, whoever serves the watcher (the shared feed, a
	// replay, or the caller registering it).
	next   uint64 // the lowest index still wanted
	where  place
	replay *replay // the replay it is a member of (placeReplay)

	once   sync.Once
	reason string // set once, before done is closed

	// removed is set once the hub has let go of the watcher for good
	// (every removal is final): Cancel then needs no lock. After one event
	// 10,000 answered watchers cancel at once, and would otherwise queue
	// on Hub.mu behind the feed delivering to the rest.
	removed atomic.Bool
}

// StartIndex is the store index when the watch was created (X-Etcd-Index).
func (w *Watcher) StartIndex() uint64 { return w.start }

// Events delivers the watcher's events.
func (w *Watcher) Events() <-chan *translate.Event { return w.ch }

// Done is closed when the watcher is ended without (more) events: its
// backend was lost, it fell behind, or the bridge is closing. Events already
// queued in Events are still valid.
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Reason says why Done was closed (valid once it is).
func (w *Watcher) Reason() string { return w.reason }

// Cancel releases the watcher (the client went away or it was answered).
func (w *Watcher) Cancel() {
	if !w.removed.Load() {
		w.hub.mu.Lock()
		w.hub.removeLocked(w)
		w.hub.mu.Unlock()
	}
	w.finish("canceled")
}

func (w *Watcher) finish(reason string) {
	w.once.Do(func() {
		w.reason = reason
		close(w.done)
	})
}

// wants reports whether ev is due to w.
func (w *Watcher) wants(ev *translate.Event) bool {
	return ev.Index() >= w.next && translate.WatchMatches(w.key, w.recursive, w.start, ev)
}
