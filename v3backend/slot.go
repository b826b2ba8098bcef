// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"sync"
)

// writeSlot lets this bridge's writes to one path (by hash) take turns.
type writeSlot struct {
	// turn is a one-place semaphore, taken for a whole write (its round
	// trips included, bounded by the request's deadline), never together
	// with a lock.
	turn chan struct{}
	// mu guards released.
	mu sync.Mutex
	// released is closed when the write holding turn gives it back; nil
	// while no one waits for that.
	released chan struct{}
}

// take waits for the turn.
func (w *writeSlot) take(ctx context.Context) error {
	select {
	case w.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// give hands the turn back and wakes those waiting for that.
func (w *writeSlot) give() {
	<-w.turn
	w.mu.Lock()
	if w.released != nil {
		close(w.released)
		w.released = nil
	}
	w.mu.Unlock()
}

// busy reports whether a write holds the turn.
func (w *writeSlot) busy() bool { return len(w.turn) > 0 }

// awaitGiven waits, if a write holds the turn, until it gives it back (or
// ctx ends). Another write may have taken the turn again by the time it
// returns.
func (w *writeSlot) awaitGiven(ctx context.Context) {
	w.mu.Lock()
	if len(w.turn) == 0 {
		w.mu.Unlock()
		return
	}
	if w.released == nil {
		w.released = make(chan struct{})
	}
	ch := w.released
	w.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}
