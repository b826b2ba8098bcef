// SPDX-License-Identifier: Apache-2.0

package shadow

import (
	"net/url"
	"testing"
	"time"
)

// TestAFollowersChangeMatchesAWriteOnlyWithItsTTL: a change of the key
// that has a TTL the write had not (or lacks one it had) is not the write
// made: the v3 node decides once the follower is past the write.
func TestAFollowersChangeMatchesAWriteOnlyWithItsTTL(t *testing.T) {
	e, f := writeEnv(t, nil)
	e.both("/w", "1", false)
	e.write(t, "PUT", "/v2/keys/w", url.Values{"value": {"2"}})
	waitGauge(t, e, "v2bridge_shadow_pending_writes", 1)
	e.v3.put("/w", "2", false, time.Hour) // what the follower wrongly made
	f.send(t, Update{Changes: []Change{file("/w", "2", true)}, HasApplied: true, Applied: everything})
	e.waitCounts(t, want(Counts{Sampled: 1, Writes: 1, Divergences: map[string]uint64{KindTTL: 1}}))
	e.recent(t, Divergence{Key: "/w", Kind: KindTTL, Method: "PUT", Where: "node.ttl"})
}

// TestATTLWriteWhoseNodeExpiredSinceMatches: a TTL node gone by the time
// the follower is past its write (within the tolerance of its expiration)
// expired on both sides: no divergence.
func TestATTLWriteWhoseNodeExpiredSinceMatches(t *testing.T) {
	e, f := writeEnv(t, nil)
	e.both("/w", "1", false)
	e.write(t, "PUT", "/v2/keys/w", url.Values{"value": {"2"}, "ttl": {"1"}})
	waitGauge(t, e, "v2bridge_shadow_pending_writes", 1)
	e.v3.remove("/w") // expired on the v3 side
	f.send(t, Update{Changes: []Change{file("/w", "2", true), {Key: "/w", Gone: true}}, HasApplied: true, Applied: everything})
	e.waitCounts(t, want(Counts{Sampled: 1, Writes: 1}))
	e.recent(t)
}

// TestATTLWriteTheFollowerMadeBeforeItsAnswerThenChangedMatches: a TTL
// write the follower made before its answer reached the bridge, the key
// rewritten since, is judged made: the v3 node is the later write's.
func TestATTLWriteTheFollowerMadeBeforeItsAnswerThenChangedMatches(t *testing.T) {
	e, f := writeEnv(t, nil)
	e.both("/w", "1", false)
	f.send(t, Update{Changes: []Change{file("/w", "2", true), file("/w", "later", false)}})
	e.write(t, "PUT", "/v2/keys/w", url.Values{"value": {"2"}, "ttl": {"100"}})
	waitGauge(t, e, "v2bridge_shadow_pending_writes", 1)
	e.v3.put("/w", "later", false, 0)
	f.send(t, Update{HasApplied: true, Applied: everything})
	e.waitCounts(t, want(Counts{Sampled: 1, Writes: 1}))
	e.recent(t)
}

// TestAnUnreadableV3SideAtTheFollowersIndexDropsTheWrite: a write at
// exactly the follower's applied index whose v3 node cannot be read is
// dropped when it ages out, not counted as lagging (the follower has it).
func TestAnUnreadableV3SideAtTheFollowersIndexDropsTheWrite(t *testing.T) {
	e, f := writeEnv(t, func(c *Config) { c.MaxAge = 3 * time.Second; c.Timeout = 50 * time.Millisecond })
	e.both("/w", "1", false)
	e.v3.mu.Lock()
	e.v3.unavailable = true
	e.v3.mu.Unlock()
	idx := e.writeIndex(t, "PUT", "/v2/keys/w", url.Values{"value": {"2"}})
	f.send(t, Update{HasApplied: true, Applied: idx})
	e.waitCounts(t, want(Counts{Sampled: 1, Dropped: map[string]uint64{"v3_unavailable": 1}}))
	e.recent(t)
}
