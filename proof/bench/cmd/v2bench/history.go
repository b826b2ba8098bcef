// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
)

// The history section: what stale waitIndexes cost a bridge that has just
// been (re)started over a long v3 history, its ring of recent events still
// empty. A waitIndex older than the ring is then caught up by one shared
// replay of v3 history, or refused with 401 when it is beyond the replay's
// reach; either way the cost must not grow with the number of such watches.

// histConfig sizes the history section.
type histConfig struct {
	revisions  int           // revisions of history written under histDir
	stale      int           // stale watches in each group (within reach, beyond reach)
	getClients int           // plain GET clients, for the baseline and during the burst
	baseline   time.Duration // how long the GET baseline runs
	minBurst   time.Duration // the GETs during the burst run at least this long
	settle     time.Duration // wait after the burst's watchers left, before reading RSS
	walkEvents int           // a history walk stops after this many events
	walkFor    time.Duration // or after this long
}

const (
	histDir = "/hist"
	// histHot is written by every other put of the history: the key a
	// client walks history on.
	histHot = "/hist/k7"
	// histGetKey is what the plain GET clients read.
	histGetKey = "/bench/hist-get"
	// histWithin is how far back the oldest waitIndex within reach is.
	histWithin = 50000
	// histWithinNewest is how far back the newest one is.
	histWithinNewest = 1000
	// histBeyond is the waitIndex of the watches beyond the replay's reach.
	histBeyond = 5
	// histRingWalk is how far back the second walk starts: within the
	// 1000 events the ring can hold (a replay's reach when nothing filled
	// the ring: the first walk's replay, paced by its walker, does not).
	histRingWalk = 900
	// histBuilders is how many Puts build the history concurrently.
	histBuilders = 128
)

func (hc *histConfig) workload() string { return fmt.Sprintf("history-%dk", hc.revisions/1000) }

