// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v2"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestErrors checks every v2 error the bridge produces: code, message, cause,
// HTTP status and headers, in the situations v2 produces them.
func TestErrors(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	for _, setup := range []struct{ method, path string }{
		{"PUT", "/v2/keys/file?value=v"},
		{"PUT", "/v2/keys/dir/child?value=c"},
		{"PUT", "/v2/keys/empty?dir=true"},
		{"PUT", "/v2/keys/cas?value=one"},
	} {
		if r := do(t, setup.method, e.url, setup.path, nil); r.status >= 300 {
			t.Fatalf("setup %s %s: %d %s", setup.method, setup.path, r.status, r.body)
		}
	}
	casIdx := do(t, "GET", e.url, "/v2/keys/cas", nil).json(t)["node"].(map[string]any)["modifiedIndex"].(float64)

	cases := []struct {
		name, method, path string
		form               []string
		status, code       int
		cause              string
	}{
		{"get missing", "GET", "/v2/keys/nope", nil, 404, 100, "/nope"},
		{"get missing deep", "GET", "/v2/keys/nope/a/b", nil, 404, 100, "/nope"},
		{"get through file", "GET", "/v2/keys/file/x", nil, 400, 104, "/file"},
		{"set under file", "PUT", "/v2/keys/file/x", []string{"value", "1"}, 400, 104, "/file"},
		{"set on dir", "PUT", "/v2/keys/dir", []string{"value", "1"}, 403, 102, "/dir"},
		{"set dir on dir", "PUT", "/v2/keys/dir", []string{"dir", "true"}, 403, 102, "/dir"},
		{"create existing", "PUT", "/v2/keys/file", []string{"value", "1", "prevExist", "false"}, 412, 105, "/file"},
		{"create existing dir", "PUT", "/v2/keys/dir", []string{"dir", "true", "prevExist", "false"}, 412, 105, "/dir"},
		{"update missing", "PUT", "/v2/keys/missing", []string{"value", "1", "prevExist", "true"}, 404, 100, "/missing"},
		{"update dir with value", "PUT", "/v2/keys/dir", []string{"value", "1", "prevExist", "true"}, 403, 102, "/dir"},
		{"cas value", "PUT", "/v2/keys/cas", []string{"value", "2", "prevValue", "bad"}, 412, 101, "[bad != one]"},
		{"cas index", "PUT", "/v2/keys/cas", []string{"value", "2", "prevIndex", "1"}, 412, 101, fmt.Sprintf("[1 != %d]", int(casIdx))},
		{"cas both", "PUT", "/v2/keys/cas", []string{"value", "2", "prevIndex", "1", "prevValue", "bad"}, 412, 101, fmt.Sprintf("[bad != one] [1 != %d]", int(casIdx))},
		{"cas missing", "PUT", "/v2/keys/nocas", []string{"value", "2", "prevValue", "x"}, 404, 100, "/nocas"},
		{"cas dir", "PUT", "/v2/keys/dir", []string{"value", "2", "prevValue", "x"}, 403, 102, "/dir"},
		{"cad value", "DELETE", "/v2/keys/cas", []string{"prevValue", "bad"}, 412, 101, "[bad != one]"},
		{"cad dir", "DELETE", "/v2/keys/dir", []string{"prevValue", "x"}, 403, 102, "/dir"},
		{"delete missing", "DELETE", "/v2/keys/missing", nil, 404, 100, "/missing"},
		{"delete dir without dir", "DELETE", "/v2/keys/dir", nil, 403, 102, "/dir"},
		{"delete non-empty dir", "DELETE", "/v2/keys/dir", []string{"dir", "true"}, 403, 108, "/dir"},
		{"delete root", "DELETE", "/v2/keys/", []string{"recursive", "true"}, 400, 107, "/"},
		{"set root", "PUT", "/v2/keys/", []string{"value", "1"}, 400, 107, "/"},
		{"update root", "PUT", "/v2/keys", []string{"value", "1", "prevExist", "true"}, 400, 107, "/"},
		{"cas root", "PUT", "/v2/keys/", []string{"value", "1", "prevValue", "x"}, 400, 107, "/"},
		{"create root", "PUT", "/v2/keys/", []string{"dir", "true", "prevExist", "false"}, 400, 107, "/"},
		{"bad recursive", "GET", "/v2/keys/file", []string{"recursive", "yes"}, 400, 209, `invalid value for "recursive"`},
		{"bad sorted", "GET", "/v2/keys/file", []string{"sorted", "2"}, 400, 209, `invalid value for "sorted"`},
		{"bad wait", "GET", "/v2/keys/file", []string{"wait", "x"}, 400, 209, `invalid value for "wait"`},
		{"bad dir", "PUT", "/v2/keys/file", []string{"dir", "x"}, 400, 209, `invalid value for "dir"`},
		{"bad quorum", "GET", "/v2/keys/file", []string{"quorum", "x"}, 400, 209, `invalid value for "quorum"`},
		{"bad stream", "GET", "/v2/keys/file", []string{"stream", "x"}, 400, 209, `invalid value for "stream"`},
		{"bad noValueOnSuccess", "PUT", "/v2/keys/file", []string{"noValueOnSuccess", "x"}, 400, 209, `invalid value for "noValueOnSuccess"`},
		{"bad prevExist", "PUT", "/v2/keys/file", []string{"prevExist", "maybe"}, 400, 209, "invalid value for prevExist"},
		{"bad refresh", "PUT", "/v2/keys/file", []string{"refresh", "maybe"}, 400, 209, "invalid value for refresh"},
		{"wait on PUT", "PUT", "/v2/keys/file", []string{"wait", "true"}, 400, 209, `"wait" can only be used with GET requests`},
		{"bad prevIndex", "PUT", "/v2/keys/file", []string{"prevIndex", "-1"}, 400, 203, `invalid value for "prevIndex"`},
		{"bad waitIndex", "GET", "/v2/keys/file", []string{"wait", "true", "waitIndex", "x"}, 400, 203, `invalid value for "waitIndex"`},
		{"bad ttl", "PUT", "/v2/keys/file", []string{"value", "1", "ttl", "-5"}, 400, 202, `invalid value for "ttl"`},
		{"empty prevValue", "PUT", "/v2/keys/file", []string{"value", "1", "prevValue", ""}, 400, 201, `"prevValue" cannot be empty`},
		{"refresh with value", "PUT", "/v2/keys/file", []string{"value", "1", "refresh", "true", "ttl", "5"}, 400, 211, "A value was provided on a refresh"},
		{"refresh without ttl", "PUT", "/v2/keys/file", []string{"refresh", "true"}, 400, 212, "No TTL value set"},
		{"refresh missing", "PUT", "/v2/keys/nothere", []string{"refresh", "true", "ttl", "5"}, 404, 100, "/nothere"},
		{"post under file", "POST", "/v2/keys/file", []string{"value", "1"}, 400, 104, "/file"},
		{"control char", "PUT", "/v2/keys/a%01b", []string{"value", "1"}, 400, 209, "key contains a control character"},
		{"nul byte", "GET", "/v2/keys/a%00b", nil, 400, 209, "key contains a control character"},
		{"long key", "PUT", "/v2/keys/" + strings.Repeat("k", 5000), []string{"value", "1"}, 400, 209, "key is longer than 4096 bytes"},
		{"deep key", "PUT", "/v2/keys" + strings.Repeat("/d", 60), []string{"value", "1"}, 400, 209, "key is deeper than 48 levels"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, c.method, e.url, c.path, form(c.form...))
			if r.status != c.status {
				t.Fatalf("status %d, want %d (%s)", r.status, c.status, r.body)
			}
			if !strings.HasSuffix(r.body, "}\n") {
				t.Errorf("body %q lacks v2's trailing newline", r.body)
			}
			var ej struct {
				ErrorCode int    `json:"errorCode"`
				Message   string `json:"message"`
				Cause     string `json:"cause"`
				Index     uint64 `json:"index"`
			}
			if err := json.Unmarshal([]byte(r.body), &ej); err != nil {
				t.Fatalf("body %q: %v", r.body, err)
			}
			if ej.ErrorCode != c.code || ej.Cause != c.cause {
				t.Errorf("got %d %q, want %d %q", ej.ErrorCode, ej.Cause, c.code, c.cause)
			}
			if ej.Message == "" {
				t.Errorf("no message")
			}
			if got := r.header.Get("X-Etcd-Index"); got != fmt.Sprint(ej.Index) {
				t.Errorf("X-Etcd-Index %q, body index %d", got, ej.Index)
			}
			if r.header.Get("X-Etcd-Cluster-Id") == "" || r.header.Get("Content-Type") != "application/json" {
				t.Errorf("headers: %v", r.header)
			}
			// Store errors carry the current index; request errors carry 0.
			if (c.code < 200) != (ej.Index > 0) {
				t.Errorf("index %d for code %d", ej.Index, c.code)
			}
		})
	}
	t.Run("method not allowed", func(t *testing.T) {
		r := do(t, "PATCH", e.url, "/v2/keys/file", nil)
		if r.status != 405 || r.header.Get("Allow") != "HEAD,GET,PUT,POST,DELETE" {
			t.Fatalf("%d %v", r.status, r.header)
		}
	})
	t.Run("unparsable form", func(t *testing.T) {
		r := do(t, "GET", e.url, "/v2/keys/file?a=%zz", nil)
		if m := r.json(t); r.status != 400 || m["errorCode"].(float64) != 210 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("value too large", func(t *testing.T) {
		r := do(t, "PUT", e.url, "/v2/keys/big", form("value", strings.Repeat("x", 3<<20)))
		m := r.json(t)
		if r.status != 400 || m["errorCode"].(float64) != 209 || !strings.Contains(m["cause"].(string), "too large") {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if r := do(t, "GET", e.url, "/v2/keys/big", nil); r.status != 404 {
			t.Fatalf("a refused value was written: %d", r.status)
		}
	})
	t.Run("unclean path redirects", func(t *testing.T) {
		r := do(t, "GET", e.url, "/v2/keys//file", nil)
		if r.status != 301 || r.header.Get("Location") != "/v2/keys/file" {
			t.Fatalf("%d %v", r.status, r.header)
		}
	})
}

// TestKeysWithV2Client drives the operations through the real v2 Go client.
func TestKeysWithV2Client(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	k := v2client(t, e.url)
	ctx := ctxT(t, time.Minute)

	r, err := k.Set(ctx, "/a/b", "1", nil)
	if err != nil || r.Action != "set" || r.Node.Value != "1" || r.PrevNode != nil {
		t.Fatalf("set: %+v %v", r, err)
	}
	first := r.Node
	if first.CreatedIndex != first.ModifiedIndex || r.Index != first.ModifiedIndex {
		t.Errorf("indexes %+v, X-Etcd-Index %d", first, r.Index)
	}
	r, err = k.Set(ctx, "/a/b", "2", nil)
	if err != nil || r.PrevNode == nil || r.PrevNode.Value != "1" || r.Node.CreatedIndex == first.CreatedIndex {
		t.Fatalf("set over a file must replace it (new createdIndex): %+v %v", r, err)
	}
	r, err = k.Update(ctx, "/a/b", "3")
	if err != nil || r.Action != "update" || r.Node.CreatedIndex != r.PrevNode.CreatedIndex {
		t.Fatalf("update: %+v %v", r, err)
	}
	r, err = k.Set(ctx, "/a/b", "4", &client.SetOptions{PrevValue: "3"})
	if err != nil || r.Action != "compareAndSwap" || r.PrevNode.Value != "3" {
		t.Fatalf("cas: %+v %v", r, err)
	}
	r, err = k.Set(ctx, "/a/b", "5", &client.SetOptions{PrevIndex: r.Node.ModifiedIndex})
	if err != nil || r.Action != "compareAndSwap" {
		t.Fatalf("cas index: %+v %v", r, err)
	}
	_, err = k.Create(ctx, "/a/b", "x")
	if ce, ok := err.(client.Error); !ok || ce.Code != client.ErrorCodeNodeExist {
		t.Fatalf("create existing: %v", err)
	}
	r, err = k.CreateInOrder(ctx, "/q", "first", nil)
	if err != nil || r.Action != "create" || len(r.Node.Key) != len("/q/")+20 {
		t.Fatalf("in-order: %+v %v", r, err)
	}
	if want := fmt.Sprintf("/q/%020d", r.Node.CreatedIndex); r.Node.Key != want {
		t.Errorf("in-order key %s, want %s (no interleaving write)", r.Node.Key, want)
	}
	if _, err := k.Set(ctx, "/emptydir", "", &client.SetOptions{Dir: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Set(ctx, "/a/_hidden", "h", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Set(ctx, "/a/c/d", "deep", nil); err != nil {
		t.Fatal(err)
	}

	g, err := k.Get(ctx, "/", &client.GetOptions{Sort: true})
	if err != nil || !g.Node.Dir || g.Node.Key != "" || g.Node.ModifiedIndex != 0 {
		t.Fatalf("root: %+v %v", g.Node, err)
	}
	if got := keysOf(g.Node.Nodes); got != "/a /emptydir /q" {
		t.Errorf("root listing %q", got)
	}
	g, err = k.Get(ctx, "/a", &client.GetOptions{Sort: true})
	if err != nil || keysOf(g.Node.Nodes) != "/a/b /a/c" {
		t.Fatalf("non-recursive listing (hidden left out): %v %v", keysOf(g.Node.Nodes), err)
	}
	if c := g.Node.Nodes[1]; !c.Dir || len(c.Nodes) != 0 {
		t.Errorf("non-recursive listing shows child dir contents: %+v", c)
	}
	g, err = k.Get(ctx, "/a", &client.GetOptions{Recursive: true, Sort: true})
	if err != nil || len(g.Node.Nodes[1].Nodes) != 1 || g.Node.Nodes[1].Nodes[0].Value != "deep" {
		t.Fatalf("recursive listing: %+v %v", g.Node, err)
	}
	if g, err := k.Get(ctx, "/a/_hidden", nil); err != nil || g.Node.Value != "h" {
		t.Fatalf("hidden key read directly: %v", err)
	}
	if g, err := k.Get(ctx, "/emptydir", &client.GetOptions{Quorum: true}); err != nil || !g.Node.Dir || len(g.Node.Nodes) != 0 {
		t.Fatalf("empty dir: %+v %v", g, err)
	}

	// TTLs.
	r, err = k.Set(ctx, "/ttl", "v", &client.SetOptions{TTL: 30 * time.Second})
	if err != nil || r.Node.TTL != 30 || r.Node.Expiration == nil {
		t.Fatalf("ttl set: %+v %v", r, err)
	}
	if d := time.Until(*r.Node.Expiration); d < 28*time.Second || d > 31*time.Second {
		t.Errorf("expiration %v away", d)
	}
	g, err = k.Get(ctx, "/ttl", nil)
	if err != nil || g.Node.TTL < 29 || g.Node.TTL > 30 {
		t.Fatalf("ttl get: %+v %v", g.Node, err)
	}
	r, err = k.Set(ctx, "/ttl", "", &client.SetOptions{TTL: 60 * time.Second, Refresh: true, PrevExist: client.PrevExist})
	if err != nil || r.Node.Value != "v" || r.Node.TTL != 60 || r.Action != "update" {
		t.Fatalf("refresh: %+v %v", r, err)
	}
	r, err = k.Update(ctx, "/ttl", "w")
	if err != nil || r.Node.TTL != 0 || r.Node.Expiration != nil {
		t.Fatalf("update without ttl must make the key permanent: %+v %v", r.Node, err)
	}
	if _, err := k.Set(ctx, "/short", "v", &client.SetOptions{TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Set(ctx, "/tdir", "", &client.SetOptions{Dir: true, TTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Set(ctx, "/tdir/inner/x", "v", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "TTL keys and TTL dirs to expire", func() bool {
		_, e1 := k.Get(ctx, "/short", nil)
		_, e2 := k.Get(ctx, "/tdir/inner/x", nil)
		return client.IsKeyNotFound(e1) && client.IsKeyNotFound(e2)
	})

	// Deletes.
	r, err = k.Delete(ctx, "/a/b", &client.DeleteOptions{PrevValue: "5"})
	if err != nil || r.Action != "compareAndDelete" || r.PrevNode.Value != "5" {
		t.Fatalf("cad: %+v %v", r, err)
	}
	r, err = k.Delete(ctx, "/a", &client.DeleteOptions{Recursive: true})
	if err != nil || r.Action != "delete" || !r.Node.Dir || !r.PrevNode.Dir {
		t.Fatalf("recursive delete: %+v %v", r, err)
	}
	if _, err := k.Get(ctx, "/a/c/d", nil); !client.IsKeyNotFound(err) {
		t.Fatalf("subtree survived: %v", err)
	}
	if _, err := k.Delete(ctx, "/emptydir", &client.DeleteOptions{Dir: true}); err != nil {
		t.Fatalf("rmdir: %v", err)
	}
}

func keysOf(ns client.Nodes) string {
	var ks []string
	for _, n := range ns {
		ks = append(ks, n.Key)
	}
	return strings.Join(ks, " ")
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestResponseShape pins the exact bytes of v2 responses.
func TestResponseShape(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	r := do(t, "PUT", e.url, "/v2/keys/s", form("value", ""))
	idx := r.header.Get("X-Etcd-Index")
	want := fmt.Sprintf(`{"action":"set","node":{"key":"/s","value":"","modifiedIndex":%s,"createdIndex":%s}}`+"\n", idx, idx)
	if r.status != 201 || r.body != want {
		t.Fatalf("got %d %q\nwant %q", r.status, r.body, want)
	}
	for _, h := range []string{"X-Etcd-Index", "X-Raft-Index", "X-Raft-Term", "X-Etcd-Cluster-Id"} {
		if r.header.Get(h) == "" {
			t.Errorf("missing %s", h)
		}
	}
	r = do(t, "PUT", e.url, "/v2/keys/s", form("value", "x", "noValueOnSuccess", "true"))
	if r.status != 200 || r.body != `{"action":"set"}`+"\n" {
		t.Fatalf("noValueOnSuccess: %d %q", r.status, r.body)
	}
	r = do(t, "HEAD", e.url, "/v2/keys/s", nil)
	if r.status != 200 || r.body != "" || r.header.Get("X-Etcd-Index") == "" {
		t.Fatalf("HEAD: %d %q", r.status, r.body)
	}
	if r := do(t, "HEAD", e.url, "/v2/keys/none", nil); r.status != 404 || r.body != "" {
		t.Fatalf("HEAD missing: %d %q", r.status, r.body)
	}
	r = do(t, "PUT", e.url, "/v2/keys/d", form("dir", "true"))
	if r.status != 201 || !strings.Contains(r.body, `"dir":true`) || strings.Contains(r.body, `"value"`) {
		t.Fatalf("mkdir: %d %q", r.status, r.body)
	}
	if r := do(t, "GET", e.url, "/v2/keys/d", nil); strings.Contains(r.body, "nodes") {
		t.Fatalf("empty dir lists nodes: %q", r.body)
	}
	// A body value wins over a query value for PUT.
	r = do(t, "PUT", e.url, "/v2/keys/prec?value=query", form("value", "body"))
	if !strings.Contains(r.body, `"value":"body"`) {
		t.Fatalf("precedence: %q", r.body)
	}
}

// TestDataPrefixIsolation proves no v2 request reads or changes a v3 key
// outside --data-prefix, with keys planted right beside it.
func TestDataPrefixIsolation(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	br := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{DataPrefix: "/x"})
	v3 := cl.Client(t)
	ctx := ctxT(t, time.Minute)
	planted := map[string]string{"/xy": "1", "/x": "2", "/": "3", "/xy/z": "4", "/x!": "5", "/y/x/a": "6"}
	for k, v := range planted {
		if _, err := v3.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	k := v2client(t, br.URL)
	for _, op := range []func() error{
		func() error { _, err := k.Set(ctx, "/a", "v", nil); return err },
		func() error { _, err := k.Set(ctx, "/y/a", "v", nil); return err },
		func() error { _, err := k.CreateInOrder(ctx, "/q", "v", nil); return err },
		func() error { _, err := k.Delete(ctx, "/y", &client.DeleteOptions{Recursive: true}); return err },
	} {
		if err := op(); err != nil {
			t.Fatal(err)
		}
	}
	// Attempts to escape the prefix.
	for _, p := range []string{"/v2/keys/../xy", "/v2/keys/%2e%2e/xy", "/v2/keys/..%2Fxy"} {
		do(t, "DELETE", br.URL, p, form("recursive", "true"))
		do(t, "PUT", br.URL, p, form("value", "escaped"))
	}
	g, err := k.Get(ctx, "/", &client.GetOptions{Recursive: true, Sort: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Node.Nodes {
		if n.Key == "/xy" || n.Key == "/y" && len(n.Nodes) > 0 {
			t.Errorf("listing shows a key outside the prefix: %+v", n)
		}
	}
	for k, v := range planted {
		r, err := v3.Get(ctx, k)
		if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != v || r.Kvs[0].Version != 1 {
			t.Errorf("planted %s changed: %+v %v", k, r.Kvs, err)
		}
	}
	all, err := v3.Get(ctx, "", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range all.Kvs {
		key := string(kv.Key)
		if _, ok := planted[key]; ok || strings.HasPrefix(key, "/x/") || strings.HasPrefix(key, "_v2bridge/") {
			continue
		}
		t.Errorf("a v2 write landed outside the prefix: %q", key)
	}
}

// TestV3NativeInterop: v3 writers and v2 clients share one keyspace.
func TestV3NativeInterop(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	v3 := e.cluster.Client(t)
	ctx := ctxT(t, time.Minute)
	lease, err := v3.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v3.Put(ctx, "/net/subnets/10.0.1.0-24", `{"PublicIP":"1.2.3.4"}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := v3.Put(ctx, "/net/config", "cfg"); err != nil {
		t.Fatal(err)
	}
	k := v2client(t, e.url)
	g, err := k.Get(ctx, "/net", &client.GetOptions{Recursive: true, Sort: true, Quorum: true})
	if err != nil {
		t.Fatal(err)
	}
	if keysOf(g.Node.Nodes) != "/net/config /net/subnets" || !g.Node.Nodes[1].Dir {
		t.Fatalf("v3 data as v2 tree: %+v", g.Node.Nodes)
	}
	sub := g.Node.Nodes[1].Nodes[0]
	if sub.Value != `{"PublicIP":"1.2.3.4"}` || sub.TTL < 58 || sub.TTL > 60 || sub.Expiration == nil {
		t.Errorf("leased v3 key as v2 TTL key: %+v", sub)
	}
	if _, err := k.Set(ctx, "/net/subnets/10.0.2.0-24", "mine", &client.SetOptions{PrevExist: client.PrevNoExist, TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	r, err := v3.Get(ctx, "/net/subnets/10.0.2.0-24")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "mine" || r.Kvs[0].Lease == 0 {
		t.Fatalf("v2 write as v3 data: %+v %v", r.Kvs, err)
	}
	ttl, err := v3.TimeToLive(ctx, clientv3.LeaseID(r.Kvs[0].Lease))
	if err != nil || ttl.TTL < 25 || ttl.TTL > 30 {
		t.Fatalf("v2 TTL as v3 lease: %+v %v", ttl, err)
	}
	// A v3 key that is also a prefix of other keys is shown as a file.
	if _, err := v3.Put(ctx, "/net/config/extra", "hidden"); err != nil {
		t.Fatal(err)
	}
	if g, err := k.Get(ctx, "/net/config", nil); err != nil || g.Node.Value != "cfg" {
		t.Fatalf("file-and-prefix: %+v %v", g, err)
	}
}

// TestConcurrentQuorumGetsSeeEveryEarlierWrite: quorum GETs sent by many
// clients at once (which share their linearizable reads) each see every v3
// write acknowledged before they were sent, though the bridge did not make
// those writes.
func TestConcurrentQuorumGetsSeeEveryEarlierWrite(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	v3 := e.cluster.Client(t)
	ctx := ctxT(t, time.Minute)
	k := v2client(t, e.url)
	const clients, rounds = 16, 25
	errs := make(chan error, clients)
	for c := range clients {
		go func() {
			key := fmt.Sprintf("/quorum/k%d", c)
			for n := range rounds {
				want := strconv.Itoa(n)
				if _, err := v3.Put(ctx, key, want); err != nil {
					errs <- err
					return
				}
				g, err := k.Get(ctx, key, &client.GetOptions{Quorum: true})
				if err != nil || g.Node.Value != want {
					errs <- fmt.Errorf("quorum GET %s after the v3 put of %s: %+v, %v", key, want, g, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestConcurrentInOrderAcrossBridges: POSTs through two bridges on one etcd
// get unique keys that sort in commit order.
func TestConcurrentInOrderAcrossBridges(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	b1 := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{})
	b2 := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{})
	ctx := ctxT(t, 2*time.Minute)
	var mu sync.Mutex
	var got []struct {
		key string
		idx uint64
	}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			k := v2client(t, []string{b1.URL, b2.URL}[i%2])
			for j := 0; j < 20; j++ {
				r, err := k.CreateInOrder(ctx, "/queue", fmt.Sprint(i, "-", j), nil)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, struct {
					key string
					idx uint64
				}{r.Node.Key, r.Node.ModifiedIndex})
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	sort.Slice(got, func(i, j int) bool { return got[i].idx < got[j].idx })
	seen := map[string]bool{}
	for i, g := range got {
		if seen[g.key] {
			t.Fatalf("duplicate in-order key %s", g.key)
		}
		seen[g.key] = true
		if i > 0 && g.key <= got[i-1].key {
			t.Fatalf("key %s (index %d) does not sort after %s (index %d)", g.key, g.idx, got[i-1].key, got[i-1].idx)
		}
	}
	if len(got) != 320 {
		t.Fatalf("%d keys", len(got))
	}
}

// TestClusterEndpoints: what v2 clients use to find and check members.
func TestClusterEndpoints(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	c, err := client.New(client.Config{Endpoints: []string{e.url}, Transport: client.DefaultTransport})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, time.Minute)
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if eps := c.Endpoints(); len(eps) != 1 || eps[0] != e.url {
		t.Fatalf("after Sync the client talks to %v, want the bridge", eps)
	}
	v, err := c.GetVersion(ctx)
	if err != nil || !strings.HasPrefix(v.Server, "3.") || !strings.HasSuffix(v.Cluster, ".0") {
		t.Fatalf("version: %+v %v", v, err)
	}
	ms, err := client.NewMembersAPI(c).List(ctx)
	if err != nil || len(ms) != 1 || ms[0].ClientURLs[0] != e.url {
		t.Fatalf("members: %+v %v", ms, err)
	}
	ld, err := client.NewMembersAPI(c).Leader(ctx)
	if err != nil || ld.ID != ms[0].ID {
		t.Fatalf("leader: %+v %v", ld, err)
	}
	if r := do(t, "GET", e.url, "/v2/machines", nil); r.body != e.url {
		t.Errorf("machines %q", r.body)
	}
	self := do(t, "GET", e.url, "/v2/stats/self", nil).json(t)
	if self["id"] != ms[0].ID || self["leaderInfo"].(map[string]any)["leader"] != ms[0].ID {
		t.Errorf("stats/self %v", self)
	}
	do(t, "PUT", e.url, "/v2/keys/s", form("value", "1"))
	st := do(t, "GET", e.url, "/v2/stats/store", nil).json(t)
	if st["setsSuccess"].(float64) != 1 {
		t.Errorf("stats/store %v", st)
	}
	if r := do(t, "GET", e.url, "/health", nil); r.status != 200 || r.body != `{"health":"true"}`+"\n" {
		t.Errorf("health %d %q", r.status, r.body)
	}
	if r := do(t, "GET", e.url, "/nothing", nil); r.status != 404 {
		t.Errorf("unknown path %d", r.status)
	}
}

// TestUnreachableBackend: with no backend member answering, requests fail
// fast with v2's 300 (HTTP 500) and /health turns 503.
func TestUnreachableBackend(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	e.cluster.Stop()
	waitFor(t, 10*time.Second, "the bridge to notice", func() bool { return !e.bridge.Backend.Up() })
	for _, m := range []string{"GET", "PUT"} {
		start := time.Now()
		r := do(t, m, e.url, "/v2/keys/k?wait=false", form("value", "v"))
		if r.status != 500 || r.json(t)["errorCode"].(float64) != 300 || time.Since(start) > 2*time.Second {
			t.Errorf("%s: %d %q after %v", m, r.status, r.body, time.Since(start))
		}
	}
	start := time.Now()
	if r := do(t, "GET", e.url, "/v2/keys/k", form("wait", "true")); r.status != 500 || time.Since(start) > 2*time.Second {
		t.Errorf("watch: %d %q", r.status, r.body)
	}
	if r := do(t, "GET", e.url, "/health", nil); r.status != 503 || r.body != `{"health":"false"}`+"\n" {
		t.Errorf("health %d %q", r.status, r.body)
	}
}

// TestExpiredDirectorySweptByABridgeStartedLater: a TTL directory that
// expires while no bridge runs leaves its children behind in v3 (they carry
// no lease); the next bridge to start removes them, as v2 removed the whole
// subtree at the expiry.
func TestExpiredDirectorySweptByABridgeStartedLater(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	v3 := cl.Client(t)
	ctx := ctxT(t, time.Minute)
	first := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{})
	for _, r := range []struct{ path, form string }{
		{"/d", "dir=true&ttl=2"}, {"/d/x", "value=1"}, {"/d/y/z", "value=2"}, {"/keep", "value=3"},
	} {
		q, _ := url.ParseQuery(r.form)
		if resp := do(t, "PUT", first.URL, "/v2/keys"+r.path, q); resp.status != 201 {
			t.Fatalf("PUT %s: %d %s", r.path, resp.status, resp.body)
		}
	}
	first.Stop() // no bridge runs when the directory expires
	layout, _ := translate.NewLayout("", "_v2bridge/")
	waitFor(t, 20*time.Second, "the directory's lease to run out", func() bool {
		r, err := v3.Get(ctx, layout.MarkerKey("/d"))
		return err == nil && len(r.Kvs) == 0
	})
	if r, err := v3.Get(ctx, "/d/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 2 {
		t.Fatalf("before a bridge starts: %v keys below /d (%v), want the 2 children left behind", r.Count, err)
	}
	later := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{})
	if r, err := v3.Get(ctx, "/d/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Fatalf("after a bridge started: %v keys below /d (%v), want none", r.Count, err)
	}
	if r := do(t, "GET", later.URL, "/v2/keys/d", form("quorum", "true")); r.status != 404 {
		t.Errorf("GET /d: %d %s, want 404", r.status, r.body)
	}
	if r := do(t, "GET", later.URL, "/v2/keys/keep", form("quorum", "true")); r.status != 200 {
		t.Errorf("GET /keep: %d %s, want it untouched", r.status, r.body)
	}
}
