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
	backoff := retryFirst
	for ctx.Err() == nil {
		start := time.Now()
		err := run(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > retryFresh {
			backoff = retryFirst
		}
		ended(err)
		if !Sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, retryMax)
	}
}
