// SPDX-License-Identifier: Apache-2.0

package shadow

import (
	"net/url"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
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
	e.v3.remove("/w") // expired on the v3 side (its changes, if any, not seen)
	f.send(t, Update{HasApplied: true, Applied: everything})
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

// TestAV3ReadOlderThanTheFollowersRecordDecidesNothing: the v3 side read
// at a revision before the one that recorded the follower's progress (a
// lagging member) may not have the write yet: the write waits for a read
// as new as the record, then matches.
func TestAV3ReadOlderThanTheFollowersRecordDecidesNothing(t *testing.T) {
	e, f := writeEnv(t, nil)
	e.both("/w", "1", false)
	idx := e.writeIndex(t, "PUT", "/v2/keys/w", url.Values{"value": {"2"}})
	waitGauge(t, e, "v2bridge_shadow_pending_writes", 1)
	const recordRev = 7 // the revision of the follower's record; the v3 side is read below it
	f.send(t, Update{HasApplied: true, Applied: idx, Rev: recordRev})
	waitGauge(t, e, "v2bridge_shadow_follower_index", float64(idx))
	time.Sleep(300 * time.Millisecond) // a few of the matcher's ticks: each reads the old node
	if c := e.sh.Stats(); c.Writes != 0 || c.Diverged() != 0 {
		t.Fatalf("a write was decided on a read older than the follower's record: %+v", c)
	}
	e.v3.mu.Lock()
	e.v3.index = recordRev * translate.IndexesPerRevision
	e.v3.putLocked("/w", "2", false, 0)
	e.v3.mu.Unlock()
	e.waitCounts(t, want(Counts{Sampled: 1, Writes: 1}))
	e.recent(t)
}
