// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestPassthroughModeRunsTheOneChainAndShutsDown: a passthrough-mode bridge
// built by Run serves the v2 API through the request chain (a key outside
// the served subtree is answered without reaching the v2 server; one
// inside is forwarded as is), serves its metrics on the metrics listener,
// and on ctx's end shuts down cleanly, closing its listeners.
func TestPassthroughModeRunsTheOneChainAndShutsDown(t *testing.T) {
	var mu sync.Mutex // guards asked
	var asked []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/health" {
			_, _ = io.WriteString(w, `{"health":"true"}`)
			return
		}
		mu.Lock()
		asked = append(asked, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("X-Etcd-Index", "7")
		w.Header().Set("X-Etcd-Cluster-Id", "1")
		_, _ = io.WriteString(w, `{"action":"get","node":{"key":"/a/x","value":"v","modifiedIndex":7,"createdIndex":7}}`+"\n")
	}))
	defer up.Close()
	client, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cu, murl := "http://"+client.Addr().String(), "http://"+metrics.Addr().String()
	cfg := Config{Mode: Passthrough, Logger: zap.NewNop(), Version: "v9.9.9", Commit: "c0ffee",
		Client: []Listener{{URL: cu, Ln: client}}, Metrics: []Listener{{URL: murl, Ln: metrics}},
		Name: "p", AdvertiseURLs: []string{cu}, Served: []string{"/a"}, ServePrefix: "/a",
		RequestTimeout: 5 * time.Second, HeartbeatInterval: 20 * time.Millisecond, HeartbeatTimeout: time.Second,
		HeartbeatFailures: 3, V2Server: []string{up.URL}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	defer func() {
		cancel()
		<-done
	}()

	get := func(u string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(murl + "/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, body := get(cu + "/v2/keys/b")
	want := `{"errorCode":100,"message":"Key not found","cause":"/b is outside the served prefix /a (--serve-prefix)","index":0}` + "\n"
	if code != http.StatusNotFound || body != want {
		t.Errorf("outside the served subtree: %d %q, want 404 %q", code, body, want)
	}
	code, body = get(cu + "/v2/keys/a/x")
	want = `{"action":"get","node":{"key":"/a/x","value":"v","modifiedIndex":7,"createdIndex":7}}` + "\n"
	if code != http.StatusOK || body != want {
		t.Errorf("inside: %d %q, want 200 %q", code, body, want)
	}
	mu.Lock()
	if len(asked) != 1 || asked[0] != "GET /v2/keys/a/x" {
		t.Errorf("the v2 server was asked %q, want only GET /v2/keys/a/x", asked)
	}
	mu.Unlock()
	_, body = get(murl + "/metrics")
	for _, line := range []string{`v2bridge_mode{mode="passthrough"} 1`, `v2bridge_mode{mode="v3"} 0`,
		`v2bridge_embedded_store 0`} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if !strings.Contains(body, `v2bridge_build_info{commit="c0ffee",`) || !strings.Contains(body, `version="v9.9.9"} 1`) {
		t.Errorf("/metrics lacks the build info of the Config")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	done <- nil // for the deferred wait
	for _, u := range []string{client.Addr().String(), metrics.Addr().String()} {
		if c, err := net.DialTimeout("tcp", u, time.Second); err == nil {
			_ = c.Close()
			t.Errorf("%s still accepts after shutdown", u)
		}
	}
}
