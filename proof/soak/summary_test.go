// SPDX-License-Identifier: Apache-2.0

package soak

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// restart is one bridge restart.
type restart struct {
	at   time.Time
	sig  syscall.Signal
	down time.Duration // from the signal until the new bridge was ready
}

// writeTotals add up writers' writeStats.
type writeTotals struct{ acked, refused, uncertain, events int64 }

func (w *writeTotals) add(s *writeStats) {
	w.acked += s.acked.Load()
	w.refused += s.refused.Load()
	w.uncertain += s.uncertain.Load()
	w.events += s.events.Load()
}

// lossVerdict is one backend loss the bridge declared, and what explains it.
type lossVerdict struct {
	lossLog
	member      int
	explanation string // "" for a false loss
}

// summary is everything a soak run saw, and its verdict.
type summary struct {
	duration      time.Duration
	seed          uint64
	race          bool
	historyEvents int
	chaosTook     time.Duration // from the start to the writers' stop
	took          time.Duration

	v2, v3       writeTotals
	reports      []watchReport
	watch        []watchStats
	stuck        []stuck
	fenceMissing []string // watchers that had not caught up drainBound after the last write

	faults      []fault
	unrecovered int
	restarts    []restart
	losses      []lossVerdict
	lossMetric  float64 // v2bridge_backend_losses_total, summed over the bridge runs (read before each stopped)
	notable     map[string]int
	// Trouble inside the bridge processes: data races, panics, exits
	// other than the ones asked for.
	races, panics int
	exits         []string

	start, end procStats
}

// judgeLosses explains every backend loss the bridges logged by the faults
// injected.
func (s *summary) judgeLosses(runs []*bridgeProc, cl *v2bridgetest.Cluster) {
	s.notable = map[string]int{}
	for _, p := range runs {
		p.mu.Lock()
		for _, l := range p.losses {
			m := cl.Index(l.endpoint)
			s.losses = append(s.losses, lossVerdict{lossLog: l, member: m,
				explanation: explainLoss(s.faults, m, l.at, livenessBound+time.Second)})
		}
		for k, n := range p.notable {
			s.notable[k] += n
		}
		s.lossMetric += p.lossMetric
		s.races += p.races
		s.panics += p.panics
		if p.exit != "" {
			s.exits = append(s.exits, p.url+" "+p.exit)
		}
		p.mu.Unlock()
	}
}

func (s *summary) falseLosses() []lossVerdict {
	var out []lossVerdict
	for _, l := range s.losses {
		if l.explanation == "" {
			out = append(out, l)
		}
	}
	return out
}

// totals adds the watchers' reports up.
func (s *summary) totals() watchReport {
	var t watchReport
	for _, r := range s.reports {
		t.expected += r.expected
		for o, n := range r.expectedBy {
			t.expectedBy[o] += n
		}
		t.delivered += r.delivered
		for o, n := range r.lost {
			t.lost[o] += n
		}
		t.resynced += r.resynced
		t.duplicates += r.duplicates
		t.reordered += r.reordered
		t.regressions += r.regressions
		t.wrongAction += r.wrongAction
		t.unexplained += r.unexplained
		t.maybes += r.maybes
	}
	return t
}

func (s *summary) watchTotals() watchStats {
	var t watchStats
	for _, w := range s.watch {
		t.requests += w.requests
		t.events += w.events
		t.empty += w.empty
		t.errors += w.errors
		t.cleared += w.cleared
		t.listings += w.listings
	}
	return t
}

