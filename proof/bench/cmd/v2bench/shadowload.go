// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The shadow section: the shadow comparison of a passthrough bridge at a
// steady write rate. A real etcd v2 server (etcd 3.5, v2ref) is the
// v2 server; a follower child keeps a copy in etcd v3 (an embedded member, a
// child of its own) and records its progress as `migrate --follow` does;
// two passthrough bridge children forward to the same v2 server, one
// without a shadow and one comparing every write with the copy. The same
// paced load of unique values runs through each in turn; the table gives
// both put latencies and their ratio, and what the shadow compared,
// dropped, found divergent or lagging. The follower is migrate's own (Copy
// + Follow), so the figures say whether it keeps up.

// shadowConfig sizes the shadow section.
type shadowConfig struct {
	rate    int           // writes per second, paced
	dur     time.Duration // of each load
	keys    int           // the keys written in turn: each is rewritten every keys/rate seconds
	clients int           // writers (connections) sharing the pace
	settle  time.Duration // after the load, the most to wait for the comparisons to finish
}

const shadowRoot = "/shadow"

// runShadow runs the shadow section cfg.runs times, plain and shadowed
// bridges taking turns.
func runShadow(cfg *config, res *results) {
	sc := cfg.shadow
	wl, sys := fmt.Sprintf("shadow-%dw/s", sc.rate), sysPassthrough
	if !has(cfg.systems, sys) {
		logf("shadow section skipped: %s is not among the systems", sys)
		return
	}
	logf("shadow workload %s: %d keys, %d writers, %v per load", wl, sc.keys, sc.clients, sc.dur)
	v2, err := startV2Ref(false)
	if err != nil {
		res.note("%s: cannot start etcd v2: %s", wl, fmtErr(err))
		return
	}
	defer v2.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct := newV2KV(v2.v2URL)
	defer closeIdle(direct)
	for i := range sc.keys {
		if err := direct.do(ctx, http.MethodPut, shadowKey(i), "", url.Values{"value": {"start"}}, nil); err != nil {
			res.note("%s: setup: %s", wl, fmtErr(err))
			return
		}
	}
	etcd, err := startEtcdChild()
	if err != nil {
		res.note("%s: cannot start etcd v3: %s", wl, fmtErr(err))
		return
	}
	defer etcd.Stop()
	follower, err := startChild("-follow", v2.v2URL, "-endpoints", etcd.etcdURL)
	if err != nil {
		res.note("%s: cannot start the follower: %s", wl, fmtErr(err))
		return
	}
	defer follower.Stop()
	plain, err := startChild("-v2-server", v2.v2URL)
	if err != nil {
		res.note("%s: cannot start the plain passthrough bridge: %s", wl, fmtErr(err))
		return
	}
	defer plain.Stop()
	shadowed, err := startChild("-v2-server", v2.v2URL, "-shadow-endpoints", etcd.etcdURL)
	if err != nil {
		res.note("%s: cannot start the shadowed passthrough bridge: %s", wl, fmtErr(err))
		return
	}
	defer shadowed.Stop()

	var next atomic.Int64 // the next unique value
	for run := 1; run <= cfg.runs; run++ {
		logf("  shadow run %d", run)
		order := []*instance{plain, shadowed}
		if run%2 == 0 {
			order = []*instance{shadowed, plain}
		}
		var lat [2]latency
		for _, in := range order {
			before, err := scrapeShadow(shadowed.v2URL)
			if err != nil {
				res.note("%s: reading the shadow's metrics: %s", wl, fmtErr(err))
				return
			}
			cpu0 := cpuSeconds(in.pid)
			l, acked, failed, missed := paceWrites(sc, in.v2URL, &next)
			cpu := cpuSeconds(in.pid) - cpu0
			if failed > 0 || missed > 0 {
				res.note("%s: run %d: %d writes failed, %d not sent (every writer busy for a second)", wl, run, failed, missed)
			}
			which := "without shadow"
			if in == shadowed {
				which = "with shadow"
				lat[1] = l
				during, err := scrapeShadow(shadowed.v2URL)
				if err != nil {
					res.note("%s: reading the shadow's metrics: %s", wl, fmtErr(err))
					return
				}
				after := waitShadow(shadowed.v2URL, before.sum()+uint64(acked), sc.settle)
				res.add(wl, sys, "writes acknowledged /s (paced)", "writes/s", false, float64(acked)/sc.dur.Seconds())
				res.add(wl, sys, "writes compared /s (during the load)", "writes/s", false,
					float64(during.compared-before.compared)/sc.dur.Seconds())
				res.add(wl, sys, "writes compared", "% of acked", false,
					100*float64(after.compared-before.compared)/float64(max(acked, 1)))
				res.add(wl, sys, "shadow: dropped", "writes", true, float64(after.dropped-before.dropped))
				res.add(wl, sys, "shadow: divergences", "writes", true, float64(after.diverged-before.diverged))
				res.add(wl, sys, "shadow: lagging", "writes", true, float64(after.lagging-before.lagging))
				res.add(wl, sys, "shadow: pending after the load", "writes", true, float64(after.pending))
			} else {
				lat[0] = l
			}
			res.add(wl, sys, "bridge CPU per write "+which, "ms", true, 1000*cpu/float64(max(acked, 1)))
		}
		res.add(wl, sys, "put p50 without shadow", "ms", true, ms(lat[0].p50))
		res.add(wl, sys, "put p50 with shadow", "ms", true, ms(lat[1].p50))
		res.add(wl, sys, "put p50 with ÷ without shadow", "×", true, ms(lat[1].p50)/ms(lat[0].p50))
		res.add(wl, sys, "put p99 without shadow", "ms", true, ms(lat[0].p99))
		res.add(wl, sys, "put p99 with shadow", "ms", true, ms(lat[1].p99))
		res.add(wl, sys, "put p99 with ÷ without shadow", "×", true, ms(lat[1].p99)/ms(lat[0].p99))
	}
}

