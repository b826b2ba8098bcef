// SPDX-License-Identifier: Apache-2.0

package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
)

// CheckerConfig configures a Checker.
type CheckerConfig struct {
	State func() (*State, bool) // Store.State
	// Await, if set, waits up to a duration for a current State while
	// State has none (Store.Current): a request then waits up to
	// stateWait for the auth data rather than fail at once.
	Await func(ctx context.Context, d time.Duration) (*State, bool)
	// ClientCertAuth: a request without an Authorization header is the
	// user its verified client certificate's common name names, as v2
	// did with --client-cert-auth.
	ClientCertAuth bool
	Logger         *zap.Logger
	// Registry, if set, gets the checker's metrics.
	Registry prometheus.Registerer
	// MaxHashChecks bounds the bcrypt comparisons run at once (0:
	// GOMAXPROCS), so a flood of wrong passwords cannot take every CPU.
	MaxHashChecks int
}

// The limits of the password checks.
const (
	// stateWait bounds a request's wait for current auth data (Await), as
	// a watch waits for the shared feed.
	stateWait = 2 * time.Second

	// maxCached bounds the verified-credential cache; past it, the cache
	// starts again empty.
	maxCached = 10000
	// freeFailures wrong passwords for a user from one client address are
	// answered as usual; each further one holds that pair off for
	// firstHold, doubling up to maxHold. While held off, a password not in
	// the cache is refused without being checked.
	freeFailures = 3
	firstHold    = 100 * time.Millisecond
	maxHold      = 30 * time.Second
	// maxFailing bounds the (user, address) pairs the limiter remembers.
	maxFailing = 10000
	// addrChecks bcrypt comparisons at most run at once for one client
	// address; its other requests wait their turn, then see what those
	// decided (a cached password, a hold-off) before any comparison of
	// their own. Concurrent guesses thus count as sequential ones.
	addrChecks = 1
)

// Checker decides requests.
type Checker struct {
	cfg     CheckerConfig
	macKey  []byte        // random per process: the cache never holds a password, nor its plain hash
	hashSem chan struct{} // a slot per bcrypt comparison running
	now     func() time.Time
	compare func(hash, password []byte) error // bcrypt's
	checks  *prometheus.CounterVec
	hashDur prometheus.Histogram

	mu      sync.Mutex                // guards cache, failing and turns
	cache   map[credential]string     // verified credential -> the hash it verified against
	failing map[failKey]*failureCount // wrong passwords by user and client address
	turns   map[string]*addrTurns     // client addresses with a password to compare
}

// addrTurns are the comparisons of one client address's passwords.
type addrTurns struct {
	sem     chan struct{} // a slot per comparison running (addrChecks)
	waiting int           // requests holding or awaiting a slot; at 0 the entry goes
}

// credential is a user and the HMAC of a password of theirs.
type credential struct {
	user string
	mac  [sha256.Size]byte
}

// failKey is a user and a client address.
type failKey struct{ user, addr string }

// failureCount is a run of n wrong passwords; a password is not checked
// before until.
type failureCount struct {
	n     int
	until time.Time
}

// NewChecker is a checker over cfg.
func NewChecker(cfg CheckerConfig) *Checker {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.MaxHashChecks <= 0 {
		cfg.MaxHashChecks = runtime.GOMAXPROCS(0)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	c := &Checker{cfg: cfg, macKey: key, hashSem: make(chan struct{}, cfg.MaxHashChecks), now: time.Now,
		compare: bcrypt.CompareHashAndPassword, turns: map[string]*addrTurns{},
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "v2bridge_auth_checks_total",
			Help: "Decisions on requests' credentials by result: allow, deny, throttled (a wrong password held off), unavailable (no current auth data)."},
			[]string{"result"}),
		hashDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "v2bridge_auth_hash_check_seconds",
			Help:    "Time of the bcrypt comparisons of passwords not in the verified-credential cache.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		cache: map[credential]string{}, failing: map[failKey]*failureCount{}}
	for _, r := range []string{"allow", "deny", "throttled", "unavailable"} {
		c.checks.WithLabelValues(r)
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(c.checks, c.hashDur)
	}
	return c
}

// Keys decides a /v2/keys request on key (the path after /v2/keys, as the
// client sent it).
func (c *Checker) Keys(r *http.Request, key string, recursive, write bool) Decision {
	return c.count(c.decide(r, true, func(st *State, user *User) bool { return st.Allowed(user, key, recursive, write) }))
}

// Root decides a request of the auth API that needs root.
func (c *Checker) Root(r *http.Request) Decision {
	return c.count(c.decide(r, false, func(st *State, user *User) bool { return st.IsRoot(user) }))
}

// decide decides r on the current State: with auth off, allowed; else
// for the request's user (the guest, nil, if guest and r has no
// credentials), allowed if allowed says so.
func (c *Checker) decide(r *http.Request, guest bool, allowed func(*State, *User) bool) (Decision, string) {
	st, ok := c.state(r.Context())
	if !ok {
		return Unavailable, "unavailable"
	}
	if !st.Enabled {
		return Allow, "allow"
	}
	user, d, why := c.user(r, st, guest)
	if d != Allow {
		return d, why
	}
	if !allowed(st, user) {
		return Deny, "deny"
	}
	return Allow, "allow"
}

// state is the current State, awaited up to stateWait if Await is set.
func (c *Checker) state(ctx context.Context) (*State, bool) {
	st, ok := c.cfg.State()
	if !ok && c.cfg.Await != nil {
		st, ok = c.cfg.Await(ctx, stateWait)
	}
	return st, ok
}

func (c *Checker) count(d Decision, result string) Decision {
	c.checks.WithLabelValues(result).Inc()
	return d
}

