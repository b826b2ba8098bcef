// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/bridge/membership"
)

var testKeys = KeysFor("_v2bridge/")

// newBareSwitch is a switch with both sides and no write window: the agent
// opens it.
func newBareSwitch(t *testing.T) (*Switch, *fakeSide, *fakeSide) {
	t.Helper()
	pass, v3 := &fakeSide{name: "old"}, &fakeSide{name: "v3"}
	ok := func() bool { return true }
	s := NewSwitch(SwitchConfig{Passthrough: SideHandlers{API: pass, Probes: pass, Ready: ok},
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "metrics") })})
	s.SetV3(SideHandlers{API: v3, Probes: v3, Ready: ok})
	return s, pass, v3
}

// runAgent runs an agent of s on f until the test ends or the returned
// stop is called (which waits for Run to return).
func runAgent(t *testing.T, f *fakeEtcd, s *Switch, timeout time.Duration) (stop func()) {
	t.Helper()
	a := NewAgent(AgentConfig{Client: f, Keys: testKeys, Switch: s, LeaseTTL: 2 * time.Second, RequestTimeout: timeout,
		Name: "test"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Error("the agent did not stop within 10s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func registration(t *testing.T, f *fakeEtcd) *membership.Registration {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, kv := range f.kvs {
		if strings.HasPrefix(k, testKeys.Bridges) {
			var g membership.Registration
			if err := json.Unmarshal(kv.Value, &g); err != nil {
				t.Fatal(err)
			}
			return &g
		}
	}
	return nil
}

func refused(r interface{ Result() *http.Response }, cause string) bool {
	resp := r.Result()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == 500 && strings.Contains(string(body), `"errorCode":300`) && strings.Contains(string(body), cause)
}

func TestAgentOpensWritesOnlyOnceRegistered(t *testing.T) {
	f := newFakeEtcd(testKeys)
	gate := make(chan struct{})
	f.txnGate = gate
	s, pass, _ := newBareSwitch(t)
	runAgent(t, f, s, time.Second)
	waitUntil(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.leases) == 1
	})
	if st, _ := s.State(); st.Side != SidePassthrough {
		t.Fatalf("state before registering: %+v", st)
	}
	// The lease is granted, the registration not yet written: a cutover
	// listing the registrations would not wait for this bridge.
	if r := serve(s, "PUT", "/v2/keys/a"); !refused(r, "cannot renew its registration") || pass.writes.Load() != 0 {
		t.Fatalf("a write before the registration is written: %d %s", r.Code, r.Body)
	}
	close(gate)
	waitUntil(t, func() bool { return registration(t, f) != nil })
	waitUntil(t, func() bool { return serve(s, "PUT", "/v2/keys/a").Body.String() == "old" })
}

func TestAgentKeepsTheRegistrationWhileWritesAreInFlight(t *testing.T) {
	for _, c := range []struct {
		name string
		// finish: the write ends before the request timeout does.
		finish bool
	}{
		{"the write finishes: the registration goes after it", true},
		{"the write outlasts the request timeout: the registration is left to expire", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeEtcd(testKeys)
			s, pass, _ := newBareSwitch(t)
			stop := runAgent(t, f, s, 500*time.Millisecond)
			waitUntil(t, func() bool { return serve(s, "PUT", "/v2/keys/a").Body.String() == "old" })
			pass.release = make(chan struct{})
			wrote := make(chan struct{})
			go func() {
				defer close(wrote)
				serve(s, "PUT", "/v2/keys/b")
			}()
			defer func() { recv(t, "the write in flight", wrote) }()
			defer close(pass.release)
			waitUntil(t, func() bool { return pass.writes.Load() == 2 })
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				stop()
			}()
			if c.finish {
				// The shutdown has begun: the write gate is closed for good.
				waitUntil(t, func() bool {
					s.mu.Lock()
					defer s.mu.Unlock()
					return s.closed
				})
				if registration(t, f) == nil {
					t.Fatal("the registration went while a write was in flight")
				}
				if r := serve(s, "PUT", "/v2/keys/c"); r.Code != 500 {
					t.Errorf("a new write while shutting down: %d %s", r.Code, r.Body)
				}
				pass.release <- struct{}{}
				recv(t, "the agent's shutdown", stopped)
				if registration(t, f) != nil {
					t.Error("the registration outlived the bridge's shutdown")
				}
				return
			}
			recv(t, "the agent's shutdown", stopped)
			if registration(t, f) == nil {
				t.Error("the registration went while a write was still in flight")
			}
		})
	}
}

