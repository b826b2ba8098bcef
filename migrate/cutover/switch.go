// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// SideHandlers serve one side of a dual-mode bridge: the passthrough to the
// v2 server, or the v3-mode bridge.
type SideHandlers struct {
	// API serves the v2 API (and the bridge's own membership and probes).
	API http.Handler
	// Probes serves /health, /readyz and /livez for metrics listeners.
	Probes http.Handler
	// Ready reports whether the side can serve now.
	Ready func() bool
	// Index is the last X-Etcd-Index the side answered with (the
	// passthrough's; nil: unknown). A waitIndex at or below it was issued
	// by this side even above a rollback's watch ceiling.
	Index func() uint64
	// EndWatches ends every watch the side serves, those waiting outside
	// their handler (parked) too; their clients get the empty answer they
	// re-issue. nil: the side's watches all wait in their handlers, which
	// the switch ends by cancelling their requests.
	EndWatches func(reason string)
}

// SwitchConfig configures a Switch.
type SwitchConfig struct {
	// Passthrough is the forwarder to the v2 server; always there.
	Passthrough SideHandlers
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
	v3  atomic.Pointer[SideHandlers] // nil until the v3 side is connected
	// writeUntil is until when the bridge's registration is surely alive
	// in etcd v3 (nil: not at all); a write is served only before it. It
	// keeps the monotonic clock reading of the time.Now it was computed
	// from, so a step of the wall clock cannot stretch it.
	writeUntil atomic.Pointer[time.Time]
	fenced     atomic.Int64 // writes refused, for the metric
	// ceilingWarned is how far the v2 server's index has come towards the
	// watch ceiling, as last logged (ceilingNear, ceilingPassed); Apply
	// resets it.
	ceilingWarned atomic.Int32
	// passID is the last X-Etcd-Cluster-Id the v2 server answered with
	// (nil: none yet), presented while no cutover has recorded one.
	passID atomic.Pointer[string]

	mu    sync.Mutex // guards everything below
	st    State
	since time.Time
	// open says writes may start; closed that they never will again (the
	// bridge is shutting down); inflight counts the writes started and not
	// finished; drained is closed when inflight reaches 0 after a close.
	open     bool
	closed   bool
	inflight int
	drained  chan struct{}
	// watches are the watches in flight, each with the side serving it.
	watches map[*inflightWatch]struct{}
}

type inflightWatch struct {
	side   Side
	cancel context.CancelFunc
	served chan struct{} // closed when its side's handler has returned
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
func (s *Switch) SetV3(b SideHandlers) { s.v3.Store(&b) }

// ExtendWrites lets writes be served until t: the bridge's registration
// lease is alive in etcd v3 at least until then. t must come from time.Now
// (plus a duration), so that it keeps the monotonic clock reading.
func (s *Switch) ExtendWrites(t time.Time) {
	for {
		old := s.writeUntil.Load()
		if old != nil && !t.After(*old) || s.writeUntil.CompareAndSwap(old, &t) {
			return
		}
	}
}

// RevokeWrites stops writes at once (the registration is gone).
func (s *Switch) RevokeWrites() { s.writeUntil.Store(nil) }

// WritesUntil is until when writes may be served (zero: not now).
func (s *Switch) WritesUntil() time.Time {
	if t := s.writeUntil.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// CloseWrites closes the write gate for good (the bridge is shutting down)
// and waits until the writes in flight have finished or ctx ends.
func (s *Switch) CloseWrites(ctx context.Context) error {
	s.mu.Lock()
	s.open, s.closed = false, true
	wait := s.drainedLocked()
	s.mu.Unlock()
	if wait == nil {
		return nil
	}
	select {
	case <-wait:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the writes in flight to finish: %w", ctx.Err())
	}
}

// drainedLocked is a channel closed once no write is in flight, nil if
// none is now. s.mu must be held.
func (s *Switch) drainedLocked() chan struct{} {
	if s.inflight == 0 {
		return nil
	}
	if s.drained == nil {
		s.drained = make(chan struct{})
	}
	return s.drained
}

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
// the side changes, every watch in flight on the old side is ended: its
// request is cancelled and, once every such handler has returned (so has
// registered or parked its watch), the old side's EndWatches ends the
// watches that wait outside their handlers.
func (s *Switch) Apply(ctx context.Context, st State) error {
	s.mu.Lock()
	prev := s.st
	if prev == st {
		s.mu.Unlock()
		return nil
	}
	s.open = false
	wait := s.drainedLocked()
	s.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			// Put back what was: the caller did not change state.
			s.mu.Lock()
			s.open = prev.Writes && !s.closed
			s.mu.Unlock()
			return fmt.Errorf("waiting for the writes in flight to finish: %w", ctx.Err())
		}
	}
	s.mu.Lock()
	s.st = st
	s.open = st.Writes && !s.closed
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
	if old := s.handlers(prev.Side); old != nil && prev.Side != st.Side && old.EndWatches != nil {
		for _, w := range ended {
			select {
			case <-w.served:
			case <-ctx.Done():
			}
		}
		old.EndWatches("the bridge switched to the " + st.Side.String() + " side")
	}
	s.ceilingWarned.Store(0)
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
	b := s.handlers(st.Side)
	return b != nil && b.Ready()
}