// failures are the reasons the soak fails; none means it passed.
func (s *summary) failures() []string {
	t := s.totals()
	var f []string
	check := func(n int, what string) {
		if n > 0 {
			f = append(f, fmt.Sprintf("%d %s", n, what))
		}
	}
	for o, n := range t.lost {
		check(n, "events lost ("+originNames[o]+")")
	}
	check(t.duplicates, "events duplicated")
	check(t.reordered, "events out of order on their key")
	check(t.regressions, "modifiedIndex regressions")
	check(t.wrongAction, "events with the wrong action")
	check(t.unexplained, "events no write explains")
	check(len(s.stuck), "stuck watches")
	check(len(s.fenceMissing), "watchers not caught up after the last heal")
	check(s.unrecovered, "members not serving again after a heal")
	check(s.races, "data races in the bridge")
	check(s.panics, "panics in the bridge")
	check(len(s.exits), "bridge exits other than asked ("+strings.Join(s.exits, "; ")+")")
	if leaks(s.start, s.end) {
		f = append(f, fmt.Sprintf("the bridge leaks: %d goroutines and %s RSS at the end, %d and %s at the start "+
			"(tolerance: +%d goroutines, +%s RSS)", s.end.goroutines, mib(s.end.rss),
			s.start.goroutines, mib(s.start.rss), goroutineSlack, mib(rssSlack())))
	}
	return f
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// render is the summary as Markdown.
func (s *summary) render() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	t, wt := s.totals(), s.watchTotals()
	race := "off"
	if s.race {
		race = "on (soak and bridge)"
	}
	p("# v2bridge chaos soak\n\n")
	p("`make soak SOAK_DURATION=%v` — %s, %s/%s, %d CPUs, race detector %s, seed %d (`V2BRIDGE_TEST_SOAK_SEED`). "+
		"Chaos phase %v, whole run %v.\n\n", s.duration, time.Now().UTC().Format("2006-01-02"), runtime.GOOS,
		runtime.GOARCH, runtime.NumCPU(), race, s.seed, s.chaosTook.Round(time.Second), s.took.Round(time.Second))
	if env := livenessEnv(); len(env) > 0 {
		p("The bridge's heartbeat: `%s` (the rest its defaults).\n\n", strings.Join(env, " "))
	} else {
		p("The bridge's heartbeat: its defaults.\n\n")
	}
	if f := s.failures(); len(f) == 0 {
		p("**PASS**\n\n")
	} else {
		p("**FAIL**: %s.\n\n", strings.Join(f, "; "))
	}

	p("## Writes\n\n| writer | acknowledged | refused (not applied) | unanswered (may be applied) | expected events |\n")
	p("|---|---:|---:|---:|---:|\n")
	p("| %d v2 writers through the bridge (set, CAS increment, delete, TTL key, mkdir, rmdir) | %d | %d | %d | %d |\n",
		v2Writers, s.v2.acked, s.v2.refused, s.v2.uncertain, s.v2.events)
	p("| %d v3 writers, multi-key transactions (2–5 keys in one revision) | %d | %d | %d | %d |\n\n",
		v3Writers, s.v3.acked, s.v3.refused, s.v3.uncertain, s.v3.events)

	p("## Events (summed over %d watchers)\n\n| | events |\n|---|---:|\n", len(s.reports))
	p("| expected | %d |\n| delivered | %d |\n", t.expected, t.delivered)
	for o, n := range t.expectedBy {
		p("| expected: %s | %d |\n", originNames[o], n)
	}
	p("| **lost** | **%d** |\n", t.lostTotal())
	for o, n := range t.lost {
		p("| lost: %s | %d |\n", originNames[o], n)
	}
	p("| skipped by a resync (401, re-list): not losses | %d |\n", t.resynced)
	p("| duplicated | %d |\n| out of order on their key | %d |\n| modifiedIndex regressions | %d |\n",
		t.duplicates, t.reordered, t.regressions)
	p("| wrong action | %d |\n| no write explains them | %d |\n", t.wrongAction, t.unexplained)
	p("| delivered for unanswered writes (allowed) | %d |\n\n", t.maybes)

	p("| watcher | scope | expected | delivered | lost | skipped (401) | dup | requests | 401 | empty 200 | errors |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, r := range s.reports {
		w := s.watch[i]
		p("| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", r.name, r.scope, r.expected, r.delivered,
			r.lostTotal(), r.resynced, r.duplicates, w.requests, w.cleared, w.empty, w.errors)
	}
	share := 0.0
	if wt.requests > 0 {
		share = 100 * float64(wt.cleared) / float64(wt.requests)
	}
	p("\nWatch requests: %d (%d answered with an event, %d empty 200s, %d errors, %d resyncs: 401 in %.3f%% of "+
		"requests); listings: %d. History kept by the bridge: %d events.\n\n", wt.requests, wt.events, wt.empty,
		wt.errors, wt.cleared, share, wt.listings, s.historyEvents)
	for _, r := range s.reports {
		for _, smp := range r.samples {
			p("- %s: %s\n", r.name, smp)
		}
	}

	p("\n## Stuck watches: %d\n\n", len(s.stuck)+len(s.fenceMissing))
	p("A watch request open more than %v (liveness %v + slack %v) while an event written after it was sent "+
		"was acknowledged that long ago; a watcher that delivered nothing for %v while events were owed; a watcher "+
		"without the final fence %v after the last write.\n\n", livenessBound+stuckSlack, livenessBound, stuckSlack,
		stallAfter, drainBound)
	for _, st := range s.stuck {
		p("- %s: %s stuck since %s (noticed %s)\n", st.watcher, st.kind, st.since.Format("15:04:05.000"),
			st.at.Format("15:04:05.000"))
	}
	for _, m := range s.fenceMissing {
		p("- %s: not caught up\n", m)
	}

	s.renderFaults(p)
	s.renderBridge(p)
	return b.String()
}

