// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/bridge/membership"
	"github.com/v2bridge/v2bridge/v2api"
)

// clusterOnly is a v2api.Store that knows only its cluster ID: enough for
// the member list's routes.
type clusterOnly struct{ v2api.Store }

func (clusterOnly) Meta() v2api.Meta { return v2api.Meta{ClusterID: 0xc1} }

// scopedBridge is a bridge of one key space: its data prefix and served
// subtree, registered by its dual-mode agent or its v3-mode registrar.
type scopedBridge struct {
	name, url    string
	data, served string
	dual         bool
}

// TestMembersListOnlyBridgesOfTheSameKeySpace: /v2/members and
// /v2/machines list the bridges of the same --data-prefix and
// --serve-prefix ("" and "/" being the same, all), whichever mode
// registered them (a dual-mode bridge's agent, a v3-mode bridge's
// registrar); a client syncing its endpoints never moves to a bridge that
// serves other keys.
func TestMembersListOnlyBridgesOfTheSameKeySpace(t *testing.T) {
	f := newFakeEtcd(testKeys)
	bridges := []scopedBridge{
		{"net-dual", "http://10.0.0.1:2379", "/x", "/coreos.com/network", true},
		{"net-v3", "http://10.0.0.2:2379", "/x", "/coreos.com/network", false},
		{"all-dual", "http://10.0.0.3:2379", "/x", "", true},
		{"all-v3", "http://10.0.0.4:2379", "/x", "/", false},
		{"other-data-dual", "http://10.0.0.5:2379", "/y", "/coreos.com/network", true},
		{"other-data-v3", "http://10.0.0.6:2379", "/y", "/coreos.com/network", false},
		{"sub-v3", "http://10.0.0.7:2379", "/x", "/coreos.com", false},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	lists := map[string]*membership.MemberList{}
	for _, b := range bridges {
		if b.dual {
			s, _, _ := newBareSwitch(t)
			run(NewAgent(AgentConfig{Client: f, Keys: testKeys, Switch: s, LeaseTTL: 10 * time.Second,
				RequestTimeout: time.Second, Name: b.name, Advertise: []string{b.url}, DataPrefix: b.data,
				Prefix: b.served}).Run)
		} else {
			run(membership.NewRegistrar(membership.RegistrarConfig{Client: f, KV: f, Bridges: testKeys.Bridges, TTL: 10 * time.Second,
				RequestTimeout: time.Second, Name: b.name, Advertise: []string{b.url}, DataPrefix: b.data,
				Prefix: b.served}).Run)
		}
		l := membership.NewMemberList(membership.MemberListConfig{Client: f, Bridges: testKeys.Bridges, DataPrefix: b.data, Prefix: b.served,
			RequestTimeout: time.Second})
		lists[b.name] = l
		run(l.Run)
	}
	waitRegistrations(t, f, len(bridges))

	// Who lists whom.
	same := map[string][]string{
		"net-dual": {"net-dual", "net-v3"}, "net-v3": {"net-dual", "net-v3"},
		"all-dual": {"all-dual", "all-v3"}, "all-v3": {"all-dual", "all-v3"},
		"other-data-dual": {"other-data-dual", "other-data-v3"}, "other-data-v3": {"other-data-dual", "other-data-v3"},
		"sub-v3": {"sub-v3"},
	}
	byName := map[string]scopedBridge{}
	for _, b := range bridges {
		byName[b.name] = b
	}
	for _, b := range bridges {
		t.Run(b.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			srv := v2api.New(v2api.Config{Store: clusterOnly{}, Name: b.name, AdvertiseURLs: []string{b.url},
				Members: lists[b.name], Registry: reg, Gatherer: reg})
			var want []memberEntry
			for _, n := range same[b.name] {
				o := byName[n]
				want = append(want, memberEntry{ID: strconv.FormatUint(v2api.MemberID([]string{o.url}), 16), Name: o.name,
					PeerURLs: []string{}, ClientURLs: []string{o.url}})
			}
			slices.SortFunc(want, func(a, b memberEntry) int { return compareIDs(a.ID, b.ID) })
			var machines []string
			for _, m := range want {
				machines = append(machines, m.ClientURLs...)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				got, gotMachines := listed(t, srv)
				if reflect.DeepEqual(got, want) && gotMachines == strings.Join(machines, ", ") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/v2/members %+v, /v2/machines %q;\nwant %+v, %q", got, gotMachines, want,
						strings.Join(machines, ", "))
				}
				time.Sleep(5 * time.Millisecond) // poll
			}
		})
	}
}

type memberEntry struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
}

func compareIDs(a, b string) int {
	x, _ := strconv.ParseUint(a, 16, 64)
	y, _ := strconv.ParseUint(b, 16, 64)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// listed is what srv's /v2/members and /v2/machines answer.
func listed(t *testing.T, srv *v2api.Server) ([]memberEntry, string) {
	t.Helper()
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest("GET", "/v2/members", nil))
	var ms struct {
		Members []memberEntry `json:"members"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &ms); err != nil || w.Code != 200 {
		t.Fatalf("/v2/members: %d %s (%v)", w.Code, w.Body, err)
	}
	m := httptest.NewRecorder()
	srv.ServeHTTP(m, httptest.NewRequest("GET", "/v2/machines", nil))
	if m.Code != 200 {
		t.Fatalf("/v2/machines: %d %s", m.Code, m.Body)
	}
	return ms.Members, m.Body.String()
}

// waitRegistrations waits until n bridges are registered in f.
func waitRegistrations(t *testing.T, f *fakeEtcd, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := f.Get(context.Background(), testKeys.Bridges, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bridges registered after 10 s, want %d", len(resp.Kvs), n)
		}
		time.Sleep(5 * time.Millisecond) // poll
	}
}