// runHistory runs the history section for the v2bridge system: one etcd
// member (a child of its own) filled with hc.revisions revisions, and
// bridges started in front of it, each a fresh process with an empty ring.
func runHistory(cfg *config, res *results) {
	hc := cfg.hist
	wl, sys := hc.workload(), sysBridge
	if !has(cfg.systems, sysBridge) {
		logf("history section skipped: %s is not among the systems", sysBridge)
		return
	}
	logf("history workload %s", wl)
	etcd, err := startEtcdChild()
	if err != nil {
		res.note("%s on %s: cannot start etcd: %s", wl, sys, fmtErr(err))
		return
	}
	defer etcd.Stop()

	// 1. A long history, straight to etcd.
	t0 := time.Now()
	hotLast, err := buildHistory(etcd.V3(), hc.revisions)
	build := time.Since(t0)
	if err != nil {
		res.note("%s on %s: building the history: %s", wl, sys, fmtErr(err))
		return
	}
	res.add(wl, sys, fmt.Sprintf("build %s revisions (clientv3 Puts, %d at a time)", commas(int64(hc.revisions)), histBuilders),
		"s", true, build.Seconds())
	res.add(wl, sys, "build rate", "revisions/s", false, float64(hc.revisions)/build.Seconds())

	// A fresh bridge in front of that history.
	br, err := startBridgeChild(etcd.etcdURL)
	if err != nil {
		res.note("%s on %s: cannot start the bridge: %s", wl, sys, fmtErr(err))
		return
	}
	k := newV2KV(br.v2URL)
	stopBridge := func() {
		closeIdle(k)
		br.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := k.put(ctx, histGetKey, value64); err != nil {
		res.note("%s on %s: setup: %s", wl, sys, fmtErr(err))
		stopBridge()
		return
	}

	// 2. Plain GET latency, nothing else running.
	stop := make(chan struct{})
	cpu := newCPUMeter(br.pid, etcd.pid)
	wait := getLoad(k, histGetKey, hc.getClients, stop)
	time.Sleep(hc.baseline)
	close(stop)
	baseGets, baseErrs := wait()
	base := latsBefore(baseGets, time.Now())
	baseCPU := cpu.cores()
	if baseErrs > 0 {
		res.note("%s on %s: %d baseline GETs failed", wl, sys, baseErrs)
	}

	// 3. The burst of stale watches, GETs running on.
	staleBurst(hc, res, br, etcd, k, base, baseCPU)
	stopBridge()

	// 4. Walking history, on a bridge restarted again: the burst's replay
	// has filled the ring of the previous one.
	br, err = startBridgeChild(etcd.etcdURL)
	if err != nil {
		res.note("%s on %s: cannot restart the bridge: %s", wl, sys, fmtErr(err))
		return
	}
	defer br.Stop()
	cur, err := currentRev(ctx, etcd.V3())
	if err != nil {
		res.note("%s on %s: %s", wl, sys, fmtErr(err))
		return
	}
	for i, walk := range []struct {
		name string
		back uint64
	}{
		{fmt.Sprintf("walk from current−%s", commas(histWithin)), histWithin},
		{fmt.Sprintf("walk from current−%d", histRingWalk), histRingWalk},
	} {
		if i > 0 {
			// A replay may read on after the first walk's client left; the
			// second walk starts once none does.
			t := time.Now()
			m0, _ := scrapeSums(br.v2URL, mReplayRevs, mSkimmed)
			moved, ok := replaysIdle(br.v2URL, 0, 60*time.Second)
			if !ok {
				res.note("%s on %s: history replays still reading 60 s after the first walk", wl, sys)
			}
			m1, _ := scrapeSums(br.v2URL, mReplayRevs, mSkimmed)
			logf("  replays read %.0f more revisions (and skimmed %.0f) for %v after the first walk ended",
				m1[mReplayRevs]-m0[mReplayRevs], m1[mSkimmed]-m0[mSkimmed], moved.Sub(t).Round(100*time.Millisecond))
			res.add(wl, sys, "revisions replayed after the first walk ended", "revisions", true, m1[mReplayRevs]-m0[mReplayRevs])
		}
		from := cur - walk.back
		logf("  %s: %s one-shot from waitIndex %d (current %d)", walk.name, histHot, from, cur)
		m0, _ := scrapeSums(br.v2URL, histMetricNames...)
		w := walkHistory(br.v2URL, histHot, translate.FirstIndex(int64(from)), translate.Index(int64(hotLast)), hc.walkEvents, hc.walkFor)
		m1, _ := scrapeSums(br.v2URL, histMetricNames...)
		logf("    %d events in %v (first after %v); stopped: %s; replays +%.0f, revisions replayed +%.0f, skimmed +%.0f, history watches +%.0f",
			w.events, w.elapsed.Round(time.Millisecond), w.first.Round(time.Millisecond), w.stopped,
			m1[mReplays]-m0[mReplays], m1[mReplayRevs]-m0[mReplayRevs], m1[mSkimmed]-m0[mSkimmed], m1[mFeeds]-m0[mFeeds])
		res.add(wl, sys, walk.name+": events caught up", "events", false, float64(w.events))
		if w.events > 0 {
			res.add(wl, sys, walk.name+": first event after", "ms", true, ms(w.first))
		}
		if w.events > 1 && w.elapsed > w.first {
			res.add(wl, sys, walk.name+": events/s after the first", "events/s", false,
				float64(w.events-1)/(w.elapsed-w.first).Seconds())
		}
		res.add(wl, sys, walk.name+": replays started", "replays", true, m1[mReplays]-m0[mReplays])
		res.add(wl, sys, walk.name+": v3 history watches opened", "watches", true, m1[mFeeds]-m0[mFeeds])
		if w.stopped != "target reached" && w.stopped != "caught up" {
			res.note("%s on %s: %s of %s stopped after %d events (the last after %v): %s", wl, sys, walk.name, histHot,
				w.events, w.elapsed.Round(time.Millisecond), w.stopped)
		}
	}
}

// replayIdleFor is how long the replay revision count must stand still for
// the replays to count as done: a replay can pause for most of a second
// when the machine is busy.
const replayIdleFor = 2 * time.Second

// replaysIdle waits until the bridge's replay revision counts (read and
// skimmed) have not moved for replayIdleFor and floor has passed, at most
// until ceiling. It returns when they were last seen moving (within 0.1 s),
// and whether they got idle.
func replaysIdle(base string, floor, ceiling time.Duration) (time.Time, bool) {
	start := time.Now()
	last, moved := -1.0, time.Now()
	for time.Since(start) < ceiling {
		m, err := scrapeSums(base, mReplayRevs, mSkimmed)
		if n := m[mReplayRevs] + m[mSkimmed]; err == nil && n != last {
			last, moved = n, time.Now()
		}
		if time.Since(moved) >= replayIdleFor && time.Since(start) >= floor {
			return moved, true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return moved, false
}

// replaySample is the bridge's replay revision count and the CPU seconds
// of the bridge and of etcd at one moment.
type replaySample struct {
	at       time.Time
	revs     float64
	cpu      [2]float64
	scrapeOK bool
}

// replayTrack polls the bridge's replay revision count and both processes'
// CPU every 100 ms until the returned func is called, which returns the
// samples.
func replayTrack(base string, bridge, etcd int) func() []replaySample {
	stop, done := make(chan struct{}), make(chan struct{})
	var ss []replaySample
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			m, err := scrapeSums(base, mReplayRevs, mSkimmed)
			ss = append(ss, replaySample{at: time.Now(), revs: m[mReplayRevs] + m[mSkimmed], scrapeOK: err == nil,
				cpu: [2]float64{cpuSecondsOf(bridge), cpuSecondsOf(etcd)}})
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() []replaySample {
		close(stop)
		<-done
		return ss
	}
}

// longestPause is the longest time the count stood still between two of
// its moves (a replay stalled with revisions left to read, or the gap
// between two replays).
func longestPause(ss []replaySample) time.Duration {
	var longest time.Duration
	var moved time.Time
	last := -1.0
	for _, s := range ss {
		if !s.scrapeOK || s.revs == last {
			continue
		}
		if last >= 0 {
			if !moved.IsZero() {
				longest = max(longest, s.at.Sub(moved))
			}
			moved = s.at
		}
		last = s.revs
	}
	return longest
}

// cpuUntil is the CPU per second of wall time of the bridge and of etcd
// from the first sample to the last one taken by t.
func cpuUntil(ss []replaySample, t time.Time) [2]float64 {
	if len(ss) < 2 {
		return [2]float64{}
	}
	a, b := ss[0], ss[0]
	for _, s := range ss {
		if !s.at.After(t) {
			b = s
		}
	}
	d := b.at.Sub(a.at).Seconds()
	if d <= 0 {
		return [2]float64{}
	}
	return [2]float64{(b.cpu[0] - a.cpu[0]) / d, (b.cpu[1] - a.cpu[1]) / d}
}

// cpuMeter measures the CPU the bridge and its etcd use over a span.
type cpuMeter struct {
	pids       [2]int
	t0         time.Time
	br0, etcd0 float64
}

func newCPUMeter(bridge, etcd int) *cpuMeter {
	return &cpuMeter{pids: [2]int{bridge, etcd}, t0: time.Now(), br0: cpuSecondsOf(bridge), etcd0: cpuSecondsOf(etcd)}
}

// cores is the CPU used since the meter started, per second, of the bridge
// and of etcd.
func (m *cpuMeter) cores() [2]float64 {
	d := time.Since(m.t0).Seconds()
	return [2]float64{(cpuSecondsOf(m.pids[0]) - m.br0) / d, (cpuSecondsOf(m.pids[1]) - m.etcd0) / d}
}

// buildHistory writes n revisions under histDir, histBuilders Puts at a
// time: every other one to histHot, the rest to /hist/k<i mod 1000>. It
// returns the last revision of histHot.
func buildHistory(cli *clientv3.Client, n int) (uint64, error) {
	var next atomic.Int64
	var hotLast atomic.Uint64
	var errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	val := strings.Repeat("v", 16)
	for g := 0; g < histBuilders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || errs.Load() > 100 {
					return
				}
				key := histHot
				if i%2 == 1 {
					key = fmt.Sprintf("%s/k%d", histDir, i%1000)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				r, err := cli.Put(ctx, key, val)
				cancel()
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					next.Add(-1) // write it again
					continue
				}
				if key == histHot {
					rev := uint64(r.Header.Revision)
					for {
						old := hotLast.Load()
						if rev <= old || hotLast.CompareAndSwap(old, rev) {
							break
						}
					}
				}
				if i > 0 && i%50000 == 0 {
					logf("    history: %s revisions written (%v)", commas(i), time.Since(t0).Round(100*time.Millisecond))
				}
			}
		}()
	}
	wg.Wait()
	if errs.Load() > 100 {
		return 0, fmt.Errorf("%d puts failed, e.g. %v", errs.Load(), firstErr.Load())
	}
	return hotLast.Load(), nil
}

