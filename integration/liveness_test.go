// SPDX-License-Identifier: Apache-2.0

package integration

// Liveness (docs/design.md, "Liveness"): a bridge whose etcd member is lost — powered
// off (blackholed), frozen (SIGSTOP) or cut off from quorum — ends every v2
// watch it feeds within seconds, moves to a healthy member, and the watchers
// (the Go v2 client, looping like flanneld) resume from their waitIndex with
// every event exactly once, in order; a busy member is never declared lost.
//
// With the default heartbeat, the watches in flight at a blackhole, a
// freeze or a partition end within a median of 2 s and at most 3 s of the fault (1 to 1.3 s
// by design, with room for a loaded machine, where a check may be excused
// because the bridge ran late), each with an empty 200 (the v2 client then
// re-issues it); every measured figure is logged (go test -v).

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/etcd/client/v2"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
)

const (
	livePrefix = "/live"
	// detectMax and detectMedian: the documented time for the v2 watches in
	// flight at a blackhole or a freeze to end (1 to 1.3 s by design: two
	// missed 500 ms heartbeats, the first starting within 300 ms), with a
	// check excused, and room for a loaded machine.
	detectMax    = 3 * time.Second
	detectMedian = 2 * time.Second
	// partitionBound: a member cut off from its peers gets no read
	// confirmed, and its heartbeats time out as a silent member's do; but
	// a cut-off follower is left only for a member that has a quorum,
	// which the majority has at once (when the leader is in it) or after
	// electing one (one to two election timeouts, 1 to 2 s) when the cut
	// member was the leader; then the bridge reconnects.
	partitionBound = detectMax
	// inFlightGrace: a watch answered just as the fault struck is re-issued
	// at once, and that one must end too.
	inFlightGrace = 500 * time.Millisecond
)

// seqWriter creates /live/k000000, /live/k000001, ... one at a time through
// one chosen member, around the proxies. A key is retried until it is known
// to exist; the create is guarded, so a retry of a create that did commit
// changes nothing and every key is created exactly once.
type seqWriter struct {
	clis     []*clientv3.Client
	via      atomic.Int64
	n        atomic.Int64
	failures atomic.Int64
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

func startWriter(t *testing.T, c *v2bridgetest.Cluster, via int) *seqWriter {
	w := &seqWriter{stop: make(chan struct{}), done: make(chan struct{})}
	for i := range c.Members {
		w.clis = append(w.clis, c.MemberClient(t, i))
	}
	w.via.Store(int64(via))
	go w.run()
	t.Cleanup(func() { w.halt() })
	return w
}

func (w *seqWriter) run() {
	defer close(w.done)
	var settleBy time.Time
	for {
		err := w.create(w.clis[w.via.Load()], fmt.Sprintf("%s/k%06d", livePrefix, w.n.Load()))
		pause := 25 * time.Millisecond
		if err == nil {
			w.n.Add(1)
		} else {
			w.failures.Add(1)
			pause = 100 * time.Millisecond
		}
		select {
		case <-w.stop:
			// Once stopped, a failed create is retried until it is
			// known to exist, so that n is exact.
			if err == nil {
				return
			}
			if settleBy.IsZero() {
				settleBy = time.Now().Add(10 * time.Second)
			} else if time.Now().After(settleBy) {
				return
			}
			time.Sleep(pause)
		case <-time.After(pause):
		}
	}
}

// create creates key unless it exists: a retry of a create whose answer was
// lost changes nothing.
func (w *seqWriter) create(cli *clientv3.Client, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "v")).Commit()
	return err
}

// through moves the writer to member i.
func (w *seqWriter) through(i int) { w.via.Store(int64(i)) }

// halt stops the writer and returns how many keys it created.
func (w *seqWriter) halt() int {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	return int(w.n.Load())
}

// waitWrites waits until k more keys are written.
func (w *seqWriter) waitWrites(t *testing.T, k int, within time.Duration) {
	t.Helper()
	n0 := w.n.Load()
	waitFor(t, within, fmt.Sprintf("%d more writes (writer failures so far: %d)", k, w.failures.Load()), func() bool {
		return w.n.Load() >= n0+int64(k)
	})
}

// liveRig is a bridge over a cluster's proxies, flannel-like v2 watchers on
// /live through the bridge, and a writer through a member.
type liveRig struct {
	t        *testing.T
	c        *v2bridgetest.Cluster
	br       *v2bridgetest.Bridge
	w        *seqWriter
	watchers []*v2bridgetest.V2Watcher
	detects  []time.Duration // one per watcher per outage
}