func (s *summary) renderFaults(p func(string, ...any)) {
	var count, onBridge, onLeader [numKinds]int
	failedMoves := 0
	for _, f := range s.faults {
		count[f.kind]++
		if f.bridgeMember {
			onBridge[f.kind]++
		}
		if f.leader {
			onLeader[f.kind]++
		}
		if f.err != nil {
			failedMoves++
		}
	}
	p("\n## Faults: %d\n\n| kind | injected | on the bridge's member | on the leader |\n|---|---:|---:|---:|\n",
		len(s.faults))
	for k := range numKinds {
		p("| %s | %d | %d | %d |\n", kindNames[k], count[k], onBridge[k], onLeader[k])
	}
	p("\nEach held %v–%v (a leader move is instant), one at a time, %v–%v apart; the next waits until the healed "+
		"member serves linearizable reads. Leader moves that failed: %d. Members not serving %v after a heal: %d.\n",
		minHold, maxHold, minGap, maxGap, failedMoves, recoverBound, s.unrecovered)
	for _, r := range s.restarts {
		how := "SIGTERM (graceful stop)"
		if r.sig == syscall.SIGKILL {
			how = "SIGKILL (crash)"
		}
		p("\nBridge restart at %s with %s: the new bridge was ready %v later.\n", r.at.Format("15:04:05"), how,
			r.down.Round(time.Millisecond))
	}
	var mine, leader int
	for _, l := range s.losses {
		switch l.explanation {
		case "its member faulted":
			mine++
		case "leader lost or moved":
			leader++
		}
	}
	fl := s.falseLosses()
	p("\nBackend losses the bridge declared (its log): %d — %d with its member faulted, %d after the leader was "+
		"faulted or moved, **%d false** (no fault on its member or the leader within %v before); "+
		"v2bridge_backend_losses_total of each run, read before it stopped, adds up to %.0f.\n", len(s.losses),
		mine, leader, len(fl), livenessBound+time.Second, s.lossMetric)
	for _, l := range fl {
		p("- %s: member %d (%s): %s\n", l.at.Format("15:04:05.000"), l.member, l.endpoint, l.reason)
	}
}

func (s *summary) renderBridge(p func(string, ...any)) {
	verdict := "no leak"
	if leaks(s.start, s.end) {
		verdict = "**LEAK**"
	}
	p("\n## The bridge process\n\n| | goroutines | RSS | heap in use |\n|---|---:|---:|---:|\n")
	p("| start (idle, after a GC) | %d | %s | %s |\n", s.start.goroutines, mib(s.start.rss), mib(s.start.heap))
	p("| end (idle, after a GC, the bridge started at the last restart) | %d | %s | %s |\n\n", s.end.goroutines,
		mib(s.end.rss), mib(s.end.heap))
	p("%s (tolerance: +%d goroutines, +%s RSS). Data races reported by the bridge: %d; panics: %d; exits other "+
		"than asked: %d.\n", verdict, goroutineSlack, mib(rssSlack()), s.races, s.panics, len(s.exits))
	for _, e := range s.exits {
		p("- %s\n", e)
	}
	if len(s.notable) > 0 {
		p("\nWarnings and errors in the bridge's log (backend losses aside):\n\n")
		for _, k := range slices.Sorted(maps.Keys(s.notable)) {
			p("- %d × %s\n", s.notable[k], k)
		}
	}
}
