// SPDX-License-Identifier: Apache-2.0

package monitoring

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// bridgeBinary builds cmd/bridge once per test process, in the main module
// (with its go.mod, as it ships, not with this module's newer dependencies).
func bridgeBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "v2bridge-monitoring-")
		if buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(buildDir, "v2bridge"), "./cmd/bridge")
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/bridge: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "v2bridge")
}

// startBridge runs the bridge binary with flags on a fresh port until the
// test ends; it returns once /readyz answers 200.
func startBridge(t *testing.T, flags ...string) string {
	t.Helper()
	bin := bridgeBinary(t)
	var p *v2bridgetest.BridgeProcess
	v2bridgetest.RetryPortTaken(t, "start the bridge binary", func() error {
		var err error
		p, err = v2bridgetest.StartBridgeProcess(bin, v2bridgetest.FreeURL(t), append(flags, "--log-level", "warn")...)
		return err
	})
	t.Cleanup(func() {
		if how := p.Stop(syscall.SIGTERM); how != "" {
			t.Errorf("the bridge at %s: %s\n%s", p.URL, how, p.Log())
		}
	})
	return p.URL
}

var httpc = &http.Client{Timeout: 10 * time.Second}

// do sends a v2 request and returns its status (0: no answer).
func do(method, base, path string, form url.Values) int {
	req, err := http.NewRequest(method, base+path, strings.NewReader(form.Encode()))
	if err != nil {
		return 0
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// scrape reads base's /metrics as Prometheus would.
func scrape(base string) (map[string]*dto.MetricFamily, error) {
	resp, err := httpc.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", base, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// sample is one series' value in a scrape.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// samples flattens metric families into the series a Prometheus scrape
// stores: a histogram's _bucket (with le), _sum and _count, a summary's
// quantiles, _sum and _count.
func samples(fams map[string]*dto.MetricFamily) []sample {
	var out []sample
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			ls := map[string]string{}
			for _, lp := range m.GetLabel() {
				ls[lp.GetName()] = lp.GetValue()
			}
			with := func(k, v string) map[string]string {
				c := map[string]string{k: v}
				for a, b := range ls {
					c[a] = b
				}
				return c
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out = append(out, sample{name, ls, m.GetCounter().GetValue()})
			case dto.MetricType_GAUGE:
				out = append(out, sample{name, ls, m.GetGauge().GetValue()})
			case dto.MetricType_UNTYPED:
				out = append(out, sample{name, ls, m.GetUntyped().GetValue()})
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					out = append(out, sample{name + "_bucket", with("le", formatLe(b.GetUpperBound())), float64(b.GetCumulativeCount())})
				}
				out = append(out, sample{name + "_bucket", with("le", "+Inf"), float64(h.GetSampleCount())},
					sample{name + "_sum", ls, h.GetSampleSum()}, sample{name + "_count", ls, float64(h.GetSampleCount())})
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					out = append(out, sample{name, with("quantile", formatLe(q.GetQuantile())), q.GetValue()})
				}
				out = append(out, sample{name + "_sum", ls, s.GetSampleSum()}, sample{name + "_count", ls, float64(s.GetSampleCount())})
			}
		}
	}
	return out
}

// scrapeSamples scrapes base and flattens what it exports.
func scrapeSamples(t *testing.T, base string) []sample {
	t.Helper()
	fams, err := scrape(base)
	if err != nil {
		t.Fatal(err)
	}
	return samples(fams)
}

func formatLe(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// waitFor polls cond every 50 ms until it holds, or fails the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