func startRig(t *testing.T, c *v2bridgetest.Cluster, watchers int, o v2bridgetest.Options) *liveRig {
	t.Helper()
	bound(t)
	r := &liveRig{t: t, c: c, br: v2bridgetest.StartBridge(t, c.ProxiedEndpoints(), o)}
	g, err := v2client(t, r.br.URL).Get(ctxT(t, 10*time.Second), "/", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < watchers; i++ {
		w, err := v2bridgetest.StartV2Watcher([]string{r.br.URL}, livePrefix, g.Index)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		r.watchers = append(r.watchers, w)
	}
	r.w = startWriter(t, c, r.other(r.connected()))
	r.waitEvents(5, 20*time.Second)
	return r
}

// connected is the member the bridge is connected to.
func (r *liveRig) connected() int {
	r.t.Helper()
	i := r.c.Index(r.br.Backend.Endpoint())
	if i < 0 {
		r.t.Fatalf("the bridge is connected to no member (%q)", r.br.Backend.Endpoint())
	}
	return i
}

// other is a member other than i.
func (r *liveRig) other(i int) int { return (i + 1) % len(r.c.Members) }

// waitEvents waits until every watcher has k events more than now.
func (r *liveRig) waitEvents(k int, within time.Duration) {
	r.t.Helper()
	ctx := ctxT(r.t, within)
	for i, w := range r.watchers {
		n0 := len(w.Events())
		if !w.WaitFor(ctx, func(evs []v2bridgetest.WatchedEvent) bool { return len(evs) >= n0+k }) {
			r.t.Fatalf("watcher %d: no %d new events within %v (has %d; errors %v)", i, k, within, len(w.Events()), w.Errors())
		}
	}
}

// outage breaks the member the bridge is connected to with fault, checks
// that every watch in flight ends within bound and that the bridge moves to
// another member and delivers again while the writer keeps writing through
// a healthy member, then lifts the fault and waits until the member serves
// again and the members agree on a leader and term (see onEtcd34). It
// returns the losses the bridge deferred from the fault until it was lifted.
func (r *liveRig) outage(name string, fault, undo func(int), bound time.Duration) (deferred float64) {
	t := r.t
	t.Helper()
	bad := r.connected()
	r.w.through(r.other(bad))
	r.w.waitWrites(t, 3, 20*time.Second)
	losses := metricValue(t, r.br.Registry, "v2bridge_backend_losses_total")
	deferred0 := metricValue(t, r.br.Registry, "v2bridge_backend_losses_deferred_total")

	t0 := time.Now()
	fault(bad)
	ends := make([]time.Duration, len(r.watchers))
	waitFor(t, bound+10*time.Second, name+": every watch in flight at the fault to end", func() bool {
		for i, w := range r.watchers {
			d, ok := w.EndedAfter(t0, inFlightGrace)
			if !ok {
				return false
			}
			ends[i] = d
		}
		return true
	})
	waitFor(t, 20*time.Second, name+": the bridge to move to another member", func() bool {
		ep := r.br.Backend.Endpoint()
		return ep != "" && r.c.Index(ep) != bad
	})
	moved := time.Since(t0)
	// Events written during the outage reach every watcher.
	r.w.waitWrites(t, 10, 20*time.Second)
	recov := make([]time.Duration, len(r.watchers))
	waitFor(t, 20*time.Second, name+": events again at every watcher", func() bool {
		for i, w := range r.watchers {
			d, ok := w.FirstEventAfter(t0.Add(ends[i]))
			if !ok {
				return false
			}
			recov[i] = ends[i] + d
		}
		return true
	})
	if got := metricValue(t, r.br.Registry, "v2bridge_backend_losses_total") - losses; got < 1 {
		t.Errorf("%s: the bridge declared %v losses", name, got)
	}
	t.Logf("%s of member %d: watches ended after %v; bridge on member %d after %v; events again after %v",
		name, bad, roundAll(ends), r.connected(), moved.Round(time.Millisecond), roundAll(recov))
	for i, d := range ends {
		if d > bound {
			t.Errorf("%s: watcher %d's watch ended %v after the fault (bound %v)", name, i, d, bound)
		}
	}
	for i, w := range r.watchers {
		checkEndedEmpty(t, fmt.Sprintf("%s: watcher %d", name, i), t0, w.InFlight(t0, inFlightGrace))
	}
	r.detects = append(r.detects, ends...)
	deferred = metricValue(t, r.br.Registry, "v2bridge_backend_losses_deferred_total") - deferred0
	undo(bad)
	// The next outage strikes a cluster with a leader, not one in the
	// election a healed member may force (onEtcd34), which may begin after
	// the member serves again.
	if !r.c.WaitServes(bad, 20*time.Second) {
		t.Fatalf("%s: member %d does not serve once the fault is lifted", name, bad)
	}
	if !r.c.WaitSettled(time.Second, 20*time.Second) {
		t.Fatalf("%s: the members agree on no leader and term once the fault is lifted", name)
	}
	return deferred
}

// onEtcd34 tells whether the cluster runs etcd 3.4, where a member back
// from a blackhole or a partition forces an election. Cut off, it kept
// starting elections, each in a higher term; back, the others (--pre-vote
// false by default in 3.4, as v2bridgetest starts them) take its term and
// the leader steps down: the cluster has no leader until it elects one (a
// second or more), and the bridge stays on its member or moves to one that
// has a quorum, as in any election. From 3.5 on (--pre-vote true) the
// member first asks whether it could win, and the cluster keeps its leader.
func onEtcd34(c *v2bridgetest.Cluster) bool { return strings.HasPrefix(c.Version(), "3.4.") }

// checkEndedEmpty checks that the watch requests in flight at a fault at t0
// (or sent just after it) ended the documented way for a lost member:
//   - a watch the bridge had answered (headers sent) before t0 ends with an
//     empty 200, which v2 clients answer by re-issuing it at once (or with
//     an event that was on its way at t0: a complete 200 all the same);
//   - a request the bridge was still taking on when the member went silent
//     (it waited on the member) may instead get v2's error 300 (a 500), as
//     every request does while the member is lost.
//
// Never a reset, a timeout, or another error.
func checkEndedEmpty(t *testing.T, who string, t0 time.Time, reqs []v2bridgetest.WatchRequest) {
	t.Helper()
	for _, r := range reqs {
		complete200 := r.Status == http.StatusOK
		lost300 := r.Status == http.StatusInternalServerError && strings.Contains(r.ErrorBody, `"errorCode":300`)
		established := !r.Answered.IsZero() && r.Answered.Before(t0)
		if r.Clean() && (complete200 || (lost300 && !established)) {
			continue
		}
		t.Errorf("%s: the watch from index %d sent %v after the fault (answered before it: %v) ended %v after it with "+
			"status %d, %d body bytes %q, error %v; want an empty 200", who, r.WaitIndex, r.Start.Sub(t0).Round(time.Millisecond),
			established, r.End.Sub(t0).Round(time.Millisecond), r.Status, r.Bytes, r.ErrorBody, r.Err)
	}
}

// checkDetection checks the documented detection time over every watch
// ending measured (all watchers, all outages).
func (r *liveRig) checkDetection() {
	r.t.Helper()
	if len(r.detects) == 0 {
		r.t.Fatal("no watch ending measured")
	}
	if m := median(r.detects); m > detectMedian {
		r.t.Errorf("median time for a watch to end: %v over %d endings, want at most %v", m, len(r.detects), detectMedian)
	}
	if m := slices.Max(r.detects); m > detectMax {
		r.t.Errorf("longest time for a watch to end: %v, want at most %v", m, detectMax)
	}
}

// finish stops the writer and checks that every watcher saw every key
// created, exactly once, in commit order.
func (r *liveRig) finish() {
	t := r.t
	t.Helper()
	n := r.w.halt()
	via := r.connected()
	resp, err := r.w.clis[via].Get(ctxT(t, 10*time.Second), livePrefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != n {
		t.Fatalf("the writer created %d keys, etcd has %d", n, len(resp.Kvs))
	}
	type ev struct {
		key   string
		index uint64
	}
	var want []ev
	for _, kv := range resp.Kvs {
		want = append(want, ev{string(kv.Key), translate.Index(kv.CreateRevision)})
	}
	sort.Slice(want, func(i, j int) bool { return want[i].index < want[j].index })
	last := want[len(want)-1].index
	ctx := ctxT(t, 30*time.Second)
	for i, w := range r.watchers {
		w.WaitFor(ctx, func(evs []v2bridgetest.WatchedEvent) bool {
			return len(evs) > 0 && evs[len(evs)-1].Index >= last
		})
		var got []ev
		for _, e := range w.Events() {
			got = append(got, ev{e.Key, e.Index})
		}
		if !slices.Equal(got, want) {
			t.Errorf("watcher %d: %s", i, diffEvents(len(want), func(j int) string { return fmt.Sprint(want[j]) },
				len(got), func(j int) string { return fmt.Sprint(got[j]) }))
		}
		for _, e := range w.Errors() {
			if e.Code != 0 {
				t.Errorf("watcher %d: v2 error %d: %v", i, e.Code, e.Err)
			}
		}
	}
	t.Logf("%d events, each seen once and in order by %d watchers (writer retries: %d)", n, len(r.watchers),
		r.w.failures.Load())
}

// diffEvents describes the first difference between two sequences.
func diffEvents(nw int, want func(int) string, ng int, got func(int) string) string {
	for j := 0; j < nw && j < ng; j++ {
		if want(j) != got(j) {
			return fmt.Sprintf("event %d is %s, want %s (%d events, want %d)", j, got(j), want(j), ng, nw)
		}
	}
	return fmt.Sprintf("%d events, want %d", ng, nw)
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}

// median is the middle value (the mean of the two middle ones for an even
// count).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// metricValue reads a counter or gauge (or a histogram's sample count) from
// the bridge's registry, summed over its series, or over those with every
// label given as name, value pairs.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var v float64
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				v += m.Counter.GetValue()
			case m.Gauge != nil:
				v += m.Gauge.GetValue()
			case m.Histogram != nil:
				v += float64(m.Histogram.GetSampleCount())
			}
		}
		return v
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// hasLabels reports whether m has every label of the name, value pairs.
func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		if !slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool {
			return lp.GetName() == pairs[i] && lp.GetValue() == pairs[i+1]
		}) {
			return false
		}
	}
	return true
}

