// SPDX-License-Identifier: Apache-2.0

package monitoring

import (
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/proof/v2ref"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// The bridge's modes: v3 (--endpoints), passthrough (--v2-server) and
// dual (both).
const (
	v3   = "v3"
	pass = "passthrough"
	dual = "dual"
)

// appliesIn says in which modes a bridge exports each metric the rules and
// the dashboard name; a metric missing here fails the test, so that a new
// query says where it applies.
var appliesIn = map[string][]string{
	// every mode
	"v2bridge_build_info":           {v3, pass, dual},
	"v2bridge_mode":                 {v3, pass, dual},
	"process_resident_memory_bytes": {v3, pass, dual},
	"go_memstats_heap_inuse_bytes":  {v3, pass, dual},
	// serving from etcd v3 (dual: once its v3 side is connected)
	"v2bridge_backend_up":                               {v3, dual},
	"v2bridge_backend_losses_total":                     {v3, dual},
	"v2bridge_backend_losses_deferred_total":            {v3, dual},
	"v2bridge_backend_heartbeat_misses_total":           {v3, dual},
	"v2bridge_backend_heartbeat_seconds_bucket":         {v3, dual},
	"v2bridge_backend_detect_seconds_bucket":            {v3, dual},
	"v2bridge_backend_recover_seconds_bucket":           {v3, dual},
	"v2bridge_v2_watchers":                              {v3, dual},
	"v2bridge_watches_detached":                         {v3, dual},
	"v2bridge_watches_errored_total":                    {v3, dual},
	"v2bridge_watch_slow_cutoffs_total":                 {v3, dual},
	"v2bridge_watch_events_delivered_total":             {v3, dual},
	"v2bridge_v3_watches":                               {v3, dual},
	"v2bridge_v3_events_received_total":                 {v3, dual},
	"v2bridge_write_conflicts_total":                    {v3, dual},
	"v2bridge_write_batches_total":                      {v3, dual},
	"v2bridge_batched_writes_total":                     {v3, dual},
	"v2bridge_mirror_reads_total":                       {v3, dual},
	"v2bridge_backend_reads_total":                      {v3, dual},
	"v2bridge_http_requests_total":                      {v3},
	"v2bridge_http_request_duration_seconds_bucket":     {v3},
	"v2bridge_auth_checks_total":                        {v3, dual},
	"v2bridge_auth_hash_check_seconds_bucket":           {v3, dual},
	"v2bridge_upstream_up":                              {pass, dual},
	"v2bridge_upstream_losses_total":                    {pass, dual},
	"v2bridge_upstream_heartbeat_misses_total":          {pass, dual},
	"v2bridge_upstream_heartbeat_seconds_bucket":        {pass, dual},
	"v2bridge_upstream_requests_total":                  {pass, dual},
	"v2bridge_upstream_request_duration_seconds_bucket": {pass, dual},
	// a migration: dual mode only
	"v2bridge_shadow_divergences_total": {dual},
	"v2bridge_shadow_compared_total":    {dual},
	"v2bridge_shadow_lagging_total":     {dual},
	"v2bridge_shadow_retried_total":     {dual},
	"v2bridge_shadow_dropped_total":     {dual},
	"v2bridge_shadow_queue_length":      {dual},
	"v2bridge_shadow_sample_rate":       {dual},
	"v2bridge_shadow_pending_writes":    {dual},
	"v2bridge_shadow_lagging_writes":    {dual},
	"v2bridge_mode_since_seconds":       {dual},
	"v2bridge_mode_generation":          {dual},
	"v2bridge_writes_fenced_total":      {dual},
	// the copy of what a bridge serving etcd v3 serves
	"v2bridge_mirror_keys":  {v3, dual},
	"v2bridge_mirror_bytes": {v3, dual},
}

// namedMetrics is every metric the rules and the dashboard select, with
// where each is named.
func namedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range loadRules(t) {
		e, err := promParser.ParseExpr(r.Expr)
		if err != nil {
			t.Fatalf("%s: %v", r.Alert, err)
		}
		for _, n := range metricNames(e) {
			out[n] = append(out[n], "alert "+r.Alert)
		}
	}
	for where, q := range dashboardQueries(t, loadDashboard(t)) {
		e, err := promParser.ParseExpr(q)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		for _, n := range metricNames(e) {
			out[n] = append(out[n], "panel "+where)
		}
	}
	return out
}