func (s *Switch) handlers(side Side) *SideHandlers {
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
	b := s.handlers(st.Side)
	w = &clusterIDWriter{ResponseWriter: w, s: s, st: st, pass: b == nil || st.Side == SidePassthrough}
	keys := r.URL.Path == "/v2/keys" || strings.HasPrefix(r.URL.Path, "/v2/keys/")
	authAPI := isAuthAPI(r)
	if b == nil {
		switch {
		case keys:
			s.writeV2Error(w, st, translate.NewError(translate.EcodeRaftInternal, s.unavailable(st), 0))
		case authAPI:
			writeJSON(w, http.StatusInternalServerError, map[string]string{"message": s.unavailable(st)})
		case r.URL.Path == "/health":
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"health": "false"})
		default:
			// Membership, /version, /livez: the passthrough answers them
			// (it advertises the bridge itself).
			s.cfg.Passthrough.API.ServeHTTP(w, r)
		}
		return
	}
	if authAPI && r.Method != http.MethodGet && r.Method != http.MethodHead {
		// Users, roles and the flag are data the cutover copies: their
		// changes are fenced as the keys' are.
		s.serveWrite(w, r, st, b)
		return
	}
	if !keys {
		b.API.ServeHTTP(w, r)
		return
	}
	s.checkCeiling(st)
	switch r.Method {
	case http.MethodPut, http.MethodPost, http.MethodDelete:
		s.serveWrite(w, r, st, b)
	case http.MethodGet:
		if translate.IsWatchRequest(r) {
			s.serveWatch(w, r, st, b)
			return
		}
		b.API.ServeHTTP(w, r)
	default:
		b.API.ServeHTTP(w, r)
	}
}

// isAuthAPI reports whether r is a request of the v2 auth API.
func isAuthAPI(r *http.Request) bool {
	return r.URL.Path == "/v2/auth" || strings.HasPrefix(r.URL.Path, "/v2/auth/")
}

func sideIndex(b *SideHandlers) uint64 {
	if b.Index == nil {
		return 0
	}
	return b.Index()
}

// Levels of ceilingWarned.
const (
	ceilingNear   = 1
	ceilingPassed = 2
)

// CeilingHeadroom is how many more indexes the v2 server can take before
// its index reaches the watch ceiling of a rollback (0 once it has), and
// whether a ceiling applies now (serving the v2 server under one, its
// index known).
func (s *Switch) CeilingHeadroom() (uint64, bool) {
	st, _ := s.State()
	if st.Side != SidePassthrough || st.WatchCeiling == 0 {
		return 0, false
	}
	idx := sideIndex(&s.cfg.Passthrough)
	if idx == 0 {
		return 0, false
	}
	if idx >= st.WatchCeiling {
		return 0, true
	}
	return st.WatchCeiling - idx, true
}