// user is the request's user, as v2 found it: with no Authorization
// header, the user its client certificate names (with ClientCertAuth), else
// the guest (nil) if guest; with one, the user whose password it carries.
// Any other request is denied.
func (c *Checker) user(r *http.Request, st *State, guest bool) (*User, Decision, string) {
	if r.Header.Get("Authorization") == "" {
		if c.cfg.ClientCertAuth {
			if u := certUser(r, st); u != nil {
				return u, Allow, ""
			}
		}
		if guest {
			return nil, Allow, ""
		}
		return nil, Deny, "deny"
	}
	name, password, ok := r.BasicAuth()
	if !ok {
		return nil, Deny, "deny"
	}
	u, ok := st.Users[name]
	if !ok {
		return nil, Deny, "deny"
	}
	d, why := c.password(r.Context(), name, password, u.Password, clientAddr(r))
	if d != Allow {
		return nil, d, why
	}
	return &u, Allow, ""
}

// certUser is the user the request's verified client certificate names by
// its common name, if there is one. Only the client's own certificate
// counts, never a CA's of its chain.
func certUser(r *http.Request, st *State) *User {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return nil
	}
	u, ok := st.Users[r.TLS.VerifiedChains[0][0].Subject.CommonName]
	if !ok {
		return nil
	}
	return &u
}

// clientAddr is the request's client IP address.
func clientAddr(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// password decides whether password is user's, whose stored hash is hash,
// for a request from addr: at once if the cache says so (whatever the
// limiter holds) or the limiter holds this user and address off; else, in
// addr's turn (addrChecks at once), by the same two, then by bcrypt in one
// of MaxHashChecks slots.
func (c *Checker) password(ctx context.Context, user, password, hash, addr string) (Decision, string) {
	cred := credential{user: user}
	m := hmac.New(sha256.New, c.macKey)
	m.Write([]byte(password))
	m.Sum(cred.mac[:0])
	fk := failKey{user, addr}

	if d, why, ok := c.known(cred, fk, hash); ok {
		return d, why
	}
	done, ok := c.turn(ctx, addr)
	if !ok {
		return Unavailable, "unavailable"
	}
	defer done() // after the outcome is recorded: the next in turn sees it
	if d, why, ok := c.known(cred, fk, hash); ok {
		return d, why
	}
	select {
	case c.hashSem <- struct{}{}:
	case <-ctx.Done():
		return Unavailable, "unavailable"
	}
	start := time.Now()
	err := c.compare([]byte(hash), []byte(password))
	c.hashDur.Observe(time.Since(start).Seconds())
	<-c.hashSem

	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		if len(c.cache) >= maxCached {
			clear(c.cache)
		}
		c.cache[cred] = hash
		delete(c.failing, fk)
		return Allow, "allow"
	}
	c.failed(fk)
	c.cfg.Logger.Debug("auth: a wrong password", zap.String("client", addr))
	return Deny, "deny"
}

// known decides cred without bcrypt if it can: allowed if the cache holds
// it for hash (ending fk's run of failures), refused while fk is held off.
func (c *Checker) known(cred credential, fk failKey, hash string) (Decision, string, bool) {
	c.mu.Lock()
	verified, cached := c.cache[cred]
	f := c.failing[fk]
	held := f != nil && c.now().Before(f.until)
	c.mu.Unlock()
	if cached && subtle.ConstantTimeCompare([]byte(verified), []byte(hash)) == 1 {
		if f != nil { // a success ends the run
			c.mu.Lock()
			delete(c.failing, fk)
			c.mu.Unlock()
		}
		return Allow, "allow", true
	}
	if held {
		return Deny, "throttled", true
	}
	return Deny, "", false
}

// turn waits for one of addr's addrChecks slots, or for ctx to end (false);
// done gives the slot back.
func (c *Checker) turn(ctx context.Context, addr string) (done func(), ok bool) {
	c.mu.Lock()
	t := c.turns[addr]
	if t == nil {
		t = &addrTurns{sem: make(chan struct{}, addrChecks)}
		c.turns[addr] = t
	}
	t.waiting++
	c.mu.Unlock()
	leave := func() {
		c.mu.Lock()
		if t.waiting--; t.waiting == 0 {
			delete(c.turns, addr)
		}
		c.mu.Unlock()
	}
	select {
	case t.sem <- struct{}{}:
		return func() { <-t.sem; leave() }, true
	case <-ctx.Done():
		leave()
		return nil, false
	}
}

// failed counts a wrong password for fk, and holds fk off past
// freeFailures. A run that has not grown for maxHold after its hold ended
// starts again. c.mu is held.
func (c *Checker) failed(fk failKey) {
	now := c.now()
	f := c.failing[fk]
	if f != nil && now.Sub(f.until) > maxHold {
		f = nil
	}
	if f == nil {
		if len(c.failing) >= maxFailing {
			c.forget(now)
		}
		f = &failureCount{}
		c.failing[fk] = f
	}
	f.n++
	f.until = now
	if f.n > freeFailures {
		hold := maxHold
		if shift := f.n - freeFailures - 1; shift < 16 {
			hold = min(maxHold, firstHold<<shift)
		}
		f.until = now.Add(hold)
	}
}

// forget drops the runs that have ended, and if none has, one run: the
// limiter's memory stays bounded, at worst forgetting a run early. c.mu is
// held.
func (c *Checker) forget(now time.Time) {
	for k, f := range c.failing {
		if now.Sub(f.until) > maxHold {
			delete(c.failing, k)
		}
	}
	for k := range c.failing {
		if len(c.failing) < maxFailing {
			break
		}
		delete(c.failing, k)
	}
}
