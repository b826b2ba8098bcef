// SPDX-License-Identifier: Apache-2.0

package ctxsleep

import (
	"context"
	"time"
)

// The back-off of Retry: it doubles from retryFirst up to retryMax, and
// starts again at retryFirst after a run that lasted retryFresh (it worked
// a while: its end is a new failure).
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 2 * time.Second
	retryFresh = 10 * time.Second
)

// Retry runs run until ctx ends, waiting a back-off between runs; ended is
// told each run's error (not after ctx ended). It is the loop of a
// follower that reads something, then watches it until the watch fails.
func Retry(ctx context.Context, run func(context.Context) error, ended func(error)) {
	RetryLive(ctx, nil, run, ended)
}

// Live reports whether the connection a follower runs on reaches etcd now
// (the bridge's checked session), and returns a channel closed at its next
// change.
type Live func() (up bool, changed <-chan struct{})

// RetryLive is Retry over a connection that live (nil: always up) tells
// about: while it is down no run starts, and none counts as failed (the
// connection's owner reports its loss), nor does one during which it
// changed; a run starts the moment it is up again, and a back-off ends
// early when it changes.
func RetryLive(ctx context.Context, live Live, run func(context.Context) error, ended func(error)) {
	if live == nil {
		live = func() (bool, <-chan struct{}) { return true, nil }
	}
	backoff := retryFirst
	for ctx.Err() == nil {
		up, changed := live()
		if !up {
			backoff = retryFirst
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			continue
		}
		start := time.Now()
		err := run(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > retryFresh {
			backoff = retryFirst
		}
		select {
		case <-changed:
			continue // the run ended with its connection (lost, or handed over): not a failure
		default:
		}
		if up, _ := live(); !up {
			continue // lost meanwhile: wait for the next connection
		}
		ended(err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-changed:
			t.Stop()
		}
		backoff = min(2*backoff, retryMax)
	}
}
