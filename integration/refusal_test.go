// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// refusalOf starts a bridge serving / by default over the endpoints (etcd
// silent while it starts, then answering after heal) and waits for it to
// exit (startTimeout "": the default); it returns the exit code and the output.
func refusalOf(t *testing.T, endpoints []string, startTimeout string, silent time.Duration, heal func()) (int, string) {
	t.Helper()
	u := v2bridgetest.FreeURL(t)
	args := []string{"--endpoints", strings.Join(endpoints, ","), "--listen-client-urls", u, "--log-level", "warn"}
	if startTimeout != "" {
		args = append(args, "--start-timeout", startTimeout)
	}
	p := startBridgeProcess(t, nil, args...)
	time.Sleep(silent)
	heal()
	select {
	case err := <-p.done:
		p.done <- err
		return p.cmd.ProcessState.ExitCode(), p.logs.String()
	case <-time.After(90 * time.Second):
		r := do(t, "GET", u, "/v2/keys/", nil)
		t.Fatalf("the bridge did not exit; it serves the key space: %d %s\n%s", r.status, r.body, p.logs)
		return 0, ""
	}
}

// TestRefusalWaitsForASilentEtcd: etcd silent while a bridge serving / by
// default starts (a defrag, a slow disk) delays the look for another
// tenant's keys, which still refuses once etcd answers; silent past
// --start-timeout, the bridge exits saying why.
func TestRefusalWaitsForASilentEtcd(t *testing.T) {
	cl, _ := sharedCluster(t)
	cl.Blackhole(0)
	code, out := refusalOf(t, cl.ProxiedEndpoints(), "", 7*time.Second, func() { cl.Heal(0) })
	want := "v2bridge: refusing to serve the whole key space: --serve-prefix is / by default, and the cluster holds 301 keys " +
		"no v2 client wrote, under /registry (301 keys)"
	if code != 2 || !strings.Contains(out, want) {
		t.Errorf("etcd silent for 7 s: exit %d, output:\n%s\nwant exit 2 with\n%s", code, out, want)
	}

	cl.Blackhole(0)
	code, out = refusalOf(t, cl.ProxiedEndpoints(), "3s", 0, func() {})
	cl.Heal(0)
	want = "v2bridge: could not tell within --start-timeout 3s whether the cluster holds keys no v2 client wrote, " +
		"which a bridge serving the whole key space (--serve-prefix / by default) must not serve: context deadline exceeded; " +
		"set --serve-prefix to the v2 subtrees your clients use, or make etcd answer\n"
	if code != 1 || !strings.HasSuffix(out, want) {
		t.Errorf("etcd silent past --start-timeout: exit %d, output:\n%s\nwant exit 1 ending\n%s", code, out, want)
	}
}

// TestAScopedBridgesMarkerVouchesOnlyForItsSubtree: after a bridge serving
// flannel's subtree wrote once (creating /coreos.com above it), a bridge
// serving / by default still refuses a cluster where another tenant keeps
// keys beside flannel's under /coreos.com, and a file at the top.
func TestAScopedBridgesMarkerVouchesOnlyForItsSubtree(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	o := patientHeartbeat
	o.Served = []string{flannelPrefix}
	flannel := v2bridgetest.StartBridge(t, cl.Endpoints(), o)
	if r := do(t, "PUT", flannel.URL, "/v2/keys/coreos.com/network/config", form("value", "{}")); r.status != 201 {
		t.Fatalf("PUT flannel's config: %d %s", r.status, r.body)
	}
	v3 := cl.Client(t)
	for _, k := range []string{"/coreos.com/vpn/a", "/coreos.com/vpn/b", "/settings"} {
		if _, err := v3.Put(ctxT(t, 10*time.Second), k, "another tenant's"); err != nil {
			t.Fatal(err)
		}
	}
	code, out := refusalOf(t, cl.Endpoints(), "", 0, func() {})
	want := "v2bridge: refusing to serve the whole key space: --serve-prefix is / by default, and the cluster holds 3 keys " +
		"no v2 client wrote, under /coreos.com/vpn (2 keys), /settings (1 keys)"
	if code != 2 || !strings.Contains(out, want) {
		t.Errorf("exit %d, output:\n%s\nwant exit 2 with\n%s", code, out, want)
	}
}

// TestMetricsKeptFromTheClientURLs: with --client-metrics=false, /metrics
// is served on --listen-metrics-urls only; the probes stay on both.
func TestMetricsKeptFromTheClientURLs(t *testing.T) {
	var u, m string
	startHealthyBridge(t, func() (string, []string, []string) {
		u, m = v2bridgetest.FreeURL(t), v2bridgetest.FreeURL(t)
		return u, nil, []string{"--listen-client-urls", u, "--listen-metrics-urls", m, "--client-metrics=false",
			"--embedded", "--embedded-client-urls", v2bridgetest.FreeURL(t), "--embedded-peer-urls", v2bridgetest.FreeURL(t),
			"--log-level", "warn"}
	})
	if r := do(t, "GET", u, "/metrics", nil); r.status != 404 || r.body != "404 page not found\n" {
		t.Errorf("/metrics on the client URL: %d %q", r.status, r.body)
	}
	if r := do(t, "GET", m, "/metrics", nil); r.status != 200 || !strings.Contains(r.body, "v2bridge_") {
		t.Errorf("/metrics on the metrics URL: %d", r.status)
	}
	for _, base := range []string{u, m} {
		if r := do(t, "GET", base, "/health", nil); r.status != 200 {
			t.Errorf("/health on %s: %d %s", base, r.status, r.body)
		}
	}
}
