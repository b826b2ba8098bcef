// SPDX-License-Identifier: Apache-2.0

package v2bridgetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Faults. Every member of a Cluster has two proxies of its own on loopback:
// one in front of its client URL (Member.ProxyURL, ProxiedEndpoints) and one
// in front of its peer URL, which is the peer URL the members advertise, so
// all raft traffic goes through the proxies too. A fault drops the bytes in
// flight in both directions and closes nothing, as a machine that lost power
// does; Heal lifts it and closes the connections that lost bytes, as the
// machine would once back. Members in child processes (StartProcessCluster)
// can also be frozen with SIGSTOP.
//
// The methods below report misuse with the cluster's t.Fatal, so call them
// from the test's goroutine.

// ProxiedEndpoints are the members' client URLs through their proxies, for a
// bridge that must see the faults.
func (c *Cluster) ProxiedEndpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.ProxyURL)
	}
	return out
}

// Index is the index in Members of the member with the given client URL or
// proxied client URL (for example Backend.Endpoint()), or -1.
func (c *Cluster) Index(endpoint string) int {
	endpoint = strings.TrimSuffix(endpoint, "/")
	for i, m := range c.Members {
		if endpoint == m.ClientURL || endpoint == m.ProxyURL {
			return i
		}
	}
	return -1
}

func (c *Cluster) member(i int) *Member {
	c.t.Helper()
	if i < 0 || i >= len(c.Members) {
		c.t.Fatalf("no member %d in a cluster of %d", i, len(c.Members))
	}
	return c.Members[i]
}

// Blackhole takes member i off the network as a power loss or a pulled cable
// would: its client and peer traffic through the proxies is dropped without
// a FIN or a RST, and new connections to it are accepted but never answered.
func (c *Cluster) Blackhole(i int) { c.member(i).blackholed.Store(true) }

// Isolate cuts member i off from its peers (a partition): clients still
// reach it, but it loses quorum, and with it its leader.
func (c *Cluster) Isolate(i int) { c.member(i).isolated.Store(true) }

// Heal lifts Blackhole and Isolate from member i. Connections that lost
// bytes to the fault are closed (as a rebooted machine answers an old
// connection with a RST); their owners reconnect.
func (c *Cluster) Heal(i int) {
	c.member(i)
	c.heal(i)
}

func (c *Cluster) heal(i int) {
	m := c.Members[i]
	m.blackholed.Store(false)
	m.isolated.Store(false)
	for _, o := range c.Members {
		if o.client != nil {
			o.client.heal()
		}
		if o.peer != nil {
			o.peer.heal()
		}
	}
}

// peerCut reports whether raft traffic between member dst and member src
// (-1: unknown) is dropped now.
func (c *Cluster) peerCut(dst, src int) bool {
	cut := func(i int) bool {
		m := c.Members[i]
		return m.blackholed.Load() || m.isolated.Load()
	}
	return cut(dst) || (src >= 0 && src < len(c.Members) && cut(src))
}

func (c *Cluster) process(i int, op string) *memberProcess {
	c.t.Helper()
	m := c.member(i)
	if m.proc == nil {
		c.t.Fatalf("%s: member %d runs in this process; start the cluster with StartProcessCluster", op, i)
	}
	return m.proc
}

// Freeze stops member i's process with SIGSTOP: the kernel still accepts and
// acknowledges its TCP traffic, but nothing answers. Only for members started
// by StartProcessCluster.
func (c *Cluster) Freeze(i int) {
	c.t.Helper()
	if err := c.process(i, "Freeze").freeze(); err != nil {
		c.t.Fatalf("freeze member %d: %v", i, err)
	}
}

// Thaw resumes a frozen member with SIGCONT.
func (c *Cluster) Thaw(i int) {
	c.t.Helper()
	c.process(i, "Thaw").thaw()
}

// Kill kills member i's process with SIGKILL: a crash, whose connections
// close at once (unlike Blackhole and Freeze). Only for members started by
// StartProcessCluster.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.process(i, "Kill")
	c.Members[i].Stop()
}

// StallStorage stalls member i's storage the way a defrag does, until the
// returned resume is called (or the test ends): it holds the backend's batch
// transaction and read transaction locks, so writes, their apply, and reads
// of the key space wait, while raft, the leader and the gRPC health service
// carry on. Unlike a real defrag, whose length depends on the disk and the
// database size, the stall lasts exactly as long as the test wants. Only for
// members in this process (StartCluster); under V2BRIDGE_TEST_ETCD it skips
// the test.
func (c *Cluster) StallStorage(i int) (resume func()) {
	c.t.Helper()
	m := c.member(i)
	if m.Etcd == nil && ExternalEtcd() != "" {
		c.t.Skip("StallStorage needs a member in this process, and " + EtcdEnv + " runs every member as " +
			ExternalEtcd())
	}
	if m.Etcd == nil {
		c.t.Fatalf("StallStorage: member %d runs in a child process; start the cluster with StartCluster", i)
	}
	be := m.Etcd.Server.Backend()
	rtx, ok := be.ReadTx().(interface {
		Lock()
		Unlock()
	})
	if !ok {
		c.t.Fatalf("StallStorage: member %d's read transaction (%T) cannot be locked", i, be.ReadTx())
	}
	// The order a defrag takes them in (a commit takes them in it too).
	btx := be.BatchTx()
	btx.LockOutsideApply()
	rtx.Lock()
	var once sync.Once
	resume = func() {
		once.Do(func() {
			rtx.Unlock()
			btx.Unlock()
		})
	}
	c.t.Cleanup(resume) // before the cluster's own cleanup closes the member
	return resume
}

// MemberClient is a clientv3 client of member i alone, on its own client URL
// (around the proxy), closed when the test ends.
func (c *Cluster) MemberClient(t TB, i int) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.member(i).ClientURL}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("clientv3: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Compact compacts the v3 history up to the current revision (physically,
// so it is gone when Compact returns) and returns that revision. It goes
// around the proxies, through the first member that does it, trying members
// without a fault first (a single blackholed member still can).
func (c *Cluster) Compact(t TB) int64 {
	t.Helper()
	var healthy, faulted []int
	for i, m := range c.Members {
		switch {
		case m.proc != nil && m.proc.frozen.Load(): // cannot answer
		case m.blackholed.Load() || m.isolated.Load():
			faulted = append(faulted, i)
		default:
			healthy = append(healthy, i)
		}
	}
	var errs []string
	for _, i := range append(healthy, faulted...) {
		rev, err := c.compactVia(i)
		if err == nil {
			return rev
		}
		errs = append(errs, fmt.Sprintf("%s: %v", c.Members[i].Name, err))
	}
	t.Fatalf("compact: no member did it: %s", strings.Join(errs, "; "))
	return 0
}

func (c *Cluster) compactVia(i int) (int64, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Members[i].ClientURL}, DialTimeout: 2 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		return 0, err
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "compact", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, err
	}
	return rev, nil
}
