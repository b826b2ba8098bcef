// SPDX-License-Identifier: Apache-2.0

package v2bridgetest

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// withMember calls f with a clientv3 client of member i alone, on its own
// client URL (around the proxy), closed when f returns.
func (c *Cluster) withMember(i int, f func(ctx context.Context, cli *clientv3.Client) error) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.member(i).ClientURL}, DialTimeout: 2 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return f(ctx, cli)
}

// Leader is the index of the leader as the first member that answers
// reports it, or -1 when none knows one.
func (c *Cluster) Leader() int {
	for i := range c.Members {
		var lead uint64
		err := c.withMember(i, func(ctx context.Context, cli *clientv3.Client) error {
			st, err := cli.Status(ctx, cli.Endpoints()[0])
			if err == nil {
				lead = st.Leader
			}
			return err
		})
		if err != nil || lead == 0 {
			continue
		}
		for j, m := range c.Members {
			if m.ID == lead {
				return j
			}
		}
	}
	return -1
}

// MoveLeader hands the leadership to member to (etcd's MoveLeader, asked of
// the current leader).
func (c *Cluster) MoveLeader(to int) error {
	from := c.Leader()
	if from < 0 {
		return errors.New("move leader: no leader")
	}
	if from == to {
		return nil
	}
	return c.withMember(from, func(ctx context.Context, cli *clientv3.Client) error {
		if _, err := cli.MoveLeader(ctx, c.member(to).ID); err != nil {
			return fmt.Errorf("move leader %d -> %d: %w", from, to, err)
		}
		return nil
	})
}

// WaitServes waits until member i answers a linearizable read on its own
// client URL (it reaches a leader and has caught up), at most d; it reports
// whether it did.
func (c *Cluster) WaitServes(i int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		err := c.withMember(i, func(ctx context.Context, cli *clientv3.Client) error {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := cli.Get(ctx, "v2bridgetest-probe", clientv3.WithCountOnly())
			return err
		})
		if err == nil {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// WaitSettled waits until every member reports the same leader and raft
// term, without a change for settle, at most d; it reports whether they
// did. On etcd 3.4 (--pre-vote false by default) a member back from a
// blackhole or a partition forces an election once its messages reach the
// leader, which may be after it already serves reads (WaitServes): a fault
// struck before the cluster settled strikes that election too.
func (c *Cluster) WaitSettled(settle, d time.Duration) bool {
	deadline := time.Now().Add(d)
	var since time.Time
	var last [2]uint64 // the leader and term all members agreed on
	for time.Now().Before(deadline) {
		agreed, ok := c.agreedLeader()
		switch {
		case !ok:
			since = time.Time{}
		case since.IsZero() || agreed != last:
			since, last = time.Now(), agreed
		case time.Since(since) >= settle:
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// agreedLeader is the leader's ID and the raft term, when every member
// answers with the same, non-zero ones.
func (c *Cluster) agreedLeader() (leaderTerm [2]uint64, ok bool) {
	for i := range c.Members {
		var got [2]uint64
		err := c.withMember(i, func(ctx context.Context, cli *clientv3.Client) error {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			st, err := cli.Status(ctx, cli.Endpoints()[0])
			if err == nil {
				got = [2]uint64{st.Leader, st.RaftTerm}
			}
			return err
		})
		if err != nil || got[0] == 0 || (i > 0 && got != leaderTerm) {
			return leaderTerm, false
		}
		leaderTerm = got
	}
	return leaderTerm, true
}
