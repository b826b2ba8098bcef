// SPDX-License-Identifier: Apache-2.0

// Package v2api is the etcd v2 HTTP surface of the bridge: it parses v2
// requests, hands them to a Store, and writes v2's JSON, headers and errors.
package v2api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/detach"
	"github.com/v2bridge/v2bridge/translate"
)

// Meta is what a response's headers report besides the index: the identity
// of the cluster and member that answered, and the raft term.
type Meta struct {
	ClusterID uint64
	MemberID  uint64
	RaftTerm  uint64
}

// Watch is one v2 watch, as a Store serves it. Events delivers the events
// due to it (one for a plain watch, any number with stream=true); Done is
// closed when it ends without more events (its backend was lost, it fell
// behind, the bridge is closing), Reason says why. Events already queued
// when Done closes are still valid.
type Watch interface {
	StartIndex() uint64 // X-Etcd-Index of the response
	Events() <-chan *translate.Event
	Done() <-chan struct{}
	Reason() string
	// Cancel releases the watch (answered, or the client went away).
	Cancel()
}

// Store is what the HTTP layer needs from a backend; a decorator (metrics,
// cross-checking) can wrap it without touching the handlers, and a fake can
// stand in for it in tests.
type Store interface {
	Get(ctx context.Context, r *translate.Request) (*translate.Event, Meta, error)
	Write(ctx context.Context, r *translate.Request) (*translate.Event, Meta, error)
	// Watch registers a watch; an error (401 for cleared history, an
	// unavailable backend) comes back before any header is written.
	Watch(ctx context.Context, r *translate.Request) (Watch, Meta, error)
	Health(ctx context.Context) error
	Version(ctx context.Context) (string, error)
	Meta() Meta
	// Ready reports whether the backend answers and the watch path works
	// (the shared v3 watch has been created).
	Ready() bool
	// Alive reports whether the bridge itself still makes progress.
	Alive(d time.Duration) bool
	// Watchers is the number of v2 watches in flight (/v2/stats/store).
	Watchers() int
}

// Config configures the HTTP surface.
type Config struct {
	Store         Store
	Name          string
	AdvertiseURLs []string
	Logger        *zap.Logger
	// Registry receives the HTTP metrics; Gatherer is served on /metrics.
	Registry prometheus.Registerer
	Gatherer prometheus.Gatherer
	// EnablePprof serves runtime profiles at /debug/pprof/.
	EnablePprof bool
	// DetachWatches lets a waiting one-shot watch on HTTP/1.1 leave
	// net/http while it waits (package detach).
	DetachWatches bool
	// Members lists the other live bridges /v2/members and /v2/machines
	// advertise; nil: the bridge alone.
	Members Members
	// Auth serves /v2/auth, and decides each request before its handler
	// (authStep); nil: the auth API is not found, nothing is checked.
	Auth Auth
}

// Server serves the v2 API.
type Server struct {
	cfg      Config
	id       uint64
	started  time.Time
	stats    storeStats
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// children caches the metrics of each (method, action, code) seen,
	// a requestMetrics: looking them up in the vectors hashes the labels
	// and takes a lock on every request.
	children sync.Map
	router   *mux.Router
	// handler serves every request: route, behind authStep with Auth.
	handler http.Handler
	// clusterID caches the text of the cluster ID the headers report.
	clusterID atomic.Pointer[clusterIDText]
}

// requestLabels names the children of the request metrics.
type requestLabels struct {
	method, action string
	code           int
}

// requestMetrics are the children of the request metrics for one
// requestLabels.
type requestMetrics struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

// metricsFor returns the metrics of a request (a handful of distinct
// labels: the methods keys allows, v2's actions and status codes).
func (s *Server) metricsFor(method, action string, code int) *requestMetrics {
	k := requestLabels{method, action, code}
	if m, ok := s.children.Load(k); ok {
		return m.(*requestMetrics)
	}
	m := &requestMetrics{requests: s.requests.WithLabelValues(method, action, strconv.Itoa(code))}
	if action != "watch" { // watches are not timed: no latency series for them
		m.latency = s.latency.WithLabelValues(method, action)
	}
	got, _ := s.children.LoadOrStore(k, m)
	return got.(*requestMetrics)
}

