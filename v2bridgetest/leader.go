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
