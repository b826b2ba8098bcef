// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// Backend is one side a dual-mode bridge serves from: the passthrough to the
// old server, or the v3-mode bridge.
type Backend struct {
	// API serves the v2 API (and the bridge's own membership and probes).
	API http.Handler
	// Probes serves /health, /readyz and /livez for metrics listeners.
	Probes http.Handler
	// Ready reports whether the side can serve now.
	Ready func() bool
}

// SwitchConfig configures a Switch.
type SwitchConfig struct {
	// Passthrough is the forwarder to the old server; always there.
	Passthrough Backend
	// Metrics serves /metrics (every side's metrics).
	Metrics http.Handler
	Logger  *zap.Logger
	// OnChange is called after every change of state (for metrics).
	OnChange func(st State, since time.Time)
	// Now is the clock (tests); time.Now by default.
	Now func() time.Time
}

// Switch is the handler a dual-mode bridge serves through: it sends each
// request to the side the mode record names, refuses writes while fenced or
// while the bridge cannot prove its registration alive, answers a waitIndex
// issued by the other side with 401, and ends the watches in flight when
// the side changes, so their clients re-issue them to the new side.
type Switch struct {
	cfg SwitchConfig
	lg  *zap.Logger
	now func() time.Time
	v3  atomic.Pointer[Backend] // nil until the v3 side is connected
	// writeUntil (unix ns) is until when the bridge's registration is
	// surely alive in etcd v3; a write is served only before it.
	writeUntil atomic.Int64
	fenced     atomic.Int64 // writes refused, for the metric

	mu    sync.Mutex // guards everything below
	st    State
	since time.Time
	// open says writes may start; inflight counts the writes started and
	// not finished; drained is closed when inflight reaches 0 after a
	// close.
	open     bool
	inflight int
	drained  chan struct{}
	// watches are the watches in flight, each with the side serving it.
	watches map[*inflightWatch]struct{}
}

type inflightWatch struct {
	side   Side
	cancel context.CancelFunc
}

// NewSwitch is a switch in the Unknown state: it serves nothing until the
// first Apply.
func NewSwitch(cfg SwitchConfig) *Switch {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Switch{cfg: cfg, lg: cfg.Logger, now: cfg.Now, watches: map[*inflightWatch]struct{}{}, since: cfg.Now()}
}

// SetV3 hands the switch the v3 side once it is connected.
func (s *Switch) SetV3(b Backend) { s.v3.Store(&b) }

// ExtendWrites lets writes be served until t: the bridge's registration
// lease is alive in etcd v3 at least until then.
func (s *Switch) ExtendWrites(t time.Time) {
	for {
		old := s.writeUntil.Load()
		if t.UnixNano() <= old || s.writeUntil.CompareAndSwap(old, t.UnixNano()) {
			return
		}
	}
}

// RevokeWrites stops writes at once (the registration is gone).
func (s *Switch) RevokeWrites() { s.writeUntil.Store(0) }

// State is the state the switch serves in, and since when it serves from
// its side.
func (s *Switch) State() (State, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st, s.since
}

// FencedWrites is the number of writes refused so far.
func (s *Switch) FencedWrites() int64 { return s.fenced.Load() }

// Apply moves the switch to st. Leaving a state that serves writes, it
// first stops new writes and waits for those in flight to finish (each is
// bounded by its deadline), so once Apply returns no write of the old state
// can still land: that is what the bridge's acknowledgement promises. When
// the side changes, every watch in flight on the old side is ended.
func (s *Switch) Apply(ctx context.Context, st State) error {
	s.mu.Lock()
	prev := s.st
	if prev == st {
		s.mu.Unlock()
		return nil
	}
	s.open = false
	var wait chan struct{}
	if s.inflight > 0 {
		if s.drained == nil {
			s.drained = make(chan struct{})
		}
		wait = s.drained
	}
	s.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			// Put back what was: the caller did not change state.
			s.mu.Lock()
			s.open = prev.Writes
			s.mu.Unlock()
			return fmt.Errorf("waiting for the writes in flight to finish: %w", ctx.Err())
		}
	}
	s.mu.Lock()
	s.st = st
	s.open = st.Writes
	if prev.Side != st.Side {
		s.since = s.now()
	}
	var ended []*inflightWatch
	for w := range s.watches {
		if w.side != st.Side {
			ended = append(ended, w)
			delete(s.watches, w)
		}
	}
	since := s.since
	s.mu.Unlock()
	for _, w := range ended {
		w.cancel()
	}
	s.lg.Info("serving mode changed", zap.String("mode", st.Mode), zap.String("side", st.Side.String()),
		zap.Bool("writes", st.Writes), zap.Uint64("generation", st.Generation), zap.Uint64("watch-floor", st.WatchFloor),
		zap.String("previous-mode", prev.Mode), zap.Int("watches-ended", len(ended)))
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(st, since)
	}
	return nil
}