// New builds the v2 HTTP handler.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Name == "" {
		cfg.Name = "v2bridge"
	}
	s := &Server{cfg: cfg, id: MemberID(cfg.AdvertiseURLs), started: time.Now()}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "v2bridge_http_requests_total",
		Help: "v2 HTTP requests by method, v2 action and HTTP status."}, []string{"method", "action", "code"})
	s.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "v2bridge_http_request_duration_seconds",
		Help:    "v2 HTTP request latency (watches excluded) by method and action.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}, []string{"method", "action"})
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(s.requests, s.latency)
	}
	r := mux.NewRouter()
	r.HandleFunc("/v2/keys", s.keys)
	r.PathPrefix("/v2/keys/").HandlerFunc(s.keys)
	r.HandleFunc("/v2/members", s.members)
	r.HandleFunc("/v2/members/{id}", s.member)
	r.HandleFunc("/v2/machines", s.machines)
	r.HandleFunc("/v2/stats/self", s.statsSelf)
	r.HandleFunc("/v2/stats/leader", s.statsLeader)
	r.HandleFunc("/v2/stats/store", s.statsStore)
	r.HandleFunc("/version", s.version)
	if cfg.Auth != nil {
		s.addAuth(r)
	}
	s.addProbes(r)
	if cfg.EnablePprof {
		r.HandleFunc("/debug/pprof/", pprof.Index)
		r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		r.HandleFunc("/debug/pprof/profile", pprof.Profile)
		r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		r.HandleFunc("/debug/pprof/trace", pprof.Trace)
		r.PathPrefix("/debug/pprof/").HandlerFunc(pprof.Index)
	}
	s.router = r
	s.handler = http.HandlerFunc(s.route)
	if cfg.Auth != nil {
		s.handler = s.authStep(s.handler)
	}
	return s
}

// addProbes mounts what both the client and the metrics listeners serve.
func (s *Server) addProbes(r *mux.Router) {
	r.HandleFunc("/health", s.health)
	r.HandleFunc("/livez", s.livez)
	r.HandleFunc("/readyz", s.readyz)
	if s.cfg.Gatherer != nil {
		r.Handle("/metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	}
}

// MetricsHandler serves only /metrics, /health, /readyz and /livez, for
// --listen-metrics-urls.
func (s *Server) MetricsHandler() http.Handler {
	r := mux.NewRouter()
	s.addProbes(r)
	return r
}

// ServeHTTP serves the v2 API: with Auth, authStep first, then the handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// route hands a request to its handler.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	// Nearly every request is for /v2/keys: one the router would hand to
	// keys as it is (a clean path: the router redirects any other) goes
	// there directly, without the router's matching and the two copies of
	// the request it makes to carry its route.
	if p := r.URL.Path; isKeysPath(p) && isCleanPath(p) {
		s.keys(w, r)
		return
	}
	s.router.ServeHTTP(w, r)
}

// isKeysPath reports whether the router sends p to keys: /v2/keys itself or
// anything below /v2/keys/.
func isKeysPath(p string) bool {
	const keys = "/v2/keys"
	return strings.HasPrefix(p, keys) && (len(p) == len(keys) || p[len(keys)] == '/')
}

// isCleanPath reports whether the router leaves p as it is rather than
// redirect to its clean form: path.Clean(p), with p's trailing slash kept.
func isCleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	if p != "/" && p[len(p)-1] == '/' {
		return path.Clean(p) == p[:len(p)-1]
	}
	return path.Clean(p) == p
}

// ID is the member id the bridge reports for itself.
func (s *Server) ID() uint64 { return s.id }

