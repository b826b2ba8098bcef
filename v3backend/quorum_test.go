// SPDX-License-Identifier: Apache-2.0

package v3backend

// The heartbeat's quorum check against fake members (liveness_test.go):
// a member cut off from its peers is left for one a quorum confirms; a
// member behind in applying is excused; a member without a quorum is kept
// while no other member has one either (the cluster elects a leader).

import (
	"context"
	"testing"
	"time"
)

// TestACutOffMemberIsLeftForOneWithAQuorum: a member that answers its
// status (it believes in a leader and has applied what it committed) but
// gets no read confirmed is missed at each timeout and, at the last miss,
// left for the member a quorum confirms. A serving member is asked one
// call per heartbeat, never its status.
func TestACutOffMemberIsLeftForOneWithAQuorum(t *testing.T) {
	const timeout = time.Second // see TestAHungHeartbeatIsAMissAfterItsTimeout
	m1, m2, b := onTheFirstOfTwo(t, 10*time.Millisecond, timeout)
	_, atConnect := m1.counts() // its release, read once
	waitUntil(t, "five heartbeats answered", func() bool { n, _ := m1.stats(); return n >= 5 })
	if checks, statuses := m1.counts(); statuses != atConnect {
		t.Fatalf("a serving member was asked its status %d times in %d checks, want never", statuses-atConnect, checks)
	}

	m2.set(serving, 0)
	start := time.Now()
	m1.set(cutOff, 0)
	waitUntil(t, "the cut-off member is declared lost", func() bool { return counterValue(t, b.metrics.losses) == 1 })
	if took := time.Since(start); took < 2*timeout {
		t.Fatalf("declared lost %v after the cut: sooner than 2 checks of %v", took, timeout)
	}
	if got := counterValue(t, b.metrics.heartbeatMisses); got != 2 {
		t.Fatalf("%v heartbeat misses counted, want 2", got)
	}
	if _, statuses := m1.counts(); statuses < 2 {
		t.Fatalf("the cut-off member was asked its status %d times, want once per missed check", statuses)
	}
	waitUntil(t, "the bridge moved to the member with a quorum", func() bool { return b.Endpoint() == m2.ep })
	for name, c := range map[string]float64{"deferred losses": counterValue(t, b.metrics.deferred),
		"checks excused as applying": counterValue(t, b.metrics.applying),
		"checks excused as late":     counterValue(t, b.metrics.excused)} {
		if c != 0 {
			t.Errorf("%v %s, want 0", c, name)
		}
	}
}

// TestACutOffLeaderIsLeftAtOnce: a leader that no quorum confirms is left
// after its misses, without waiting for another member to have a quorum
// (none has one until the majority has elected a leader); the bridge
// connects to the first member that has one.
func TestACutOffLeaderIsLeftAtOnce(t *testing.T) {
	const timeout = time.Second
	m1, m2, b := onTheFirstOfTwo(t, 10*time.Millisecond, timeout)
	m1.set(cutOffLeader, 0)
	waitUntil(t, "the cut-off leader is declared lost", func() bool { return counterValue(t, b.metrics.losses) == 1 })
	if misses, deferred := counterValue(t, b.metrics.heartbeatMisses), counterValue(t, b.metrics.deferred); misses != 2 ||
		deferred != 0 {
		t.Fatalf("%v misses, %v losses deferred; want 2, 0", misses, deferred)
	}
	m2.set(serving, 0) // the majority has elected a leader
	waitUntil(t, "the bridge moved to the member with a quorum", func() bool { return b.Endpoint() == m2.ep })
}

// TestACutOffLeaderThatStepsDownIsLeft: a leader that no quorum confirms
// at one check, and that has stepped down by the next (cut off, it has no
// leader), is still the member cut off: left after its misses, without
// waiting for the majority to elect a leader.
func TestACutOffLeaderThatStepsDownIsLeft(t *testing.T) {
	const timeout = time.Second
	m1, m2, b := onTheFirstOfTwo(t, 10*time.Millisecond, timeout)
	m1.setThen(cutOffLeader, 1, notServing)
	waitUntil(t, "the cut-off leader is declared lost", func() bool { return counterValue(t, b.metrics.losses) == 1 })
	if misses, deferred := counterValue(t, b.metrics.heartbeatMisses), counterValue(t, b.metrics.deferred); misses != 2 ||
		deferred != 0 {
		t.Fatalf("%v misses, %v losses deferred; want 2, 0", misses, deferred)
	}
	m2.set(serving, 0)
	waitUntil(t, "the bridge moved to the member with a quorum", func() bool { return b.Endpoint() == m2.ep })
}

