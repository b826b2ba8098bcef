// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

const (
	watchDir   = "/bench/watch"
	otherDir   = "/bench/other"
	keyWatches = 256 // watchers on distinct keys next to the shared directory
)

// watchTarget is one system under a watch workload: a fresh server process,
// a writer, and fleets of its kind of watcher.
type watchTarget struct {
	sys string
	in  *instance
	k   kv
}

func newWatchTarget(sys string) (*watchTarget, error) {
	in, err := startInstance(sys)
	if err != nil {
		return nil, err
	}
	t := &watchTarget{sys: sys, in: in}
	if isV3(sys) {
		t.k = v3kv{cli: in.V3(), prefix: v3Prefix}
	} else {
		t.k = newV2KV(in.v2URL)
	}
	return t, nil
}

func (t *watchTarget) stop() {
	closeIdle(t.k)
	t.in.Stop()
}

func (t *watchTarget) fleet(nDir int, keys []string) *fleet {
	if isV3(t.sys) {
		return startV3Fleet(t.in.V3(), watchDir, nDir, keys)
	}
	return startV2Fleet(t.in.v2URL, watchDir, nDir, keys)
}

func (t *watchTarget) put(ctx context.Context, i int) (uint64, error) {
	return t.k.put(ctx, fmt.Sprintf("%s/k%d", watchDir, i%64), value64)
}

// liveness is the bridge's backend losses, heartbeat misses and misses
// excused so far (nil: not a bridge, or its metrics did not answer).
func (t *watchTarget) liveness() []float64 {
	if t.sys != sysBridge && t.sys != sysBridgeExt {
		return nil
	}
	var out []float64
	for _, m := range []string{"v2bridge_backend_losses_total", "v2bridge_backend_heartbeat_misses_total",
		"v2bridge_backend_heartbeat_misses_excused_total"} {
		v, err := scrapeGauge(t.in.v2URL, m)
		if err != nil {
			return nil
		}
		out = append(out, v)
	}
	return out
}

// v3Watches is how many v3 watches serve the system's v2 watchers: the
// bridge's own gauge for the bridge, etcd's watcher gauge for the others.
func (t *watchTarget) v3Watches() (float64, error) {
	if t.sys == sysBridge || t.sys == sysBridgeExt {
		return scrapeGauge(t.in.v2URL, "v2bridge_v3_watches")
	}
	return scrapeGauge(t.in.etcdURL, "etcd_debugging_mvcc_watcher_total")
}

// profile fetches a CPU profile of the bridge for secs, if asked to.
func (t *watchTarget) profile(cfg *config, name string, secs int) func() {
	if t.in.kind != sysBridge || !cfg.profiles(name) {
		return func() {}
	}
	return profileBridge(cfg, t.in, name+"-"+t.sys, secs)
}

