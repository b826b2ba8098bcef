// SPDX-License-Identifier: Apache-2.0

package ctxsleep

import (
	"context"
	"testing"
	"time"
)

func TestSleepWaitsOrEndsWithItsContext(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("a sleep with a live context did not run its course")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) {
		t.Error("a sleep with an ended context reported it ran its course")
	}
	if time.Since(start) > 10*time.Second {
		t.Error("a sleep with an ended context did not return at once")
	}
}

// TestRetryBacksOffAndEndsWithItsContext: runs are spaced by a doubling
// back-off, each error is reported, and the loop ends with its context.
func TestRetryBacksOffAndEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var starts []time.Time
	var errs int
	Retry(ctx, func(context.Context) error {
		starts = append(starts, time.Now())
		if len(starts) == 4 {
			cancel()
		}
		return context.DeadlineExceeded
	}, func(err error) {
		if err != context.DeadlineExceeded {
			t.Errorf("ended with %v", err)
		}
		errs++
	})
	if len(starts) != 4 || errs != 3 {
		t.Fatalf("%d runs, %d errors reported; want 4 and 3 (none after the context ended)", len(starts), errs)
	}
	for i, want := range []time.Duration{retryFirst, 2 * retryFirst, 4 * retryFirst} {
		if gap := starts[i+1].Sub(starts[i]); gap < want {
			t.Errorf("run %d came %v after the one before; want at least %v", i+2, gap, want)
		}
	}
}
