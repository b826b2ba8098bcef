// SPDX-License-Identifier: Apache-2.0

// Package ctxsleep holds a sleep that a context cuts short, and the retry
// loop of a follower built on it.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits for d, and reports false if ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
