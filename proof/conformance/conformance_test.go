// SPDX-License-Identifier: Apache-2.0

package conformance

import (
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/migrate/v2diff"
)

// TestConformance starts one real etcd v2 server and one bridge and runs
// every scripted case, then the random sequences, against both.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a reference etcd and a bridge")
	}
	start := time.Now()
	e := newEnv(t)
	t.Logf("servers up in %v: ref %s, bridge %s", time.Since(start).Round(time.Millisecond), e.pair[v2diff.Ref].URL, e.pair[v2diff.Bridge].URL)
	defer func() { t.Log(e.summary()) }()

	t.Run("scripted", func(t *testing.T) {
		for _, c := range scriptedCases() {
			t.Run(c.Name, func(t *testing.T) { e.runCase(t, c) })
		}
	})
	t.Run("watch", func(t *testing.T) {
		for _, c := range watchCases() {
			t.Run(c.Name, func(t *testing.T) { e.runCase(t, c) })
		}
	})
	t.Run("auth", func(t *testing.T) {
		for _, c := range authCases() {
			t.Run(c.Name, func(t *testing.T) { e.runAuthCase(t, c) })
		}
	})
	t.Run("random", func(t *testing.T) { e.runRandom(t) })
}
