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