// TestAMembersOwnTimeoutIsATimeout: a cut-off member of etcd 3.4 may end a
// check whose deadline passed itself, with codes.Unknown, before the
// bridge's own deadline does: that check is a timeout all the same, whose
// status tells a member without a quorum, so the other member is asked at
// each of the two misses and the member is left at the second, with no
// loss deferred.
func TestAMembersOwnTimeoutIsATimeout(t *testing.T) {
	const timeout = time.Second
	m1, m2, b := onTheFirstOfTwoReleases(t, 10*time.Millisecond, timeout, "3.4.23", "3.4.23")
	m2.set(serving, 0)
	m1.answerUnknown(1)
	m1.set(cutOff, 0)
	waitUntil(t, "the cut-off member is declared lost", func() bool { return counterValue(t, b.metrics.losses) == 1 })
	if misses, deferred := counterValue(t, b.metrics.heartbeatMisses), counterValue(t, b.metrics.deferred); misses != 2 ||
		deferred != 0 {
		t.Fatalf("%v misses, %v losses deferred; want 2, 0", misses, deferred)
	}
	waitUntil(t, "the bridge moved to the member with a quorum", func() bool { return b.Endpoint() == m2.ep })
}

// TestAnOldMemberCutOffHasNoQuorumElsewhere: polled while the bridge's
// member has no leader, a member of etcd 3.4 cut off from its peers, which
// answers its member list from memory, is asked a read, which no quorum
// confirms: no member has a quorum, and the loss is deferred. So with its
// release read at connect, and with the member added to the endpoints
// later (by auto-sync), its release read when first polled.
func TestAnOldMemberCutOffHasNoQuorumElsewhere(t *testing.T) {
	for _, later := range []bool{false, true} {
		t.Run(map[bool]string{false: "read at connect", true: "added later"}[later], func(t *testing.T) {
			const interval, timeout = 10 * time.Millisecond, 300 * time.Millisecond
			m1, m2 := startFakeMember(t, serving), startFakeRelease(t, cutOff, "3.4.23")
			eps := []string{m1.ep, m2.ep}
			if later {
				eps = eps[:1]
			}
			b := newMonitored(t, Config{HeartbeatInterval: interval, HeartbeatTimeout: timeout, HeartbeatFailures: 2,
				DialTimeout: 2 * time.Second}, eps...)
			if b.Endpoint() != m1.ep {
				t.Fatalf("connected to %q, want the serving %q", b.Endpoint(), m1.ep)
			}
			if later {
				b.mu.Lock()
				b.eps = []string{m1.ep, m2.ep}
				b.mu.Unlock()
			}
			m1.set(notServing, 0)
			waitUntil(t, "a loss deferred, and three misses past it (or a loss)", func() bool {
				return counterValue(t, b.metrics.losses) > 0 ||
					counterValue(t, b.metrics.deferred) == 1 && counterValue(t, b.metrics.heartbeatMisses) >= 5
			})
			if losses := counterValue(t, b.metrics.losses); losses != 0 || b.Endpoint() != m1.ep {
				t.Fatalf("while no member had a quorum: %v losses, on %q; want 0, on %q", losses, b.Endpoint(), m1.ep)
			}
		})
	}
}

// TestANewLeaderIsNotDeposed: a member just elected leader, in a new term,
// that has not confirmed a read yet, is a member without a quorum like
// any other: kept while no other member has a quorum.
func TestANewLeaderIsNotDeposed(t *testing.T) {
	const timeout = time.Second
	m1, _, b := onTheFirstOfTwo(t, 10*time.Millisecond, timeout)
	m1.set(newLeader, 0)
	waitUntil(t, "a loss deferred", func() bool { return counterValue(t, b.metrics.deferred) == 1 })
	served, _ := m1.stats()
	m1.set(serving, 0)
	waitUntil(t, "two heartbeats answered", func() bool { n, _ := m1.stats(); return n >= served+2 })
	if losses, misses := counterValue(t, b.metrics.losses), counterValue(t, b.metrics.heartbeatMisses); losses != 0 ||
		misses < 2 || b.Endpoint() != m1.ep {
		t.Fatalf("%v losses, %v misses, on %q; want 0, 2 at least, on %q", losses, misses, b.Endpoint(), m1.ep)
	}
}

