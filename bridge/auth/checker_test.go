// SPDX-License-Identifier: Apache-2.0

package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/crypto/bcrypt"
)

func mustHash(t testing.TB, pw string) string {
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

// testState: root, alice (role ops: read /app/*, write /app/w), bob
// (no roles); the guest role reads /pub/*.
func testState(t testing.TB) *State {
	return &State{Rev: 1, Enabled: true,
		Users: map[string]User{
			"root":  {User: "root", Password: mustHash(t, "rootpw"), Roles: []string{"root"}},
			"alice": {User: "alice", Password: mustHash(t, "alicepw"), Roles: []string{"ops"}},
			"bob":   {User: "bob", Password: mustHash(t, "bobpw")},
		},
		Roles: map[string]Role{
			"ops":   {Role: "ops", Permissions: perms([]string{"/app/*"}, []string{"/app/w"})},
			"guest": {Role: "guest", Permissions: perms([]string{"/pub/*"}, nil)},
		}}
}

// fixed is a State source tests swap States in.
type fixed struct {
	st *State
	ok bool
}

func (f *fixed) get() (*State, bool) { return f.st, f.ok }

func newTestChecker(t testing.TB, f *fixed, certs bool) (*Checker, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	c := NewChecker(CheckerConfig{State: f.get, ClientCertAuth: certs, Registry: reg})
	return c, reg
}

// req is a GET from addr with basic auth user:pw ("" user: no header).
func req(user, pw, addr string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/v2/keys/x", nil)
	r.RemoteAddr = addr + ":4567"
	if user != "" {
		r.SetBasicAuth(user, pw)
	}
	return r
}

func hashChecks(t *testing.T, c *Checker) uint64 {
	var m dto.Metric
	if err := c.hashDur.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func counts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "v2bridge_auth_checks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "result" {
				t.Fatalf("labels %v", m.GetLabel())
			}
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestCheckerDecisions(t *testing.T) {
	st := testState(t)
	f := &fixed{st: st, ok: true}
	c, reg := newTestChecker(t, f, false)
	const ip = "192.0.2.1"
	cases := []struct {
		name            string
		r               *http.Request
		key             string
		recursive, wrte bool
		want            Decision
	}{
		{"guest read", req("", "", ip), "/pub/a", false, false, Allow},
		{"guest recursive read", req("", "", ip), "/pub/a", true, false, Allow},
		{"guest write", req("", "", ip), "/pub/a", false, true, Deny},
		{"guest elsewhere", req("", "", ip), "/app/a", false, false, Deny},
		{"alice read", req("alice", "alicepw", ip), "/app/a", false, false, Allow},
		{"alice recursive", req("alice", "alicepw", ip), "/app/", true, false, Allow},
		{"alice write", req("alice", "alicepw", ip), "/app/a", false, true, Deny},
		{"alice exact write", req("alice", "alicepw", ip), "/app/w", false, true, Allow},
		{"alice recursive exact write", req("alice", "alicepw", ip), "/app/w", true, true, Deny},
		// A user is not the guest: alice may not read what guests may.
		{"alice pub", req("alice", "alicepw", ip), "/pub/a", false, false, Deny},
		{"bob, no roles", req("bob", "bobpw", ip), "/app/a", false, false, Deny},
		{"root", req("root", "rootpw", ip), "/any", true, true, Allow},
		{"wrong password", req("alice", "nope", "192.0.2.9"), "/pub/a", false, false, Deny},
		{"unknown user", req("carol", "x", ip), "/pub/a", false, false, Deny},
	}
	for _, tc := range cases {
		if got := c.Keys(tc.r, tc.key, tc.recursive, tc.wrte); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// A malformed Authorization header is no fall-back to the guest.
	for _, h := range []string{"Basic !!!", "Bearer abc", "Basic"} {
		r := req("", "", ip)
		r.Header.Set("Authorization", h)
		if got := c.Keys(r, "/pub/a", false, false); got != Deny {
			t.Errorf("Authorization %q: %v", h, got)
		}
	}
	// Root: only a root user's request.
	for _, tc := range []struct {
		name string
		r    *http.Request
		want Decision
	}{
		{"guest", req("", "", ip), Deny},
		{"alice", req("alice", "alicepw", ip), Deny},
		{"root wrong password", req("root", "x", "192.0.2.8"), Deny},
		{"root", req("root", "rootpw", ip), Allow},
	} {
		if got := c.Root(tc.r); got != tc.want {
			t.Errorf("Root %s: %v, want %v", tc.name, got, tc.want)
		}
	}
	want := map[string]float64{"allow": 7, "deny": 14, "throttled": 0, "unavailable": 0}
	if got := counts(t, reg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counts %v, want %v", got, want)
	}

	// No guest role: a request without credentials is denied.
	noGuest := *st
	noGuest.Roles = map[string]Role{"ops": st.Roles["ops"]}
	f.st = &noGuest
	if got := c.Keys(req("", "", ip), "/pub/a", false, false); got != Deny {
		t.Errorf("no guest role: %v", got)
	}

	// Disabled: everything passes, credentials unchecked.
	off := *st
	off.Enabled = false
	f.st = &off
	if c.Keys(req("carol", "x", ip), "/app/a", true, true) != Allow || c.Root(req("", "", ip)) != Allow {
		t.Error("disabled: denied")
	}

	// No current State: nothing is decided.
	f.st, f.ok = nil, false
	if c.Keys(req("root", "rootpw", ip), "/a", false, false) != Unavailable || c.Root(req("root", "rootpw", ip)) != Unavailable {
		t.Error("no State: decided")
	}
	if got := counts(t, reg)["unavailable"]; got != 2 {
		t.Errorf("unavailable %v", got)
	}
}

// tlsReq is a request without an Authorization header whose verified
// client certificate has common name cn.
func tlsReq(cn string) *http.Request {
	r := req("", "", "192.0.2.1")
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	ca := &x509.Certificate{Subject: pkix.Name{CommonName: "root"}}
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf, ca}}}
	return r
}