func allowMethod(w http.ResponseWriter, m string, ms ...string) bool {
	for _, a := range ms {
		if m == a {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(ms, ","))
	http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	return false
}

// writeError writes a v2 error; anything that is not a v2 error is v2's 300
// "Raft Internal Error" (HTTP 500), which v2 clients retry elsewhere.
func writeError(w http.ResponseWriter, err error) int {
	var ve *translate.Error
	if !errors.As(err, &ve) {
		ve = translate.NewError(translate.EcodeRaftInternal, err.Error(), 0)
	}
	return ve.WriteResponse(w)
}

func setEventHeaders(w http.ResponseWriter, index uint64, meta Meta) {
	h := w.Header()
	idx := strconv.FormatUint(index, 10)
	setHeader(h, "Content-Type", "application/json")
	setHeader(h, "X-Etcd-Index", idx)
	// v3 has no raft index in its response header; the revision is the
	// closest monotonic stand-in.
	setHeader(h, "X-Raft-Index", idx)
	setHeader(h, "X-Raft-Term", strconv.FormatUint(meta.RaftTerm, 10))
}

// setHeader is h.Set for a canonical key k, reusing the value slice a
// recycled header keeps (that of a writer on a detached connection).
func setHeader(h http.Header, k, v string) {
	if vs := h[k]; cap(vs) > 0 {
		h[k] = append(vs[:0], v)
		return
	}
	h[k] = []string{v}
}

// clusterIDHeader is the X-Etcd-Cluster-Id value of id, formatted once per
// cluster ID.
func (s *Server) clusterIDHeader(id uint64) string {
	if c := s.clusterID.Load(); c != nil && c.id == id {
		return c.text
	}
	c := &clusterIDText{id, strconv.FormatUint(id, 16)}
	s.clusterID.Store(c)
	return c.text
}

type clusterIDText struct {
	id   uint64
	text string
}

// keysMethods are the methods /v2/keys allows.
var keysMethods = []string{"HEAD", "GET", "PUT", "POST", "DELETE"}

// keysRequest is a /v2/keys request parsed (parseKeys): its key as sent
// and the request, or the v2 error it gets instead; start is when it came.
type keysRequest struct {
	start time.Time
	key   string
	req   *translate.Request
	err   *translate.Error
}

// parsedKeys is the context key of the keysRequest authStep parsed.
type parsedKeys struct{}

// parseKeys parses a /v2/keys request as v2 did: its form (error 210),
// then its parameters (translate.ParseRequest).
func parseKeys(r *http.Request) *keysRequest {
	kr := &keysRequest{start: time.Now(), key: strings.TrimPrefix(r.URL.Path, "/v2/keys")}
	if err := r.ParseForm(); err != nil {
		kr.err = translate.NewError(translate.EcodeInvalidForm, err.Error(), 0)
		return kr
	}
	kr.req, kr.err = translate.ParseRequest(r.Method, kr.key, r.Form)
	return kr
}

// observe counts a /v2/keys answer in the request metrics.
func (s *Server) observe(method, action string, code int, start time.Time) {
	m := s.metricsFor(method, action, code)
	m.requests.Inc()
	if action != "watch" {
		m.latency.Observe(time.Since(start).Seconds())
	}
}

func (s *Server) keys(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r.Method, keysMethods...) {
		return
	}
	kr, ok := r.Context().Value(parsedKeys{}).(*keysRequest)
	if !ok {
		kr = parseKeys(r)
	}
	action, code := "error", 0
	defer func() { s.observe(r.Method, action, code, kr.start) }()
	setHeader(w.Header(), "X-Etcd-Cluster-Id", s.clusterIDHeader(s.cfg.Store.Meta().ClusterID))
	if kr.err != nil {
		code = writeError(w, kr.err)
		return
	}
	req := kr.req
	if req.IsWatch() {
		action = "watch"
		code = s.watch(w, r, req)
		return
	}
	var ev *translate.Event
	var meta Meta
	var err error
	if r.Method == "GET" || r.Method == "HEAD" {
		ev, meta, err = s.cfg.Store.Get(r.Context(), req)
	} else {
		// A write is seen through even when its client leaves (or only
		// half-closes) meanwhile, within the backend's deadline: cancelled
		// mid-way it could be applied yet answered with an error, which a
		// client would retry into a duplicate.
		ev, meta, err = s.cfg.Store.Write(context.WithoutCancel(r.Context()), req)
	}
	s.stats.count(req, ev, err)
	if err != nil {
		code = writeError(w, err)
		return
	}
	action = ev.Action
	setHeader(w.Header(), "X-Etcd-Cluster-Id", s.clusterIDHeader(meta.ClusterID))
	setEventHeaders(w, ev.EtcdIndex, meta)
	code = http.StatusOK
	if ev.IsCreated() {
		code = http.StatusCreated
	}
	w.WriteHeader(code)
	if req.NoValueOnSuccess && (ev.Action == translate.ActionSet || ev.Action == translate.ActionCompareAndSwap ||
		ev.Action == translate.ActionCreate || ev.Action == translate.ActionUpdate) {
		ev = &translate.Event{Action: ev.Action}
	}
	writeEvent(w, ev)
}

// eventBufs recycles the buffers answers are encoded into.
var eventBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// writeEvent writes ev's JSON and a newline, as json.Encoder does (nothing
// if it cannot be encoded).
func writeEvent(w http.ResponseWriter, ev *translate.Event) {
	bp := eventBufs.Get().(*[]byte)
	b, err := ev.AppendJSON((*bp)[:0])
	if err != nil {
		eventBufs.Put(bp)
		return
	}
	_, _ = w.Write(append(b, '\n'))
	if cap(b) <= 64<<10 { // a large listing's buffer is not kept
		*bp = b[:0]
		eventBufs.Put(bp)
	}
}