// histogramMean is a histogram's mean (0 without samples).
func histogramMean(t *testing.T, reg *prometheus.Registry, name string) time.Duration {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].Histogram != nil {
			h := mf.GetMetric()[0].Histogram
			if h.GetSampleCount() == 0 {
				return 0
			}
			return time.Duration(h.GetSampleSum() / float64(h.GetSampleCount()) * float64(time.Second))
		}
	}
	return 0
}

func (r *liveRig) logBridgeFigures() {
	reg := r.br.Registry
	r.t.Logf("measured at the watchers: median %v, max %v over %d watch endings; bridge: %v losses, mean time to detect %v, "+
		"mean time to recover %v, %v heartbeat misses, %v watches errored out",
		median(r.detects).Round(10*time.Millisecond), slices.Max(append([]time.Duration{0}, r.detects...)).Round(10*time.Millisecond),
		len(r.detects), metricValue(r.t, reg, "v2bridge_backend_losses_total"),
		histogramMean(r.t, reg, "v2bridge_backend_detect_seconds").Round(10*time.Millisecond),
		histogramMean(r.t, reg, "v2bridge_backend_recover_seconds").Round(10*time.Millisecond),
		metricValue(r.t, reg, "v2bridge_backend_heartbeat_misses_total"),
		metricValue(r.t, reg, "v2bridge_watches_errored_total"))
}

