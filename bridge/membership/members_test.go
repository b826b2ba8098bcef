// SPDX-License-Identifier: Apache-2.0

package membership_test

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/bridge/membership"
	"github.com/v2bridge/v2bridge/v2api"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

var bridges = membership.Bridges("_v2bridge/")

// waitMembers waits until l lists want (by ID), failing after 10 s.
func waitMembers(t *testing.T, l *membership.MemberList, want []v2api.Member) {
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
func putRegistration(t *testing.T, cli *clientv3.Client, lease clientv3.LeaseID, g membership.Registration) clientv3.LeaseID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if lease == 0 {
		l, err := membership.Grant(ctx, cli, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		lease = l.ID
	}
	if ok, err := membership.Put(ctx, cli, bridges, lease, g); err != nil || !ok {
		t.Fatalf("writing registration %+v: %v, %v", g, ok, err)
	}
	return lease
}

// revoke revokes leases, as their expiry would: the registrations go.
func revoke(t *testing.T, cli *clientv3.Client, leases ...clientv3.LeaseID) {
	t.Helper()
	for _, l := range leases {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.Revoke(ctx, l)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// read lists the registrations, failing the test on an error.
func read(t *testing.T, cli *clientv3.Client) map[string]membership.Registration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	regs, _, err := membership.Read(ctx, cli, bridges)
	if err != nil {
		t.Fatal(err)
	}
	return regs
}

func member(name string, urls ...string) v2api.Member {
	return v2api.Member{ID: v2api.MemberID(urls), Name: name, ClientURLs: urls}
}

// run runs f until the test ends or the returned stop is called (which
// waits for f to return).
func run(t *testing.T, f func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f(ctx)
	}()
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return stop
}

// TestMemberListFollowsRegistrations: the list is what is registered for the
// same data prefix, kept by the watch: registrations that come, change and
// go (a lease running out) show at once; those of another data prefix, of
// only-self bridges, without URLs or that do not decode never show.
func TestMemberListFollowsRegistrations(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cli := v2bridgetest.StartCluster(t, 1).MemberClient(t, 0)
	dual := putRegistration(t, cli, 0, membership.Registration{Name: "dual", Advertise: []string{"http://d:2379"}, DataPrefix: "/x", Mode: "passthrough"})
	other := putRegistration(t, cli, 0, membership.Registration{Name: "other", Advertise: []string{"http://o:2379"}, DataPrefix: "/y"})
	local := putRegistration(t, cli, 0, membership.Registration{Name: "node-local", Advertise: []string{"http://127.0.0.1:12379"}, DataPrefix: "/x", OnlySelf: true})
	bare := putRegistration(t, cli, 0, membership.Registration{Name: "no-urls", DataPrefix: "/x"})
	if _, err := cli.Put(context.Background(), bridges+"5", "not json"); err != nil {
		t.Fatal(err)
	}
	l := membership.NewMemberList(membership.MemberListConfig{Client: cli, Bridges: bridges, DataPrefix: "/x", RequestTimeout: time.Second})
	run(t, l.Run)

	waitMembers(t, l, []v2api.Member{member("dual", "http://d:2379")})
	static := putRegistration(t, cli, 0, membership.Registration{Name: "static", Advertise: []string{"http://s1:2379", "http://s2:2379"}, DataPrefix: "/x", Static: true})
	waitMembers(t, l, []v2api.Member{member("dual", "http://d:2379"), member("static", "http://s1:2379", "http://s2:2379")})
	// A rewrite (an acknowledgement) keeps the entry, with what it says now.
	putRegistration(t, cli, dual, membership.Registration{Name: "dual-renamed", Advertise: []string{"http://d:2379"}, DataPrefix: "/x", Mode: "v3"})
	waitMembers(t, l, []v2api.Member{member("dual-renamed", "http://d:2379"), member("static", "http://s1:2379", "http://s2:2379")})
	revoke(t, cli, dual, other, local, bare, static)
	waitMembers(t, l, nil)
}

// countingLease counts the renewals of the leases it keeps alive, and the
// renewals made on a stream of their own (KeepAliveOnce).
type countingLease struct {
	clientv3.Lease
	renewals, once atomic.Int64
}

func (c *countingLease) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	c.once.Add(1)
	return c.Lease.KeepAliveOnce(ctx, id)
}