// TestAMemberBehindInApplyingIsExcused: checks that time out while the
// member has a leader but has not applied what it committed, or while its
// storage stalls (a defrag with writes pending), are no misses, however
// many; once it stops answering altogether, it is declared lost.
func TestAMemberBehindInApplyingIsExcused(t *testing.T) {
	for _, mode := range []memberMode{behind, stalled} {
		t.Run(map[memberMode]string{behind: "behind", stalled: "stalled"}[mode], func(t *testing.T) {
			testBehindInApplying(t, mode)
		})
	}
}

func testBehindInApplying(t *testing.T, mode memberMode) {
	const timeout = time.Second
	m := startFakeMember(t, serving)
	b := newMonitored(t, Config{HeartbeatInterval: 10 * time.Millisecond, HeartbeatTimeout: timeout,
		HeartbeatFailures: 2}, m.ep)

	m.set(mode, 0)
	waitUntil(t, "three checks excused as applying", func() bool { return counterValue(t, b.metrics.applying) >= 3 })
	if misses, losses := counterValue(t, b.metrics.heartbeatMisses), counterValue(t, b.metrics.losses); misses != 0 ||
		losses != 0 || !b.Up() {
		t.Fatalf("while the member was behind: %v misses, %v losses, up %v; want 0, 0, up", misses, losses, b.Up())
	}

	applying := counterValue(t, b.metrics.applying)
	m.set(hanging, 0)
	waitUntil(t, "the silent member is declared lost", func() bool { return counterValue(t, b.metrics.losses) == 1 })
	if got := counterValue(t, b.metrics.heartbeatMisses); got != 2 {
		t.Fatalf("%v misses counted, want 2", got)
	}
	// The check in flight when the member went silent may have been
	// excused still; none after it.
	if got := counterValue(t, b.metrics.applying); got > applying+1 {
		t.Fatalf("%v checks of a silent member excused as applying, want at most 1", got-applying)
	}
}

// TestAMemberStuckApplyingIsLeft: a member whose storage stays behind
// longer than applyingLimit is excused no more: two misses, and it is left.
func TestAMemberStuckApplyingIsLeft(t *testing.T) {
	defer func(l time.Duration) { applyingLimit = l }(applyingLimit)
	applyingLimit = 500 * time.Millisecond
	m := startFakeMember(t, serving)
	b := newMonitored(t, Config{HeartbeatInterval: 10 * time.Millisecond, HeartbeatTimeout: 100 * time.Millisecond,
		HeartbeatFailures: 2}, m.ep)
	m.set(behind, 0)
	waitUntil(t, "the member stuck applying is declared lost", func() bool { return counterValue(t, b.metrics.losses) == 1 })
	if got := counterValue(t, b.metrics.heartbeatMisses); got != 2 {
		t.Fatalf("%v misses counted, want 2", got)
	}
	if got := counterValue(t, b.metrics.applying); got < 1 {
		t.Fatalf("%v checks excused as applying before the limit, want some", got)
	}
}

// TestNoMemberWithAQuorumDefersTheLoss: a member without a leader is kept
// while the other member has none either: one deferred loss, however many
// misses, until the member has gone ten heartbeats without a good one
// (never sooner); then it is lost, and the bridge moves to the first member
// that has a quorum again.
func TestNoMemberWithAQuorumDefersTheLoss(t *testing.T) {
	const interval, timeout = 10 * time.Millisecond, 300 * time.Millisecond
	m1, m2, b := onTheFirstOfTwo(t, interval, timeout)

	start := time.Now()
	m1.set(notServing, 0)
	waitUntil(t, "a loss deferred, and three misses past it", func() bool {
		return counterValue(t, b.metrics.deferred) == 1 && counterValue(t, b.metrics.heartbeatMisses) >= 5
	})
	if losses := counterValue(t, b.metrics.losses); losses != 0 || b.Endpoint() != m1.ep {
		t.Fatalf("while no member had a quorum: %v losses, on %q; want 0, on %q", losses, b.Endpoint(), m1.ep)
	}

	waitUntil(t, "the member is lost at last", func() bool { return counterValue(t, b.metrics.losses) == 1 })
	if took, limit := time.Since(start), excuseLimit*(interval+timeout); took < limit-interval-timeout {
		t.Fatalf("lost %v after its leader, sooner than the %v a loss may be deferred", took, limit)
	}
	if got := counterValue(t, b.metrics.deferred); got != 1 {
		t.Fatalf("%v losses deferred, want 1", got)
	}
	m2.set(serving, 0)
	waitUntil(t, "the bridge moved to the member with a quorum", func() bool { return b.Endpoint() == m2.ep })
}