func currentRev(ctx context.Context, cli *clientv3.Client) (uint64, error) {
	r, err := cli.Get(ctx, histHot, clientv3.WithSerializable(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return uint64(r.Header.Revision), nil
}

// getSample is one GET: when it started and how long it took.
type getSample struct {
	at time.Time
	d  time.Duration
}

// getLoad runs n closed-loop v2 GET clients of key until stop is closed;
// the returned func waits for them and returns their GETs and errors.
func getLoad(k *v2kv, key string, n int, stop <-chan struct{}) func() ([]getSample, int) {
	var mu sync.Mutex
	var all []getSample
	errs := 0
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []getSample
			e := 0
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				errs += e
				mu.Unlock()
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				t := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := k.get(ctx, key, false)
				cancel()
				if err != nil {
					e++
					continue
				}
				mine = append(mine, getSample{t, time.Since(t)})
			}
		}()
	}
	return func() ([]getSample, int) {
		wg.Wait()
		return all, errs
	}
}

// latsBefore is the latencies of the GETs started before t.
func latsBefore(gs []getSample, t time.Time) lat {
	var l lat
	for _, g := range gs {
		if g.at.Before(t) {
			l = append(l, g.d)
		}
	}
	return l
}

// The bridge's metrics the section reads.
const (
	mReplays    = "v2bridge_watch_history_replays_total"
	mReplayRevs = "v2bridge_watch_history_replay_revisions_total"
	mSkimmed    = "v2bridge_watch_history_skimmed_revisions_total"
	mFeeds      = "v2bridge_watch_history_feeds_total"
	mRefused    = "v2bridge_watch_history_refused_total"
	mWatchers   = "v2bridge_v2_watchers"
)

