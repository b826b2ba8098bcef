// SPDX-License-Identifier: Apache-2.0

package v2ref

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// buildTimeout covers a cold build of etcd 3.5 on a small machine (module
// downloads included); serverTimeout covers everything after it.
const (
	buildTimeout  = 8 * time.Minute
	serverTimeout = 2 * time.Minute
)

type v2Node struct {
	Key           string    `json:"key"`
	Value         *string   `json:"value"`
	Dir           bool      `json:"dir"`
	TTL           int64     `json:"ttl"`
	Expiration    *string   `json:"expiration"`
	ModifiedIndex uint64    `json:"modifiedIndex"`
	CreatedIndex  uint64    `json:"createdIndex"`
	Nodes         []*v2Node `json:"nodes"`
}

type v2Response struct {
	Action   string  `json:"action"`
	Node     *v2Node `json:"node"`
	PrevNode *v2Node `json:"prevNode"`
	// error responses
	ErrorCode int    `json:"errorCode"`
	Message   string `json:"message"`
	Cause     string `json:"cause"`
}

type result struct {
	status int
	header http.Header
	body   v2Response
	raw    string
}

func do(t *testing.T, ctx context.Context, method, rawURL string, form url.Values) result {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, rawURL, err)
	}
	r := result{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		t.Fatalf("%s %s: status %d, body %q is not JSON: %v", method, rawURL, resp.StatusCode, raw, err)
	}
	return r
}

func buildOnce(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the reference etcd v2 server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	start := time.Now()
	bin, err := Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("v2ref binary %s (ready in %v)", bin, time.Since(start).Round(time.Millisecond))
}

func start(t *testing.T, ctx context.Context, opts Options) *Server {
	t.Helper()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() }) // no-op if the test already stopped it
	return s
}

