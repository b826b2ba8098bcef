// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/v2api"
)

// waitMembers waits until l lists want (by ID), failing after 10 s.
func waitMembers(t *testing.T, l *MemberList, want []v2api.Member) {
	t.Helper()
	sortByID := func(ms []v2api.Member) []v2api.Member {
		ms = slices.Clone(ms)
		slices.SortFunc(ms, func(a, b v2api.Member) int {
			if a.ID < b.ID {
				return -1
			}
			if a.ID > b.ID {
				return 1
			}
			return 0
		})
		return ms
	}
	want = sortByID(want)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := sortByID(l.Members())
		if reflect.DeepEqual(got, want) || len(got) == 0 && len(want) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("members %+v, want %+v", got, want)
		}
		time.Sleep(5 * time.Millisecond) // poll
	}
}

// putRegistration writes g on lease (0: a new one), as an agent or a
// registrar would; it returns the lease.
func putRegistration(t *testing.T, f *fakeEtcd, lease clientv3.LeaseID, g Registration) clientv3.LeaseID {
	t.Helper()
	if lease == 0 {
		l, err := f.Grant(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		lease = l.ID
	}
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	f.put(testKeys.Bridges+strconv.FormatInt(int64(lease), 16), string(b), int64(lease))
	return lease
}

func member(name string, urls ...string) v2api.Member {
	return v2api.Member{ID: v2api.MemberID(urls), Name: name, ClientURLs: urls}
}

// TestMemberListFollowsRegistrations: the list is what is registered for the
// same data prefix, kept by the watch: registrations that come, change and
// go (a lease running out) show at once; those of another data prefix, of
// only-self bridges, without URLs or that do not decode never show.
func TestMemberListFollowsRegistrations(t *testing.T) {
	f := newFakeEtcd(testKeys)
	dual := putRegistration(t, f, 0, Registration{Name: "dual", Advertise: []string{"http://d:2379"}, DataPrefix: "/x", Mode: ModePassthrough})
	putRegistration(t, f, 0, Registration{Name: "other", Advertise: []string{"http://o:2379"}, DataPrefix: "/y"})
	putRegistration(t, f, 0, Registration{Name: "node-local", Advertise: []string{"http://127.0.0.1:12379"}, DataPrefix: "/x", OnlySelf: true})
	putRegistration(t, f, 0, Registration{Name: "no-urls", DataPrefix: "/x"})
	f.put(testKeys.Bridges+"5", "not json", 0)
	l := NewMemberList(MemberListConfig{Client: f, Keys: testKeys, DataPrefix: "/x", RequestTimeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.Run(ctx)
	}()
	defer func() { cancel(); wg.Wait() }()

	waitMembers(t, l, []v2api.Member{member("dual", "http://d:2379")})
	putRegistration(t, f, 0, Registration{Name: "static", Advertise: []string{"http://s1:2379", "http://s2:2379"}, DataPrefix: "/x", Static: true})
	waitMembers(t, l, []v2api.Member{member("dual", "http://d:2379"), member("static", "http://s1:2379", "http://s2:2379")})
	// A rewrite (an acknowledgement) keeps the entry, with what it says now.
	putRegistration(t, f, dual, Registration{Name: "dual-renamed", Advertise: []string{"http://d:2379"}, DataPrefix: "/x", Mode: ModeV3})
	waitMembers(t, l, []v2api.Member{member("dual-renamed", "http://d:2379"), member("static", "http://s1:2379", "http://s2:2379")})
	f.expire()
	waitMembers(t, l, nil)
}

// TestRegistrarRegistersRenewsAndRevokes: a bridge without --v2-upstream
// registers as a static member on a lease of its TTL, renews it, registers
// again on a new lease when etcd lost it, and revokes it when it stops.
func TestRegistrarRegistersRenewsAndRevokes(t *testing.T) {
	f := newFakeEtcd(testKeys)
	r := NewRegistrar(RegistrarConfig{Client: f, KV: f, Keys: testKeys, TTL: 2 * time.Second,
		RequestTimeout: time.Second, Name: "b1", Advertise: []string{"http://b1:2379"}, DataPrefix: "/x"})
	l := NewMemberList(MemberListConfig{Client: f, Keys: testKeys, DataPrefix: "/x"})
	ctx, cancel := context.WithCancel(context.Background())
	rctx, rcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		l.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		r.Run(rctx)
	}()
	defer func() { rcancel(); cancel(); wg.Wait() }()
	self := member("b1", "http://b1:2379")
	waitMembers(t, l, []v2api.Member{self})

	regs := func() []Registration {
		resp, err := f.Get(context.Background(), testKeys.Bridges, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var out []Registration
		for _, kv := range resp.Kvs {
			var g Registration
			if err := json.Unmarshal(kv.Value, &g); err != nil {
				t.Fatal(err)
			}
			out = append(out, g)
		}
		return out
	}
	gs := regs()
	if len(gs) != 1 {
		t.Fatalf("registrations %+v, want one", gs)
	}
	g := gs[0]
	if g.Name != "b1" || !reflect.DeepEqual(g.Advertise, []string{"http://b1:2379"}) || g.DataPrefix != "/x" ||
		!g.Static || g.OnlySelf || g.Mode != ModeV3 || g.Generation != 0 || g.PID == 0 || g.Started.IsZero() {
		t.Fatalf("registration %+v", g)
	}
	f.mu.Lock()
	ttls := make([]int64, 0, len(f.leases))
	for _, ttl := range f.leases {
		ttls = append(ttls, ttl)
	}
	f.mu.Unlock()
	if !reflect.DeepEqual(ttls, []int64{2}) {
		t.Fatalf("lease TTLs %v, want [2]", ttls)
	}
	// Renewed every quarter TTL (0.5 s).
	deadline := time.Now().Add(10 * time.Second)
	for f.renewed() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals after 10 s", f.renewed())
		}
		time.Sleep(10 * time.Millisecond) // poll
	}
	// Lost (the bridge was cut off for longer than the TTL): it comes back.
	f.expire()
	deadline = time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.leases)
		f.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d leases 10 s after the lease was lost, want a new one", n)
		}
		time.Sleep(10 * time.Millisecond) // poll
	}
	waitMembers(t, l, []v2api.Member{self})
	// Stopped: revoked at once, not left to expire.
	rcancel()
	waitMembers(t, l, nil)
	f.mu.Lock()
	n := len(f.leases)
	f.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d leases left after the registrar stopped", n)
	}
}

// TestCutoverWaitsOnlyForDualModeBridges: a static registration (a bridge
// serving etcd v3 alone) is not a bridge the cutover waits for.
func TestCutoverWaitsOnlyForDualModeBridges(t *testing.T) {
	f := newFakeEtcd(testKeys)
	dual := putRegistration(t, f, 0, Registration{Name: "dual", Advertise: []string{"http://d:2379"}, Mode: ModePassthrough})
	putRegistration(t, f, 0, Registration{Name: "static", Advertise: []string{"http://s:2379"}, Mode: ModeV3, Static: true})
	o, _ := testOptions(t, f, nil)
	regs, err := o.registrations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Registration{strconv.FormatInt(int64(dual), 16): {Name: "dual", Advertise: []string{"http://d:2379"}, Mode: ModePassthrough}}
	if !reflect.DeepEqual(regs, want) {
		t.Fatalf("registrations %+v, want %+v", regs, want)
	}
}