// TestLivenessBlackhole: the member the bridge uses loses power (its traffic
// is dropped, no FIN, no RST), three times over, each time a different
// member: every watch ends within the bound, the bridge moves on, and every
// event written before, during and after each outage is seen exactly once
// and in order, with nothing restarted.
func TestLivenessBlackhole(t *testing.T) {
	c := v2bridgetest.StartCluster(t, 3)
	r := startRig(t, c, 4, v2bridgetest.Options{})
	for round := 0; round < 3; round++ {
		r.outage(fmt.Sprintf("blackhole %d", round+1), c.Blackhole, c.Heal, detectMax)
		r.waitEvents(5, 20*time.Second)
	}
	r.finish()
	r.logBridgeFigures()
	r.checkDetection()
}

// TestLivenessFreeze: the same with the member's process frozen (SIGSTOP:
// the kernel still acknowledges its TCP traffic, nothing answers), then
// thawed.
func TestLivenessFreeze(t *testing.T) {
	c := v2bridgetest.StartProcessCluster(t, 3)
	r := startRig(t, c, 4, v2bridgetest.Options{})
	for round := 0; round < 3; round++ { // an odd count: the median is one outage's
		r.outage(fmt.Sprintf("freeze %d", round+1), c.Freeze, c.Thaw, detectMax)
		r.waitEvents(5, 20*time.Second)
	}
	r.finish()
	r.logBridgeFigures()
	r.checkDetection()
}