var histMetricNames = []string{mReplays, mReplayRevs, mSkimmed, mFeeds, mRefused, mWatchers}

// scrapeSums reads metrics from a Prometheus text endpoint, each the sum of
// its series (a labelled counter that has none counts 0).
func scrapeSums(base string, names ...string) (map[string]float64, error) {
	m := map[string]float64{}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		return m, err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		for _, n := range names {
			rest, ok := strings.CutPrefix(l, n)
			if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
				continue
			}
			if i := strings.LastIndexByte(rest, ' '); i >= 0 {
				if v, err := strconv.ParseFloat(rest[i+1:], 64); err == nil {
					m[n] += v
				}
			}
		}
	}
	return m, sc.Err()
}

// rssSampler reads pid's VmRSS every period until the returned func is
// called, which returns the highest value seen.
func rssSampler(pid int, period time.Duration) func() float64 {
	stop, done := make(chan struct{}), make(chan struct{})
	var peak float64
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			if v, err := rssKiB(pid); err == nil && v > peak {
				peak = v
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 {
		close(stop)
		<-done
		return peak
	}
}

// staleWatch is one watch of the burst and how it was answered.
type staleWatch struct {
	beyond    bool // waitIndex beyond the replay's reach
	key       string
	waitIndex uint64
	headers   bool          // the response headers arrived
	outcome   string        // "401", "event", "ended" (no event), "error"; "" = still waiting when it left
	answered  time.Duration // since the burst started
	detail    string
}

const (
	outWaiting = "still waiting"
	out401     = "401"
	outEvent   = "event"
	outEnded   = "ended without event"
	outError   = "error"
)

// staleBurst opens hc.stale one-shot watches with waitIndexes within the
// replay's reach and hc.stale beyond it, all at once, on keys never
// written, while the GET clients run on; they stay until the replays are
// done, then leave.
func staleBurst(hc *histConfig, res *results, br, etcd *instance, k *v2kv, base lat, baseCPU [2]float64) {
	wl, sys := hc.workload(), sysBridge
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cur, err := currentRev(ctx, br.V3())
	if err != nil {
		res.note("%s on %s: %s", wl, sys, fmtErr(err))
		return
	}
	var ws []*staleWatch
	for j := 0; j < hc.stale; j++ {
		back := uint64(histWithinNewest)
		if hc.stale > 1 {
			back += uint64(j) * (histWithin - histWithinNewest) / uint64(hc.stale-1)
		}
		ws = append(ws, &staleWatch{key: fmt.Sprintf("%s/never/a%03d", histDir, j), waitIndex: translate.FirstIndex(int64(cur - back))})
	}
	for j := 0; j < hc.stale; j++ {
		ws = append(ws, &staleWatch{beyond: true, key: fmt.Sprintf("%s/never/b%03d", histDir, j), waitIndex: histBeyond})
	}
	rand.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
	logf("  burst: %d stale watches (waitIndex %d…%d and %d), current revision %d", len(ws),
		cur-histWithin, cur-histWithinNewest, histBeyond, cur)

	time.Sleep(300 * time.Millisecond)
	rss0, _ := rssKiB(br.pid)
	mem0, _ := bridgeGoMem(br)
	m0, err := scrapeSums(br.v2URL, histMetricNames...)
	if err != nil {
		res.note("%s on %s: metrics: %s", wl, sys, fmtErr(err))
	}

	stopGets := make(chan struct{})
	waitGets := getLoad(k, histGetKey, hc.getClients, stopGets)
	peakRSS := rssSampler(br.pid, 20*time.Millisecond)
	track := replayTrack(br.v2URL, br.pid, etcd.pid)
	start := time.Now()
	host := br.v2URL[len("http://"):]
	var leaving atomic.Bool
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	var settled atomic.Int64 // watches with headers or an answer
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counted := false
			settle := func() {
				if !counted {
					counted = true
					settled.Add(1)
				}
			}
			defer settle()
			c, err := net.DialTimeout("tcp", host, 10*time.Second)
			if err != nil {
				w.outcome, w.detail = outError, err.Error()
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			req := fmt.Sprintf("GET /v2/keys%s?wait=true&waitIndex=%d HTTP/1.1\r\nHost: %s\r\n\r\n", w.key, w.waitIndex, host)
			if _, err := c.Write([]byte(req)); err != nil {
				w.outcome, w.detail = outError, err.Error()
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				if !leaving.Load() {
					w.outcome, w.detail = outError, err.Error()
				}
				return
			}
			w.headers = true
			if resp.StatusCode == http.StatusOK {
				settle() // a 200's headers come at once; its body when an event (or the end) comes
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				if !leaving.Load() {
					w.outcome, w.detail = outError, err.Error()
				}
				return
			}
			w.answered = time.Since(start)
			var b v2WatchBody
			switch {
			case len(body) == 0:
				w.outcome = outEnded
			case json.Unmarshal(body, &b) != nil:
				w.outcome, w.detail = outError, fmt.Sprintf("HTTP %d %.200s", resp.StatusCode, body)
			case b.ErrorCode == 401:
				w.outcome, w.detail = out401, fmt.Sprintf("%.200s", body)
			case b.ErrorCode == 0 && b.Node != nil:
				w.outcome, w.detail = outEvent, fmt.Sprintf("%s %s", b.Action, b.Node.Key)
			default:
				w.outcome, w.detail = outError, fmt.Sprintf("HTTP %d %.200s", resp.StatusCode, body)
			}
		}()
	}

	// Every watch registered or answered, then the replays done: their
	// revision count no longer moving.
	dl := time.Now().Add(30 * time.Second)
	for settled.Load() < int64(len(ws)) && time.Now().Before(dl) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := settled.Load(); n < int64(len(ws)) {
		res.note("%s on %s: %d of %d stale watches had neither headers nor an answer after 30 s", wl, sys, int64(len(ws))-n, len(ws))
	}
	registered := time.Since(start)
	moved, replaysDone := replaysIdle(br.v2URL, hc.minBurst-registered, 60*time.Second)
	replayTime := moved.Sub(start)
	if !replaysDone {
		res.note("%s on %s: history replays still reading after 60 s", wl, sys)
	}
	// The GETs during the burst: those started before the replays were
	// done (and at least within minBurst).
	close(stopGets)
	gets, duringErrs := waitGets()
	getSpan := max(replayTime, hc.minBurst)
	during := latsBefore(gets, start.Add(getSpan))
	m1, _ := scrapeSums(br.v2URL, histMetricNames...)
	memPeak, _ := bridgeGoMem(br)

	// The watchers leave.
	leaving.Store(true)
	mu.Lock()
	for _, c := range conns {
		_ = c.Close()
	}
	mu.Unlock()
	wg.Wait()
	peak := peakRSS()
	time.Sleep(hc.settle)
	samples := track()
	burstCPU := cpuUntil(samples, start.Add(getSpan))
	rss2, _ := rssKiB(br.pid)
	mem2, _ := bridgeGoMem(br)
	m2, _ := scrapeSums(br.v2URL, histMetricNames...)

	// Figures.
	mib := func(kib float64) float64 { return kib / 1024 }
	logf("    bridge RSS %.1f MiB before, %.1f MiB at the peak, %.1f MiB %v after; Go heap in use %.1f → %.1f → %.1f MiB",
		mib(rss0), mib(peak), mib(rss2), hc.settle, float64(mem0.HeapInuse)/(1<<20), float64(memPeak.HeapInuse)/(1<<20),
		float64(mem2.HeapInuse)/(1<<20))
	logf("    all watches registered or answered after %v; replays read until %v; GETs during the burst: %d in %v",
		registered.Round(time.Millisecond), replayTime.Round(time.Millisecond), len(during), getSpan.Round(time.Millisecond))
	res.add(wl, sys, "bridge RSS before the burst", "MiB", true, mib(rss0))
	res.add(wl, sys, "RSS added by the burst (peak)", "MiB", true, mib(peak-rss0))
	res.add(wl, sys, fmt.Sprintf("RSS added, %v after the watchers left", hc.settle), "MiB", true, mib(rss2-rss0))
	if len(base) > 0 {
		addLat(res, wl, sys, fmt.Sprintf("GET p50, baseline (%d clients)", hc.getClients), base, 0.50)
		addLat(res, wl, sys, fmt.Sprintf("GET p99, baseline (%d clients)", hc.getClients), base, 0.99)
	}
	if len(during) > 0 {
		addLat(res, wl, sys, "GET p50, during the burst", during, 0.50)
		addLat(res, wl, sys, "GET p99, during the burst", during, 0.99)
		if len(base) > 0 {
			res.add(wl, sys, "GET p99 during ÷ baseline", "×", true, float64(during.pct(0.99))/float64(base.pct(0.99)))
		}
	}
	if duringErrs > 0 {
		res.note("%s on %s: %d GETs failed during the burst", wl, sys, duringErrs)
	}
	res.add(wl, sys, "bridge CPU, baseline (GETs)", "cores", true, baseCPU[0])
	res.add(wl, sys, "bridge CPU, during the burst (GETs too)", "cores", true, burstCPU[0])
	res.add(wl, sys, "etcd CPU, baseline (GETs)", "cores", true, baseCPU[1])
	res.add(wl, sys, "etcd CPU, during the burst (GETs too)", "cores", true, burstCPU[1])
	res.add(wl, sys, "bridge CPU time, burst (GETs too)", "s", true, burstCPU[0]*getSpan.Seconds())
	res.add(wl, sys, "etcd CPU time, burst (GETs too)", "s", true, burstCPU[1]*getSpan.Seconds())
	res.add(wl, sys, "history replays started", "replays", true, m1[mReplays]-m0[mReplays])
	res.add(wl, sys, "revisions read by replays", "revisions", true, m1[mReplayRevs]-m0[mReplayRevs])
	res.add(wl, sys, "revisions skimmed by replays", "revisions", true, m1[mSkimmed]-m0[mSkimmed])
	res.add(wl, sys, "v3 history watches opened by replays", "watches", true, m1[mFeeds]-m0[mFeeds])
	res.add(wl, sys, "replays done after", "ms", true, ms(replayTime))
	res.add(wl, sys, "watches refused (401)", "watches", false, m1[mRefused]-m0[mRefused])
	res.add(wl, sys, fmt.Sprintf("v2 watchers left %v after", hc.settle), "watchers", true, m2[mWatchers])
	res.add(wl, sys, "revisions replayed after the watchers left", "revisions", true,
		m2[mReplayRevs]+m2[mSkimmed]-m1[mReplayRevs]-m1[mSkimmed])
	if m2[mReplays] != m1[mReplays] {
		res.note("%s on %s: %.0f more replays started after the watchers left", wl, sys, m2[mReplays]-m1[mReplays])
	}
	if pause := longestPause(samples); pause > 0 {
		res.add(wl, sys, "longest pause of a replay's progress", "ms", true, ms(pause))
	}

	for _, g := range []struct {
		beyond bool
		name   string
		want   string // the expected outcome
	}{
		{false, fmt.Sprintf("waitIndex current−%s…%s", commas(histWithin), commas(histWithinNewest)), outWaiting},
		{true, fmt.Sprintf("waitIndex %d (beyond reach)", histBeyond), out401},
	} {
		count := map[string]int{}
		var ans lat
		var example = map[string]string{}
		for _, w := range ws {
			if w.beyond != g.beyond {
				continue
			}
			o := w.outcome
			if o == "" {
				o = outWaiting
			} else {
				ans = append(ans, w.answered)
			}
			count[o]++
			if example[o] == "" && w.detail != "" {
				example[o] = fmt.Sprintf("waitIndex %d: %s", w.waitIndex, w.detail)
			}
		}
		for _, o := range []string{out401, outEvent, outWaiting, outEnded, outError} {
			res.add(wl, sys, fmt.Sprintf("%s: %s", g.name, o), "watches", o != g.want, float64(count[o]))
		}
		if count[out401] > 0 && count[out401] == len(ans) {
			addLat(res, wl, sys, g.name+": 401 answered in (max)", ans, 1)
		}
		for _, o := range []string{outEvent, outEnded, outError} {
			if count[o] > 0 {
				res.note("%s on %s: %s: %d watches on never-written keys answered %q, e.g. %s", wl, sys, g.name, count[o], o, example[o])
			}
		}
	}
}

