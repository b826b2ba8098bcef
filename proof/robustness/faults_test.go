// SPDX-License-Identifier: Apache-2.0

package robustness

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// faultKind is a fault the run injects.
type faultKind int

const (
	bridgeKill faultKind = iota // SIGKILL a bridge, start it again
	bridgeTerm                  // SIGTERM a bridge (graceful), start it again
	freeze                      // SIGSTOP a member, SIGCONT it
	blackhole                   // drop a member's traffic, then heal it
	leaderMove                  // etcd MoveLeader to another member
	compaction                  // compact v3 history to the current revision
	numFaults
)

var faultNames = [numFaults]string{"bridge SIGKILL restart", "bridge SIGTERM restart", "member SIGSTOP",
	"member blackhole", "leader move", "compaction"}

// faultHold is how long a member stays frozen or blackholed: longer than
// the bridge's default liveness bound (two missed 1 s heartbeats), so the
// bridge fails over.
const faultHold = 4 * time.Second

// recoverBound: a healed member serves again within it.
const recoverBound = 30 * time.Second

// chaos injects one fault at a time, every kind once per round in a random
// order, each followed by a random pause.
type chaos struct {
	t       *testing.T
	cl      *v2bridgetest.Cluster
	bridges []*bridge
	rng     *rand.Rand
	counts  [numFaults]int
	errs    []string // faults that did not go as asked (a failed leader move)
}

// run injects faults until deadline.
func (c *chaos) run(deadline time.Time) {
	for {
		for _, k := range c.rng.Perm(int(numFaults)) {
			if !time.Now().Add(faultHold).Before(deadline) {
				return
			}
			c.one(faultKind(k))
			time.Sleep(time.Duration(500+c.rng.IntN(1500)) * time.Millisecond)
		}
	}
}

func (c *chaos) one(k faultKind) {
	c.t.Helper()
	m := c.rng.IntN(len(c.cl.Members))
	switch k {
	case bridgeKill, bridgeTerm:
		sig := syscall.SIGKILL
		if k == bridgeTerm {
			sig = syscall.SIGTERM
		}
		c.bridges[c.rng.IntN(len(c.bridges))].restart(sig)
	case freeze:
		c.cl.Freeze(m)
		time.Sleep(faultHold)
		c.cl.Thaw(m)
	case blackhole:
		c.cl.Blackhole(m)
		time.Sleep(faultHold)
		c.cl.Heal(m)
	case leaderMove:
		lead := c.cl.Leader()
		if lead < 0 {
			c.errs = append(c.errs, "leader move: no leader")
			return
		}
		if err := c.cl.MoveLeader((lead + 1 + c.rng.IntN(len(c.cl.Members)-1)) % len(c.cl.Members)); err != nil {
			c.errs = append(c.errs, err.Error())
			return
		}
	case compaction:
		c.cl.Compact(c.t)
	}
	c.counts[k]++
	if k == freeze || k == blackhole {
		if !c.cl.WaitServes(m, recoverBound) {
			c.t.Errorf("member %d does not serve %v after a %s was healed", m, recoverBound, faultNames[k])
		}
	}
}

// bridge runs one bridge process in a slot, restarting it on its address.
type bridge struct {
	t    *testing.T
	slot *bridgeSlot
	bin  string
	args []string
	proc *v2bridgetest.BridgeProcess
	// exits are how stops went that were not clean (a SIGTERM that did not
	// end the process with status 0).
	exits []string
}

// start starts the bridge on url ("" or taken: a fresh port).
func (b *bridge) start(url string) {
	b.t.Helper()
	first := true
	v2bridgetest.RetryPortTaken(b.t, "start a bridge", func() error {
		if !first || url == "" {
			url = v2bridgetest.FreeURL(b.t)
		}
		first = false
		p, err := v2bridgetest.StartBridgeProcess(b.bin, url, b.args...)
		if err != nil {
			return err
		}
		b.proc = p
		return nil
	})
	u := b.proc.URL
	b.slot.url.Store(&u)
}

// restart stops the bridge with sig and starts it again on its address.
func (b *bridge) restart(sig syscall.Signal) {
	b.t.Helper()
	b.slot.gen.Add(1) // odd: restarting
	if how := b.proc.Stop(sig); how != "" {
		b.exits = append(b.exits, sig.String()+": "+how)
	}
	b.start(b.proc.URL)
	b.slot.gen.Add(1) // even: serving
}

func (b *bridge) stop() {
	if b.proc != nil {
		if how := b.proc.Stop(syscall.SIGTERM); how != "" {
			b.exits = append(b.exits, "final SIGTERM: "+how)
		}
		b.proc = nil
	}
}
