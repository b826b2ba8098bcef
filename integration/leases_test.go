// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestTTLWritesShareLeases: TTL writes asking the same TTL within the
// pool's window (100 ms) share one lease, so 64 writers making 1,024 TTL writes cost a handful of
// lease grants, and etcd holds no more leases than were granted.
func TestTTLWritesShareLeases(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	const writers, writes = 64, 16
	ctx := ctxT(t, 60*time.Second)
	start := time.Now()
	errc := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			for i := 0; i < writes; i++ {
				r, err := v2writeResp(e.url, fmt.Sprintf("/sl/k%d", w), "x", fmt.Sprint(60+i%2))
				if err != nil || r/100 != 2 {
					errc <- fmt.Errorf("writer %d: %d %v", w, r, err)
					return
				}
			}
			errc <- nil
		}()
	}
	for w := 0; w < writers; w++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	grants := metricValue(t, e.bridge.Registry, "v2bridge_lease_grants_total")
	// Two TTLs in use, one grant per TTL per window (100 ms), with a
	// little room for a grant racing the edge.
	most := 2 * (10*took.Seconds() + 2)
	t.Logf("%d TTL writes in %v: %v lease grants", writers*writes, took.Round(time.Millisecond), grants)
	if grants < 2 || grants > most {
		t.Errorf("%v lease grants for %d TTL writes in %v, want 2…%.0f", grants, writers*writes, took, most)
	}
	leases, err := e.cluster.Client(t).Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if float64(len(leases.Leases)) > grants {
		t.Errorf("%d leases alive, more than the %v granted", len(leases.Leases), grants)
	}
}

// TestSharedLeasesKeepEveryKeysExpiry: keys sharing a lease expire no
// sooner than their TTL and at most the sharing window (plus the bridge's
// expiry check) later; a key written again moves to another lease without keeping
// the others alive; the TTL shown right after a write is the one asked for.
// So too on a bridge serving a subtree, which watches no lease record.
func TestSharedLeasesKeepEveryKeysExpiry(t *testing.T) {
	for _, o := range []v2bridgetest.Options{{}, {Served: []string{"/ex"}}} {
		t.Run(fmt.Sprintf("serving %v", o.Served), func(t *testing.T) { sharedLeasesKeepEveryKeysExpiry(t, o) })
	}
}

func sharedLeasesKeepEveryKeysExpiry(t *testing.T, o v2bridgetest.Options) {
	e := newEnv(t, o)
	const ttl = 3 * time.Second
	expired := map[string]chan time.Time{}
	for _, k := range []string{"/ex/b", "/ex/c"} {
		expired[k] = make(chan time.Time, 1)
	}
	watchExpiry := func(key string, after uint64) {
		go func() {
			ch := startWatch(t, e.url, key, "waitIndex", fmt.Sprint(after+1))
			if ev := <-ch; ev.Action == "expire" {
				expired[key] <- time.Now()
			}
		}()
	}
	wrote := map[string]time.Time{}
	var idx uint64
	for _, k := range []string{"/ex/b", "/ex/c"} {
		wrote[k] = time.Now()
		r := do(t, "PUT", e.url, "/v2/keys"+k, form("value", "1", "ttl", "3"))
		if r.status/100 != 2 {
			t.Fatalf("PUT %s: %d %s", k, r.status, r.body)
		}
		n := r.json(t)["node"].(map[string]any)
		if n["ttl"].(float64) != 3 {
			t.Errorf("PUT %s answered ttl %v, want 3", k, n["ttl"])
		}
		idx = uint64(n["modifiedIndex"].(float64))
	}
	if g := do(t, "GET", e.url, "/v2/keys/ex/c", nil).json(t)["node"].(map[string]any); g["ttl"].(float64) != 3 {
		t.Errorf("GET right after the write shows ttl %v, want 3", g["ttl"])
	}
	// /ex/b is written again a second later, with the same TTL: it moves
	// to a newer lease; /ex/c must still go at its own time.
	for time.Since(wrote["/ex/b"]) < time.Second {
		time.Sleep(10 * time.Millisecond) // wait out the sharing window
	}
	wrote["/ex/b"] = time.Now()
	r := do(t, "PUT", e.url, "/v2/keys/ex/b", form("value", "2", "ttl", "3", "prevExist", "true"))
	if r.status != 200 {
		t.Fatalf("renewal of /ex/b: %d %s", r.status, r.body)
	}
	watchExpiry("/ex/b", uint64(r.json(t)["node"].(map[string]any)["modifiedIndex"].(float64)))
	watchExpiry("/ex/c", idx)
	const late = time.Second // the sharing window (100 ms) and the expiry check (every 50 ms), with room
	for _, k := range []string{"/ex/c", "/ex/b"} {
		select {
		case at := <-expired[k]:
			lived := at.Sub(wrote[k])
			t.Logf("%s expired %v after its last write (ttl %v)", k, lived.Round(time.Millisecond), ttl)
			if lived < ttl-50*time.Millisecond || lived > ttl+late {
				t.Errorf("%s expired %v after its last write, want %v…%v", k, lived, ttl, ttl+late)
			}
		case <-time.After(ttl + late + 5*time.Second):
			t.Fatalf("%s did not expire", k)
		}
	}
}

// TestTTLWriteAfterItsSharedLeaseWasRevoked: a v3 client revokes the lease
// the bridge's TTL writes share; the next TTL write takes a new one instead
// of failing.
func TestTTLWriteAfterItsSharedLeaseWasRevoked(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	ctx := ctxT(t, 30*time.Second)
	if r, err := v2writeResp(e.url, "/rv/a", "x", "60"); err != nil || r/100 != 2 {
		t.Fatalf("first TTL write: %d %v", r, err)
	}
	cli := e.cluster.Client(t)
	g, err := cli.Get(ctx, e.bridge.Backend.Layout().DataKey("/rv/a"))
	if err != nil || len(g.Kvs) != 1 || g.Kvs[0].Lease == 0 {
		t.Fatalf("the key's lease: %v %v", g, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(g.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if r, err := v2writeResp(e.url, "/rv/b", "x", "60"); err != nil || r/100 != 2 {
		t.Fatalf("TTL write after the shared lease was revoked: %d %v", r, err)
	}
}
