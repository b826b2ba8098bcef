// SPDX-License-Identifier: Apache-2.0

package shadow

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"
)

// writeIndex sends a write through the passthrough and returns the index
// the v2 server answered it with.
func (e *env) writeIndex(t *testing.T, method, target string, form url.Values) uint64 {
	t.Helper()
	code, body := do(t, e.url, method, target, form)
	var ans struct {
		Node struct{ ModifiedIndex uint64 }
	}
	if err := json.Unmarshal([]byte(body), &ans); err != nil || code >= 300 || ans.Node.ModifiedIndex == 0 {
		t.Fatalf("%s %s: %d %s (%v)", method, target, code, body, err)
	}
	return ans.Node.ModifiedIndex
}

// TestAWriteAtTheFollowersIndexIsCompared: a follower whose applied index
// is exactly a write's index has applied it (the last write before a quiet
// spell is the usual case): the write is compared then, matched or
// divergent, and never left to age out as dropped or lagging.
func TestAWriteAtTheFollowersIndexIsCompared(t *testing.T) {
	for _, c := range []struct {
		name string
		form url.Values
		// change: the follower's change of the key comes with its
		// progress record (a TTL write then still waits for the record).
		change bool
		v3     func(v3 *fakeStore)
		want   Counts
		recent []Divergence
	}{
		{"matched", url.Values{"value": {"2"}}, false, func(v3 *fakeStore) { v3.put("/w", "2", false, 0) },
			want(Counts{Sampled: 1, Writes: 1}), nil},
		{"divergent", url.Values{"value": {"2"}}, false, func(v3 *fakeStore) { v3.put("/w", "third", false, 0) },
			want(Counts{Sampled: 1, Writes: 1, Divergences: map[string]uint64{KindValue: 1}}),
			[]Divergence{{Key: "/w", Kind: KindValue, Method: "PUT", Where: "node.value"}}},
		{"a TTL seen, then its record", url.Values{"value": {"2"}, "ttl": {"100"}}, true,
			func(v3 *fakeStore) { v3.put("/w", "2", false, 100*time.Second) },
			want(Counts{Sampled: 1, Writes: 1}), nil},
		{"a TTL seen, divergent by its record", url.Values{"value": {"2"}, "ttl": {"100"}}, true,
			func(v3 *fakeStore) { v3.put("/w", "2", false, time.Hour) },
			want(Counts{Sampled: 1, Writes: 1, Divergences: map[string]uint64{KindTTL: 1}}),
			[]Divergence{{Key: "/w", Kind: KindTTL, Method: "PUT", Where: "node.expiration"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, f := writeEnv(t, nil)
			e.both("/w", "1", false)
			idx := e.writeIndex(t, "PUT", "/v2/keys/w", c.form)
			waitGauge(t, e, "v2bridge_shadow_pending_writes", 1)
			c.v3(e.v3)
			u := Update{HasApplied: true, Applied: idx}
			if c.change {
				u.Changes = []Change{file("/w", "2", true)}
			}
			f.send(t, u)
			e.waitCounts(t, c.want)
			e.recent(t, c.recent...)
			waitGauge(t, e, "v2bridge_shadow_follower_index", float64(idx))
			waitGauge(t, e, "v2bridge_shadow_pending_writes", 0)
			waitGauge(t, e, "v2bridge_shadow_lagging_writes", 0)
		})
	}
}

// TestAWritesTTLIsComparedInBothDirections: a v3 expiration later than the
// v2 server's is as wrong as an earlier one (after the cutover a lease
// would outlive its host); within the tolerance either way it agrees.
func TestAWritesTTLIsComparedInBothDirections(t *testing.T) {
	for _, c := range []struct {
		name  string
		v3TTL time.Duration // the v2 server's is 100 s
		kind  string        // "": agrees
	}{
		{"much longer", 200 * time.Second, KindTTL},
		{"much shorter", 50 * time.Second, KindTTL},
		{"a little longer", 102 * time.Second, ""},
		{"a little shorter", 98 * time.Second, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, f := writeEnv(t, nil)
			e.both("/w", "1", false)
			e.write(t, "PUT", "/v2/keys/w", url.Values{"value": {"2"}, "ttl": {"100"}})
			waitGauge(t, e, "v2bridge_shadow_pending_writes", 1)
			e.v3.put("/w", "2", false, c.v3TTL)
			f.send(t, Update{Changes: []Change{file("/w", "2", true)}, HasApplied: true, Applied: everything})
			if c.kind == "" {
				e.waitCounts(t, want(Counts{Sampled: 1, Writes: 1}))
				e.recent(t)
				return
			}
			e.waitCounts(t, want(Counts{Sampled: 1, Writes: 1, Divergences: map[string]uint64{c.kind: 1}}))
			e.recent(t, Divergence{Key: "/w", Kind: c.kind, Method: "PUT", Where: "node.expiration"})
		})
	}
}

// TestAReadsTTLIsComparedInBothDirections: the same for reads: the v3
// node's TTL and expiration, later or earlier than the v2 server's beyond
// the tolerance, are a TTL divergence, never lagging.
func TestAReadsTTLIsComparedInBothDirections(t *testing.T) {
	for _, c := range []struct {
		name  string
		v3TTL time.Duration // the v2 server's is an hour
		agree bool
	}{
		{"much longer", 2 * time.Hour, false},
		{"much shorter", 30 * time.Minute, false},
		{"a little longer", time.Hour + 3*time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, func(cfg *Config) { cfg.CatchUp = 200 * time.Millisecond })
			e.up.put("/t", "v", false, time.Hour)
			e.v3.put("/t", "v", false, c.v3TTL)
			do(t, e.url, "GET", "/v2/keys/t", nil)
			got := e.settle(t)
			w := want(Counts{Sampled: 1, Reads: 1})
			if !c.agree {
				w.Divergences[KindTTL] = 1
			}
			if got.Sampled != w.Sampled || got.Reads != w.Reads || got.Writes != 0 || got.Lagging != 0 ||
				got.Diverged() != w.Diverged() || got.Divergences[KindTTL] != w.Divergences[KindTTL] || got.DroppedTotal() != 0 {
				t.Fatalf("counts %+v, want %+v", got, w)
			}
		})
	}
}
