// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/proof/v2ref"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestBinaryServesPassthroughWithDefaultLiveness runs the bridge binary in
// passthrough mode, set from the environment, with the default heartbeat
// (300ms, 500ms, 2 misses), and times how long a blackholed v2 server keeps
// a watch.
func TestBinaryServesPassthroughWithDefaultLiveness(t *testing.T) {
	ref := v2ref.StartT(t, v2ref.Options{})
	proxy := v2bridgetest.StartTCPProxy(t, ref.URL)
	var url, metrics string
	startHealthyBridge(t, func() (string, []string, []string) {
		url, metrics = v2bridgetest.FreeURL(t), v2bridgetest.FreeURL(t)
		return url, []string{"V2BRIDGE_V2_SERVER=" + proxy.URL, "V2BRIDGE_EMBEDDED=false", "V2BRIDGE_LOG_LEVEL=warn"},
			[]string{"--listen-client-urls", url, "--listen-metrics-urls", metrics}
	})
	if r := do(t, "PUT", url, "/v2/keys/bin/a", form("value", "through")); r.status != 201 {
		t.Fatalf("write through the bridge: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", ref.URL, "/v2/keys/bin/a", nil); !strings.Contains(r.body, `"value":"through"`) {
		t.Fatalf("the v2 server does not hold the write: %s", r.body)
	}
	if r := do(t, "GET", metrics, "/metrics", nil); !strings.Contains(r.body, `v2bridge_mode{mode="passthrough"} 1`) ||
		!strings.Contains(r.body, "v2bridge_upstream_up 1") {
		t.Fatalf("metrics do not say passthrough to a v2 server that is up")
	}

	ch := startWatch(t, url, "/bin/w")
	waitFor(t, 5*time.Second, "the watch parked on the v2 server", func() bool {
		return strings.Contains(do(t, "GET", url, "/v2/stats/store", nil).body, `"watchers":1`)
	})
	t0 := time.Now()
	proxy.Blackhole()
	select {
	case ev := <-ch:
		if ev.status != 200 || ev.Action != "" {
			t.Fatalf("a watch on a lost v2 server must end with an empty 200: %d %q", ev.status, ev.Action)
		}
		t.Logf("default liveness: the watch ended %v after the v2 server was blackholed", time.Since(t0))
	case <-time.After(livenessBound):
		t.Fatalf("a watch still parked %v after the v2 server was blackholed", livenessBound)
	}
	if r := do(t, "GET", url, "/v2/keys/bin/a", nil); r.status != 500 || !strings.Contains(r.body, `"errorCode":300`) {
		t.Fatalf("a request to a lost v2 server: %d %s, want error 300", r.status, r.body)
	}
	proxy.Heal()
	waitFor(t, 10*time.Second, "the bridge ready again", func() bool { return do(t, "GET", url, "/readyz", nil).status == 200 })
	if r := do(t, "GET", url, "/v2/keys/bin/a", nil); r.status != 200 {
		t.Fatalf("a read after recovery: %d %s", r.status, r.body)
	}
}
