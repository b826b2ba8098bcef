// SPDX-License-Identifier: Apache-2.0

// Package soak is a chaos soak of v2bridge: for a set duration, v2 writers
// through the bridge and v3 clients writing multi-key transactions change a
// directory that flannel-like v2 watchers watch, while the etcd members
// under the bridge are blackholed, frozen and lose their leadership at
// random, one at a time, and the bridge is restarted partway. It proves
// that no watch event is lost or duplicated, no watch gets stuck and the
// bridge leaks nothing.
//
// It is long, so it runs only when V2BRIDGE_TEST_SOAK_DURATION is set:
//
//	make soak                     # 3 minutes
//	make soak SOAK_DURATION=30m
//	make soak SOAK_RACE=1         # the soak and the bridge under the race detector
//
// The summary goes to stdout and to proof/soak/SOAK.md (overwritten by each run).
package soak

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

func TestMain(m *testing.M) {
	v2bridgetest.MemberMain()
	os.Exit(m.Run())
}

const (
	durationEnv = "V2BRIDGE_TEST_SOAK_DURATION"
	seedEnv     = "V2BRIDGE_TEST_SOAK_SEED"

	// margin bounds everything but the chaos itself: building the bridge,
	// starting the cluster, draining, settling. Past duration + margin the
	// watchdog ends the test with every goroutine's stack.
	margin = 10 * time.Minute

	v2Writers, v2Pause = 3, 30 * time.Millisecond
	v3Writers, v3Pause = 2, 100 * time.Millisecond

	// historyEvents is the bridge's --watch-history-events: large enough
	// that a watcher behind by a fault's worth of events is served from
	// memory, not with a 401.
	historyEvents = 10000

	// livenessBound is how long the bridge may take to end a watch fed by a
	// member that went silent (1 to 1.3 s with the default heartbeat; 2 to
	// 3 s with a 1 s one, V2BRIDGE_HEARTBEAT_*); a watch request open
	// longer than it plus stuckSlack, with events owed, is stuck.
	livenessBound = 4 * time.Second
	stuckSlack    = 6 * time.Second
	// stallAfter: a watcher that delivered nothing for this long while
	// events were owed to it is stuck (it keeps failing, or did not come
	// back after a heal or a restart).
	stallAfter = 15 * time.Second
	// drainBound bounds each wait of the drain at the end.
	drainBound = 60 * time.Second

	// goroutineSlack is the leak tolerance on goroutines, the bridge at the
	// end against the bridge at the start, both idle.
	goroutineSlack = 10
)

// rssSlack is the leak tolerance on RSS, the bridge at the end against the
// bridge at the start, both idle and after a GC: the end holds a full
// history of events (historyEvents) and heap the runtime has not given
// back yet. The race detector's shadow memory is never given back.
func rssSlack() float64 {
	if raceBuild {
		return 128 << 20
	}
	return 32 << 20
}

// watchScopes are the watchers' directories: two on everything, one on
// the v2 writers' part, one on the v3 transactions' part.
var watchScopes = []string{"/soak", "/soak", "/soak/v2", "/soak/v3"}

func TestSoak(t *testing.T) {
	d := os.Getenv(durationEnv)
	if d == "" {
		t.Skip("a long chaos soak: run it with make soak (" + durationEnv + "=3m)")
	}
	duration, err := time.ParseDuration(d)
	if err != nil || duration <= 0 {
		t.Fatalf("%s=%q: want a duration such as 3m", durationEnv, d)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(seedEnv); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
	}
	watchdog := time.AfterFunc(duration+margin, func() {
		buf := make([]byte, 1<<22)
		fmt.Fprintf(os.Stderr, "soak: still running %v after the start: ending it\n%s\n", duration+margin,
			buf[:runtime.Stack(buf, true)])
		os.Exit(2)
	})
	defer watchdog.Stop()

	s := runSoak(t, duration, seed)
	md := s.render()
	fmt.Println()
	fmt.Println(md)
	//nolint:gosec // G306: 0o644 is meant (a committed report).
	if err := os.WriteFile("SOAK.md", []byte(md), 0o644); err != nil {
		t.Error(err)
	}
	for _, f := range s.failures() {
		t.Error(f)
	}
}