// TestLivenessPartition: the member the bridge uses is cut off from its
// peers (it answers, but no quorum confirms it), once as a follower and
// once as the leader: the watches end within the bound of a silent member
// (the heartbeat's quorum check times out as for a silent one, well before
// the member notices it has no leader) and resume on a member that has a leader, with the events
// written meanwhile.
func TestLivenessPartition(t *testing.T) {
	c := v2bridgetest.StartCluster(t, 3)
	r := startRig(t, c, 3, v2bridgetest.Options{})
	var deferred [2]float64 // during the follower's partition, and the leader's
	for i, leader := range []bool{false, true} {
		bad := r.connected()
		to := r.other(bad)
		if leader {
			to = bad
		}
		if err := c.MoveLeader(to); err != nil {
			t.Fatal(err)
		}
		// The bridge knows its member's new term (a leader is told from
		// one just elected by its term).
		hb := metricValue(t, r.br.Registry, "v2bridge_backend_heartbeat_seconds")
		waitFor(t, 20*time.Second, "two heartbeats answered after the leader moved", func() bool {
			return metricValue(t, r.br.Registry, "v2bridge_backend_heartbeat_seconds") >= hb+2
		})
		deferred[i] = r.outage(fmt.Sprintf("partition (the leader: %v)", leader), c.Isolate, c.Heal, partitionBound)
		r.waitEvents(5, 20*time.Second)
	}
	r.finish()
	r.logBridgeFigures()
	if deferred[0] != 0 {
		t.Errorf("%v losses deferred during the follower's partition, want none: the majority had a quorum", deferred[0])
	}
	if deferred[1] != 0 {
		t.Errorf("%v losses deferred during the leader's partition, want none: the bridge leaves a leader no quorum "+
			"confirms in its term", deferred[1])
	}
	after := metricValue(t, r.br.Registry, "v2bridge_backend_losses_deferred_total") - deferred[0] - deferred[1]
	switch {
	case onEtcd34(c):
		t.Logf("%v losses deferred after the partitions, in the elections the healed members forced", after)
	case after != 0:
		t.Errorf("%v losses deferred after the partitions, want none: with pre-vote, a healed member forces no election",
			after)
	}
}