// walkResult is how a history walk went.
type walkResult struct {
	events  int
	first   time.Duration // until the first event
	elapsed time.Duration // until the last event
	stopped string        // why the walk stopped
}

// walkHistory walks key's history like a v2 client: a one-shot watch from
// waitIndex from, re-issued with waitIndex = modifiedIndex+1 after each
// event, until maxEvents, the key's last index (last), a 401 or limit.
func walkHistory(base, key string, from, last uint64, maxEvents int, limit time.Duration) walkResult {
	c := newHTTPClient(1)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var r walkResult
	start := time.Now()
	next := from
	for {
		if r.events >= maxEvents {
			r.stopped = "target reached"
			return r
		}
		if next > last {
			r.stopped = "caught up"
			return r
		}
		u := fmt.Sprintf("%s/v2/keys%s?wait=true&waitIndex=%d", base, key, next)
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		resp, err := c.Do(req)
		if err != nil {
			r.stopped = "no event: " + fmtErr(err)
			if ctx.Err() != nil {
				r.stopped = fmt.Sprintf("time limit (%v)", limit)
			}
			return r
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			r.stopped = "reading an answer: " + fmtErr(err)
			if ctx.Err() != nil {
				r.stopped = fmt.Sprintf("time limit (%v)", limit)
			}
			return r
		}
		if len(body) == 0 {
			continue // the watch ended without an event: re-issue it
		}
		var b v2WatchBody
		if err := json.Unmarshal(body, &b); err != nil {
			r.stopped = fmt.Sprintf("HTTP %d %.200s", resp.StatusCode, body)
			return r
		}
		if b.ErrorCode != 0 || b.Node == nil {
			r.stopped = fmt.Sprintf("waitIndex %d answered %.200s", next, strings.TrimSpace(string(body)))
			return r
		}
		r.events++
		r.elapsed = time.Since(start)
		if r.events == 1 {
			r.first = r.elapsed
		}
		next = b.Node.ModifiedIndex + 1
	}
}
