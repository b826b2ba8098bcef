// SPDX-License-Identifier: Apache-2.0

package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// learnQueue bounds the passwords waiting to be learned; more are dropped
// (the user's next request offers its password again).
const learnQueue = 16

// learnStore is what the Learner needs of the Store.
type learnStore interface {
	State() (*State, bool)
	Learn(ctx context.Context, name, password string) (changed bool, err error)
}

// Learner adopts, in dual mode, the passwords the v2 server accepts:
// the v2 auth API never shows hashes, so a password is known to etcd v3
// once a request the v2 server let through has carried it. It works
// beside the request path: a request is never slowed or failed by it, and
// credentials are never logged.
type Learner struct {
	store learnStore
	// v2ServerAuthOn asks the v2 server whether auth is enabled now: with
	// auth off, v2 accepts any password, so none is learned.
	v2ServerAuthOn func(ctx context.Context) (bool, error)
	timeout        time.Duration
	lg             *zap.Logger
	results        *prometheus.CounterVec // by result, never by name
	key            []byte                 // of the HMAC that stands for a password in memory
	queue          chan learnCredential
	wg             sync.WaitGroup // the worker

	mu      sync.Mutex        // guards learned, pending, stopped and sending on queue
	learned map[string]learnt // by user: the password last learned (or found known)
	pending map[string]bool   // users with a password queued or being learned
	stopped bool              // queue is closed
}

// learnt is a password stored: its HMAC, and the hash etcd v3 held for the
// user then. Once the hash changes (a copy from the v2 server replaced
// it, the user was made again) the password is offered again.
type learnt struct {
	mac  [32]byte
	hash string
}

type learnCredential struct {
	user, password string
	mac            [32]byte
}

// NewLearner starts a learner's worker; Stop ends it.
func NewLearner(st learnStore, v2ServerAuthOn func(context.Context) (bool, error), timeout time.Duration,
	lg *zap.Logger, reg prometheus.Registerer) *Learner {
	l := &Learner{store: st, v2ServerAuthOn: v2ServerAuthOn, timeout: timeout, lg: lg,
		key: make([]byte, 32), queue: make(chan learnCredential, learnQueue),
		learned: map[string]learnt{}, pending: map[string]bool{}}
	_, _ = rand.Read(l.key) // never fails (crypto/rand)
	l.results = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "v2bridge_auth_learned_total",
		Help: "Passwords of requests the v2 server accepted, offered to etcd v3 in dual mode, by result (learned; " +
			"known: already stored; skipped: auth off, or the user unknown; dropped: the queue was full; failed)."},
		[]string{"result"})
	if reg != nil {
		reg.MustRegister(l.results)
	}
	l.wg.Add(1)
	go l.run()
	return l
}

// Stop ends the worker once the queue is drained; later offers are
// ignored.
func (l *Learner) Stop() {
	l.mu.Lock()
	if !l.stopped {
		l.stopped = true
		close(l.queue)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// Wrap is h, offering the credentials of each keys or users/roles request
// it answers with success. Other answers prove nothing: v2 answers a
// request it cannot parse before it checks the credentials.
func (l *Learner) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pw, ok := r.BasicAuth()
		if !ok || user == "" || !checkedByV2(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&statusWatcher{ResponseWriter: w, on: func(code int) {
			if code >= 200 && code < 300 {
				l.offer(user, pw)
			}
		}}, r)
	})
}

// checkedByV2 reports whether v2 checks the credentials of a request on
// path before it answers with success (when auth is on): the keys, and the
// users and roles, which need root.
func checkedByV2(p string) bool {
	return p == "/v2/keys" || strings.HasPrefix(p, "/v2/keys/") ||
		strings.HasPrefix(p, "/v2/auth/users") || strings.HasPrefix(p, "/v2/auth/roles")
}

// offer queues a password to learn unless it was learned already or one of
// the user's is on its way; it never waits.
func (l *Learner) offer(user, password string) {
	m := hmac.New(sha256.New, l.key)
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write([]byte(password))
	var mac [32]byte
	copy(mac[:], m.Sum(nil))
	hash := ""
	if st, ok := l.store.State(); ok {
		hash = st.Users[user].Password
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if known, ok := l.learned[user]; l.stopped || l.pending[user] ||
		(ok && hmac.Equal(known.mac[:], mac[:]) && known.hash == hash) {
		return
	}
	select {
	case l.queue <- learnCredential{user: user, password: password, mac: mac}:
		l.pending[user] = true
	default:
		l.results.WithLabelValues("dropped").Inc()
	}
}

func (l *Learner) run() {
	defer l.wg.Done()
	for c := range l.queue {
		result := l.learn(c)
		l.results.WithLabelValues(result).Inc()
		l.mu.Lock()
		delete(l.pending, c.user)
		if result == "learned" || result == "known" {
			if st, ok := l.store.State(); ok { // it shows the change: Learn returns once it does
				l.learned[c.user] = learnt{mac: c.mac, hash: st.Users[c.user].Password}
			}
		}
		l.mu.Unlock()
	}
}

// learn stores c's password if auth is on on both sides and the user is
// known, and says what came of it.
func (l *Learner) learn(c learnCredential) string {
	st, ok := l.store.State()
	if !ok || !st.Enabled {
		return "skipped" // the copy of the v2 server's flag says auth is off
	}
	if _, ok := st.Users[c.user]; !ok {
		return "skipped"
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	on, err := l.v2ServerAuthOn(ctx)
	if err != nil {
		l.lg.Warn("dual mode: cannot ask the v2 server whether auth is on; a password is not learned", zap.Error(err))
		return "failed"
	}
	if !on {
		return "skipped"
	}
	changed, err := l.store.Learn(ctx, c.user, c.password)
	switch {
	case err != nil:
		l.lg.Warn("dual mode: storing a password the v2 server accepted failed", zap.Error(err))
		return "failed"
	case changed:
		l.lg.Info("dual mode: learned a user's password from a request the v2 server accepted")
		return "learned"
	}
	return "known"
}

// statusWatcher tells on the status of the answer, once, when it is sent.
type statusWatcher struct {
	http.ResponseWriter
	on   func(code int)
	done bool
}

func (w *statusWatcher) WriteHeader(code int) {
	if !w.done && code >= 200 {
		w.done = true
		w.on(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWatcher) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush keeps a relayed watch streaming.
func (w *statusWatcher) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection underneath.
func (w *statusWatcher) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// V2ServerAuthEnabled asks the v2 server, through h (the passthrough),
// whether auth is enabled: GET /v2/auth/enable, open to all in v2.
func V2ServerAuthEnabled(h http.Handler) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		r, err := http.NewRequestWithContext(ctx, http.MethodGet, "/v2/auth/enable", nil)
		if err != nil {
			return false, err
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		var en struct {
			Enabled *bool `json:"enabled"`
		}
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &en) != nil || en.Enabled == nil {
			return false, &httpStatusError{code: rec.Code}
		}
		return *en.Enabled, nil
	}
}

type httpStatusError struct{ code int }

func (e *httpStatusError) Error() string {
	return "GET /v2/auth/enable on the v2 server answered " + http.StatusText(e.code) + " without the flag"
}
