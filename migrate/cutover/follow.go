// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrSwitched ends a follower: the mode record says etcd v3 is the
// authority, so the v2 server's changes must no longer be applied.
var ErrSwitched = errors.New("the cutover to etcd v3 is done")

// FollowReporter records how far `migrate --follow` has applied the v2
// server's changes (Keys.Follow), for the cutover to wait on. While the
// follower is idle it proves progress itself with a probe of the v2 server
// (a watch from the next index that parks), so an idle follower's record
// stays within the v2 server's event history. It also watches the mode
// record and ends the follower once the cutover is done.
type FollowReporter struct {
	Client   *clientv3.Client
	Keys     Keys
	V2Server *V2Server
	Prefix   string
	// Interval between writes of the record (default 100ms); an idle
	// follower is probed every ten intervals.
	Interval       time.Duration
	RequestTimeout time.Duration
	Log            func(string)

	applied atomic.Uint64
}

// Applied notes that every v2 server event up to index is handled.
func (f *FollowReporter) Applied(index uint64) {
	for {
		old := f.applied.Load()
		if index <= old || f.applied.CompareAndSwap(old, index) {
			return
		}
	}
}

// Check refuses to follow once etcd v3 is the authority: the v2 server's
// changes would overwrite what clients wrote since.
func (f *FollowReporter) Check(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, f.timeout())
	defer cancel()
	resp, err := f.Client.Get(cctx, f.Keys.Mode)
	if err != nil {
		return fmt.Errorf("reading the mode record: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	rec, err := Decode(resp.Kvs[0].Value)
	if err != nil {
		return err
	}
	if rec.Mode == ModeV3 || rec.Mode == ModeFencing && rec.From == ModeV3 {
		return fmt.Errorf("%w: the mode record says etcd v3 is the authority (generation %d, %s, set by %s at %s): "+
			"copying the v2 server now would overwrite what clients wrote since; run `migrate rollback` first",
			ErrSwitched, rec.Generation, rec.Mode, rec.By, rec.At.Format(time.RFC3339))
	}
	return nil
}

func (f *FollowReporter) timeout() time.Duration {
	if f.RequestTimeout > 0 {
		return f.RequestTimeout
	}
	return 5 * time.Second
}

func (f *FollowReporter) logf(format string, a ...any) {
	if f.Log != nil {
		f.Log(fmt.Sprintf(format, a...))
	}
}

// Run writes the record until ctx ends (then it marks the follower
// stopped) or the cutover is done (ErrSwitched).
func (f *FollowReporter) Run(ctx context.Context) error {
	interval := f.Interval
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	_, cid, err := f.V2Server.Index(ctx)
	if err != nil {
		f.logf("follow progress: reading the v2 server's cluster id: %v", err)
	}
	rec := FollowRecord{V2Server: f.V2Server.String(), ClusterID: cid, Prefix: f.Prefix}
	wch, stop := f.watch(ctx)
	defer func() { stop() }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var written uint64
	idle := 0
	for {
		select {
		case <-ctx.Done():
			rec.Stopped = "interrupted"
			f.write(context.Background(), &rec)
			return nil
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				stop()
				wch, stop = f.watch(ctx)
				if err := f.Check(ctx); errors.Is(err, ErrSwitched) {
					f.logf("%v: stopping", err)
					return ErrSwitched
				}
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				if m, err := Decode(ev.Kv.Value); err == nil && m.Mode == ModeV3 {
					rec.Index = max(rec.Index, f.applied.Load())
					rec.Stopped = fmt.Sprintf("the cutover to etcd v3 is done (generation %d)", m.Generation)
					f.write(context.Background(), &rec)
					f.logf("the mode record says etcd v3 is the authority (generation %d): stopping", m.Generation)
					return ErrSwitched
				}
			}
		case <-tick.C:
			cur := f.applied.Load()
			if cur == written {
				if idle++; idle < 10 || cur == 0 {
					continue
				}
				// Idle: prove that nothing below the prefix came since.
				idle = 0
				if ok, at, err := f.V2Server.Caught(ctx, f.Prefix, cur+1); err == nil && ok {
					f.Applied(at)
					cur = f.applied.Load()
				}
				if cur == written {
					continue
				}
			}
			idle = 0
			rec.Index = cur
			if f.write(ctx, &rec) {
				written = cur
			}
		}
	}
}

// watch opens a watch of the mode record.
func (f *FollowReporter) watch(ctx context.Context) (clientv3.WatchChan, context.CancelFunc) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	return f.Client.Watch(wctx, f.Keys.Mode), cancel
}

func (f *FollowReporter) write(ctx context.Context, rec *FollowRecord) bool {
	rec.Updated = time.Now().UTC()
	b, _ := json.Marshal(rec)
	cctx, cancel := context.WithTimeout(ctx, f.timeout())
	defer cancel()
	if _, err := f.Client.Put(cctx, f.Keys.Follow, string(b)); err != nil {
		f.logf("follow progress: writing %s: %v", f.Keys.Follow, err)
		return false
	}
	return true
}