// Ready reports whether the bridge knows its mode and its side can serve.
func (s *Switch) Ready() bool {
	st, _ := s.State()
	b := s.backend(st.Side)
	return b != nil && b.Ready()
}

func (s *Switch) backend(side Side) *Backend {
	switch side {
	case SidePassthrough:
		return &s.cfg.Passthrough
	case SideV3:
		return s.v3.Load()
	}
	return nil
}

// ServeHTTP routes a request to the side the record names.
func (s *Switch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/metrics":
		s.cfg.Metrics.ServeHTTP(w, r)
		return
	case "/readyz":
		s.readyz(w)
		return
	case "/v2/stats/self":
		s.statsSelf(w, r)
		return
	}
	st, _ := s.State()
	b := s.backend(st.Side)
	keys := r.URL.Path == "/v2/keys" || strings.HasPrefix(r.URL.Path, "/v2/keys/")
	if b == nil {
		switch {
		case keys:
			writeV2Error(w, translate.NewError(translate.EcodeRaftInternal, s.unavailable(st), 0))
		case r.URL.Path == "/health":
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"health": "false"})
		default:
			// Membership, /version, /livez: the passthrough answers them
			// (it advertises the bridge itself).
			s.cfg.Passthrough.API.ServeHTTP(w, r)
		}
		return
	}
	if !keys {
		b.API.ServeHTTP(w, r)
		return
	}
	switch r.Method {
	case http.MethodPut, http.MethodPost, http.MethodDelete:
		s.serveWrite(w, r, st, b)
	case http.MethodGet:
		if isWatch(r) {
			s.serveWatch(w, r, st, b)
			return
		}
		b.API.ServeHTTP(w, r)
	default:
		b.API.ServeHTTP(w, r)
	}
}

func (s *Switch) unavailable(st State) string {
	if st.Side == SideUnknown {
		return "v2bridge: the bridge has not read its mode record from etcd v3 yet, so it cannot tell " +
			"whether the old v2 server or etcd v3 is the authority; retry"
	}
	return "v2bridge: serving from etcd v3 (mode record generation " + strconv.FormatUint(st.Generation, 10) +
		"), which this bridge has not connected to yet; retry"
}

// serveWrite serves a write while writes are open and the registration is
// alive, bounding it by the registration's lease, and counts it in flight so
// a fence waits for it.
func (s *Switch) serveWrite(w http.ResponseWriter, r *http.Request, st State, b *Backend) {
	until := time.Unix(0, s.writeUntil.Load())
	now := s.now()
	s.mu.Lock()
	ok := s.open && s.st == st && now.Before(until)
	if ok {
		s.inflight++
	}
	s.mu.Unlock()
	if !ok {
		s.fenced.Add(1)
		cause := "v2bridge: a migration cutover is in progress: writes are refused until every bridge has " +
			"switched (mode record generation " + strconv.FormatUint(st.Generation, 10) + "); retry"
		if st.Writes && !now.Before(until) {
			cause = "v2bridge: this bridge cannot renew its registration in etcd v3, so a cutover may have " +
				"fenced writes without it: writes are refused until it reaches etcd v3 again; retry"
		}
		writeV2Error(w, translate.NewError(translate.EcodeRaftInternal, cause, 0))
		return
	}
	defer s.doneWrite()
	// A write must not land after the registration may have lapsed.
	ctx, cancel := context.WithDeadline(r.Context(), until)
	defer cancel()
	b.API.ServeHTTP(w, r.WithContext(ctx))
}

