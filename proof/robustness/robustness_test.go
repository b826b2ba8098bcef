// SPDX-License-Identifier: Apache-2.0

// Package robustness checks that three bridges on one etcd cluster serve
// one linearizable v2 store under faults. Clients through every bridge
// record each v2 operation (quorum and plain GET, PUT, compare-and-swap by
// prevValue and prevIndex, compare-and-delete, DELETE, in-order POST, TTL
// create and refresh, directory create and recursive delete) with its
// invocation and response times, and recursive watchers follow the key
// space through every bridge, while bridges are killed and restarted,
// members are frozen and blackholed, the leader moves and history is
// compacted. Then porcupine checks the history against a model of the v2
// store, every watch event is held to the operations, and every plain GET
// to what the design promises of it.
//
// A short run is part of make test; a long one:
//
//	make robustness ROBUSTNESS_DURATION=30m
//
// writes its summary to proof/robustness/ROBUSTNESS.md.
package robustness

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

func TestMain(m *testing.M) {
	v2bridgetest.MemberMain()
	os.Exit(m.Run())
}

const (
	durationEnv = "V2BRIDGE_TEST_ROBUSTNESS_DURATION"
	seedEnv     = "V2BRIDGE_TEST_ROBUSTNESS_SEED"
	replayEnv   = "V2BRIDGE_TEST_ROBUSTNESS_REPLAY"
	// shortRun is the run inside make test.
	shortRun = 45 * time.Second

	numBridges       = 3
	clientsPerBridge = 2
	clientPause      = 20 * time.Millisecond
	// epochLen: how long clients use one set of keys.
	epochLen = 10 * time.Second
	// checkTimeout bounds porcupine on one key's history.
	checkTimeout = time.Minute
	// fenceBound: every watcher sees the last write within it.
	fenceBound = time.Minute
	// margin bounds all but the chaos (building, starting, checking).
	margin = 10 * time.Minute
)

func TestRobustness(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd cluster and three bridges")
	}
	duration, long := shortRun, false
	if d := os.Getenv(durationEnv); d != "" {
		var err error
		if duration, err = time.ParseDuration(d); err != nil || duration <= 0 {
			t.Fatalf("%s=%q: want a duration such as 30m", durationEnv, d)
		}
		long = true
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(seedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
	}
	watchdog := time.AfterFunc(duration+margin, func() {
		buf := make([]byte, 1<<22)
		fmt.Fprintf(os.Stderr, "robustness: still running %v after the start: ending it\n%s\n", duration+margin,
			buf[:runtime.Stack(buf, true)])
		os.Exit(2)
	})
	defer watchdog.Stop()

	s := run(t, duration, seed)
	md := s.render()
	fmt.Println()
	fmt.Println(md)
	if long {
		//nolint:gosec // G306: 0o644 is meant (a committed report).
		if err := os.WriteFile("ROBUSTNESS.md", []byte(md), 0o644); err != nil {
			t.Error(err)
		}
	}
	for _, a := range s.v.anomalies {
		t.Error(a)
	}
	for _, e := range s.exits {
		t.Error("bridge stop: " + e)
	}
}

// summary is what a run did and found.
type summary struct {
	duration, took time.Duration
	seed           uint64
	ops            [numOpKinds][numOutcomes]int
	faults         [numFaults]int
	faultErrs      []string
	watchers       int
	watchRequests  int
	watchEmpty     int
	watchErrs      int
	longestOut     time.Duration
	exits          []string
	v              verdict
	dump           string // where the history went, when there are anomalies
}

