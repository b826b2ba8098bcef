// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/proof/v2ref"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestDualModeMovesWithTheSession: a dual-mode bridge's auth data, member
// list and mode record agent follow etcd v3 on the v3 side's checked
// session once it is connected, so its member frozen or black-holed costs
// v2 requests no more than the bridge's own detection of the loss, as in v3
// mode: served from the v2 server (the agent's lease bounds its writes),
// then from etcd v3 after a cutover, with v2 auth off and on.
func TestDualModeMovesWithTheSession(t *testing.T) {
	t.Parallel() // with the other tests that mostly wait: its faults, and the settling after each
	c := v2bridgetest.StartProcessCluster(t, 3)
	ref := v2ref.StartT(t, v2ref.Options{})
	bin := buildBridge(t)
	u := v2bridgetest.FreeURL(t)
	// A short lease: writes stop unless the agent renews it within 2.5 s.
	p, err := v2bridgetest.StartBridgeProcess(bin, u, "--v2-server", ref.URL,
		"--endpoints", strings.Join(c.ProxiedEndpoints(), ","), "--mode-lease-ttl", "3s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("the bridge's log, its end:\n%s", p.Log())
		}
	})
	waitFor(t, 30*time.Second, "the bridge's v3 side connected", func() bool {
		return strings.Contains(p.Log(), "dual mode: the etcd v3 side is connected")
	})
	// Each part alone: -run 'TestDualModeMovesWithTheSession/^from_the_v2_server$'.
	t.Run("from the v2 server", func(t *testing.T) {
		bridges := func() int { return bridgeMember(t, c, p) }
		faultsCostOnlyDetection(t, c, p, u, []livenessFault{
			{"freeze", bridges, c.Freeze, c.Thaw, false},
			{"blackhole", bridges, c.Blackhole, c.Heal, false},
		})
	})
	t.Run("from etcd v3 after a cutover", func(t *testing.T) {
		endpoints := strings.Join(c.Endpoints(), ",")
		// On etcd 3.4 the last heal forces an election, and the follower
		// gives up on a cluster without a leader when it starts.
		if !c.WaitSettled(time.Second, 20*time.Second) {
			t.Fatal("the members agree on no leader and term after the faults")
		}
		var follower *proc
		t.Cleanup(func() { // after the follower stopped
			if t.Failed() && follower != nil {
				t.Logf("the follower's log:\n%s", follower.logs)
			}
		})
		follower = startBridgeProcess(t, nil, "migrate", "--v2-server", ref.URL, "--endpoints", endpoints,
			"--follow", "--progress", "none", "--ttl-resync", "0")
		v3 := c.Client(t)
		waitFor(t, 30*time.Second, "the follower's progress record", func() bool {
			r, err := v3.Get(ctxT(t, 5*time.Second), "_v2bridge/migrate/follow")
			return err == nil && len(r.Kvs) > 0
		})
		res := runBinary(t, nil, "migrate", "cutover", "--v2-server", ref.URL, "--endpoints", endpoints,
			"--index-margin", "100", "--ack-timeout", "20s")
		if res.code != 0 {
			t.Fatalf("migrate cutover (exit %d):\n%s%s\nfollower:\n%s", res.code, res.stdout, res.stderr, follower.logs)
		}
		if m := statsMode(t, u); m != "v3" {
			t.Fatalf("/v2/stats/self says mode %q after the cutover", m)
		}
		bridges := func() int { return bridgeMember(t, c, p) }
		faultsCostOnlyDetection(t, c, p, u, []livenessFault{
			{"freeze", bridges, c.Freeze, c.Thaw, false},
			{"blackhole", bridges, c.Blackhole, c.Heal, false},
			{"freeze", bridges, c.Freeze, c.Thaw, true},
			{"blackhole", bridges, c.Blackhole, c.Heal, true},
		})
	})
}