// checkCeiling warns, once per state, when the v2 server's index comes
// within a tenth of the room a rollback left below its watch ceiling, and
// again when it passes it: from then on an index etcd v3 gave a client
// before the rollback may name a moment of the v2 server's.
func (s *Switch) checkCeiling(st State) {
	if st.Side != SidePassthrough || st.WatchCeiling == 0 || s.ceilingWarned.Load() == ceilingPassed {
		return
	}
	idx := sideIndex(&s.cfg.Passthrough)
	if idx == 0 {
		return
	}
	level := int32(0)
	switch room := (st.WatchCeiling - min(st.WatchFloor, st.WatchCeiling)) / 10; {
	case idx >= st.WatchCeiling:
		level = ceilingPassed
	case st.WatchCeiling-idx <= room:
		level = ceilingNear
	}
	for {
		old := s.ceilingWarned.Load()
		if level <= old {
			return
		}
		if s.ceilingWarned.CompareAndSwap(old, level) {
			break
		}
	}
	if level == ceilingPassed {
		s.lg.Warn("the v2 server's index has passed the watch ceiling the rollback set: a waitIndex at or below "+
			"its index is passed through, and one etcd v3 gave a client before the rollback may now name a moment "+
			"of the v2 server's; run the next cutover",
			zap.Uint64("index", idx), zap.Uint64("watch-ceiling", st.WatchCeiling), zap.Uint64("generation", st.Generation))
		return
	}
	s.lg.Warn("the v2 server's index nears the watch ceiling the rollback set: run the next cutover before it "+
		"passes it", zap.Uint64("index", idx), zap.Uint64("watch-ceiling", st.WatchCeiling),
		zap.Uint64("headroom", st.WatchCeiling-idx), zap.Uint64("generation", st.Generation))
}

func (s *Switch) unavailable(st State) string {
	if st.Side == SideUnknown {
		return "v2bridge: the bridge has not read its mode record from etcd v3 yet, so it cannot tell " +
			"whether the v2 server or etcd v3 is the authority; retry"
	}
	return "v2bridge: serving from etcd v3 (mode record generation " + strconv.FormatUint(st.Generation, 10) +
		"), which this bridge has not connected to yet; retry"
}

