// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestScopedBridgeReceivesNothingOfOtherTenants: while another tenant's
// bridge, on the same etcd and meta prefix, makes 1,000 writes of every kind
// (plain and TTL files, directories, TTL directories, updates,
// compare-and-swaps, in-order creates, deletes, recursive deletes and
// expiries), flannel's bridge receives no v3 event (its journal records and
// lease records included) and not one metric it exports moves. (On a member
// of etcd before 3.4.25/3.5.8 a scoped bridge watches one range covering its
// subtrees, and drops, uncounted, what falls outside them.)
func TestScopedBridgeReceivesNothingOfOtherTenants(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	o := patientHeartbeat
	o.Served = []string{flannelPrefix}
	flannel := v2bridgetest.StartBridge(t, cl.Endpoints(), o)
	o.Served = []string{"/other"}
	other := v2bridgetest.StartBridge(t, cl.Endpoints(), o)

	write := func(base, method, path string, kv ...string) resp {
		t.Helper()
		r := do(t, method, base, "/v2/keys"+path, form(kv...))
		if r.status >= 300 {
			t.Fatalf("%s %s %v: %d %s", method, path, kv, r.status, r.body)
		}
		return r
	}
	// Flannel's own state, and a watch on it that stays open.
	write(flannel.URL, "PUT", flannelPrefix+"/config", "value", `{"Network":"10.5.0.0/16"}`)
	write(flannel.URL, "PUT", flannelPrefix+"/subnets/10.5.1.0-24", "value", "a", "ttl", "600")
	// As flanneld's: no client timeout (the writes below may take minutes
	// under the race detector); the test's end cuts it.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	watch := make(chan string, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, "GET",
			flannel.URL+"/v2/keys"+flannelPrefix+"?"+form("wait", "true", "recursive", "true").Encode(), nil)
		if err != nil {
			watch <- err.Error()
			return
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				watch <- err.Error()
			}
			return
		}
		defer func() { _ = r.Body.Close() }()
		b, _ := io.ReadAll(r.Body)
		watch <- fmt.Sprintf("%d %s", r.StatusCode, b)
	}()
	settle := func() { time.Sleep(2 * time.Second) }
	settle()
	before := tenantMetrics(t, flannel.URL)

	n := 0
	count := func(r resp) { n++; _ = r }
	for i := 0; n < 1000; i++ {
		d := fmt.Sprintf("/other/d%d", i)
		count(write(other.URL, "PUT", d+"/plain", "value", "v"))
		count(write(other.URL, "PUT", d+"/plain", "value", "w", "prevExist", "true"))
		count(write(other.URL, "PUT", d+"/plain", "value", "x", "prevValue", "w"))
		count(write(other.URL, "PUT", d+"/ttl", "value", "t", "ttl", "600"))
		count(write(other.URL, "PUT", d+"/ttl", "ttl", "900", "refresh", "true", "prevExist", "true"))
		count(write(other.URL, "PUT", d+"/short", "value", "s", "ttl", "1")) // expires
		count(write(other.URL, "PUT", d+"/sub", "dir", "true"))
		count(write(other.URL, "PUT", d+"/tdir", "dir", "true", "ttl", "1")) // expires, swept
		count(write(other.URL, "PUT", d+"/tdir/child", "value", "c"))
		count(write(other.URL, "POST", d+"/queue", "value", "q"))
		count(write(other.URL, "DELETE", d+"/plain", "prevValue", "x"))
		count(write(other.URL, "DELETE", d+"/ttl"))
		count(write(other.URL, "DELETE", d+"/sub", "dir", "true"))
		if i%2 == 1 {
			count(write(other.URL, "DELETE", fmt.Sprintf("/other/d%d", i-1), "recursive", "true"))
		}
	}
	// Every TTL of 1 s runs out; the expired directories are swept.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := do(t, "GET", other.URL, "/v2/keys/other", form("recursive", "true", "quorum", "true"))
		if !strings.Contains(r.body, "/short") && !strings.Contains(r.body, "/tdir") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TTL keys still there after 30 s: %s", r.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	settle()

	after := tenantMetrics(t, flannel.URL)
	var changed []string
	for name, v := range after {
		if before[name] != v {
			changed = append(changed, fmt.Sprintf("%s: %s -> %s", name, before[name], v))
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			changed = append(changed, name+": gone")
		}
	}
	slices.Sort(changed)
	if len(changed) > 0 {
		t.Errorf("flannel's bridge moved with %d writes of another tenant:\n%s", n, strings.Join(changed, "\n"))
	}
	select {
	case r := <-watch:
		t.Errorf("flannel's watch answered: %s", r)
	default:
	}
}

// tenantMetrics is base's /metrics, series by series: all but the Go
// runtime's and the process's, the heartbeat's timing, and the requests of
// /metrics itself.
func tenantMetrics(t *testing.T, base string) map[string]string {
	t.Helper()
	r := do(t, "GET", base, "/metrics", nil)
	if r.status != http.StatusOK {
		t.Fatalf("/metrics: %d %s", r.status, r.body)
	}
	out := map[string]string{}
	for _, line := range strings.Split(r.body, "\n") {
		i := strings.LastIndexByte(line, ' ')
		if line == "" || line[0] == '#' || i < 0 || strings.HasPrefix(line, "go_") || strings.HasPrefix(line, "process_") ||
			strings.HasPrefix(line, "promhttp_") || strings.Contains(line, "heartbeat") || strings.Contains(line, `"/metrics"`) {
			continue
		}
		out[line[:i]] = line[i+1:]
	}
	if _, ok := out["v2bridge_v3_events_received_total"]; !ok {
		t.Fatalf("no v2bridge_v3_events_received_total in %s/metrics", base)
	}
	return out
}
