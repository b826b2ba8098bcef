// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/migrate/engine"
	"github.com/v2bridge/v2bridge/migrate/shadow"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestShadowComparesEveryWriteAtASteadyRate: a steady writer of unique
// values through a passthrough bridge, ten keys each rewritten every 300
// ms, a real etcd v2 server followed by migrate into etcd v3 with its
// progress recorded: every write is compared, none lags, drops or
// diverges, and nothing is left awaiting the follower. (make bench loads
// the comparison at 500 writes/s.)
func TestShadowComparesEveryWriteAtASteadyRate(t *testing.T) {
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e := newShadowEnv(t, (*v2bridgetest.Cluster).Endpoints, func(c *shadow.Config, cl *v2bridgetest.Cluster) {
		c.Updates = &shadow.V3Updates{Client: cl.Client(t), Layout: layout}
		c.Registry = reg
	})
	ctx := ctxT(t, 3*time.Minute)
	src := e.ref.URL
	const keys = 10
	for i := range keys {
		v2do(t, src, "PUT", fmt.Sprintf("/steady/k%d", i), "value", "start")
	}
	o := engine.Options{V2Server: []string{src}, V2ServerPrefix: "/steady", Target: newTargetBackend(t, e.cl.Endpoints()),
		NoHiddenDiscovery: true}
	sum, err := engine.Copy(ctx, o)
	if err != nil {
		t.Fatalf("copy: %+v %v", sum, err)
	}
	source, err := cutover.NewV2Server([]string{src}, nil, "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rep := &cutover.FollowReporter{Client: e.cl.Client(t), Keys: cutover.KeysFor(layout.MetaPrefix), V2Server: source,
		Prefix: "/steady"}
	rep.Applied(sum.Index)
	o.Applied = rep.Applied
	fctx, fcancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		if _, err := engine.Follow(fctx, o, sum); err != nil {
			t.Errorf("follow: %v", err)
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		if err := rep.Run(fctx); err != nil {
			t.Errorf("follow progress: %v", err)
		}
	}()
	defer func() {
		fcancel()
		<-done
		<-done
	}()

	// 30 writes a second for 5 s, paced.
	const n = 150
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / 30)))
		r := do(t, "PUT", e.url, fmt.Sprintf("/v2/keys/steady/k%d", i%keys), form("value", fmt.Sprintf("v%d", i)))
		if r.status >= 300 {
			t.Fatalf("write %d: %d %s", i, r.status, r.body)
		}
	}
	want := shadow.Counts{Sampled: n, Writes: n, Divergences: map[string]uint64{}, Dropped: map[string]uint64{}}
	waitFor(t, 60*time.Second, "every write compared", func() bool {
		c := e.sh.Stats()
		return c.Writes+c.Lagging+c.DroppedTotal() >= n
	})
	c := e.sh.Stats()
	if fmt.Sprint(c) != fmt.Sprint(want) {
		t.Fatalf("counts %+v, want %+v\nlog: %v", c, want, e.logs.All())
	}
	waitFor(t, 10*time.Second, "nothing awaiting the follower", func() bool {
		return gauge(t, reg, "v2bridge_shadow_pending_writes") == 0 && gauge(t, reg, "v2bridge_shadow_lagging_writes") == 0
	})
	// The follower records its progress after it applied the writes.
	waitFor(t, 10*time.Second, "the follower's recorded index at the last write's", func() bool {
		return gauge(t, reg, "v2bridge_shadow_follower_index") >= float64(sum.Index+n)
	})
	t.Logf("%d writes in %v: %+v", n, time.Since(start).Round(time.Millisecond), c)
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	v, err := testutil.GatherAndCount(reg, name)
	if err != nil || v != 1 {
		t.Fatalf("%s: %d series, %v", name, v, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
