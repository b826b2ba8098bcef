// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestServedPrefixesSharingANameDeliverEachChangeOnce: a bridge serving
// /coreos.com/network and /coreos.com/network-v6 (one name starts with the
// other) shows a watcher of both each change once, under its own index: v2
// writes, v3 writes and TTL expiries, in either subtree; and nothing of
// /coreos.com/network-backup, which it does not serve.
func TestServedPrefixesSharingANameDeliverEachChangeOnce(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	v3 := cl.Client(t)
	ctx := ctxT(t, 2*time.Minute)
	o := patientHeartbeat
	o.Served = []string{"/coreos.com/network", "/coreos.com/network-v6"}
	u := v2bridgetest.StartBridge(t, cl.Endpoints(), o).URL

	r := do(t, "PUT", u, "/v2/keys/coreos.com/network/config", form("value", "4"))
	start := respIndex(t, r) + 1
	events := make(chan v2Answer, 100)
	for _, dir := range o.Served {
		go readStream(ctx, u+"/v2/keys"+dir+"?wait=true&recursive=true&stream=true&waitIndex="+fmt.Sprint(start), events)
	}

	type change struct {
		action, key string
		index       uint64
	}
	var want []change
	for _, dir := range []string{"/coreos.com/network", "/coreos.com/network-v6"} {
		if r := do(t, "PUT", u, "/v2/keys"+dir+"/v2", form("value", "x")); r.status != 201 {
			t.Fatalf("PUT: %d %s", r.status, r.body)
		}
		if _, err := v3.Put(ctx, dir+"/v3", "x"); err != nil {
			t.Fatal(err)
		}
		if _, err := v3.Put(ctx, "/coreos.com/network-backup/v3", "x"); err != nil {
			t.Fatal(err)
		}
		lease, err := v3.Grant(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v3.Put(ctx, dir+"/v3-ttl", "x", clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		if r := do(t, "PUT", u, "/v2/keys"+dir+"/v2-ttl", form("value", "x", "ttl", "1")); r.status != 201 {
			t.Fatalf("PUT: %d %s", r.status, r.body)
		}
		want = append(want, change{"set", dir + "/v2", 0}, change{"create", dir + "/v3", 0},
			change{"create", dir + "/v3-ttl", 0}, change{"set", dir + "/v2-ttl", 0})
	}
	expired := map[string]bool{}
	var got []change
	seen := map[uint64]bool{}
	for len(expired) < 4 {
		select {
		case a := <-events:
			if a.Node == nil {
				t.Fatalf("watch: %s", a.raw)
			}
			if seen[a.Node.ModifiedIndex] {
				t.Errorf("index %d twice: %s", a.Node.ModifiedIndex, a.raw)
			}
			seen[a.Node.ModifiedIndex] = true
			if a.Action == "expire" {
				if expired[a.Node.Key] {
					t.Errorf("%s expired twice", a.Node.Key)
				}
				expired[a.Node.Key] = true
				continue
			}
			got = append(got, change{a.Action, a.Node.Key, a.Node.ModifiedIndex})
		case <-time.After(30 * time.Second):
			t.Fatalf("expiries seen: %v; changes seen: %v", expired, got)
		}
	}
	// Anything more (a second delivery) arrives by now.
	if r := do(t, "PUT", u, "/v2/keys/coreos.com/network-v6/last", form("value", "x")); r.status != 201 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	for done := false; !done; {
		select {
		case a := <-events:
			if a.Node.Key == "/coreos.com/network-v6/last" {
				done = true
				continue
			}
			got = append(got, change{a.Action, a.Node.Key, a.Node.ModifiedIndex})
		case <-time.After(30 * time.Second):
			t.Fatal("the last write never came")
		}
	}
	// Two watches: each in index order, the two interleaved.
	slices.SortFunc(got, func(a, b change) int { return cmp.Compare(a.index, b.index) })
	for i := range got {
		got[i].index = 0
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("changes:\n%v\nwant\n%v", got, want)
	}
}
