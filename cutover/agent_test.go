// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/membership"
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
