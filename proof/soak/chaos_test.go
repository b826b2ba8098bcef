// SPDX-License-Identifier: Apache-2.0

package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// faultKind is a way a member breaks.
type faultKind int

const (
	blackhole  faultKind = iota // power off: its traffic is dropped, no FIN, no RST
	freeze                      // SIGSTOP, then SIGCONT
	leaderMove                  // clientv3 MoveLeader to another member
	numKinds
)

var kindNames = [numKinds]string{"blackhole", "freeze", "leader move"}

// fault is one fault injected.
type fault struct {
	kind         faultKind
	member       int  // the faulted member; for a leader move, the old leader
	bridgeMember bool // it was the member the bridge used
	leader       bool // it was the leader
	start, end   time.Time
	err          error // a leader move that failed
}

const (
	minHold, maxHold = 2 * time.Second, 8 * time.Second // how long a fault lasts
	minGap, maxGap   = 2 * time.Second, 6 * time.Second // between faults
	recoverBound     = 30 * time.Second                 // a healed member serves again within it
)

// chaos injects one fault at a time, on a random member (the bridge's
// member half the time), and heals it after a few seconds; the next fault
// waits until the healed member serves linearizable reads again, so quorum
// always stays.
type chaos struct {
	t      *testing.T
	cl     *v2bridgetest.Cluster
	clis   []*clientv3.Client // one per member, on its own URL (around the fault proxies)
	rng    *rand.Rand
	faults []fault
	// unrecovered counts healed members that did not serve again within
	// recoverBound.
	unrecovered int
}

func newChaos(t *testing.T, cl *v2bridgetest.Cluster, seed uint64) *chaos {
	c := &chaos{t: t, cl: cl, rng: rand.New(rand.NewPCG(seed, 1))}
	for i := range cl.Members {
		c.clis = append(c.clis, cl.MemberClient(t, i))
	}
	return c
}

func (c *chaos) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(c.rng.Int64N(int64(hi-lo)))
}

// gap is a random pause before the next fault.
func (c *chaos) gap() time.Duration { return c.between(minGap, maxGap) }

// one injects a fault, holds it, heals it and waits for the member to
// serve again. bridgeMember is the member the bridge uses (-1: unknown).
func (c *chaos) one(bridgeMember int) {
	c.t.Helper()
	f := fault{kind: faultKind(c.rng.IntN(int(numKinds))), member: c.rng.IntN(len(c.cl.Members))}
	if bridgeMember >= 0 && c.rng.IntN(2) == 0 {
		f.member = bridgeMember
	}
	leader := c.leader()
	if f.kind == leaderMove {
		if leader < 0 {
			f.kind = freeze // nobody to move: break something instead
		} else {
			f.member = leader
		}
	}
	f.leader = f.member == leader
	f.bridgeMember = f.member == bridgeMember
	f.start = time.Now()
	switch f.kind {
	case leaderMove:
		f.err = c.moveLeader(leader)
		f.end = time.Now()
	case blackhole:
		c.cl.Blackhole(f.member)
		time.Sleep(c.between(minHold, maxHold))
		c.cl.Heal(f.member)
		f.end = time.Now()
	case freeze:
		c.cl.Freeze(f.member)
		time.Sleep(c.between(minHold, maxHold))
		c.cl.Thaw(f.member)
		f.end = time.Now()
	}
	c.faults = append(c.faults, f)
	if !c.serves(f.member, recoverBound) {
		c.unrecovered++
		c.t.Logf("member %d does not serve %v after a %s was healed", f.member, recoverBound, kindNames[f.kind])
	}
}

// leader is the index of the leader as the members report it, or -1.
func (c *chaos) leader() int {
	for _, cli := range c.clis {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, cli.Endpoints()[0])
		cancel()
		if err != nil || st.Leader == 0 {
			continue
		}
		for i, m := range c.cl.Members {
			if m.ID == st.Leader {
				return i
			}
		}
	}
	return -1
}

// moveLeader hands leadership from member from to another member.
func (c *chaos) moveLeader(from int) error {
	to := (from + 1 + c.rng.IntN(len(c.cl.Members)-1)) % len(c.cl.Members)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.clis[from].MoveLeader(ctx, c.cl.Members[to].ID); err != nil {
		return fmt.Errorf("move leader %d -> %d: %w", from, to, err)
	}
	return nil
}

// serves waits until member i answers a linearizable read (it reaches a
// leader and has caught up), at most d.
func (c *chaos) serves(i int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.clis[i].Get(ctx, "soak-probe")
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// explain tells why the bridge may have lost its member at t: a fault on
// that member, or a fault that cost the cluster its leader, active then or
// healed within the detection bound before. "" means no fault explains it.
func explainLoss(faults []fault, member int, t time.Time, detect time.Duration) string {
	for _, f := range faults {
		if t.Before(f.start) || t.After(f.end.Add(detect)) {
			continue
		}
		switch {
		case f.member == member && f.kind != leaderMove:
			return "its member faulted"
		case f.leader || f.kind == leaderMove:
			return "leader lost or moved"
		}
	}
	return ""
}