func run(t *testing.T, duration time.Duration, seed uint64) *summary {
	began := time.Now()
	s := &summary{duration: duration, seed: seed}
	rng := rand.New(rand.NewPCG(seed, 2))
	bin := v2bridgetest.BuildBridge(t, false)
	cl := v2bridgetest.StartProcessCluster(t, numBridges)

	// Each bridge lists the members in another order, so each starts on a
	// member of its own.
	eps := cl.ProxiedEndpoints()
	var brs []*bridge
	for i := range numBridges {
		rot := append(append([]string(nil), eps[i%len(eps):]...), eps[:i%len(eps)]...)
		b := &bridge{t: t, slot: &bridgeSlot{idx: i}, bin: bin, args: []string{"--endpoints", strings.Join(rot, ","),
			"--serve-prefix", "/", "--log-level", "warn"}}
		b.start("")
		brs = append(brs, b)
		t.Cleanup(b.stop)
	}

	ck := clock{start: time.Now()}
	keys := keySpace{root: "/robustness", epochLen: epochLen}
	hist := &history{}
	setup := newHTTPClient(requestTimeout)
	setupID := numBridges * clientsPerBridge
	start := do(setup, ck, brs[0].slot, setupID, input{Kind: opSet, Key: keys.root + "/start", Value: "start"})
	hist.add(start)
	if start.Class != okay {
		t.Fatalf("first write: %+v", start)
	}

	var wg sync.WaitGroup // every watcher and client
	watchCtx, stopWatchers := context.WithCancel(context.Background())
	defer func() { stopWatchers(); wg.Wait() }()
	var ws []*watcher
	for _, b := range brs {
		w := newWatcher(b.slot, keys.root, ck, start.Out.Node.Mod+1)
		ws = append(ws, w)
		wg.Go(func() { w.run(watchCtx) })
	}
	clientCtx, stopClients := context.WithCancel(context.Background())
	var cwg sync.WaitGroup
	defer func() { stopClients(); cwg.Wait() }()
	var cs []*client
	for i := range numBridges * clientsPerBridge {
		c := &client{id: i, b: brs[i%numBridges].slot, hc: newHTTPClient(requestTimeout), ck: ck, keys: keys,
			hist: hist, rng: rand.New(rand.NewPCG(seed, uint64(10+i))), seen: map[string]seen{}, pause: clientPause}
		cs = append(cs, c)
		cwg.Go(func() { c.run(clientCtx) })
	}

	ch := &chaos{t: t, cl: cl, bridges: brs, rng: rng}
	ch.run(time.Now().Add(duration))
	stopClients()
	cwg.Wait()

	fence := do(setup, ck, brs[0].slot, setupID, input{Kind: opSet, Key: keys.root + "/fence", Value: "fence"})
	hist.add(fence)
	if fence.Class != okay {
		t.Fatalf("last write: %+v", fence)
	}
	deadline := time.Now().Add(fenceBound)
	for i, w := range ws {
		for !w.reached(fence.Out.Node.Mod) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if !w.reached(fence.Out.Node.Mod) {
			s.v.anomaly("watcher %d (bridge %d) did not see the last write (index %d) within %v", i, i,
				fence.Out.Node.Mod, fenceBound)
		}
	}
	stopWatchers()
	wg.Wait()
	for _, b := range brs {
		b.stop()
		s.exits = append(s.exits, b.exits...)
	}

	ops := hist.all()
	var evs [][]watchEvent
	var segs [][]segment
	var badAnswers []string
	for _, w := range ws {
		e, sg, bad := w.result()
		evs, segs = append(evs, e), append(segs, sg)
		badAnswers = append(badAnswers, bad...)
		s.watchRequests += w.requests
		s.watchEmpty += w.empty
		s.watchErrs += w.errs
	}
	s.watchers = len(ws)
	for _, r := range ops {
		s.ops[r.In.Kind][r.Class]++
	}
	for _, c := range cs {
		s.longestOut = max(s.longestOut, c.longOut)
	}
	s.faults, s.faultErrs = ch.counts, ch.errs

	fenceAnomalies := s.v.anomalies
	s.v = check(ops, evs, segs)
	s.v.anomalies = append(append(fenceAnomalies, badAnswers...), s.v.anomalies...)
	if len(s.v.anomalies) > 0 {
		s.dump = writeDump(t, recorded{Ops: ops, Events: evs, Segments: segs})
	}
	s.took = time.Since(began)
	return s
}

// check runs every check on a recorded run.
func check(ops []record, evs [][]watchEvent, segs [][]segment) verdict {
	var v verdict
	ops = append([]record(nil), ops...)
	resolve(ops, evs, &v)
	checkLinearizable(ops, checkTimeout, &v)
	checkWatches(ops, evs, segs, &v)
	checkPlainGets(ops, evs, &v)
	return v
}

// recorded is a run's history, as a run with anomalies writes it and
// TestReplay reads it.
type recorded struct {
	Ops      []record
	Events   [][]watchEvent
	Segments [][]segment
}

