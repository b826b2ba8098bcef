// SPDX-License-Identifier: Apache-2.0

package membership_test

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/bridge/membership"
	"github.com/v2bridge/v2bridge/v2api"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// sessionLease is a Lease over a connection the test loses and gets back,
// as a bridge's checked session: a loss ends the renewals on it (not the
// lease), and Live tells.
type sessionLease struct {
	clientv3.Lease

	mu      sync.Mutex // guards the fields below
	up      bool
	changed chan struct{}   // closed at the next change of up
	lost    context.Context // ends at the next loss
	lose    context.CancelFunc
}

func (s *sessionLease) Live() (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up, s.changed
}

func (s *sessionLease) set(up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if up {
		s.lost, s.lose = context.WithCancel(context.Background())
	} else {
		s.lose()
	}
	s.up = up
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *sessionLease) KeepAlive(ctx context.Context, id clientv3.LeaseID) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	s.mu.Lock()
	lost := s.lost
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	context.AfterFunc(lost, cancel)
	return s.Lease.KeepAlive(ctx, id)
}

// TestRegistrarKeepsItsLeaseAcrossSessions: when the session the
// registration is renewed on is lost, and the next comes before the lease
// expired, the registrar renews the same lease: the bridge stays listed
// once, under the same ID.
func TestRegistrarKeepsItsLeaseAcrossSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cli := v2bridgetest.StartCluster(t, 1).MemberClient(t, 0)
	s := &sessionLease{Lease: cli.Lease, up: true, changed: make(chan struct{})}
	s.lost, s.lose = context.WithCancel(context.Background())
	r := membership.NewRegistrar(membership.RegistrarConfig{Client: s, KV: cli, Live: s.Live, Bridges: bridges,
		TTL: 10 * time.Second, RequestTimeout: time.Second, Name: "b1", Advertise: []string{"http://b1:2379"}, DataPrefix: "/x"})
	l := membership.NewMemberList(membership.MemberListConfig{Client: cli, Bridges: bridges, DataPrefix: "/x"})
	run(t, l.Run)
	run(t, r.Run)
	waitMembers(t, l, []v2api.Member{member("b1", "http://b1:2379")})
	first := read(t, cli)

	s.set(false)
	s.set(true)
	// For half the TTL: listed once, under the same ID.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if regs := read(t, cli); len(regs) != 1 || onlyID(t, regs) != onlyID(t, first) {
			t.Fatalf("registrations %v after the session changed, want %v still", regs, first)
		}
	}
	// And renewed on the new session meanwhile (a renewal every third of
	// the TTL): half the TTL after the loss, more than half is left.
	ttl, err := cli.TimeToLive(context.Background(), leaseOf(t, onlyID(t, first)))
	if err != nil || ttl.TTL <= 5 {
		t.Fatalf("the lease half its TTL after the session changed: %+v, %v; want it renewed", ttl, err)
	}
}

// onlyID is the ID of the one registration in regs.
func onlyID(t *testing.T, regs map[string]membership.Registration) string {
	t.Helper()
	if len(regs) != 1 {
		t.Fatalf("registrations %v, want one", regs)
	}
	for id := range regs {
		return id
	}
	return ""
}
