// SPDX-License-Identifier: Apache-2.0

package shadow

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/translate"
)

// Update is what one step of the v3 side's history says about the
// follower's work: the v2 nodes it changed, in order, and how far it has
// applied the v2 server's history.
type Update struct {
	// Rev is the v3 revision of the follower's progress record when
	// HasApplied; a read of the v3 side at or after it shows every change
	// the follower made up to Applied.
	Rev        int64
	HasApplied bool
	Applied    uint64 // the v2 server index every source event up to which is applied
	Changes    []Change
}

// Change is one v2 node as a v3 event left it.
type Change struct {
	Key  string // the v2 key
	Dir  bool   // a directory (its marker), else a file
	Gone bool   // deleted or expired
	// Sum is the value's SHA-256 (files only); TTL says the node is on a
	// lease.
	Sum [32]byte
	TTL bool
}

// Updates delivers the v3 side's updates. Run sends them on out, in revision
// order, until ctx ends or the feed fails; the shadow runs it again after a
// failure (changes in between are missed: the writes they concern are then
// decided from the v3 node alone).
type Updates interface {
	Run(ctx context.Context, out chan<- Update) error
}

// V3Updates is the Updates of an etcd v3 cluster: one watch over the bridge's
// whole key range (translate.Layout.WatchRange), which holds the data keys,
// the directory markers and the follower's progress record
// (cutover.Keys.Follow), so they arrive in one order.
type V3Updates struct {
	Client  *clientv3.Client
	Layout  translate.Layout
	Timeout time.Duration // of the first read
}

// Run implements Updates.
func (f *V3Updates) Run(ctx context.Context, out chan<- Update) error {
	follow := cutover.KeysFor(f.Layout.MetaPrefix).Follow
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = Defaults.Timeout
	}
	gctx, cancel := context.WithTimeout(ctx, timeout)
	resp, err := f.Client.Get(gctx, follow)
	cancel()
	if err != nil {
		return fmt.Errorf("reading the follower's progress %s: %w", follow, err)
	}
	first := Update{Rev: resp.Header.Revision}
	if len(resp.Kvs) > 0 {
		first.Applied, first.HasApplied = decodeFollow(resp.Kvs[0].Value)
	}
	if !send(ctx, out, first) {
		return nil
	}
	start, end := f.Layout.WatchRange()
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	wch := f.Client.Watch(wctx, start, clientv3.WithRange(end), clientv3.WithRev(resp.Header.Revision+1))
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watching the v3 side: %w", err)
		}
		var u Update
		for _, ev := range wr.Events {
			key := string(ev.Kv.Key)
			gone := ev.Type == clientv3.EventTypeDelete
			if key == follow && !gone {
				if a, ok := decodeFollow(ev.Kv.Value); ok {
					u.Rev, u.Applied, u.HasApplied = ev.Kv.ModRevision, a, true
				}
				continue
			}
			c := Change{Gone: gone, TTL: ev.Kv.Lease != 0}
			if p, ok := f.Layout.PathOfData(key); ok {
				c.Key = p
				c.Sum = sha256.Sum256(ev.Kv.Value)
			} else if p, ok := f.Layout.PathOfMarker(key); ok {
				c.Key, c.Dir = p, true
			} else {
				continue
			}
			u.Changes = append(u.Changes, c)
		}
		if (len(u.Changes) > 0 || u.HasApplied) && !send(ctx, out, u) {
			return nil
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("the v3 watch ended")
}

func decodeFollow(b []byte) (uint64, bool) {
	var r cutover.FollowRecord
	if json.Unmarshal(b, &r) != nil {
		return 0, false
	}
	return r.Index, true
}

func send(ctx context.Context, out chan<- Update, u Update) bool {
	select {
	case out <- u:
		return true
	case <-ctx.Done():
		return false
	}
}