// watchIdle: n idle watchers on the shared directory (plus keyWatches on
// distinct keys), the server's RSS per watcher and v3 watches, then one
// write (fan-out to all n) and a writer at a steady rate.
func watchIdle(cfg *config, res *results, t *watchTarget, wl string, n int, rate float64, steady time.Duration, run int) {
	sys := t.sys
	logf("  %s %s run %d", wl, sys, run)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := t.k.put(ctx, watchDir+"/init", "x"); err != nil {
		res.note("%s on %s: setup: %s", wl, sys, fmtErr(err))
		return
	}
	if err := parallelPut(t.k, otherDir, keyWatches); err != nil {
		res.note("%s on %s: setup: %s", wl, sys, fmtErr(err))
		return
	}
	var keys []string
	for i := 0; i < keyWatches; i++ {
		keys = append(keys, fmt.Sprintf("%s/k%04d", otherDir, i))
	}
	time.Sleep(300 * time.Millisecond)
	rss0, _ := t.in.rss()
	var mem0 goMem
	if t.in.kind == sysBridge {
		mem0, _ = bridgeGoMem(t.in)
	}

	live0 := t.liveness()
	var hb0 *histogram
	if live0 != nil {
		hb0, _ = heartbeatHist(t.in.v2URL)
	}
	t0 := time.Now()
	f := t.fleet(n, keys)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			f.stop()
		}
	}
	defer stop()
	if !f.waitRegistered(30*time.Second + time.Duration(n)*5*time.Millisecond) {
		res.note("%s on %s: only %d of %d watchers registered (%d failed) within the deadline", wl, sys,
			f.registered.Load(), len(f.ws), f.failed.Load())
	}
	regTime := time.Since(t0)
	time.Sleep(500 * time.Millisecond)
	rss1, _ := t.in.rss()
	total := float64(len(f.ws))
	res.add(wl, sys, "server RSS per idle watcher", "KiB", true, (rss1-rss0)/total)
	if t.in.kind == sysBridge {
		if mem1, err := bridgeGoMem(t.in); err == nil {
			per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / total / 1024 }
			logf("    %s %s: Go heap in use %+.1f KiB/watcher, goroutine stacks %+.1f KiB/watcher, %d GCs meanwhile",
				wl, sys, per(mem0.HeapInuse, mem1.HeapInuse), per(mem0.StackInuse, mem1.StackInuse), mem1.NumGC-mem0.NumGC)
		}
	}
	if v, err := t.v3Watches(); err == nil {
		res.add(wl, sys, "v3 watches open", "watches", true, v)
	} else {
		res.note("%s on %s: v3 watch count: %s", wl, sys, fmtErr(err))
	}
	res.add(wl, sys, "time to register all watchers", "ms", true, ms(regTime))
	if t.in.kind == sysBridge && cfg.profiles("heap-"+wl) {
		snapshotBridge(cfg, t.in, "heap-"+wl+"-"+sys)
	}

	// One write to the shared directory: time until all n have it.
	sent := now()
	idx, err := t.put(ctx, 0)
	if err != nil {
		res.note("%s on %s: fan-out write: %s", wl, sys, fmtErr(err))
		return
	}
	writes := []write{{idx, sent, 0}}
	fanTimeout := cfg.drain
	if !f.waitAll(idx, fanTimeout) {
		res.note("%s on %s: run %d: one write had not reached every watcher within %v (or 2 s without receipts)", wl, sys, run, fanTimeout)
	}

	// A writer at a steady rate; then up to drain for the stragglers.
	done := t.profile(cfg, wl, int(steady.Seconds())+1)
	cpu0 := t.in.cpu()
	wsteady, werrs := steadyWriter(t.put, rate, steady, 1, 1)
	writeEnd := now()
	writes = append(writes, wsteady...)
	if werrs > 0 {
		res.note("%s on %s: %d steady writes failed", wl, sys, werrs)
	}
	if len(wsteady) > 0 && !f.waitAll(wsteady[len(wsteady)-1].idx, cfg.drain) {
		res.note("%s on %s: run %d: events still undelivered %v after the last write, or 2 s without receipts (counted as lost)", wl, sys, run, cfg.drain)
	}
	done()
	stop()

	cpu1 := t.in.cpu()
	if live0 != nil {
		if live1 := t.liveness(); live1 != nil {
			res.add(wl, sys, "backend losses declared (a member that answered)", "losses", true, live1[0]-live0[0])
			res.add(wl, sys, "heartbeats missed (not excused)", "heartbeats", true, live1[1]-live0[1])
			logf("    %s %s: %.0f heartbeat misses, %.0f excused (the bridge ran late)", wl, sys,
				live1[1]-live0[1], live1[2]-live0[2])
		}
		if h1, err := heartbeatHist(t.in.v2URL); err == nil && hb0 != nil {
			if p, ok := h1.since(hb0).quantile(0.99); ok {
				res.add(wl, sys, "heartbeat p99 (answered in time)", "ms", true, p*1e3)
			}
		}
	}
	vs, unexpected := judge(f, writes, 2)
	fan, st := vs[0], vs[1]
	addLat(res, wl, sys, "one write → all: p50", fan.lat, 0.50)
	addLat(res, wl, sys, "one write → all: p99", fan.lat, 0.99)
	addLat(res, wl, sys, "one write → all: max", fan.lat, 1)
	res.add(wl, sys, "one write → all: missed", "watchers", true, float64(fan.lost))
	steadyName := fmt.Sprintf("steady %g w/s: ", rate)
	if len(wsteady) > 1 {
		elapsed := writeEnd - wsteady[0].sent
		res.add(wl, sys, steadyName+"writes achieved", "writes/s", false, float64(len(wsteady))/elapsed.Seconds())
	}
	addLat(res, wl, sys, steadyName+"delivery p50", st.lat, 0.50)
	addLat(res, wl, sys, steadyName+"delivery p99", st.lat, 0.99)
	if st.delivered > 0 {
		res.add(wl, sys, steadyName+"server CPU per delivery", "µs", true, (cpu1-cpu0)/float64(st.delivered)*1e6)
	}
	res.add(wl, sys, steadyName+"events lost", "events", true, float64(st.lost))
	res.add(wl, sys, steadyName+"duplicates", "events", true, float64(st.dups+fan.dups))
	_, errs, _, _ := answerCounts(f)
	res.add(wl, sys, "watch answers that were errors", "answers", true, float64(errs))
	noteAnswers(res, wl, sys, f, unexpected)
}

// histogram is a Prometheus histogram read from /metrics: each bucket's
// upper bound and cumulative count.
type histogram struct {
	le     []float64
	counts []float64
}

// heartbeatHist reads the bridge's v2bridge_backend_heartbeat_seconds.
func heartbeatHist(url string) (*histogram, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	h := &histogram{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), `v2bridge_backend_heartbeat_seconds_bucket{le="`)
		if !ok {
			continue
		}
		le, count, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		b, err1 := strconv.ParseFloat(le, 64)
		n, err2 := strconv.ParseFloat(strings.TrimSpace(count), 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("bad bucket line %q", sc.Text())
		}
		h.le, h.counts = append(h.le, b), append(h.counts, n)
	}
	if len(h.le) == 0 {
		return nil, fmt.Errorf("no v2bridge_backend_heartbeat_seconds at %s", url)
	}
	return h, sc.Err()
}