func TestAgentKeepsItsSideWhenTheRecordIsDeleted(t *testing.T) {
	for _, c := range []struct {
		name     string
		applied  *Record // nil: the bridge never saw a record
		side     Side
		write    string // who serves a write after the deletion ("": refused)
		regMode  string
		regGen   uint64
		restored *Record // written after the deletion
		after    string  // who serves a write then
	}{
		{"serving etcd v3: stays there, fenced", &Record{Mode: ModeV3, Generation: 2, WatchFloor: 100}, SideV3, "", ModeFencing, 2,
			&Record{Mode: ModeV3, Generation: 3, WatchFloor: 100}, "v3"},
		{"serving the v2 server after a rollback: stays there, fenced", &Record{Mode: ModePassthrough, Generation: 4, WatchFloor: 6},
			SidePassthrough, "", ModeFencing, 4, &Record{Mode: ModePassthrough, Generation: 5, WatchFloor: 6}, "old"},
		{"never saw a record: passthrough as before", nil, SidePassthrough, "old", ModePassthrough, 0,
			&Record{Mode: ModeV3, Generation: 1}, "v3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeEtcd(testKeys)
			if c.applied != nil {
				f.put(testKeys.Mode, string(c.applied.Encode()), 0)
			}
			s, _, _ := newBareSwitch(t)
			runAgent(t, f, s, time.Second)
			waitUntil(t, func() bool { g := registration(t, f); return g != nil && g.Mode != "" })
			if _, err := f.Delete(context.Background(), testKeys.Mode); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, func() bool {
				g := registration(t, f)
				return g != nil && g.Mode == c.regMode && g.Generation == c.regGen
			})
			if st, _ := s.State(); st.Side != c.side {
				t.Errorf("side after the deletion: %+v", st)
			}
			if c.write == "" {
				if r := serve(s, "PUT", "/v2/keys/a"); !refused(r, "was deleted") {
					t.Errorf("a write after the deletion: %d %s; want it refused", r.Code, r.Body)
				}
			} else {
				// The agent opens the write window once it has its
				// registration's answer, just after the fake etcd has it.
				waitUntil(t, func() bool { return serve(s, "PUT", "/v2/keys/a").Body.String() == c.write })
			}
			f.put(testKeys.Mode, string(c.restored.Encode()), 0)
			waitUntil(t, func() bool { g := registration(t, f); return g != nil && g.Generation == c.restored.Generation })
			waitUntil(t, func() bool { return serve(s, "PUT", "/v2/keys/a").Body.String() == c.after })
		})
	}
}

func TestAgentRenewsItsLeaseWhileWritesDrain(t *testing.T) {
	f := newFakeEtcd(testKeys)
	s, pass, _ := newBareSwitch(t)
	runAgent(t, f, s, 10*time.Second)
	waitUntil(t, func() bool { return serve(s, "PUT", "/v2/keys/a").Body.String() == "old" })
	pass.release = make(chan struct{})
	var release sync.Once
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		serve(s, "PUT", "/v2/keys/b")
	}()
	t.Cleanup(func() {
		release.Do(func() { close(pass.release) })
		recv(t, "the write in flight", wrote)
	})
	waitUntil(t, func() bool { return pass.writes.Load() == 2 })
	f.put(testKeys.Mode, string((&Record{Mode: ModeFencing, From: ModePassthrough, Generation: 1}).Encode()), 0)
	before := f.renewed()
	// A lease of 2s is renewed every 0.5s: twice more within 5s even on a
	// busy machine, unless the agent waits for the write without renewing.
	waitUntil(t, func() bool { return f.renewed() >= before+2 })
	if st, _ := s.State(); st.Mode == ModeFencing {
		t.Error("fenced with a write in flight")
	}
	release.Do(func() { close(pass.release) })
	waitUntil(t, func() bool { g := registration(t, f); return g != nil && g.Generation == 1 })
}

// lossyEtcd is fakeEtcd behind a session the test loses and gets back, as
// a bridge's v3backend.Conn: while lost, every call fails at once and every
// watch ends; live tells the agent.
type lossyEtcd struct {
	*fakeEtcd

	mu      sync.Mutex // guards everything below
	up      bool
	changed chan struct{}      // closed at the next change
	lost    context.Context    // ends at the next loss
	lose    context.CancelFunc // ends lost
	calls   []string           // every call, in order
}

var errSessionLost = errors.New("session lost")