func stop(t *testing.T, s *Server) {
	t.Helper()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// checkSetFoo PUTs /v2/keys/foo=bar and checks the v2 "set" response, then
// overwrites it with baz. It returns both PUT results.
func checkSetFoo(t *testing.T, ctx context.Context, s *Server) (first, second result) {
	t.Helper()
	r := do(t, ctx, http.MethodPut, s.URL+"/v2/keys/foo", url.Values{"value": {"bar"}})
	if r.status != http.StatusCreated {
		t.Fatalf("PUT foo: status %d, want 201; body %s", r.status, r.raw)
	}
	n := r.body.Node
	if r.body.Action != "set" || n == nil || n.Key != "/foo" || n.Value == nil || *n.Value != "bar" {
		t.Fatalf("PUT foo: unexpected body %s", r.raw)
	}
	if n.CreatedIndex == 0 || n.ModifiedIndex != n.CreatedIndex {
		t.Fatalf("PUT foo: want createdIndex == modifiedIndex > 0, body %s", r.raw)
	}
	if r.body.PrevNode != nil {
		t.Fatalf("PUT foo: unexpected prevNode on a fresh key: %s", r.raw)
	}
	if idx, err := strconv.ParseUint(r.header.Get("X-Etcd-Index"), 10, 64); err != nil || idx < n.ModifiedIndex {
		t.Fatalf("PUT foo: X-Etcd-Index %q, want >= %d", r.header.Get("X-Etcd-Index"), n.ModifiedIndex)
	}

	// Overwrite: 200 with prevNode, and GET sees the new value.
	r2 := do(t, ctx, http.MethodPut, s.URL+"/v2/keys/foo", url.Values{"value": {"baz"}})
	if r2.status != http.StatusOK || r2.body.Action != "set" || r2.body.PrevNode == nil ||
		r2.body.PrevNode.Value == nil || *r2.body.PrevNode.Value != "bar" ||
		r2.body.Node.ModifiedIndex <= n.ModifiedIndex {
		t.Fatalf("PUT foo again: status %d body %s", r2.status, r2.raw)
	}
	g := do(t, ctx, http.MethodGet, s.URL+"/v2/keys/foo", nil)
	if g.status != http.StatusOK || g.body.Action != "get" || g.body.Node.Value == nil || *g.body.Node.Value != "baz" {
		t.Fatalf("GET foo: status %d body %s", g.status, g.raw)
	}
	return r, r2
}

func checkStopped(t *testing.T, s *Server) {
	t.Helper()
	stop(t, s)
	if _, err := os.Stat(s.DataDir); !os.IsNotExist(err) {
		t.Fatalf("temporary data dir %s still there after Stop (stat: %v)", s.DataDir, err)
	}
	if _, err := http.Get(s.URL + "/v2/keys/foo"); err == nil {
		t.Fatalf("server at %s still answers after Stop", s.URL)
	}
}

func TestV2Store(t *testing.T) {
	buildOnce(t)
	ctx, cancel := context.WithTimeout(context.Background(), serverTimeout)
	defer cancel()

	s := start(t, ctx, Options{})
	if !strings.HasPrefix(s.URL, "http://127.0.0.1:") || strings.HasSuffix(s.URL, ":0") {
		t.Fatalf("URL %q: want http://127.0.0.1:<port>", s.URL)
	}
	r, r2 := checkSetFoo(t, ctx, s)
	if term, _ := strconv.Atoi(r.header.Get("X-Raft-Term")); term < 1 {
		t.Errorf("v2 store: X-Raft-Term %q, want >= 1", r.header.Get("X-Raft-Term"))
	}
	// In the v2 store a set replaces the node: createdIndex moves too.
	if n := r2.body.Node; n.CreatedIndex != n.ModifiedIndex {
		t.Errorf("v2 store: overwrite has createdIndex %d, want = modifiedIndex %d", n.CreatedIndex, n.ModifiedIndex)
	}

	// The real v2 store supports TTLs.
	ttl := do(t, ctx, http.MethodPut, s.URL+"/v2/keys/ttlkey?ttl=60", url.Values{"value": {"x"}})
	if ttl.status != http.StatusCreated || ttl.body.Node == nil || ttl.body.Node.TTL != 60 || ttl.body.Node.Expiration == nil {
		t.Fatalf("PUT with ttl: status %d body %s", ttl.status, ttl.raw)
	}

	// Error responses have the v2 error shape.
	nf := do(t, ctx, http.MethodGet, s.URL+"/v2/keys/missing", nil)
	if nf.status != http.StatusNotFound || nf.body.ErrorCode != 100 || nf.body.Cause != "/missing" {
		t.Fatalf("GET missing: status %d body %s", nf.status, nf.raw)
	}

	checkStopped(t, s)
}

func TestV2V3(t *testing.T) {
	buildOnce(t)
	ctx, cancel := context.WithTimeout(context.Background(), serverTimeout)
	defer cancel()

	s := start(t, ctx, Options{V2V3: true})
	r, r2 := checkSetFoo(t, ctx, s)
	// Unlike the v2 store, the emulation keeps createdIndex on overwrite
	// (it is the v3 create revision).
	if n := r2.body.Node; n.CreatedIndex != r.body.Node.CreatedIndex {
		t.Errorf("v2v3: overwrite has createdIndex %d, want the original %d", n.CreatedIndex, r.body.Node.CreatedIndex)
	}
	// The emulation answers without raft metadata.
	if got := r.header.Get("X-Raft-Term"); got != "0" {
		t.Errorf("v2v3: X-Raft-Term %q, want 0", got)
	}

	// The v2-over-v3 emulation rejects TTLs: 500, errorCode 300.
	ttl := do(t, ctx, http.MethodPut, s.URL+"/v2/keys/ttlkey?ttl=60", url.Values{"value": {"x"}})
	if ttl.status != http.StatusInternalServerError || ttl.body.ErrorCode != 300 || ttl.body.Cause != "TTLs are unsupported" {
		t.Fatalf("v2v3 PUT with ttl: status %d body %s; want 500 errorCode 300 cause %q",
			ttl.status, ttl.raw, "TTLs are unsupported")
	}
	if g := do(t, ctx, http.MethodGet, s.URL+"/v2/keys/ttlkey", nil); g.status != http.StatusNotFound || g.body.ErrorCode != 100 {
		t.Fatalf("v2v3: key of rejected TTL write: status %d body %s, want 404", g.status, g.raw)
	}

	// Directories and prevExist preconditions are emulated.
	d := do(t, ctx, http.MethodPut, s.URL+"/v2/keys/dir?dir=true", url.Values{})
	if d.status != http.StatusCreated || d.body.Node == nil || !d.body.Node.Dir {
		t.Fatalf("v2v3 mkdir: status %d body %s", d.status, d.raw)
	}
	pe := do(t, ctx, http.MethodPut, s.URL+"/v2/keys/foo?prevExist=false", url.Values{"value": {"z"}})
	if pe.status != http.StatusPreconditionFailed || pe.body.ErrorCode != 105 {
		t.Fatalf("v2v3 prevExist=false on existing key: status %d body %s, want 412/105", pe.status, pe.raw)
	}

	checkStopped(t, s)
}

// TestDataDirPersists restarts a server on a caller-owned data dir, which
// must survive Stop with its contents.
func TestDataDirPersists(t *testing.T) {
	buildOnce(t)
	ctx, cancel := context.WithTimeout(context.Background(), serverTimeout)
	defer cancel()

	dir := t.TempDir()
	s1 := start(t, ctx, Options{DataDir: dir})
	checkSetFoo(t, ctx, s1)
	stop(t, s1)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("caller-owned data dir gone after Stop: %v", err)
	}

	s2 := start(t, ctx, Options{DataDir: dir})
	g := do(t, ctx, http.MethodGet, s2.URL+"/v2/keys/foo", nil)
	if g.status != http.StatusOK || g.body.Node == nil || g.body.Node.Value == nil || *g.body.Node.Value != "baz" {
		t.Fatalf("GET foo after restart: status %d body %s", g.status, g.raw)
	}
	stop(t, s2)
}