// KeepAlive hands on the answers of clientv3's, counting them; its
// forwarder ends when clientv3's channel closes (its context ended, or the
// lease was lost), and the caller reads until then.
func (c *countingLease) KeepAlive(ctx context.Context, id clientv3.LeaseID) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	in, err := c.Lease.KeepAlive(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make(chan *clientv3.LeaseKeepAliveResponse)
	go func() {
		defer close(out)
		for k := range in {
			c.renewals.Add(1)
			out <- k
		}
	}()
	return out, nil
}

// TestRegistrarRegistersRenewsAndRevokes: a bridge without --v2-server
// registers as a static member on a lease of its TTL, renews it, registers
// again on a new lease when etcd lost it, and revokes it when it stops.
func TestRegistrarRegistersRenewsAndRevokes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cli := v2bridgetest.StartCluster(t, 1).MemberClient(t, 0)
	leases := &countingLease{Lease: cli.Lease}
	r := membership.NewRegistrar(membership.RegistrarConfig{Client: leases, KV: cli, Bridges: bridges, TTL: 5 * time.Second,
		RequestTimeout: time.Second, Name: "b1", Advertise: []string{"http://b1:2379"}, DataPrefix: "/x"})
	l := membership.NewMemberList(membership.MemberListConfig{Client: cli, Bridges: bridges, DataPrefix: "/x"})
	run(t, l.Run)
	stopRegistrar := run(t, r.Run)
	self := member("b1", "http://b1:2379")
	waitMembers(t, l, []v2api.Member{self})

	regs := read(t, cli)
	if len(regs) != 1 {
		t.Fatalf("registrations %+v, want one", regs)
	}
	var id string
	var g membership.Registration
	for id, g = range regs {
		break
	}
	if g.Name != "b1" || !reflect.DeepEqual(g.Advertise, []string{"http://b1:2379"}) || g.DataPrefix != "/x" ||
		!g.Static || g.OnlySelf || g.Mode != "v3" || g.Generation != 0 || g.PID == 0 || g.Started.IsZero() ||
		g.Host == "" || g.Prefix != "" || !g.Since.IsZero() {
		t.Fatalf("registration %+v", g)
	}
	lease := leaseOf(t, id)
	ttl, err := cli.TimeToLive(context.Background(), lease)
	if err != nil || ttl.GrantedTTL != 5 {
		t.Fatalf("the registration's lease: %+v, %v; want a TTL of 5 s", ttl, err)
	}
	// Renewed every third of the TTL (1.67 s), on one stream.
	deadline := time.Now().Add(10 * time.Second)
	for leases.renewals.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals after 10 s", leases.renewals.Load())
		}
		time.Sleep(10 * time.Millisecond) // poll
	}
	if n := leases.once.Load(); n != 0 {
		t.Errorf("%d renewals on a stream of their own", n)
	}
	// Lost (the bridge was cut off for longer than the TTL): it comes back
	// on a new lease.
	revoke(t, cli, lease)
	deadline = time.Now().Add(10 * time.Second)
	for {
		regs := read(t, cli)
		if _, again := regs[id]; len(regs) == 1 && !again {
			for id = range regs {
				break
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("registrations %+v 10 s after the lease was lost, want one on a new lease", regs)
		}
		time.Sleep(10 * time.Millisecond) // poll
	}
	waitMembers(t, l, []v2api.Member{self})
	// Stopped: revoked at once, not left to expire (which would take
	// 3.33 s at least: the last renewal is at most a third of the TTL old).
	stopped := time.Now()
	stopRegistrar()
	if regs := read(t, cli); len(regs) != 0 {
		t.Fatalf("registrations %+v left after the registrar stopped", regs)
	}
	if d := time.Since(stopped); d > 2500*time.Millisecond {
		t.Errorf("the registration went %v after the registrar stopped: expired, not revoked", d)
	}
	waitMembers(t, l, nil)
	if ttl, err := cli.TimeToLive(context.Background(), leaseOf(t, id)); err != nil || ttl.TTL != -1 {
		t.Fatalf("the lease after the registrar stopped: %+v, %v; want it revoked", ttl, err)
	}
}

// leaseOf is the lease of the registration of bridge id: its ID in hex
// (Key).
func leaseOf(t *testing.T, id string) clientv3.LeaseID {
	t.Helper()
	n, err := strconv.ParseInt(id, 16, 64)
	if err != nil || membership.Key(bridges, clientv3.LeaseID(n)) != bridges+id {
		t.Fatalf("bridge ID %q is not a lease in hex: %v", id, err)
	}
	return clientv3.LeaseID(n)
}