func shadowKey(i int) string { return fmt.Sprintf("%s/k%03d", shadowRoot, i) }

type latency struct{ p50, p99 time.Duration }

// paceWrites puts unique values to sc.keys keys in turn at sc.rate a second
// for sc.dur through base, sc.clients at a time, and returns the put
// latency, the writes acknowledged, those that failed, and those not sent
// (a pace the writers cannot hold).
func paceWrites(sc *shadowConfig, base string, next *atomic.Int64) (latency, int, int, int) {
	k := newV2KV(base)
	defer closeIdle(k)
	slots := make(chan int64, sc.rate) // a second of writes at most waits for a writer
	var mu sync.Mutex                  // guards lats, acked and failed
	var lats []time.Duration
	var acked, failed int
	var wg sync.WaitGroup
	for range sc.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range slots {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				err := k.do(ctx, http.MethodPut, shadowKey(int(n)%sc.keys), "",
					url.Values{"value": {"v" + strconv.FormatInt(n, 10)}}, nil)
				d := time.Since(start)
				cancel()
				mu.Lock()
				if err != nil {
					failed++
				} else {
					acked++
					lats = append(lats, d)
				}
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	total := int(sc.dur.Seconds() * float64(sc.rate))
	interval := time.Second / time.Duration(sc.rate)
	missed := 0
	for i := range total {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		select {
		case slots <- next.Add(1):
		default:
			missed++
		}
	}
	close(slots)
	wg.Wait()
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	var l latency
	if n := len(lats); n > 0 {
		l = latency{p50: lats[n/2], p99: lats[min(n-1, n*99/100)]}
	}
	return l, acked, failed, missed
}

// shadowFigures are the shadow's counters, summed over their labels.
type shadowFigures struct {
	compared, dropped, diverged, lagging uint64
	pending                              float64
}

// sum is every write the shadow has finished with, one way or another.
func (f shadowFigures) sum() uint64 { return f.compared + f.dropped + f.lagging }

// scrapeShadow reads the shadow's figures from a bridge's /metrics.
func scrapeShadow(base string) (shadowFigures, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		return shadowFigures{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	var f shadowFigures
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(name, `v2bridge_shadow_compared_total{op="write"}`):
			f.compared += uint64(v)
			found = true
		case strings.HasPrefix(name, "v2bridge_shadow_dropped_total{"):
			f.dropped += uint64(v)
		case strings.HasPrefix(name, "v2bridge_shadow_divergences_total{"):
			f.diverged += uint64(v)
		case name == "v2bridge_shadow_lagging_total":
			f.lagging += uint64(v)
		case name == "v2bridge_shadow_pending_writes":
			f.pending = v
		}
	}
	if err := sc.Err(); err != nil {
		return f, err
	}
	if !found {
		return f, errors.New("no v2bridge_shadow_compared_total in /metrics")
	}
	return f, nil
}

// waitShadow waits until the shadow has finished with want writes in all,
// for at most d, and returns its figures then (its gauges, set every 100
// ms, a moment later).
func waitShadow(base string, want uint64, d time.Duration) shadowFigures {
	deadline := time.Now().Add(d)
	for {
		f, err := scrapeShadow(base)
		if err == nil && f.sum() >= want || time.Now().After(deadline) {
			time.Sleep(300 * time.Millisecond)
			if g, err := scrapeShadow(base); err == nil {
				f.pending = g.pending
			}
			return f
		}
		time.Sleep(100 * time.Millisecond)
	}
}