func writeDump(t *testing.T, r recorded) string {
	b, err := json.Marshal(r)
	if err != nil {
		t.Error(err)
		return ""
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("v2bridge-robustness-%d.json", time.Now().UnixNano()))
	//nolint:gosec // G306: a report for people to read.
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Error(err)
		return ""
	}
	return path
}

// TestReplay runs the checks again on a history a run wrote
// (V2BRIDGE_TEST_ROBUSTNESS_REPLAY=path).
func TestReplay(t *testing.T) {
	if path := os.Getenv(replayEnv); path != "" {
		v := checkFile(t, path)
		for _, a := range v.anomalies {
			t.Error(a)
		}
		return
	}
	// Without a history named, the anomalies recorded in testdata (one
	// key's history each, from real runs before their bugs were fixed)
	// must still be found: the checker keeps catching what it caught.
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded anomalies in testdata: %v", err)
	}
	for _, f := range files {
		if v := checkFile(t, f); len(v.anomalies) == 0 {
			t.Errorf("%s: the recorded anomaly is no longer found", f)
		}
	}
}

// checkFile checks the recorded history in path again.
func checkFile(t *testing.T, path string) verdict {
	t.Helper()
	b, err := os.ReadFile(path) //nolint:gosec // G304: the file the developer names, or testdata.
	if err != nil {
		t.Fatal(err)
	}
	var r recorded
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	v := check(r.Ops, r.Events, r.Segments)
	t.Logf("%s: %d key histories, %d operations, %d events, %d anomalies", path, v.partitions, v.checkedOps, v.events,
		len(v.anomalies))
	return v
}

func (s *summary) render() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# v2bridge robustness run\n\n")
	p("%v of faults (seed %d, `%s=%d` replays the choices), %v in all with the checks; %d bridges, %d clients "+
		"each, one recursive watcher each, on a 3-member etcd cluster.\n\n", s.duration, s.seed, seedEnv, s.seed,
		s.took.Round(time.Second), numBridges, clientsPerBridge)
	p("## Operations\n\n| operation |")
	for _, n := range outcomeNames {
		p(" %s |", n)
	}
	p("\n|---|")
	for range outcomeNames {
		p("---|")
	}
	p("\n")
	var total int
	for k := range numOpKinds {
		p("| %s |", opNames[k])
		for o := range numOutcomes {
			p(" %d |", s.ops[k][o])
			total += s.ops[k][o]
		}
		p("\n")
	}
	p("\n%d operations. *v2 error*: a decided failure (100, 101, 105); *no answer*: a timeout, a cut connection "+
		"or a 5xx (may or may not have happened); *refused*: connection refused (never sent).\n\n", total)
	p("## Faults\n\n| fault | injected |\n|---|---|\n")
	for k := range numFaults {
		p("| %s | %d |\n", faultNames[k], s.faults[k])
	}
	for _, e := range s.faultErrs {
		p("\nnot injected: %s\n", e)
	}
	v := &s.v
	p("\n## Checks\n\n")
	p("- linearizability (porcupine): %d key histories, %d operations; %d undecided\n", v.partitions,
		v.checkedOps, v.undecided)
	p("- unanswered writes: %d shown to have happened by a watch event, %d left may-or-may-not\n", v.resolved,
		v.stillUnknown)
	p("- watches: %d watchers, %d events checked, %d requests (%d ended empty, %d failed), %d restarts after 401\n",
		s.watchers, v.events, s.watchRequests, s.watchEmpty, s.watchErrs, v.gaps)
	p("- plain GETs: %d checked (%d explained only by an unanswered write)\n", v.plainGets, v.plainExplained)
	p("- longest time a client was refused: %v\n", s.longestOut.Round(time.Millisecond))
	p("\n**Anomalies: %d**\n", len(v.anomalies))
	if s.dump != "" {
		p("\nThe history is in %s (`%s=%s` checks it again).\n", s.dump, replayEnv, s.dump)
	}
	for i, a := range v.anomalies {
		if i == 20 {
			p("- ... %d more\n", len(v.anomalies)-20)
			break
		}
		p("- %s\n", a)
	}
	return b.String()
}