// watch serves wait=true: any 401 is decided before the headers go out;
// then the headers are flushed at once and one event (or, with stream=true,
// every event) follows. A watch whose backend is lost ends with an empty body,
// which v2 clients answer by re-issuing it.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, req *translate.Request) int {
	// Registering is bounded by the backend's own deadline; a client that
	// leaves meanwhile is noticed once the watch waits. Not deriving from
	// the request's cancelable context spares every re-watch a
	// registration with it.
	wa, meta, err := s.cfg.Store.Watch(context.WithoutCancel(r.Context()), req)
	if err != nil {
		return writeError(w, err)
	}
	setEventHeaders(w, wa.StartIndex(), meta)
	waiting := len(wa.Events()) == 0
	if !req.Stream && waiting && s.cfg.DetachWatches &&
		detach.Park(w, r, func(gone <-chan struct{}) []byte { return awaitOne(wa, gone) }, parkObserver(w)) {
		return http.StatusOK
	}
	defer wa.Cancel()
	// net/http stops watching an HTTP/1.x connection once its client sends
	// a byte behind the request; gone still sees such a client leave.
	var gone <-chan struct{}
	if req.Stream || waiting {
		var stop func()
		gone, stop = detach.Gone(r)
		defer stop()
	}
	defer wa.Cancel()
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	// The headers go out at once, as v2 sends them; a one-shot watch whose
	// event is already there (a re-watch served from the hub's memory) sends
	// them with the event in one write instead of two.
	if fl != nil && (req.Stream || len(wa.Events()) == 0) {
		fl.Flush()
	}
	send := func(ev *translate.Event) bool {
		// Encoded once for every watcher the event reaches.
		if _, err := w.Write(ev.JSON()); err != nil || !req.Stream {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	for {
		select {
		case <-r.Context().Done():
			return http.StatusOK
		case <-gone:
			return http.StatusOK
		case ev := <-wa.Events():
			if !send(ev) {
				return http.StatusOK
			}
		case <-wa.Done():
			for {
				select {
				case ev := <-wa.Events():
					if !send(ev) {
						return http.StatusOK
					}
				default:
					return http.StatusOK
				}
			}
		}
	}
}

// awaitOne is a parked one-shot watch's wait: the JSON of its event, or
// nothing when it ends without one or its client is gone.
func awaitOne(wa Watch, gone <-chan struct{}) []byte {
	defer wa.Cancel()
	select {
	case ev := <-wa.Events():
		return ev.JSON()
	case <-wa.Done():
		select {
		case ev := <-wa.Events():
			return ev.JSON()
		default:
			return nil
		}
	case <-gone:
		return nil
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) statsStore(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r.Method, "GET") {
		return
	}
	m := s.stats.snapshot()
	m["watchers"] = uint64(s.cfg.Store.Watchers())
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r.Method, "GET") {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	v, err := s.cfg.Store.Version(ctx)
	cluster := "not_decided"
	if err != nil {
		v = "not_decided"
	} else if parts := strings.SplitN(v, ".", 3); len(parts) >= 2 {
		cluster = parts[0] + "." + parts[1] + ".0"
	}
	writeJSON(w, http.StatusOK, map[string]string{"etcdserver": v, "etcdcluster": cluster})
}

// health is 200 {"health":"true"} only while the backend answers a
// linearizable read; 503 with the same shape otherwise.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r.Method, "GET", "HEAD") {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Store.Health(ctx); err != nil {
		s.cfg.Logger.Debug("health check failed", zap.Error(err))
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"health": "false"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"health": "true"})
}

// livez fails only when the process is wedged (its locks cannot be taken),
// as etcd's /livez: a lost backend is /readyz's business, not a reason to
// restart the bridge.
func (s *Server) livez(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.Store.Alive(5 * time.Second) {
		http.Error(w, "wedged", http.StatusServiceUnavailable)
		return
	}
	_, _ = fmt.Fprintln(w, "ok")
}

// readyz fails until the backend answers and its watch path works.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.Store.Ready() {
		http.Error(w, "not ready: backend or its watch unavailable", http.StatusServiceUnavailable)
		return
	}
	_, _ = fmt.Fprintln(w, "ok")
}

// storeStats counts operations for /v2/stats/store, as v2's store did.
type storeStats struct {
	c [14]atomic.Uint64
}

var statNames = [14]string{"getsSuccess", "getsFail", "setsSuccess", "setsFail", "deleteSuccess", "deleteFail",
	"updateSuccess", "updateFail", "createSuccess", "createFail", "compareAndSwapSuccess", "compareAndSwapFail",
	"compareAndDeleteSuccess", "compareAndDeleteFail"}

func (st *storeStats) count(r *translate.Request, ev *translate.Event, err error) {
	i := 0
	switch {
	case r.Method == "GET" || r.Method == "HEAD":
		i = 0
	case r.Method == "POST" || (r.Method == "PUT" && r.PrevExist != nil && !*r.PrevExist):
		i = 8
	case r.Method == "DELETE" && r.HasCompare():
		i = 12
	case r.Method == "DELETE":
		i = 4
	case r.PrevExist != nil && *r.PrevExist && !r.HasCompare():
		i = 6
	case r.HasCompare():
		i = 10
	default:
		i = 2
	}
	if err != nil {
		i++
	}
	st.c[i].Add(1)
}

func (st *storeStats) snapshot() map[string]uint64 {
	m := map[string]uint64{"expireCount": 0}
	for i, n := range statNames {
		m[n] = st.c[i].Load()
	}
	return m
}