func TestCheckerClientCert(t *testing.T) {
	f := &fixed{st: testState(t), ok: true}
	c, _ := newTestChecker(t, f, true)
	if got := c.Keys(tlsReq("alice"), "/app/a", false, false); got != Allow {
		t.Errorf("alice's certificate: %v", got)
	}
	// Named by the certificate, alice is not the guest.
	if got := c.Keys(tlsReq("alice"), "/pub/a", false, false); got != Deny {
		t.Errorf("alice's certificate, guest's key: %v", got)
	}
	// A certificate naming no user: the guest; but never root, even with
	// a CA named root in the chain.
	if got := c.Keys(tlsReq("carol"), "/pub/a", false, false); got != Allow {
		t.Errorf("carol's certificate, guest's key: %v", got)
	}
	if got := c.Root(tlsReq("carol")); got != Deny {
		t.Errorf("carol's certificate, root: %v", got)
	}
	if got := c.Root(tlsReq("root")); got != Allow {
		t.Errorf("root's certificate, root: %v", got)
	}
	// An Authorization header wins over the certificate.
	r := tlsReq("root")
	r.SetBasicAuth("alice", "alicepw")
	if got := c.Root(r); got != Deny {
		t.Errorf("root's certificate, alice's password: %v", got)
	}
	// Without ClientCertAuth, certificates name nobody.
	c2, _ := newTestChecker(t, f, false)
	if got := c2.Keys(tlsReq("alice"), "/app/a", false, false); got != Deny {
		t.Errorf("no client-cert-auth, alice's certificate: %v", got)
	}
	if got := c2.Root(tlsReq("root")); got != Deny {
		t.Errorf("no client-cert-auth, root's certificate: %v", got)
	}
}

func TestCheckerCache(t *testing.T) {
	st := testState(t)
	f := &fixed{st: st, ok: true}
	c, _ := newTestChecker(t, f, false)
	const ip = "192.0.2.1"
	if c.Keys(req("alice", "alicepw", ip), "/app/a", false, false) != Allow || hashChecks(t, c) != 1 {
		t.Fatalf("first check: %d hash checks", hashChecks(t, c))
	}
	for range 5 {
		if c.Keys(req("alice", "alicepw", ip), "/app/a", false, false) != Allow {
			t.Fatal("cached check denied")
		}
	}
	if n := hashChecks(t, c); n != 1 {
		t.Fatalf("cached checks ran bcrypt: %d", n)
	}
	for cred, v := range c.cache {
		if cred.user != "alice" || v != st.Users["alice"].Password || string(cred.mac[:]) == "alicepw" {
			t.Fatalf("cache entry %+v", cred)
		}
	}
	// A new password (a new hash): the cached one no longer passes.
	changed := *st
	changed.Users = map[string]User{"alice": {User: "alice", Password: mustHash(t, "new"), Roles: []string{"ops"}}}
	f.st = &changed
	if c.Keys(req("alice", "alicepw", ip), "/app/a", false, false) != Deny {
		t.Fatal("old password passed after a change")
	}
	if c.Keys(req("alice", "new", ip), "/app/a", false, false) != Allow || hashChecks(t, c) != 3 {
		t.Fatalf("new password: %d hash checks", hashChecks(t, c))
	}
	// A deleted user: denied, cache or not.
	gone := *st
	gone.Users = map[string]User{}
	f.st = &gone
	if c.Keys(req("alice", "new", ip), "/app/a", false, false) != Deny {
		t.Fatal("deleted user passed")
	}
	// The cache is bounded.
	f.st = st
	for i := range maxCached {
		c.cache[credential{user: fmt.Sprint(i)}] = "x"
	}
	if c.Keys(req("bob", "bobpw", ip), "/app/a", false, false) != Deny || len(c.cache) != 1 {
		t.Fatalf("cache of %d after passing its bound", len(c.cache))
	}
}