// TestLivenessCompactedDuringOutage: the history a watcher still needs is
// compacted while its bridge's only member is unreachable: once the member
// answers again, the re-issued watch gets 401 (and the flannel-like watcher
// re-lists and carries on). While the member is unreachable, requests fail
// fast with v2's 300 and /health is 503.
func TestLivenessCompactedDuringOutage(t *testing.T) {
	c := v2bridgetest.StartCluster(t, 1)
	br := v2bridgetest.StartBridge(t, c.ProxiedEndpoints(), v2bridgetest.Options{})
	kapi := v2client(t, br.URL)
	ctx := ctxT(t, 40*time.Second)
	first, err := kapi.Set(ctx, "/c/a", "1", nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := v2bridgetest.StartV2Watcher([]string{br.URL}, "/c", first.Index-1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if !w.WaitFor(ctx, func(evs []v2bridgetest.WatchedEvent) bool { return len(evs) == 1 }) {
		t.Fatal("no first event")
	}

	t0 := time.Now()
	c.Blackhole(0)
	waitFor(t, detectMax, "the bridge to declare its member lost", func() bool { return !br.Backend.Up() })
	t.Logf("loss declared after %v", time.Since(t0).Round(10*time.Millisecond))
	waitFor(t, 5*time.Second, "the watch in flight to end", func() bool {
		_, ok := w.EndedAfter(t0, inFlightGrace)
		return ok
	})
	checkEndedEmpty(t, "the watcher", t0, w.InFlight(t0, inFlightGrace))
	start := time.Now()
	if r := do(t, "GET", br.URL, "/v2/keys/c/a", nil); r.status != 500 || r.json(t)["errorCode"].(float64) != 300 ||
		time.Since(start) > 2*time.Second {
		t.Errorf("GET while lost: %d %s after %v", r.status, r.body, time.Since(start))
	}
	if r := do(t, "GET", br.URL, "/health", nil); r.status != http.StatusServiceUnavailable {
		t.Errorf("/health while lost: %d %s", r.status, r.body)
	}

	direct := c.MemberClient(t, 0)
	for i := 0; i < 5; i++ {
		if _, err := direct.Put(ctx, fmt.Sprintf("/c/gone%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	compacted := c.Compact(t)
	c.Heal(0)
	waitFor(t, 20*time.Second, "the bridge to reconnect", br.Backend.Up)

	// A watch re-issued with the waitIndex it had before the outage (re-issued
	// again, as v2 clients do, while the bridge answers 500 or ends it empty).
	var r resp
	waitFor(t, 20*time.Second, "the re-issued watch to be answered", func() bool {
		r = do(t, "GET", br.URL, fmt.Sprintf("/v2/keys/c?wait=true&recursive=true&waitIndex=%d", first.Node.ModifiedIndex+1), nil)
		return r.status != 500 && r.body != ""
	})
	if r.status != http.StatusBadRequest || r.json(t)["errorCode"].(float64) != 401 {
		t.Errorf("watch from before the compaction: %d %s", r.status, r.body)
	}
	// The flannel-like watcher got 401, re-listed, and sees new events.
	waitFor(t, 20*time.Second, "the watcher to get 401 and watch again", func() bool {
		got401 := false
		for _, e := range w.Errors() {
			got401 = got401 || e.Code == client.ErrorCodeEventIndexCleared
		}
		reqs := w.Requests()
		return got401 && len(reqs) > 0 && reqs[len(reqs)-1].End.IsZero() && reqs[len(reqs)-1].WaitIndex > uint64(compacted)
	})
	next, err := kapi.Set(ctx, "/c/after", "1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !w.WaitFor(ctx, func(evs []v2bridgetest.WatchedEvent) bool { return len(evs) > 0 && evs[len(evs)-1].Index == next.Index }) {
		t.Fatalf("the watcher did not resume: events %v, errors %v, requests %+v", w.Events(), w.Errors(), w.Requests())
	}
	for _, e := range w.Events() {
		if strings.HasPrefix(e.Key, "/c/gone") {
			t.Errorf("event %v from the compacted history", e)
		}
	}
}

// TestLivenessHistoryWatchEnds: a watch from further back than the hub's
// ring of recent events is served by a v3 watch of its own; it too ends when
// the member is lost.
func TestLivenessHistoryWatchEnds(t *testing.T) {
	c := v2bridgetest.StartCluster(t, 1)
	writer := v2bridgetest.StartBridge(t, c.ProxiedEndpoints(), v2bridgetest.Options{})
	kapi := v2client(t, writer.URL)
	ctx := ctxT(t, time.Minute)
	first, err := kapi.Set(ctx, "/h/k0", "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 20; i++ {
		if _, err := kapi.Set(ctx, fmt.Sprintf("/h/k%d", i), "v", nil); err != nil {
			t.Fatal(err)
		}
	}
	// A bridge started after the writes has none of them in its ring: the
	// watch below is caught up by a replay of v3 history.
	br := v2bridgetest.StartBridge(t, c.ProxiedEndpoints(), v2bridgetest.Options{})
	watchers := metricValue(t, br.Registry, "v2bridge_v2_watchers")
	type answer struct {
		status int
		body   string
		err    error
		at     time.Time
	}
	done := make(chan answer, 1)
	go func() {
		// Nothing will match: the watch waits on its history watch.
		r, err := httpClient.Get(fmt.Sprintf("%s/v2/keys/h/none?wait=true&waitIndex=%d", br.URL, first.Index))
		a := answer{err: err}
		if err == nil {
			b, rerr := io.ReadAll(r.Body)
			_ = r.Body.Close()
			a.status, a.body, a.err = r.StatusCode, string(b), rerr
		}
		a.at = time.Now()
		done <- a
	}()
	waitFor(t, 10*time.Second, "the history watch", func() bool {
		return metricValue(t, br.Registry, "v2bridge_v2_watchers") > watchers
	})
	t0 := time.Now()
	c.Blackhole(0)
	select {
	case a := <-done:
		d := a.at.Sub(t0)
		t.Logf("the history watch ended %v after the blackhole: %d %q %v", d.Round(10*time.Millisecond), a.status, a.body, a.err)
		if d > detectMax || a.err != nil || a.status != 200 || a.body != "" {
			t.Errorf("the history watch ended after %v with %d %q %v; want an empty 200 within %v", d, a.status, a.body, a.err, detectMax)
		}
	case <-time.After(detectMax + 10*time.Second):
		t.Fatalf("the history watch outlived its backend by %v", time.Since(t0))
	}
}

// oldHeartbeat is the default heartbeat before the current one: a check
// every second, each with a 1 s timeout, two misses in a row.
var oldHeartbeat = v2bridgetest.Options{Backend: func(c *v3backend.Config) {
	c.HeartbeatInterval = time.Second
	c.HeartbeatTimeout = time.Second
	c.HeartbeatFailures = 2
}}

// TestLivenessFalsePositiveLoad: a member kept busy by writers of large
// values and readers of the whole range, with watchers on the bridge (so
// the heartbeat shares its connection with a busy watch stream), is never
// declared lost.
func TestLivenessFalsePositiveLoad(t *testing.T) {
	c := v2bridgetest.StartCluster(t, 1)
	br := v2bridgetest.StartBridge(t, c.ProxiedEndpoints(), v2bridgetest.Options{})
	var watchers []*v2bridgetest.V2Watcher
	for i := 0; i < 3; i++ {
		w, err := v2bridgetest.StartV2Watcher([]string{br.URL}, "/load", 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		watchers = append(watchers, w)
	}
	cli := c.MemberClient(t, 0)
	value := strings.Repeat("x", 64<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var puts, gets atomic.Int64
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ctx.Err() == nil; j++ {
				if _, err := cli.Put(ctx, fmt.Sprintf("/load/w%d/k%d", i, j%50), value); err == nil {
					puts.Add(1)
				}
			}
		}()
	}
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := cli.Get(ctx, "/load/", clientv3.WithPrefix()); err == nil {
					gets.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if l := metricValue(t, br.Registry, "v2bridge_backend_losses_total"); l != 0 {
		t.Errorf("a busy member was declared lost %v times", l)
	}
	for i, w := range watchers {
		if len(w.Events()) == 0 {
			t.Errorf("watcher %d saw no event", i)
		}
	}
	t.Logf("%d puts of 64 KiB, %d full-range reads in 15s, %d events at each of %d watchers; heartbeat misses: %v",
		puts.Load(), gets.Load(), len(watchers[0].Events()), len(watchers),
		metricValue(t, br.Registry, "v2bridge_backend_heartbeat_misses_total"))
}

// TestLivenessFalsePositiveStorageStall: the member's storage stalls as in a
// defrag (writes, their apply and reads wait) for longer than the default
// heartbeat's patience: no loss is declared, the heartbeats during the
// stall are answered or excused (the member has a leader and is applying
// what it committed), and the watches carry on with every event.
func TestLivenessFalsePositiveStorageStall(t *testing.T) {
	c := v2bridgetest.StartCluster(t, 1)
	cli := c.MemberClient(t, 0)
	ctx := ctxT(t, 2*time.Minute)
	// The stall outlasts the silence the default heartbeat sits out (its
	// misses in a row, of a timeout each), with a margin: a stall the
	// heartbeat could sit out proves nothing.
	d := v3backend.Defaults
	stallFor := time.Duration(d.HeartbeatFailures)*d.HeartbeatTimeout + 2*time.Second

	bridges := []struct {
		name string
		opts v2bridgetest.Options
	}{
		{"defaults", v2bridgetest.Options{}},
		{"old defaults (1s, 1s, 2)", oldHeartbeat},
	}
	var brs []*v2bridgetest.Bridge
	var watchers []*v2bridgetest.V2Watcher
	for _, b := range bridges {
		br := v2bridgetest.StartBridge(t, c.ProxiedEndpoints(), b.opts)
		g, err := v2client(t, br.URL).Get(ctx, "/", nil)
		if err != nil {
			t.Fatal(err)
		}
		w, err := v2bridgetest.StartV2Watcher([]string{br.URL}, "/d", g.Index)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		brs, watchers = append(brs, br), append(watchers, w)
	}
	// heartbeats counts the checks each bridge has finished without a
	// miss: answered, or excused as the member applies.
	heartbeats := func() []float64 {
		var out []float64
		for _, br := range brs {
			out = append(out, metricValue(t, br.Registry, "v2bridge_backend_heartbeat_seconds")+
				metricValue(t, br.Registry, "v2bridge_backend_heartbeat_applying_total"))
		}
		return out
	}

	// A writer through the member: the longest write is the storage stall.
	stop := make(chan struct{})
	done := make(chan struct{})
	var (
		mu       sync.Mutex // guards the four below
		revs     []uint64
		stall    time.Duration
		since    time.Time // when the write in flight began; zero between writes
		writeErr error
	)
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			start := time.Now()
			mu.Lock()
			since = start
			mu.Unlock()
			r, err := cli.Put(ctx, fmt.Sprintf("/d/k%d", i%20), "v")
			mu.Lock()
			since = time.Time{}
			if err != nil {
				writeErr = err
				mu.Unlock()
				return
			}
			revs = append(revs, translate.Index(r.Header.Revision))
			stall = max(stall, time.Since(start))
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	})
	for i, w := range watchers {
		if !w.WaitFor(ctx, func(evs []v2bridgetest.WatchedEvent) bool { return len(evs) >= 3 }) {
			t.Fatalf("%s: no events before the stall", bridges[i].name)
		}
	}

	resume := c.StallStorage(0)
	t0 := time.Now()
	hb0 := heartbeats()
	// The stall lasts until the writer has waited on it for stallFor and
	// every bridge has had two heartbeats finished meanwhile.
	waitFor(t, stallFor+30*time.Second, fmt.Sprintf("a write to wait %v on the stalled storage, and two heartbeats "+
		"finished at each bridge meanwhile", stallFor), func() bool {
		mu.Lock()
		blocked := !since.IsZero() && time.Since(since) >= stallFor
		failed := writeErr != nil
		mu.Unlock()
		if failed {
			return true // reported below
		}
		for i, n := range heartbeats() {
			if n < hb0[i]+2 {
				return false
			}
		}
		return blocked
	})
	hb1 := heartbeats()
	resume()
	took := time.Since(t0)
	// The heartbeat is sequential: once two more checks have finished, every
	// check that overlapped the stall is over, and a loss it caused would
	// have been declared.
	waitFor(t, 20*time.Second, "two heartbeats after the stall", func() bool {
		for i, n := range heartbeats() {
			if n < hb1[i]+2 {
				return false
			}
		}
		return true
	})
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	if writeErr != nil {
		t.Fatalf("write during the stall: %v", writeErr)
	}
	if stall < stallFor {
		t.Fatalf("writes waited at most %v during the %v stall, want at least %v: the storage did not stall",
			stall.Round(time.Millisecond), took.Round(time.Millisecond), stallFor)
	}

	last := revs[len(revs)-1]
	for i, b := range bridges {
		br, w := brs[i], watchers[i]
		losses := metricValue(t, br.Registry, "v2bridge_backend_losses_total")
		if losses != 0 {
			t.Errorf("%s: a member with stalled storage was declared lost %v times", b.name, losses)
		}
		if !w.WaitFor(ctx, func(evs []v2bridgetest.WatchedEvent) bool { return len(evs) > 0 && evs[len(evs)-1].Index >= last }) {
			t.Errorf("%s: the watcher did not reach index %d", b.name, last)
		}
		var got []uint64
		for _, e := range w.Events() {
			got = append(got, e.Index)
		}
		if !slices.Equal(got, revs) {
			t.Errorf("%s: %s", b.name, diffEvents(len(revs), func(j int) string { return fmt.Sprint(revs[j]) },
				len(got), func(j int) string { return fmt.Sprint(got[j]) }))
		}
		t.Logf("%s: %v heartbeats answered or excused as applying during the stall; in all %v misses, %v excused as "+
			"late, %v as applying, %v losses; %d events", b.name, hb1[i]-hb0[i],
			metricValue(t, br.Registry, "v2bridge_backend_heartbeat_misses_total"),
			metricValue(t, br.Registry, "v2bridge_backend_heartbeat_misses_excused_total"),
			metricValue(t, br.Registry, "v2bridge_backend_heartbeat_applying_total"), losses, len(got))
	}
	t.Logf("storage stalled for %v; writes waited up to %v", took.Round(time.Millisecond), stall.Round(time.Millisecond))
}

// TestNewSessionTakesNoMemberCutOffFromItsPeers: a member just cut off from
// its peers, before it notices that it has lost its leader, is not taken
// by a new session: etcd 3.4 answers a linearizable member list from
// memory, so the bridge first reads its release, and checks such a member
// with a read, as its heartbeat does. (Taken, it was left again a
// heartbeat later, after its partition had cost the watches twice.)
func TestNewSessionTakesNoMemberCutOffFromItsPeers(t *testing.T) {
	c := v2bridgetest.StartCluster(t, 3)
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	lead := c.Leader()
	if lead < 0 {
		t.Fatal("no leader")
	}
	cut := (lead + 1) % len(c.Members)
	c.Isolate(cut)
	defer c.Heal(cut)
	start := time.Now()
	be, err := v3backend.New(ctxT(t, 10*time.Second), v3backend.Config{Endpoints: c.ProxiedEndpoints()[cut : cut+1],
		Layout: layout, Logger: zap.NewNop()})
	if err == nil {
		_ = be.Close()
		t.Fatalf("a new session took member %d, cut off from its peers %v before", cut, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("member %d refused after %v: %v", cut, time.Since(start).Round(time.Millisecond), err)
}
