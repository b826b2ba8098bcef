// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v2"

	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
)

// env is one bridge over a one-member embedded etcd.
type env struct {
	cluster *v2bridgetest.Cluster
	bridge  *v2bridgetest.Bridge
	url     string
}

func newEnv(t *testing.T, o v2bridgetest.Options) *env {
	t.Helper()
	bound(t)
	cl := v2bridgetest.StartCluster(t, 1)
	br := v2bridgetest.StartBridge(t, cl.Endpoints(), o)
	return &env{cluster: cl, bridge: br, url: br.URL}
}

// testBound is how long one integration test may run: several times the
// slowest under the race detector on a busy machine, far below go test's
// -timeout, so that a test that hangs stops on its own, named, with every
// goroutine's stack, and not at the end of the whole run.
const testBound = 5 * time.Minute

// watchdogs holds the tests whose watchdog runs (*testing.T keys).
var watchdogs sync.Map

// bound starts the test's watchdog, once per test (the common helpers call
// it): a test still running testBound after that ends the test binary with
// a panic naming it, and every goroutine's stack.
func bound(t *testing.T) {
	if _, running := watchdogs.LoadOrStore(t, true); running {
		return
	}
	timer := time.AfterFunc(testBound, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("%s: still running after its own bound of %v: it hangs", t.Name(), testBound))
	})
	t.Cleanup(func() {
		timer.Stop()
		watchdogs.Delete(t)
	})
}

// patientHeartbeat is for tests that load this process heavily (the race
// detector makes it several times slower) but are not about liveness: a
// heartbeat starved of CPU is not taken for a lost member.
var patientHeartbeat = v2bridgetest.Options{Backend: func(c *v3backend.Config) {
	c.HeartbeatTimeout = 5 * time.Second
	c.HeartbeatFailures = 3
}}

// resp is a raw HTTP answer.
type resp struct {
	status int
	header http.Header
	body   string
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.body, err)
	}
	return m
}

var httpClient = &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

// do sends method to base+path; form goes in the body for PUT/POST and in the
// query otherwise.
func do(t *testing.T, method, base, path string, form url.Values) resp {
	t.Helper()
	bound(t)
	u := base + path
	var body io.Reader
	if form != nil {
		if method == "PUT" || method == "POST" {
			body = strings.NewReader(form.Encode())
		} else {
			sep := "?"
			if strings.Contains(u, "?") {
				sep = "&"
			}
			u += sep + form.Encode()
		}
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	r, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer func() { _ = r.Body.Close() }()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{status: r.StatusCode, header: r.Header, body: string(b)}
}

func v2client(t *testing.T, urls ...string) client.KeysAPI {
	t.Helper()
	bound(t)
	c, err := client.New(client.Config{Endpoints: urls, Transport: client.DefaultTransport,
		HeaderTimeoutPerRequest: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return client.NewKeysAPI(c)
}

// v2clientWith is v2client over a given transport (TLS).
func v2clientWith(t *testing.T, tr client.CancelableTransport, urls ...string) client.KeysAPI {
	t.Helper()
	c, err := client.New(client.Config{Endpoints: urls, Transport: tr, HeaderTimeoutPerRequest: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return client.NewKeysAPI(c)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	bound(t)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

// requireClientsEnv makes a test that drives a real v2 client (etcdctl,
// python-etcd) fail instead of skip when the client is missing: CI sets it,
// so that CI cannot pass without those clients having run. (V2BRIDGE_TEST_*
// is the test suite's: the binary ignores it.)
const requireClientsEnv = "V2BRIDGE_TEST_REQUIRE_CLIENTS"

// missingClient skips the test, saying why (a client missing or unusable),
// or fails it when requireClientsEnv is set.
func missingClient(t *testing.T, why string) {
	t.Helper()
	if v := os.Getenv(requireClientsEnv); v != "" && v != "0" {
		t.Fatalf("%s, and %s=%s requires it", why, requireClientsEnv, v)
	}
	t.Skip(why)
}

// startHealthyBridge starts the bridge binary and waits until it is healthy.
// args gives its environment and arguments, with ports fresh from FreeURL on
// each call, and the URL whose /health to poll: a bridge that exits because
// another process took one of its ports before it bound it is started again.
func startHealthyBridge(t *testing.T, args func() (health string, env, args []string)) *proc {
	t.Helper()
	var p *proc
	v2bridgetest.RetryPortTaken(t, "start the bridge binary", func() error {
		health, env, a := args()
		p = startBridgeProcess(t, env, a...)
		return p.healthy(health, 60*time.Second)
	})
	return p
}

// embedded is startHealthyBridge's args for the binary on its embedded etcd,
// serving at its health URL, with extra arguments.
func embedded(t *testing.T, extra ...string) func() (string, []string, []string) {
	return func() (string, []string, []string) {
		url, args := embeddedArgs(t)
		return url, nil, append(args, extra...)
	}
}

// healthy waits until the bridge process says it is healthy at url; it
// returns an error with the bridge's output if the bridge exits first or is
// not healthy within d.
func (p *proc) healthy(url string, d time.Duration) error {
	p.url = url
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(d)
	for {
		select {
		case err := <-p.done:
			p.done <- err // for the cleanup, which waits for it
			return fmt.Errorf("bridge exited: %v\n%s", err, p.logs)
		default:
		}
		// Healthy (the backend answers) and ready (the shared watch is
		// open: a watch or a metric right after start sees it).
		if r, err := c.Get(url + "/health"); err == nil {
			b, _ := io.ReadAll(r.Body)
			_ = r.Body.Close()
			if r.StatusCode == 200 && strings.Contains(string(b), "true") {
				if rr, err := c.Get(url + "/readyz"); err == nil {
					_ = rr.Body.Close()
					if rr.StatusCode == 200 {
						return nil
					}
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bridge not healthy after %v\n%s", d, p.logs)
		}
		time.Sleep(100 * time.Millisecond) // poll
	}
}

// scrapeMetric reads an unlabelled metric from base's /metrics, as a
// Prometheus scrape sees it.
func scrapeMetric(t *testing.T, base, name string) float64 {
	t.Helper()
	r := do(t, "GET", base, "/metrics", nil)
	for _, line := range strings.Split(r.body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no %s in %s/metrics", name, base)
	return 0
}

// pyWatchLines applies to st what a python watch loop prints: "relist",
// then "node <key> <value>" for each file, then "listed"; "event <action>
// <key> [<value>]" for each event.
func pyWatchLines(st *watchState) func(string) {
	var listing map[string]string
	return func(l string) {
		f := strings.Fields(l)
		switch {
		case len(f) == 1 && f[0] == "relist":
			listing = map[string]string{}
		case len(f) == 3 && f[0] == "node" && listing != nil:
			listing[f[1]] = f[2]
		case len(f) == 1 && f[0] == "listed":
			st.reset(listing)
		case len(f) >= 3 && f[0] == "event":
			v := ""
			if len(f) == 4 {
				v = f[3]
			}
			st.apply(f[1], f[2], v)
		}
	}
}
