// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"testing"
	"time"
)

// TestAgentClosesTheWriteWindowShortOfTheLease: the agent lets writes run
// only until the registration's lease may have expired, less a safety
// margin, counted from when the grant or renewal was sent: never later
// than the lease's TTL, less the margin, from now.
func TestAgentClosesTheWriteWindowShortOfTheLease(t *testing.T) {
	f := newFakeEtcd(testKeys)
	s, _, _ := newBareSwitch(t)
	runAgent(t, f, s, time.Second) // a 2 s lease, renewed every 500 ms
	waitUntil(t, func() bool { return registration(t, f) != nil && !s.WritesUntil().IsZero() })
	for i := 0; i < 6; i++ { // across renewals
		until := s.WritesUntil()
		now := time.Now()
		if latest := now.Add(2*time.Second - safety); until.After(latest) {
			t.Fatalf("writes run until %v after now; at most the TTL less the safety margin (%v) may be left",
				until.Sub(now), 2*time.Second-safety)
		}
		time.Sleep(300 * time.Millisecond) // sampling over renewals, not waiting for a condition
	}
}