// TestNamedMetricsExist runs the bridge binary in each mode, sends it the
// requests that make its labelled series appear, and checks that every
// metric the rules and the dashboard name is on its /metrics in each mode
// where it applies.
func TestNamedMetricsExist(t *testing.T) {
	t.Parallel()
	named := namedMetrics(t)
	for n, where := range named {
		if _, ok := appliesIn[n]; !ok {
			t.Errorf("%s (in %s) is not in appliesIn: say in which modes the bridge exports it", n, strings.Join(where, ", "))
		}
	}

	var mu sync.Mutex // guards have
	have := map[string]map[string]bool{}
	record := func(t *testing.T, mode string, ss []sample) {
		mu.Lock()
		defer mu.Unlock()
		have[mode] = map[string]bool{}
		for _, s := range ss {
			have[mode][s.name] = true
		}
	}
	ref := v2ref.StartT(t, v2ref.Options{})
	// The bridges run in parallel subtests; t.Run returns once all three
	// have been scraped and stopped.
	t.Run("modes", func(t *testing.T) {
		t.Run(v3, func(t *testing.T) {
			t.Parallel()
			record(t, v3, scrapeSamples(t, v3Bridge(t)))
		})
		t.Run(pass, func(t *testing.T) {
			t.Parallel()
			record(t, pass, scrapeSamples(t, passthroughBridge(t, ref.URL)))
		})
		t.Run(dual, func(t *testing.T) {
			t.Parallel()
			b, before := dualBridge(t, ref.URL)
			after := scrapeSamples(t, b)
			record(t, dual, after)
			// The divergence fires V2BridgeShadowDivergence, and nothing
			// else: scrapes 15 s apart, before and after it.
			firing := evaluate(t, [][]sample{before, after})
			if len(firing[0]) != 0 || !slices.Equal(firing[1], []string{"V2BridgeShadowDivergence"}) {
				t.Errorf("before and after a shadow divergence: firing %v, want [] then [V2BridgeShadowDivergence]", firing)
			}
		})
	})
	if t.Failed() {
		return
	}

	var names []string
	for n := range named {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, mode := range appliesIn[n] {
			if !have[mode][n] {
				t.Errorf("%s (in %s) is not on /metrics in %s mode", n, strings.Join(named[n], ", "), mode)
			}
		}
		for _, mode := range []string{v3, pass, dual} {
			if have[mode][n] && !slices.Contains(appliesIn[n], mode) {
				t.Logf("note: %s is on /metrics in %s mode too", n, mode)
			}
		}
	}
}

// v3Bridge is a bridge serving a one-member etcd cluster, after a write, a
// read, a miss and a watch answered with an event.
func v3Bridge(t *testing.T) string {
	c := v2bridgetest.StartCluster(t, 1)
	b := startBridge(t, "--endpoints", strings.Join(c.Endpoints(), ","))
	watched := make(chan int, 1)
	go func() { watched <- do("GET", b, "/v2/keys/mon/a?wait=true", nil) }()
	waitFor(t, 10*time.Second, "a v2 watcher parked", func() bool {
		fams, err := scrape(b)
		return err == nil && fams["v2bridge_v2_watchers"].GetMetric()[0].GetGauge().GetValue() == 1
	})
	if s := do("PUT", b, "/v2/keys/mon/a", url.Values{"value": {"1"}}); s != 201 {
		t.Fatalf("PUT through the v3 bridge: %d", s)
	}
	if s := <-watched; s != 200 {
		t.Fatalf("the watch: %d", s)
	}
	if s := do("GET", b, "/v2/keys/mon/a", nil); s != 200 {
		t.Fatalf("GET through the v3 bridge: %d", s)
	}
	if s := do("GET", b, "/v2/keys/mon/missing", nil); s != 404 {
		t.Fatalf("GET of a missing key through the v3 bridge: %d", s)
	}
	return b
}

// passthroughBridge is a bridge forwarding to the v2 server at ref, after
// a write and a read.
func passthroughBridge(t *testing.T, ref string) string {
	b := startBridge(t, "--v2-server", ref)
	if s := do("PUT", b, "/v2/keys/pass/a", url.Values{"value": {"1"}}); s != 201 {
		t.Fatalf("PUT through the passthrough bridge: %d", s)
	}
	if s := do("GET", b, "/v2/keys/pass/a", nil); s != 200 {
		t.Fatalf("GET through the passthrough bridge: %d", s)
	}
	return b
}

// dualBridge is a bridge in dual mode between the v2 server at ref and a
// fresh etcd v3 cluster that no migration filled, after a read of a key the
// v2 server has: its shadow comparison finds etcd v3 without it. before
// is its scrape before that read.
func dualBridge(t *testing.T, ref string) (base string, before []sample) {
	c := v2bridgetest.StartCluster(t, 1)
	if s := do("PUT", ref, "/v2/keys/dual/a", url.Values{"value": {"1"}}); s != 201 {
		t.Fatalf("PUT to the v2 server: %d", s)
	}
	b := startBridge(t, "--v2-server", ref, "--endpoints", strings.Join(c.Endpoints(), ","), "--mode-lease-ttl", "3s")
	waitFor(t, 30*time.Second, "the dual bridge's v3 side", func() bool {
		fams, err := scrape(b)
		return err == nil && fams["v2bridge_backend_up"] != nil && fams["v2bridge_shadow_sample_rate"] != nil
	})
	before = scrapeSamples(t, b)
	if s := do("GET", b, "/v2/keys/dual/a", nil); s != 200 {
		t.Fatalf("GET through the dual bridge: %d", s)
	}
	waitFor(t, 30*time.Second, "a shadow divergence", func() bool {
		fams, err := scrape(b)
		if err != nil || fams["v2bridge_shadow_divergences_total"] == nil {
			return false
		}
		for _, m := range fams["v2bridge_shadow_divergences_total"].GetMetric() {
			if m.GetCounter().GetValue() > 0 {
				return true
			}
		}
		return false
	})
	return b, before
}
