// SPDX-License-Identifier: Apache-2.0

package monitoring

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/util/teststorage"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// The fault test scrapes the bridge every scrapeEvery and stores scrape i at
// i × scrapeInterval, as if Prometheus scraped every 15 s: the fault's few
// seconds become minutes, long enough for the rules' windows and for:
// durations. What the rules compute is unchanged by the stretch as long as
// they compare gauges, shares (errors per request, refusals per check),
// quantiles, or counts over a window, which is what they do; a rate in
// events per second would be divided by the stretch.
const (
	scrapeEvery    = 250 * time.Millisecond
	scrapeInterval = 15 * time.Second
	// scrapes before the fault (10 min at 15 s) and during it (15 min)
	scrapesBefore = 40
	scrapesDuring = 60
	faultWatchers = 20
)

// firesOnFrozenMember are the alerts that must fire while the only etcd
// member a bridge has is frozen (docs/operations.md says so in each one's
// runbook); every other alert must stay silent, and every alert must stay
// silent before the fault.
var firesOnFrozenMember = []string{"V2BridgeBackendLost", "V2BridgeHighErrorRate"}

// frozenMemberSentence is how an alert's runbook says it fires on a frozen
// member.
const frozenMemberSentence = "It fires while the bridge's only etcd member is frozen."

// TestAlertsDuringFrozenMember runs the bridge binary on a one-member etcd
// cluster with v2 watchers, a writer and a reader through it, scrapes its
// /metrics before and while the member is frozen (SIGSTOP), and evaluates
// the alerting rules on the scrapes with Prometheus's rule engine.
func TestAlertsDuringFrozenMember(t *testing.T) {
	t.Parallel()
	c := v2bridgetest.StartProcessCluster(t, 1)
	b := startBridge(t, "--endpoints", c.Endpoints()[0])
	if s := do("PUT", b, "/v2/keys/mon/k", url.Values{"value": {"0"}}); s != 201 {
		t.Fatalf("PUT through the bridge: %d", s)
	}

	for range faultWatchers {
		w, err := v2bridgetest.StartV2Watcher([]string{b}, "/mon", 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	t.Cleanup(func() { cancel(); clients.Wait() })
	loop := func(every time.Duration, f func(i int)) {
		clients.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				f(i)
				select {
				case <-ctx.Done():
				case <-time.After(every):
				}
			}
		})
	}
	loop(100*time.Millisecond, func(i int) { do("PUT", b, "/v2/keys/mon/k", url.Values{"value": {fmt.Sprint(i)}}) })
	loop(50*time.Millisecond, func(int) { do("GET", b, "/v2/keys/mon/k", nil) })
	waitFor(t, 30*time.Second, "every watcher parked", func() bool {
		fams, err := scrape(b)
		return err == nil && fams["v2bridge_v2_watchers"].GetMetric()[0].GetGauge().GetValue() >= faultWatchers
	})

	var scrapes [][]sample
	take := func(n int) {
		t.Helper()
		tick := time.NewTicker(scrapeEvery)
		defer tick.Stop()
		for range n {
			<-tick.C
			fams, err := scrape(b)
			if err != nil {
				t.Fatalf("scrape %d: %v", len(scrapes), err)
			}
			scrapes = append(scrapes, samples(fams))
		}
	}
	take(scrapesBefore)
	c.Freeze(0)
	t.Cleanup(func() { c.Thaw(0) })
	take(scrapesDuring)
	cancel()

	firing := evaluate(t, scrapes)
	for i, names := range firing { // the changes
		if i > 0 && slices.Equal(names, firing[i-1]) {
			continue
		}
		phase := "before the fault"
		if i >= scrapesBefore {
			phase = fmt.Sprintf("%v into the fault", time.Duration(i-scrapesBefore+1)*scrapeInterval)
		}
		t.Logf("%s: firing %v", phase, names)
	}
	for i, names := range firing[:scrapesBefore] {
		if len(names) > 0 {
			t.Errorf("%v before the fault: %v fire, want none", time.Duration(scrapesBefore-i)*scrapeInterval, names)
		}
	}
	fired := map[string]bool{}
	for _, names := range firing[scrapesBefore:] {
		for _, n := range names {
			fired[n] = true
		}
	}
	for _, n := range firesOnFrozenMember {
		if !fired[n] {
			t.Errorf("%s did not fire during the fault", n)
		}
		if last := firing[len(firing)-1]; !slices.Contains(last, n) {
			t.Errorf("%s is not firing at the end of the fault (firing: %v)", n, last)
		}
	}
	for n := range fired {
		if !slices.Contains(firesOnFrozenMember, n) {
			t.Errorf("%s fired during the fault: its runbook does not say it fires on a frozen member", n)
		}
	}
}

// evaluate stores the scrapes, scrapeInterval apart, and evaluates every
// alerting rule at each scrape, in order, as Prometheus's rule manager
// would; it returns the names of the alerts firing after each.
func evaluate(t *testing.T, scrapes [][]sample) [][]string {
	t.Helper()
	db := teststorage.New(t)
	start := time.Unix(1_700_000_000, 0)
	app := db.Appender(context.Background())
	for i, ss := range scrapes {
		ts := start.Add(time.Duration(i) * scrapeInterval).UnixMilli()
		for _, s := range ss {
			m := map[string]string{"__name__": s.name, "job": "v2bridge", "instance": "bridge-0"}
			for k, v := range s.labels {
				m[k] = v
			}
			if _, err := app.Append(0, labels.FromMap(m), ts, s.value); err != nil {
				t.Fatalf("append %v: %v", m, err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute,
		LookbackDelta: 5 * time.Minute, Parser: promParser})
	query := rules.EngineQueryFunc(engine, db)
	lg := slog.New(slog.DiscardHandler)
	var alerts []*rules.AlertingRule
	for _, r := range loadRules(t) {
		e, err := promParser.ParseExpr(r.Expr)
		if err != nil {
			t.Fatalf("%s: %v", r.Alert, err)
		}
		alerts = append(alerts, rules.NewAlertingRule(r.Alert, e, time.Duration(r.For), time.Duration(r.KeepFiringFor),
			labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, lg))
	}
	out := make([][]string, len(scrapes))
	for i := range scrapes {
		ts := start.Add(time.Duration(i) * scrapeInterval)
		for _, a := range alerts {
			if _, err := a.Eval(context.Background(), 0, ts, query, nil, 0); err != nil {
				t.Fatalf("%s at scrape %d: %v", a.Name(), i, err)
			}
			for _, al := range a.ActiveAlerts() {
				if al.State == rules.StateFiring {
					// What the operator is paged with: the bridge, the
					// severity, and a summary that names the bridge.
					if al.Labels.Get("instance") != "bridge-0" || al.Labels.Get("job") != "v2bridge" ||
						al.Labels.Get("severity") == "" || al.Labels.Get("alertname") != a.Name() {
						t.Errorf("%s: labels %v", a.Name(), al.Labels)
					}
					if s := al.Annotations.Get("summary"); !strings.Contains(s, "v2bridge bridge-0 ") || strings.Contains(s, "{{") {
						t.Errorf("%s: summary %q", a.Name(), s)
					}
					out[i] = append(out[i], a.Name())
					break
				}
			}
		}
	}
	return out
}