// runSoak runs the soak and returns what it saw.
func runSoak(t *testing.T, duration time.Duration, seed uint64) *summary {
	began := time.Now()
	s := &summary{duration: duration, seed: seed, race: raceBuild, historyEvents: historyEvents}
	bin := buildBridge(t)
	cl := v2bridgetest.StartProcessCluster(t, 3)
	br := &bridgeRunner{t: t, bin: bin, dir: t.TempDir(), flags: bridgeFlags(cl.ProxiedEndpoints(), historyEvents)}
	t.Cleanup(br.close)
	br.start("")
	s.start = settledStats(t, br.cur, nil)
	mkdirs(t, br.tgt, "/soak/v2", "/soak/v3")

	led := newLedger()
	var wg sync.WaitGroup // every watcher, writer and the monitor
	watchCtx, stopWatchers := context.WithCancel(context.Background())
	defer func() { stopWatchers(); wg.Wait() }() // a t.Fatal on the way still ends them
	var ws []*watcher
	for i, scope := range watchScopes {
		w := newWatcher(fmt.Sprintf("w%d", i), scope, br.tgt)
		ws = append(ws, w)
		wg.Go(func() { w.run(watchCtx) })
	}
	for _, w := range ws {
		select {
		case <-w.listed:
		case <-time.After(drainBound):
			t.Fatalf("watcher %s: no listing of %s within %v", w.name, w.scope, drainBound)
		}
	}
	mon := &monitor{led: led, ws: ws, stuckAfter: livenessBound + stuckSlack, stallAfter: stallAfter}
	wg.Go(func() { mon.run(watchCtx) })

	writeCtx, stopWriters := context.WithCancel(context.Background())
	var wwg sync.WaitGroup // the writers
	defer func() { stopWriters(); wwg.Wait() }()
	var v2ws []*v2Writer
	var v3ws []*v3Writer
	for i := range v2Writers {
		w := newV2Writer(fmt.Sprintf("v2w%d", i), br.tgt, led, seed+uint64(i), v2Pause)
		v2ws = append(v2ws, w)
		wwg.Go(func() { w.run(writeCtx) })
	}
	for i := range v3Writers {
		w := newV3Writer(fmt.Sprintf("v3w%d", i), cl.Client(t), led, seed+100+uint64(i), v3Pause)
		v3ws = append(v3ws, w)
		wwg.Go(func() { w.run(writeCtx) })
	}

	ch := newChaos(t, cl, seed)
	s.restarts = runChaos(t, ch, br, duration)
	stopWriters()
	wwg.Wait()
	s.chaosTook = time.Since(began)

	waitExpiries(t, cl.Client(t))
	s.fenceMissing = fence(t, br.tgt, led, ws)
	stopWatchers()
	wg.Wait()

	s.end = settledStats(t, br.cur, &s.start)
	br.close()

	snap := led.snapshot()
	for _, w := range ws {
		rec, st := w.record()
		s.reports = append(s.reports, analyze(snap, rec))
		s.watch = append(s.watch, st)
	}
	for _, w := range v2ws {
		s.v2.add(&w.stats)
	}
	for _, w := range v3ws {
		s.v3.add(&w.stats)
	}
	s.stuck = mon.stuck()
	s.faults, s.unrecovered = ch.faults, ch.unrecovered
	s.judgeLosses(br.all(), cl)
	s.took = time.Since(began)
	return s
}

// runChaos injects faults until duration has passed, and restarts the
// bridge partway: once per started 10 minutes, alternately with SIGTERM
// (graceful) and SIGKILL (a crash).
func runChaos(t *testing.T, ch *chaos, br *bridgeRunner, duration time.Duration) []restart {
	start := time.Now()
	end := start.Add(duration)
	n := int((duration + 10*time.Minute - 1) / (10 * time.Minute))
	var due []time.Time
	for i := range n {
		due = append(due, start.Add(time.Duration((float64(i)+0.5)/float64(n)*float64(duration))))
	}
	var restarts []restart
	for time.Now().Before(end) {
		if len(due) > 0 && time.Now().After(due[0]) {
			sig := syscall.SIGTERM
			if len(restarts)%2 == 1 {
				sig = syscall.SIGKILL
			}
			r := restart{at: time.Now(), sig: sig}
			br.restart(sig)
			r.down = time.Since(r.at)
			restarts = append(restarts, r)
			due = due[1:]
			continue
		}
		time.Sleep(min(ch.gap(), time.Until(end)))
		if time.Now().Before(end) {
			ch.one(ch.cl.Index(br.cur.connected()))
		}
	}
	return restarts
}