func TestCheckerLimiter(t *testing.T) {
	f := &fixed{st: testState(t), ok: true}
	c, reg := newTestChecker(t, f, false)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	const attacker, other = "198.51.100.7", "203.0.113.5"
	wrong := func() Decision { return c.Keys(req("alice", "guess", attacker), "/app/a", false, false) }
	right := func(addr string) Decision { return c.Keys(req("alice", "alicepw", addr), "/app/a", false, false) }

	for i := range freeFailures {
		if wrong() != Deny || c.failing[failKey{"alice", attacker}].until != now {
			t.Fatalf("free failure %d held", i)
		}
	}
	// Each further failure holds the pair off for twice as long, up to
	// maxHold; while held off, nothing is hashed, even the right password.
	hold := firstHold
	for i := range 12 {
		checks := hashChecks(t, c)
		if wrong() != Deny || hashChecks(t, c) != checks+1 {
			t.Fatalf("failure %d: not checked", i)
		}
		if got := c.failing[failKey{"alice", attacker}].until.Sub(now); got != hold {
			t.Fatalf("failure %d: held %v, want %v", i, got, hold)
		}
		if right(attacker) != Deny || wrong() != Deny || hashChecks(t, c) != checks+1 {
			t.Fatalf("failure %d: checked while held", i)
		}
		now = now.Add(hold)
		hold = min(2*hold, maxHold)
	}
	if hold != maxHold {
		t.Fatalf("hold %v never reached the cap", hold)
	}
	// One more wrong password holds the pair off again; the real user
	// elsewhere is not.
	if wrong() != Deny || right(attacker) != Deny {
		t.Fatal("not held")
	}
	if right(other) != Allow {
		t.Fatal("the real user, elsewhere, held off")
	}
	// Now the password is cached: passes even from the held-off address,
	// and that success ends the run.
	if right(attacker) != Allow {
		t.Fatal("a cached password held off")
	}
	if _, ok := c.failing[failKey{"alice", attacker}]; ok {
		t.Fatal("a success left the run")
	}
	// A run that stops growing for maxHold after its hold starts again.
	for range freeFailures + 1 {
		wrong()
	}
	now = now.Add(firstHold + maxHold + time.Millisecond)
	if wrong() != Deny || c.failing[failKey{"alice", attacker}].n != 1 {
		t.Fatalf("run not restarted: %+v", c.failing[failKey{"alice", attacker}])
	}
	if got := counts(t, reg); got["throttled"] != 25 {
		t.Errorf("throttled %v", got)
	}

	// The limiter's memory is bounded.
	for i := range maxFailing + 100 {
		c.mu.Lock()
		c.failed(failKey{"u", fmt.Sprint(i)})
		c.mu.Unlock()
	}
	if n := len(c.failing); n > maxFailing {
		t.Fatalf("%d runs remembered", n)
	}
}

func TestCheckerHashSlots(t *testing.T) {
	f := &fixed{st: testState(t), ok: true}
	reg := prometheus.NewRegistry()
	c := NewChecker(CheckerConfig{State: f.get, Registry: reg, MaxHashChecks: 1})
	c.hashSem <- struct{}{} // the one slot is taken
	r := req("alice", "alicepw", "192.0.2.1")
	ctx, cancel := context.WithTimeout(r.Context(), 50*time.Millisecond)
	defer cancel()
	if got := c.Keys(r.WithContext(ctx), "/app/a", false, false); got != Unavailable {
		t.Fatalf("no slot: %v", got)
	}
	<-c.hashSem
	if got := c.Keys(r, "/app/a", false, false); got != Allow {
		t.Fatalf("a free slot: %v", got)
	}
}