// TestDeferralEndsWhenTheMemberHasAQuorumAgain: a cluster that elects a
// leader within the deferral keeps the bridge on its member, with no loss;
// the next election is a deferral of its own.
func TestDeferralEndsWhenTheMemberHasAQuorumAgain(t *testing.T) {
	const timeout = time.Second
	m1, _, b := onTheFirstOfTwo(t, 10*time.Millisecond, timeout)
	for round := 1; round <= 2; round++ {
		m1.set(notServing, 0)
		waitUntil(t, "a loss deferred", func() bool { return counterValue(t, b.metrics.deferred) == float64(round) })
		served, _ := m1.stats()
		m1.set(serving, 0)
		waitUntil(t, "two heartbeats answered", func() bool { n, _ := m1.stats(); return n >= served+2 })
	}
	if losses := counterValue(t, b.metrics.losses); losses != 0 || b.Endpoint() != m1.ep {
		t.Fatalf("after two elections: %v losses, on %q; want 0, on %q", losses, b.Endpoint(), m1.ep)
	}
}

// TestConnectDoesNotWaitForASilentEndpoint: connecting again, an endpoint
// that failed is tried again every heartbeat interval, so the attempt ends
// once it serves, without waiting for a silent endpoint's check to give
// up.
func TestConnectDoesNotWaitForASilentEndpoint(t *testing.T) {
	const dialTimeout = time.Minute
	m1, m2 := startFakeMember(t, serving), startFakeMember(t, notServing)
	b := newMonitored(t, Config{HeartbeatInterval: 10 * time.Millisecond, HeartbeatTimeout: time.Second,
		HeartbeatFailures: 2, DialTimeout: dialTimeout}, m1.ep, m2.ep)
	m1.set(hanging, 0)
	done := make(chan *session, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		s, err := b.connect(ctx, true)
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	waitUntil(t, "the member without a leader was tried twice", func() bool { n, _ := m2.counts(); return n >= 2 })
	m2.set(serving, 0)
	select {
	case s := <-done:
		if s == nil {
			return
		}
		defer s.end()
		if s.endpoint != m2.ep {
			t.Fatalf("connected to %q, want %q", s.endpoint, m2.ep)
		}
	case <-time.After(dialTimeout / 2):
		t.Fatal("connect waited for the silent endpoint")
	}
}

// onTheFirstOfTwo starts two fake members, the first serving and the
// second not, and a monitored backend over both (two misses lose a
// member), connected to the first.
func onTheFirstOfTwo(t *testing.T, interval, timeout time.Duration) (m1, m2 *fakeMember, b *Backend) {
	t.Helper()
	return onTheFirstOfTwoReleases(t, interval, timeout, "", "")
}

// onTheFirstOfTwoReleases is onTheFirstOfTwo with members whose status
// claims releases v1 and v2.
func onTheFirstOfTwoReleases(t *testing.T, interval, timeout time.Duration, v1, v2 string) (m1, m2 *fakeMember,
	b *Backend) {
	t.Helper()
	m1, m2 = startFakeRelease(t, serving, v1), startFakeRelease(t, notServing, v2)
	b = newMonitored(t, Config{HeartbeatInterval: interval, HeartbeatTimeout: timeout, HeartbeatFailures: 2,
		DialTimeout: 2 * time.Second}, m1.ep, m2.ep)
	if b.Endpoint() != m1.ep {
		t.Fatalf("connected to %q, want the serving %q", b.Endpoint(), m1.ep)
	}
	return m1, m2, b
}
