// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestMembersOfTheSameKeySpaceInEveryMode: bridges over one etcd cluster,
// in dual mode and in v3 mode, list in /v2/members and /v2/machines those
// of the same --data-prefix and --serve-prefix only: a client syncing its
// endpoints never moves to a bridge that answers "Key not found" for its
// keys.
func TestMembersOfTheSameKeySpaceInEveryMode(t *testing.T) {
	e := newDualEnv(t)
	const net = "/coreos.com/network"
	dual := func(extra ...string) string {
		return startHealthyBridge(t, func() (string, []string, []string) {
			u := v2bridgetest.FreeURL(t)
			return u, nil, append([]string{"--v2-server", e.ref.URL, "--endpoints", e.endpoints(), "--listen-client-urls", u,
				"--mode-lease-ttl", "3s", "--request-timeout", "2s", "--log-level", "warn"}, extra...)
		}).url
	}
	v3 := func(extra ...string) string {
		return startHealthyBridge(t, func() (string, []string, []string) {
			u := v2bridgetest.FreeURL(t)
			return u, nil, append([]string{"--endpoints", e.endpoints(), "--listen-client-urls", u,
				"--mode-lease-ttl", "3s", "--log-level", "warn"}, extra...)
		}).url
	}
	all := []string{dual(), v3()}
	network := []string{dual("--serve-prefix", net), v3("--serve-prefix", net)}
	other := []string{v3("--data-prefix", "/other"), v3("--data-prefix", "/other", "--serve-prefix", net)}
	for _, group := range [][]string{all, network} {
		for _, u := range group {
			waitMembers(t, u, group)
		}
	}
	for _, u := range other {
		waitMembers(t, u, []string{u})
	}
	// Every bridge is registered by now (each lists itself): the lists
	// read once more still hold their group alone.
	for _, group := range [][]string{all, network, other[:1], other[1:]} {
		for _, u := range group {
			if got := memberURLs(t, u); strings.Join(got, " ") != strings.Join(sorted(group), " ") {
				t.Errorf("%s lists %v, want %v", u, got, sorted(group))
			}
		}
	}
}

// put writes value at target, reporting whether it was answered 2xx.
func put(ctx context.Context, target, value string) bool {
	req, err := http.NewRequestWithContext(ctx, "PUT", target, strings.NewReader(url.Values{"value": {value}}.Encode()))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r, err := httpClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	return r.StatusCode/100 == 2
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// registryTTL is the registration lease's TTL the registry test gives its
// bridges: short, so that ten of them pass quickly.
const registryTTL = 3 * time.Second

// TestRegistrationOutlivesManyLeaseTTLs: against a real etcd, whose leases
// run out by time, a live bridge stays in the other bridges' member lists
// across more than ten TTLs of its registration's lease while clients
// write through both; a bridge killed (no chance to revoke its lease)
// leaves the lists within one TTL, plus the moment etcd takes to notice
// an expired lease (it checks every 500 ms) and tell the watchers.
func TestRegistrationOutlivesManyLeaseTTLs(t *testing.T) {
	bound(t)
	cl := v2bridgetest.StartCluster(t, 1)
	v3 := cl.Client(t)
	start := func(name string) *proc {
		return startHealthyBridge(t, func() (string, []string, []string) {
			u := v2bridgetest.FreeURL(t)
			return u, nil, []string{"--endpoints", strings.Join(cl.Endpoints(), ","), "--listen-client-urls", u,
				"--name", name, "--mode-lease-ttl", registryTTL.String(), "--log-level", "warn"}
		})
	}
	a, b := start("a"), start("b")
	urls := []string{a.url, b.url}
	for _, u := range urls {
		waitMembers(t, u, urls)
	}
	// Each registration is on a lease of the TTL given.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	regs, err := v3.Get(ctx, cutover.KeysFor("_v2bridge/").Bridges, clientv3.WithPrefix())
	if err != nil || len(regs.Kvs) != 2 {
		t.Fatalf("registrations: %v %v", regs, err)
	}
	for _, kv := range regs.Kvs {
		var g struct{ Name string }
		_ = json.Unmarshal(kv.Value, &g)
		ttl, err := v3.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil || ttl.GrantedTTL != int64(registryTTL/time.Second) {
			t.Fatalf("bridge %q's registration: lease %x granted %+v (%v), want a TTL of %v", g.Name, kv.Lease, ttl, err,
				registryTTL)
		}
	}

	// Load: writers through both bridges, for more than ten TTLs, while
	// both lists are read every 100 ms.
	var wg sync.WaitGroup
	load, stop := context.WithCancel(context.Background())
	defer func() { stop(); wg.Wait() }()
	var writes sync.Map // bridge -> writes answered
	for i := range 4 {
		u := urls[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for load.Err() == nil {
				if put(load, u+fmt.Sprintf("/v2/keys/load/%d", i), fmt.Sprint(n)) {
					n++
				}
			}
			writes.Store(i, n)
		}()
	}
	until := time.Now().Add(10*registryTTL + registryTTL/2)
	polls := 0
	for time.Now().Before(until) {
		for _, u := range urls {
			if got := memberURLs(t, u); strings.Join(got, " ") != strings.Join(sorted(urls), " ") {
				t.Fatalf("after %d polls, %s lists %v, want both %v", polls, u, got, sorted(urls))
			}
		}
		polls++
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	wg.Wait()
	writes.Range(func(k, v any) bool {
		if v.(int) == 0 {
			t.Errorf("writer %v wrote nothing: no load", k)
		}
		return true
	})
	t.Logf("both bridges listed at each of %d polls over %v", polls, 10*registryTTL+registryTTL/2)

	// Killed: it cannot revoke its lease, which runs out.
	kill := time.Now()
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = <-b.done
	b.done <- err // for the cleanup
	const slack = 2 * time.Second
	var left time.Duration
	waitFor(t, registryTTL+slack+10*time.Second, "the killed bridge to leave /v2/members", func() bool {
		if got := memberURLs(t, a.url); len(got) != 1 || got[0] != a.url {
			return false
		}
		left = time.Since(kill)
		return true
	})
	if left > registryTTL+slack {
		t.Errorf("the killed bridge left /v2/members after %v, want within its TTL %v (+%v)", left, registryTTL, slack)
	}
	t.Logf("the killed bridge left after %v", left)
	waitMembers(t, a.url, []string{a.url})
}