// serveWrite serves a write while writes are open and the registration is
// alive, bounding it by the registration's lease, and counts it in flight so
// a fence waits for it.
func (s *Switch) serveWrite(w http.ResponseWriter, r *http.Request, st State, b *SideHandlers) {
	until := s.WritesUntil()
	now := s.now()
	s.mu.Lock()
	ok := s.open && s.st == st && now.Before(until)
	if ok {
		s.inflight++
	}
	closed := s.closed
	s.mu.Unlock()
	if !ok {
		s.fenced.Add(1)
		cause := "v2bridge: a migration cutover is in progress: writes are refused until every bridge has " +
			"switched (mode record generation " + strconv.FormatUint(st.Generation, 10) + "); retry"
		switch {
		case closed:
			cause = "v2bridge: this bridge is shutting down: writes are refused; retry on another bridge"
		case st.Vanished:
			cause = "v2bridge: the mode record (generation " + strconv.FormatUint(st.Generation, 10) + ") was deleted " +
				"from etcd v3, so nothing says which side is the authority: writes are refused until an operator " +
				"writes a mode record; retry"
		case st.Writes && !now.Before(until):
			cause = "v2bridge: this bridge cannot renew its registration in etcd v3, so a cutover may have " +
				"fenced writes without it: writes are refused until it reaches etcd v3 again; retry"
		}
		if isAuthAPI(r) {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"message": cause})
		} else {
			s.writeV2Error(w, st, translate.NewError(translate.EcodeRaftInternal, cause, 0))
		}
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
// tracks the watch so a change of side ends it. A waitIndex above the watch
// ceiling but at or below the last index the side itself answered with is
// the side's own: once the v2 server's index has passed the ceiling, its
// clients' watches must go on (and the ceiling no longer tells the two
// index spaces apart, which checkCeiling warns about beforehand).
func (s *Switch) serveWatch(w http.ResponseWriter, r *http.Request, st State, b *SideHandlers) {
	if wi, err := strconv.ParseUint(r.URL.Query().Get("waitIndex"), 10, 64); err == nil && wi > 0 &&
		(wi <= st.WatchFloor || st.WatchCeiling > 0 && wi > st.WatchCeiling && wi > sideIndex(b)) {
		s.writeV2Error(w, st, translate.NewError(translate.EcodeEventIndexCleared,
			fmt.Sprintf("the requested history has been cleared [%d/%d]", st.WatchFloor+1, wi), st.WatchFloor))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	iw := &inflightWatch{side: st.Side, cancel: cancel, served: make(chan struct{})}
	defer close(iw.served)
	s.mu.Lock()
	if s.st != st { // changed since it was read: an empty 200, which clients re-issue
		s.mu.Unlock()
		s.setClusterID(w.Header(), st)
		w.WriteHeader(http.StatusOK)
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

func (s *Switch) readyz(w http.ResponseWriter) {
	st, _ := s.State()
	if !s.Ready() {
		http.Error(w, "not ready: "+s.notReady(st), http.StatusServiceUnavailable)
		return
	}
	_, _ = fmt.Fprintln(w, "ok")
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
	return "v2 server unavailable"
}

// statsSelf is the serving side's /v2/stats/self with the bridge's mode
// added: v2 clients ignore fields they do not know.
func (s *Switch) statsSelf(w http.ResponseWriter, r *http.Request) {
	st, since := s.State()
	b := s.handlers(st.Side)
	if b == nil {
		b = &s.cfg.Passthrough
	}
	rec := httptest.NewRecorder()
	b.API.ServeHTTP(rec, r)
	res := rec.Result()
	var m map[string]any
	if res.StatusCode != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &m) != nil || m == nil {
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(rec.Body.Bytes())
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
	for k, v := range res.Header {
		if k != "Content-Length" {
			w.Header()[k] = v
		}
	}
	writeJSON(w, http.StatusOK, m)
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
			b := s.handlers(st.Side)
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

// clusterID is the X-Etcd-Cluster-Id the bridge presents under st: the v2
// server's, as the cutover recorded it or, before any cutover, as the v2
// server last sent it ("" while unknown). v2 clients may take a change of
// it for a change of cluster (python-etcd raises EtcdClusterIdChanged), so
// it stays the same whichever side serves.
func (s *Switch) clusterID(st State) string {
	if st.ClusterID != "" {
		return st.ClusterID
	}
	if id := s.passID.Load(); id != nil {
		return *id
	}
	return ""
}

// setClusterID sets h's X-Etcd-Cluster-Id to the one presented, if known.
func (s *Switch) setClusterID(h http.Header, st State) {
	if id := s.clusterID(st); id != "" {
		h.Set(clusterIDHeader, id)
	}
}

const clusterIDHeader = "X-Etcd-Cluster-Id"

// clusterIDWriter replaces the X-Etcd-Cluster-Id of an answer, where the
// side sets one, by the one the switch presents; on the passthrough it first
// notes the one the v2 server sent.
type clusterIDWriter struct {
	http.ResponseWriter
	s    *Switch
	st   State
	pass bool // the answer comes from the passthrough
	done bool // the header was fixed
}

func (w *clusterIDWriter) fix() {
	if w.done {
		return
	}
	w.done = true
	h := w.Header()
	v := h.Get(clusterIDHeader)
	if v == "" {
		return
	}
	if w.pass {
		if old := w.s.passID.Load(); old == nil || *old != v {
			w.s.passID.Store(&v)
		}
	}
	w.s.setClusterID(h, w.st)
}

func (w *clusterIDWriter) WriteHeader(code int) {
	w.fix()
	w.ResponseWriter.WriteHeader(code)
}

func (w *clusterIDWriter) Write(p []byte) (int, error) {
	w.fix()
	return w.ResponseWriter.Write(p)
}

func (w *clusterIDWriter) Flush() {
	w.fix()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection underneath.
func (w *clusterIDWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Switch) writeV2Error(w http.ResponseWriter, st State, ve *translate.Error) {
	s.setClusterID(w.Header(), st)
	ve.WriteResponse(w)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
