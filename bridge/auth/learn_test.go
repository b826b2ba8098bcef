// SPDX-License-Identifier: Apache-2.0

package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
)

// fakeLearnStore records what it is asked to learn.
type fakeLearnStore struct {
	mu      sync.Mutex // guards st and learned
	st      *State
	learned []string // user:password, in order
}

func (f *fakeLearnStore) State() (*State, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st, f.st != nil
}

func (f *fakeLearnStore) Learn(_ context.Context, name, password string) (bool, error) {
	f.setHash(name, "hash of "+password)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.learned = append(f.learned, name+":"+password)
	return true, nil
}

// setHash stores a user's hash in a new State, as a Store does.
func (f *fakeLearnStore) setHash(name, hash string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := *f.st
	st.Users = map[string]User{}
	for k, v := range f.st.Users {
		st.Users[k] = v
	}
	u := st.Users[name]
	u.Password = hash
	st.Users[name] = u
	f.st = &st
}

func (f *fakeLearnStore) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.learned...)
}

func TestLearnerLearnsOnlyWhatTheOldServerAccepted(t *testing.T) {
	st := &fakeLearnStore{st: &State{Enabled: true, Users: map[string]User{"alice": {User: "alice"}, "root": {User: "root"}}}}
	var v2ServerOn atomic.Bool
	v2ServerOn.Store(true)
	var asked atomic.Int64
	l := NewLearner(st, func(context.Context) (bool, error) { asked.Add(1); return v2ServerOn.Load(), nil },
		5*time.Second, zap.NewNop(), nil)
	defer l.Stop()
	// The v2 server answers with the status the query names.
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.WriteHeader(code)
	}))
	send := func(target, user, pw string) {
		r := httptest.NewRequest("GET", target, nil)
		if user != "" {
			r.SetBasicAuth(user, pw)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	handled := func() float64 {
		n := 0.0
		for _, r := range []string{"learned", "known", "skipped", "dropped", "failed"} {
			n += testutil.ToFloat64(l.results.WithLabelValues(r))
		}
		return n
	}
	waitHandled := func(n float64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for handled() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%v of %v offers handled", handled(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	send("/v2/keys/a?status=401", "alice", "wrong")   // refused
	send("/v2/keys/a?status=400", "alice", "any")     // v2 parses before it checks
	send("/v2/keys/a?status=200", "", "")             // no credentials
	send("/v2/auth/enable?status=200", "alice", "x1") // open to all in v2
	send("/v2/members?status=200", "alice", "x2")     // not checked by v2
	send("/v2/keys/a?status=200", "alice", "alicepw")
	waitHandled(1)
	send("/v2/keys/b?status=201", "alice", "alicepw") // learned already: not offered again
	send("/v2/auth/users?status=200", "root", "rootpw")
	waitHandled(2)
	st.setHash("root", "") // a copy from the v2 server lost it
	send("/v2/keys/b?status=200", "alice", "alicepw")
	send("/v2/keys/b?status=200", "root", "rootpw") // offered again
	waitHandled(3)
	send("/v2/keys/a?status=200", "bob", "bobpw") // no such user in etcd v3
	waitHandled(4)
	v2ServerOn.Store(false)
	send("/v2/keys/a?status=200", "alice", "other") // the v2 server accepts anything
	waitHandled(5)
	if got, want := st.calls(), []string{"alice:alicepw", "root:rootpw", "root:rootpw"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("learned %q, want %q", got, want)
	}
	if n := testutil.ToFloat64(l.results.WithLabelValues("learned")); n != 3 {
		t.Errorf("learned counted %v times, want 3", n)
	}
	if n := testutil.ToFloat64(l.results.WithLabelValues("skipped")); n != 2 {
		t.Errorf("skipped counted %v times, want 2", n)
	}
	if n := asked.Load(); n != 4 {
		t.Errorf("the v2 server was asked %d times whether auth is on, want 4", n)
	}

	// With etcd v3's copy of the flag off, nothing is learned nor asked.
	st.mu.Lock()
	st.st = &State{Users: st.st.Users}
	st.mu.Unlock()
	v2ServerOn.Store(true)
	send("/v2/keys/a?status=200", "alice", "third")
	waitHandled(6)
	if got := st.calls(); len(got) != 3 || asked.Load() != 4 {
		t.Errorf("with auth off in etcd v3: learned %q, asked %d times", got, asked.Load())
	}
}

func TestLearnerNeverWaits(t *testing.T) {
	block := make(chan struct{})
	st := &fakeLearnStore{st: &State{Enabled: true, Users: map[string]User{}}}
	for i := range 2 * learnQueue {
		st.st.Users["u"+strconv.Itoa(i)] = User{}
	}
	l := NewLearner(st, func(ctx context.Context) (bool, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return true, nil
	}, 30*time.Second, zap.NewNop(), nil)
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }))
	start := time.Now()
	for i := range 2 * learnQueue {
		r := httptest.NewRequest("GET", "/v2/keys/a", nil)
		r.SetBasicAuth("u"+strconv.Itoa(i), "pw")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("offers took %v while the learner was stuck", d)
	}
	if n := testutil.ToFloat64(l.results.WithLabelValues("dropped")); n < learnQueue-1 {
		t.Errorf("dropped %v offers, want at least %d", n, learnQueue-1)
	}
	close(block)
	l.Stop()
	if n := len(st.calls()); n < learnQueue || n > learnQueue+1 {
		t.Errorf("learned %d, want the queue's %d (and the one in flight)", n, learnQueue)
	}
}