// mkdirs creates the soak's directories through the bridge before anyone
// watches.
func mkdirs(t *testing.T, tgt *target, dirs ...string) {
	hc, tr := newHTTPClient()
	defer tr.CloseIdleConnections()
	for _, d := range dirs {
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		a, err := v2Do(ctx, hc, tgt.get(), http.MethodPut, d, url.Values{"dir": {"true"}})
		cancel()
		if err != nil || (a.ev == nil && (a.err == nil || a.err.Code != 102)) {
			t.Fatalf("mkdir %s: %v %+v %+v", d, err, a.err, a.body)
		}
	}
}

var ttlKey = regexp.MustCompile(`/t[0-9]+$`)

// waitExpiries waits until every key written with a TTL has expired, so
// their expire events are due before the fence.
func waitExpiries(t *testing.T, cli *clientv3.Client) {
	deadline := time.Now().Add(drainBound)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cli.Get(ctx, "/soak/v2/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		cancel()
		if err == nil {
			left := 0
			for _, kv := range resp.Kvs {
				if ttlKey.Match(kv.Key) {
					left++
				}
			}
			if left == 0 {
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("TTL keys still there %v after the writers stopped: their expiries may count as lost", drainBound)
}

// fence writes a last key through the bridge into each watched part and
// waits until every watcher has delivered the fences in its scope: events
// come in index order, so by then a watcher has delivered everything
// written before, or lost it. It returns the watchers that did not.
func fence(t *testing.T, tgt *target, led *ledger, ws []*watcher) []string {
	hc, tr := newHTTPClient()
	defer tr.CloseIdleConnections()
	var fences []identity
	for i, key := range []string{"/soak/v2/fence", "/soak/v3/fence"} {
		deadline := time.Now().Add(drainBound)
		for n := 0; ; n++ {
			v := fmt.Sprintf("fence.%d.%d", i, n)
			ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
			sent := time.Now()
			a, err := v2Do(ctx, hc, tgt.get(), http.MethodPut, key, url.Values{"value": {v}})
			cancel()
			id := identity{key: key, value: v}
			o := classify(a, err)
			if o == applied {
				led.expect(expected{id: id, action: a.ev.Action, origin: fromV2, sent: sent, acked: time.Now()})
				fences = append(fences, id)
				break
			}
			if o == uncertain {
				led.uncertain(id)
			}
			if time.Now().After(deadline) {
				t.Fatalf("fence %s: not written within %v: %v %+v", key, drainBound, err, a.err)
			}
			time.Sleep(errorPause)
		}
	}
	var missing []string
	deadline := time.Now().Add(drainBound)
	for _, w := range ws {
		for _, f := range fences {
			if !inScope(w.scope, f.key) {
				continue
			}
			for !w.has(f) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if !w.has(f) {
				missing = append(missing, w.name+" ("+f.key+")")
			}
		}
	}
	return missing
}

// settledStats measures the bridge idle: after a GC, and (at the end) once
// its goroutines and RSS are back within the tolerances of the start, or
// after drainBound.
func settledStats(t *testing.T, p *bridgeProc, start *procStats) procStats {
	time.Sleep(2 * time.Second) // connections just closed are let go
	deadline := time.Now().Add(drainBound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		st, err := p.stats(ctx)
		cancel()
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("bridge metrics: %v", err)
		}
		if err == nil && (start == nil || !leaks(*start, st) || time.Now().After(deadline)) {
			return st
		}
		time.Sleep(2 * time.Second)
	}
}

// leaks reports whether end is beyond the tolerances of start.
func leaks(start, end procStats) bool {
	return end.goroutines > start.goroutines+goroutineSlack || end.rss > start.rss+rssSlack()
}