// Concurrent wrong passwords from one address are compared one at a time,
// each in turn seeing the hold-off the ones before it earned: 200 at once
// cost as many comparisons as freeFailures+1 in a row. Meanwhile another
// address's passwords and a cached one from the same address do not wait.
func TestCheckerComparesOneAddressInTurn(t *testing.T) {
	f := &fixed{st: testState(t), ok: true}
	reg := prometheus.NewRegistry()
	c := NewChecker(CheckerConfig{State: f.get, Registry: reg, MaxHashChecks: 4})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now } // no hold runs out during the test
	const attacker, other = "198.51.100.7", "203.0.113.5"
	// Wrong guesses wait at the gate, in their comparison, until it opens.
	gate := make(chan struct{})
	var mu sync.Mutex
	guessing, mostGuessing, guesses := 0, 0, 0
	c.compare = func(hash, pw []byte) error {
		if string(pw) == "guess" {
			mu.Lock()
			guessing++
			guesses++
			mostGuessing = max(mostGuessing, guessing)
			mu.Unlock()
			<-gate
			mu.Lock()
			guessing--
			mu.Unlock()
		}
		return bcrypt.CompareHashAndPassword(hash, pw)
	}
	if c.Keys(req("bob", "bobpw", attacker), "/", false, false) != Deny { // bob may read nothing: cached, denied
		t.Fatal("bob allowed")
	}
	const n = 200
	results := make(chan Decision, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { results <- c.Keys(req("alice", "guess", attacker), "/app/a", false, false) })
	}
	// With a guess held in its comparison, the real alice elsewhere is
	// checked, and bob's cached password at the attacker's address too.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		g := guessing
		mu.Unlock()
		if g > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no guess compared")
		}
		time.Sleep(time.Millisecond)
	}
	before := hashChecks(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got := c.Keys(req("alice", "alicepw", other).WithContext(ctx), "/app/a", false, false); got != Allow {
		t.Fatalf("alice at another address: %v", got)
	}
	if hashChecks(t, c) != before+1 {
		t.Fatal("alice's password elsewhere was not compared")
	}
	if got := c.Keys(req("bob", "bobpw", attacker), "/", false, false); got != Deny || hashChecks(t, c) != before+1 {
		t.Fatalf("bob's cached password: %v, compared again", got)
	}
	close(gate)
	wg.Wait()
	close(results)
	denied := 0
	for d := range results {
		if d == Deny {
			denied++
		}
	}
	if denied != n || guesses != freeFailures+1 || mostGuessing != addrChecks {
		t.Fatalf("%d of %d denied, %d guesses compared (most at once %d); want all denied, %d compared, %d at once",
			denied, n, guesses, mostGuessing, freeFailures+1, addrChecks)
	}
	if got := counts(t, reg); got["throttled"] != n-freeFailures-1 || got["deny"] != freeFailures+1+2 || got["allow"] != 1 {
		t.Fatalf("decisions %v", got)
	}
	if len(c.turns) != 0 {
		t.Fatalf("%d addresses' turns left", len(c.turns))
	}
}

// BenchmarkCheck compares a request's check without credentials (the
// guest), with a cached credential, and with one bcrypt must verify (v2's
// cost, bcrypt.DefaultCost).
func BenchmarkCheck(b *testing.B) {
	st := testState(b)
	h, err := bcrypt.GenerateFromPassword([]byte("alicepw"), bcrypt.DefaultCost)
	if err != nil {
		b.Fatal(err)
	}
	alice := st.Users["alice"]
	alice.Password = string(h)
	st.Users["alice"] = alice
	f := &fixed{st: st, ok: true}
	c := NewChecker(CheckerConfig{State: f.get})
	for _, bc := range []struct {
		name string
		r    *http.Request
		prep func()
	}{
		{"guest", req("", "", "192.0.2.1"), func() {}},
		{"cached", req("alice", "alicepw", "192.0.2.1"), func() {}},
		{"uncached", req("alice", "alicepw", "192.0.2.1"), func() { clear(c.cache) }},
	} {
		key := "/pub/a"
		if bc.r.Header.Get("Authorization") != "" {
			key = "/app/a"
		}
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				bc.prep()
				if c.Keys(bc.r, key, false, false) != Allow {
					b.Fatal("denied")
				}
			}
		})
	}
}

// TestCheckerAwaitsTheState: without a current State, a request waits (as
// long as Await lets it) for one rather than fail at once.
func TestCheckerAwaitsTheState(t *testing.T) {
	st := testState(t)
	f := &fixed{}
	var waited time.Duration
	await := func(ctx context.Context, d time.Duration) (*State, bool) {
		waited = d
		return st, true
	}
	c := NewChecker(CheckerConfig{State: f.get, Await: await})
	if got := c.Keys(req("alice", "alicepw", "10.0.0.1:1"), "/app/a", false, false); got != Allow || waited != stateWait {
		t.Fatalf("Keys while the State is awaited: %v (waited up to %v)", got, waited)
	}
	if got := c.Root(req("alice", "alicepw", "10.0.0.1:1")); got != Deny {
		t.Fatalf("Root of alice while the State is awaited: %v", got)
	}
	c = NewChecker(CheckerConfig{State: f.get, Await: func(context.Context, time.Duration) (*State, bool) { return nil, false }})
	if got := c.Keys(req("alice", "alicepw", "10.0.0.1:1"), "/app/a", false, false); got != Unavailable {
		t.Fatalf("Keys when none comes: %v", got)
	}
}