// since is h less an earlier reading of the same histogram.
func (h *histogram) since(old *histogram) *histogram {
	d := &histogram{le: h.le, counts: make([]float64, len(h.counts))}
	for i := range h.counts {
		d.counts[i] = h.counts[i]
		if i < len(old.counts) {
			d.counts[i] -= old.counts[i]
		}
	}
	return d
}

// quantile is the q-quantile, interpolated within its bucket as
// Prometheus's histogram_quantile does (false: no observations).
func (h *histogram) quantile(q float64) (float64, bool) {
	total := h.counts[len(h.counts)-1]
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	lo, below := 0.0, 0.0
	for i, c := range h.counts {
		if c >= rank {
			if math.IsInf(h.le[i], 1) {
				return lo, true
			}
			return lo + (h.le[i]-lo)*(rank-below)/(c-below), true
		}
		lo, below = h.le[i], c
	}
	return lo, true
}

// watchSustained: n watchers on one directory, a writer as fast as the
// system delivers (never more than window writes ahead of the slowest).
func watchSustained(cfg *config, res *results, t *watchTarget, n int, run int) {
	sys := t.sys
	wl := fmt.Sprintf("watch-sustained-%d", n)
	logf("  %s %s run %d", wl, sys, run)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := t.k.put(ctx, watchDir+"/init", "x"); err != nil {
		res.note("%s on %s: setup: %s", wl, sys, fmtErr(err))
		return
	}
	f := t.fleet(n, nil)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			f.stop()
		}
	}
	defer stop()
	if !f.waitRegistered(30*time.Second + time.Duration(n)*5*time.Millisecond) {
		res.note("%s on %s: only %d of %d watchers registered within the deadline", wl, sys, f.registered.Load(), n)
	}
	done := t.profile(cfg, wl, int(cfg.sustained.Seconds()))
	cpu0, self0 := t.in.cpu(), cpuSeconds(os.Getpid())
	writes, werrs, stalls, elapsed := gatedWriter(f, t.put, cfg.window, cfg.sustained, cfg.stallAfter)
	if werrs > 0 {
		res.note("%s on %s: %d writes failed", wl, sys, werrs)
	}
	if stalls > 0 {
		res.note("%s on %s: run %d: the writer gave up waiting for the slowest watcher %d times (%v each)", wl, sys, run, stalls, cfg.stallAfter)
	}
	if len(writes) > 0 && !f.waitAll(writes[len(writes)-1].idx, cfg.drain) {
		res.note("%s on %s: run %d: events still undelivered %v after the last write, or 2 s without receipts (counted as lost)", wl, sys, run, cfg.drain)
	}
	cpu1, self1 := t.in.cpu(), cpuSeconds(os.Getpid())
	done()
	stop()
	vs, unexpected := judge(f, writes, 1)
	v := vs[0]
	if v.delivered > 0 {
		res.add(wl, sys, "server CPU per delivery", "µs", true, (cpu1-cpu0)/float64(v.delivered)*1e6)
		logf("    %s %s: benchmark process CPU %.0f µs per delivery", wl, sys, (self1-self0)/float64(v.delivered)*1e6)
	}
	span := time.Duration(0)
	if len(writes) > 0 {
		span = v.lastRecv - writes[0].sent
	}
	dps := 0.0
	if span > 0 {
		dps = float64(v.delivered) / span.Seconds()
	}
	res.add(wl, sys, "deliveries", "events/s", false, dps)
	res.add(wl, sys, "writes", "writes/s", false, float64(len(writes))/elapsed.Seconds())
	addLat(res, wl, sys, "delivery p50", v.lat, 0.50)
	addLat(res, wl, sys, "delivery p99", v.lat, 0.99)
	res.add(wl, sys, "events lost", "events", true, float64(v.lost))
	res.add(wl, sys, "duplicates", "events", true, float64(v.dups))
	noteAnswers(res, wl, sys, f, unexpected)
}

func noteAnswers(res *results, wl, sys string, f *fleet, unexpected int) {
	cleared, errs, empty, firstErr := answerCounts(f)
	if cleared > 0 {
		res.note("%s on %s: %d answers were 401 (history cleared); those watchers re-watched from the current index", wl, sys, cleared)
	}
	if errs > 0 {
		res.note("%s on %s: %d watch answers were errors (e.g. %s)", wl, sys, errs, strings.TrimSpace(firstErr))
	}
	if empty > 0 {
		res.note("%s on %s: %d watches ended without an event (re-issued)", wl, sys, empty)
	}
	if unexpected > 0 {
		res.note("%s on %s: %d receipts of indexes the writer did not write", wl, sys, unexpected)
	}
	if n := keyWatcherEvents(f); n > 0 {
		res.note("%s on %s: key watchers (keys never written) received %d events", wl, sys, n)
	}
}

// addLat records a latency percentile; with no deliveries there is none.
func addLat(res *results, wl, sys, metric string, l lat, q float64) {
	if len(l) == 0 {
		res.note("%s on %s: no deliveries, so no %q figure", wl, sys, metric)
		return
	}
	res.add(wl, sys, metric, "ms", true, ms(l.pct(q)))
}
