// SPDX-License-Identifier: Apache-2.0

package ctxsleep

import (
	"context"
	"errors"
	"sync"
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

// testLive is a connection a test loses and gets back.
type testLive struct {
	mu      sync.Mutex // guards up, changed
	up      bool
	changed chan struct{}
}

func (l *testLive) live() (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up, l.changed
}

func (l *testLive) set(up bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.up = up
	close(l.changed)
	l.changed = make(chan struct{})
}

// TestRetryLiveRunsOnlyWhileUp: no run starts while the connection is down;
// a run that ends because it was lost is not reported, and the next starts
// once it is up; a run that fails while it is up is reported.
func TestRetryLiveRunsOnlyWhileUp(t *testing.T) {
	l := &testLive{changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	runs := make(chan int, 10)
	var n int
	var reported []error
	done := make(chan struct{})
	failed := errors.New("failed while up")
	go func() {
		defer close(done)
		RetryLive(ctx, l.live, func(context.Context) error {
			n++
			runs <- n
			switch n {
			case 1:
				l.set(false) // lost during the run
				return errors.New("lost")
			case 2:
				return failed
			default:
				cancel()
				return ctx.Err()
			}
		}, func(err error) { reported = append(reported, err) })
	}()
	select {
	case r := <-runs:
		t.Fatalf("run %d started while down", r)
	case <-time.After(50 * time.Millisecond): // a run would start at once
	}
	l.set(true)
	if r := <-runs; r != 1 {
		t.Fatalf("run %d first", r)
	}
	select {
	case r := <-runs:
		t.Fatalf("run %d started while down", r)
	case <-time.After(50 * time.Millisecond):
	}
	l.set(true)
	<-done
	if n != 3 || len(reported) != 1 || reported[0] != failed {
		t.Fatalf("%d runs, reported %v; want 3 runs and only the failure while up", n, reported)
	}
}

// TestRetryLiveTakesAChangeAsTheRunsEnd: a run during which the connection
// changed (a new one, or a handover) ended with it: it is not reported.
func TestRetryLiveTakesAChangeAsTheRunsEnd(t *testing.T) {
	l := &testLive{up: true, changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	var n int
	var reported []error
	RetryLive(ctx, l.live, func(context.Context) error {
		n++
		if n == 1 {
			l.set(true) // handed over to another connection, up too
			return errors.New("watch closed")
		}
		cancel()
		return ctx.Err()
	}, func(err error) { reported = append(reported, err) })
	if n != 2 || len(reported) != 0 {
		t.Fatalf("%d runs, reported %v; want 2 runs and nothing reported", n, reported)
	}
}
