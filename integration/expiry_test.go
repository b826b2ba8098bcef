// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestExpiredNodesAreNeverServed: from the expiration a TTL write answered
// with, neither of two bridges on one cluster serves the node (a file, a
// TTL directory with its permanent child, in a listing too) nor shows a
// ttl below 1; writes treat it as absent (a create succeeds, an update and
// a compare-and-swap fail with 100); a refreshed key lives on; the expire
// event comes soon after the expiration, with the key's last node as
// prevNode.
// Also with bridges serving only a subtree.
func TestExpiredNodesAreNeverServed(t *testing.T) {
	for _, o := range []v2bridgetest.Options{{}, {Served: []string{"/ex"}}} {
		t.Run(fmt.Sprintf("serving %v", o.Served), func(t *testing.T) { expiredNodesAreNeverServed(t, o) })
	}
}

func expiredNodesAreNeverServed(t *testing.T, o v2bridgetest.Options) {
	bound(t)
	cl := v2bridgetest.StartCluster(t, 1)
	a := v2bridgetest.StartBridge(t, cl.Endpoints(), o)
	b := v2bridgetest.StartBridge(t, cl.Endpoints(), o)
	put := func(path string, f url.Values) map[string]any {
		t.Helper()
		r := do(t, "PUT", a.URL, "/v2/keys"+path, f)
		if r.status/100 != 2 {
			t.Fatalf("PUT %s: %d %s", path, r.status, r.body)
		}
		return r.json(t)["node"].(map[string]any)
	}
	expiration := func(n map[string]any) time.Time {
		t.Helper()
		e, err := time.Parse(time.RFC3339Nano, n["expiration"].(string))
		if err != nil || n["ttl"].(float64) != 2 {
			t.Fatalf("node %v: want ttl 2 and an expiration (%v)", n, err)
		}
		return e
	}
	k := put("/ex/k", form("value", "v", "ttl", "2"))
	kIdx := uint64(k["modifiedIndex"].(float64))
	expired := make(chan time.Time, 1)
	watch := startWatch(t, b.URL, "/ex/k", "waitIndex", fmt.Sprint(kIdx+1))
	var ev v2event
	go func() {
		ev = <-watch
		expired <- time.Now()
	}()
	exps := map[string]time.Time{"/ex/k": expiration(k), "/ex/d": expiration(put("/ex/d", form("dir", "true", "ttl", "2")))}
	put("/ex/d/c", form("value", "c"))
	exps["/ex/d/c"] = exps["/ex/d"]
	exps["/ex/u"] = expiration(put("/ex/u", form("value", "v", "ttl", "2")))
	exps["/ex/cas"] = expiration(put("/ex/cas", form("value", "v", "ttl", "2")))
	put("/ex/r", form("value", "r", "ttl", "2"))
	if r := do(t, "PUT", a.URL, "/v2/keys/ex/r", form("refresh", "true", "ttl", "4", "prevExist", "true")); r.status != 200 {
		t.Fatalf("refresh: %d %s", r.status, r.body)
	}
	last := exps["/ex/k"]
	for _, e := range exps {
		last = maxTime(last, e)
	}

	// Read until well past the last expiration, from both bridges.
	for time.Now().Before(last.Add(700 * time.Millisecond)) {
		for _, br := range []*v2bridgetest.Bridge{a, b} {
			for _, p := range []string{"/ex/k", "/ex/d", "/ex/d/c", "/ex/u"} {
				sent := time.Now()
				r := do(t, "GET", br.URL, "/v2/keys"+p, nil)
				switch {
				case r.status == 404 && sent.After(exps[p].Add(-time.Second)):
				case r.status == 200 && !sent.Before(exps[p]):
					t.Errorf("GET %s sent %v after its expiration: %s", p, sent.Sub(exps[p]), r.body)
				case r.status == 200:
					if ttl, ok := r.json(t)["node"].(map[string]any)["ttl"].(float64); ok && ttl < 1 {
						t.Errorf("GET %s: ttl %v: %s", p, ttl, r.body)
					}
				default:
					t.Errorf("GET %s sent %v before its expiration: %d %s", p, exps[p].Sub(sent), r.status, r.body)
				}
			}
			sent := time.Now()
			r := do(t, "GET", br.URL, "/v2/keys/ex", form("recursive", "true"))
			for _, n := range nodesOf(t, r) {
				key := n["key"].(string)
				if e, ok := exps[key]; ok && !sent.Before(e) {
					t.Errorf("listing sent %v after %s expired shows it: %s", sent.Sub(e), key, r.body)
				}
				if ttl, ok := n["ttl"].(float64); ok && ttl < 1 {
					t.Errorf("listing shows %s with ttl %v", key, ttl)
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if g := do(t, "GET", b.URL, "/v2/keys/ex/r", nil); g.status != 200 {
		t.Errorf("the refreshed key is gone after its first TTL: %d %s", g.status, g.body)
	}

	select {
	case at := <-expired:
		t.Logf("expire event %v after the expiration", at.Sub(exps["/ex/k"]).Round(time.Millisecond))
		if at.Sub(exps["/ex/k"]) > time.Second {
			t.Errorf("expire event %v after the expiration", at.Sub(exps["/ex/k"]))
		}
		v := "v"
		want := v2event{Action: "expire", Node: &v2node{Key: "/ex/k", ModifiedIndex: ev.Node.ModifiedIndex, CreatedIndex: kIdx},
			PrevNode: &v2node{Key: "/ex/k", Value: &v, ModifiedIndex: kIdx, CreatedIndex: kIdx}}
		if ev.Action != want.Action || *ev.Node != *want.Node || ev.PrevNode == nil || ev.PrevNode.Key != "/ex/k" ||
			*ev.PrevNode.Value != v || ev.PrevNode.TTL != 0 || ev.PrevNode.ModifiedIndex != kIdx ||
			ev.PrevNode.CreatedIndex != kIdx || ev.Node.ModifiedIndex <= kIdx {
			t.Errorf("expire event %+v node %+v prevNode %+v", ev, ev.Node, ev.PrevNode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no expire event")
	}

	// Writes: the expired nodes are absent.
	if r := do(t, "PUT", b.URL, "/v2/keys/ex/k", form("value", "new", "prevExist", "false")); r.status != 201 ||
		r.json(t)["action"] != "create" || r.json(t)["prevNode"] != nil {
		t.Errorf("create over the expired key: %d %s", r.status, r.body)
	}
	for _, f := range []url.Values{form("value", "x", "prevExist", "true"), form("value", "x", "prevValue", "v")} {
		p := "/ex/u"
		if f.Has("prevValue") {
			p = "/ex/cas"
		}
		r := do(t, "PUT", b.URL, "/v2/keys"+p, f)
		if j := r.json(t); r.status != 404 || j["errorCode"].(float64) != 100 || j["cause"] != p {
			t.Errorf("PUT %s %v over the expired key: %d %s", p, f, r.status, r.body)
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// nodesOf flattens a recursive listing's nodes.
func nodesOf(t *testing.T, r resp) []map[string]any {
	t.Helper()
	if r.status != 200 {
		return nil
	}
	var out []map[string]any
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		out = append(out, n)
		kids, _ := n["nodes"].([]any)
		for _, k := range kids {
			walk(k.(map[string]any))
		}
	}
	walk(r.json(t)["node"].(map[string]any))
	return out
}