func newLossyEtcd(f *fakeEtcd) *lossyEtcd {
	l := &lossyEtcd{fakeEtcd: f, up: true, changed: make(chan struct{})}
	l.lost, l.lose = context.WithCancel(context.Background())
	return l
}

func (l *lossyEtcd) live() (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up, l.changed
}

// set loses the session (up false) or connects a new one.
func (l *lossyEtcd) set(up bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.up = up
	if up {
		l.lost, l.lose = context.WithCancel(context.Background())
	} else {
		l.lose()
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// call notes a call; false: the session is lost, and it fails.
func (l *lossyEtcd) call(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, name)
	return l.up
}

func (l *lossyEtcd) callsSince(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls[n:]...)
}

func (l *lossyEtcd) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if !l.call("Get") {
		return nil, errSessionLost
	}
	return l.fakeEtcd.Get(ctx, key, opts...)
}

func (l *lossyEtcd) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	if !l.call("Put") {
		return nil, errSessionLost
	}
	return l.fakeEtcd.Put(ctx, key, val, opts...)
}

func (l *lossyEtcd) Txn(ctx context.Context) clientv3.Txn {
	if !l.call("Txn") {
		return lostTxn{}
	}
	return l.fakeEtcd.Txn(ctx)
}

func (l *lossyEtcd) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	if !l.call("Grant") {
		return nil, errSessionLost
	}
	return l.fakeEtcd.Grant(ctx, ttl)
}

func (l *lossyEtcd) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	if !l.call("Revoke") {
		return nil, errSessionLost
	}
	return l.fakeEtcd.Revoke(ctx, id)
}

func (l *lossyEtcd) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	if !l.call("KeepAliveOnce") {
		return nil, errSessionLost
	}
	return l.fakeEtcd.KeepAliveOnce(ctx, id)
}

// Watch ends (its channel closes) with ctx or the session.
func (l *lossyEtcd) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	out := make(chan clientv3.WatchResponse)
	if !l.call("Watch") {
		close(out)
		return out
	}
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(lost, cancel)
	in := l.fakeEtcd.Watch(ctx, key, opts...)
	go func() { // ends with ctx, which the agent's cancel or the loss ends
		defer close(out)
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case wr := <-in:
				select {
				case out <- wr:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// lostTxn is a transaction on a lost session.
type lostTxn struct{}

func (t lostTxn) If(...clientv3.Cmp) clientv3.Txn      { return t }
func (t lostTxn) Then(...clientv3.Op) clientv3.Txn     { return t }
func (t lostTxn) Else(...clientv3.Op) clientv3.Txn     { return t }
func (lostTxn) Commit() (*clientv3.TxnResponse, error) { return nil, errSessionLost }

// TestAgentWaitsForTheSessionAndRenewsItsLeaseFirst: on a bridge's checked
// session, an agent that lost it calls nothing until a new one is live,
// then at once renews the lease it kept (writes open again) rather than
// granting another.
func TestAgentWaitsForTheSessionAndRenewsItsLeaseFirst(t *testing.T) {
	f := newFakeEtcd(testKeys)
	l := newLossyEtcd(f)
	s, _, _ := newBareSwitch(t)
	a := NewAgent(AgentConfig{Client: l, Live: l.live, Keys: testKeys, Switch: s, LeaseTTL: 2 * time.Second,
		RequestTimeout: time.Second, Name: "test"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		recv(t, "the agent's end", done)
	})
	waitUntil(t, func() bool { return serve(s, "PUT", "/v2/keys/a").Body.String() == "old" })

	lostAt := len(l.callsSince(0))
	l.set(false)
	// Lost past the lease's life in the switch (its TTL less the safety):
	// writes are refused.
	waitUntil(t, func() bool { return refused(serve(s, "PUT", "/v2/keys/a"), "cannot renew its registration") })
	if calls := l.callsSince(lostAt); len(calls) > 2 {
		t.Errorf("while the session was lost the agent called %v; want at most the call that failed and a renewal due", calls)
	}
	upAt := len(l.callsSince(0))
	l.set(true)
	waitUntil(t, func() bool { return serve(s, "PUT", "/v2/keys/a").Body.String() == "old" })
	if calls := l.callsSince(upAt); len(calls) == 0 || calls[0] != "KeepAliveOnce" {
		t.Errorf("on the new session the agent called %v; want the kept lease's renewal first", calls)
	}
	f.mu.Lock()
	leases := len(f.leases)
	f.mu.Unlock()
	if leases != 1 {
		t.Errorf("%d leases after the new session; want the one kept", leases)
	}
}