func (s *Switch) doneWrite() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if s.inflight == 0 && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

// serveWatch refuses a waitIndex from the other side's index space and
// tracks the watch so a change of side ends it.
func (s *Switch) serveWatch(w http.ResponseWriter, r *http.Request, st State, b *Backend) {
	if wi, err := strconv.ParseUint(r.URL.Query().Get("waitIndex"), 10, 64); err == nil && wi > 0 &&
		(wi <= st.WatchFloor || st.WatchCeiling > 0 && wi > st.WatchCeiling) {
		writeV2Error(w, translate.NewError(translate.EcodeEventIndexCleared,
			fmt.Sprintf("the requested history has been cleared [%d/%d]", st.WatchFloor+1, wi), st.WatchFloor))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	iw := &inflightWatch{side: st.Side, cancel: cancel}
	s.mu.Lock()
	if s.st != st { // changed since it was read: let the client ask again
		s.mu.Unlock()
		return
	}
	s.watches[iw] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watches, iw)
		s.mu.Unlock()
	}()
	b.API.ServeHTTP(w, r.WithContext(ctx))
}

// Watches is the number of watches in flight through the switch.
func (s *Switch) Watches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watches)
}

// isWatch is v2's rule: GET with wait=true, unless quorum=true (which makes
// it a plain read).
func isWatch(r *http.Request) bool {
	q := r.URL.Query()
	wait, _ := strconv.ParseBool(q.Get("wait"))
	quorum, _ := strconv.ParseBool(q.Get("quorum"))
	return wait && !quorum
}

func (s *Switch) readyz(w http.ResponseWriter) {
	st, _ := s.State()
	if !s.Ready() {
		http.Error(w, "not ready: "+s.notReady(st), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (s *Switch) notReady(st State) string {
	switch st.Side {
	case SideUnknown:
		return "mode record not read from etcd v3 yet"
	case SideV3:
		if s.v3.Load() == nil {
			return "serving from etcd v3, not connected yet"
		}
		return "etcd v3 backend or its watch unavailable"
	}
	return "v2 upstream unavailable"
}

// statsSelf is the serving side's /v2/stats/self with the bridge's mode
// added: v2 clients ignore fields they do not know.
func (s *Switch) statsSelf(w http.ResponseWriter, r *http.Request) {
	st, since := s.State()
	b := s.backend(st.Side)
	if b == nil {
		b = &s.cfg.Passthrough
	}
	rec := &captureWriter{header: http.Header{}}
	b.API.ServeHTTP(rec, r)
	var m map[string]any
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status != http.StatusOK || json.Unmarshal(rec.body.Bytes(), &m) != nil || m == nil {
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
		return
	}
	mode := st.Mode
	if mode == "" {
		mode = "unknown"
	}
	m["v2bridgeMode"] = mode
	m["v2bridgeSide"] = st.Side.String()
	m["v2bridgeModeSince"] = since.UTC()
	m["v2bridgeModeGeneration"] = st.Generation
	m["v2bridgeWrites"] = st.Writes
	for k, v := range rec.header {
		if k != "Content-Length" {
			w.Header()[k] = v
		}
	}
	writeJSON(w, http.StatusOK, m)
}

// captureWriter keeps an answer to rewrite it.
type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *captureWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(p)
}

// MetricsHandler serves /metrics and the probes of the serving side, for
// metrics listeners.
func (s *Switch) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			s.cfg.Metrics.ServeHTTP(w, r)
		case "/readyz":
			s.readyz(w)
		default:
			st, _ := s.State()
			b := s.backend(st.Side)
			if b == nil {
				if r.URL.Path == "/health" {
					writeJSON(w, http.StatusServiceUnavailable, map[string]string{"health": "false"})
					return
				}
				b = &s.cfg.Passthrough
			}
			b.Probes.ServeHTTP(w, r)
		}
	})
}

func writeV2Error(w http.ResponseWriter, ve *translate.Error) {
	w.Header().Set("X-Etcd-Index", strconv.FormatUint(ve.Index, 10))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ve.StatusCode())
	_, _ = w.Write(ve.JSON())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
