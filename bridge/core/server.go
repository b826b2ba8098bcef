// SPDX-License-Identifier: Apache-2.0

// Package core builds the v3 bridge, the core of every mode that serves from
// etcd v3: the etcd v3 backend (with its liveness monitor and watch hub), the
// v2 HTTP surface over it, and the metrics registry they share. It also holds
// the HTTP lifecycle every mode runs (Listen, Servers, Run). Package modes
// builds the modes around this core; the test fixture and the benchmarks build
// the v3 bridge here directly, with the same defaults.
package core

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/bridge/detach"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2api"
	"github.com/v2bridge/v2bridge/v3backend"
)

// Config is what a bridge is built from.
type Config struct {
	// Backend configures the v3 side; its Logger and Registry are filled
	// in from this Config when unset.
	Backend v3backend.Config

	// Name is the member name the bridge reports; AdvertiseURLs are what
	// /v2/members and /v2/machines advertise.
	Name          string
	AdvertiseURLs []string
	// Members lists the other live bridges /v2/members advertises (nil:
	// the bridge alone).
	Members     v2api.Members
	EnablePprof bool
	// DetachWatches lets waiting one-shot HTTP/1.1 watches leave net/http
	// while they wait (package detach); off, every watch waits inside it.
	DetachWatches bool
	// Parked, if set, counts the watches parked on the listeners another
	// server serves the API on (dual mode's) for v2bridge_watches_detached;
	// nil: those of Serve's listeners.
	Parked func() int
	// Auth serves /v2/auth and checks every /v2/keys request; the caller
	// runs its Store. The bridge is not ready while the Store has no
	// current State. nil: no auth (the auth API is not served).
	Auth *auth.Service
	// Followers, if set, is called once the backend is connected, before
	// the HTTP surface is built, and gives Members and Auth: so they can
	// follow etcd v3 on the backend's checked session (Backend.Conn), and
	// move with its member, instead of a client of their own.
	Followers func(*v3backend.Backend) (v2api.Members, *auth.Service)

	Logger *zap.Logger
	// Registry receives every metric and is served on /metrics; nil means a
	// new registry with the Go and process collectors.
	Registry *prometheus.Registry
	// GRPCClientMetrics adds v2bridge_grpc_client_* metrics of the v3 client.
	GRPCClientMetrics bool

	// HTTP limits of every listener. None of them cuts a parked watch:
	// they bound reading a request (its headers, then its body) and how
	// long an idle keep-alive connection is kept.
	HTTP HTTPLimits
}

// HTTPLimits bound what a client can hold of the bridge's HTTP server.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// BodyReadTimeout bounds reading a request's body (a client sending
	// it a byte at a time is cut off).
	BodyReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle between requests.
	IdleTimeout time.Duration
	// MaxConnections caps the connections served at once per listener;
	// further ones wait in the accept queue (0: no cap).
	MaxConnections int
	// MaxBodyBytes caps the body read for a handler: one that reaches it is
	// handed over cut there, and the connection closed after the answer.
	// The default is one byte over the 10 MiB form limit of the v2 API, so
	// an oversized form gets v2's own error.
	MaxBodyBytes int64
}

// DefaultHTTPLimits are the defaults of HTTPLimits' zero values.
var DefaultHTTPLimits = HTTPLimits{
	ReadHeaderTimeout: 10 * time.Second,
	BodyReadTimeout:   30 * time.Second,
	IdleTimeout:       2 * time.Minute,
	MaxConnections:    32768,
	MaxBodyBytes:      10<<20 + 1,
}

func (l *HTTPLimits) setDefaults() {
	d := DefaultHTTPLimits
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.BodyReadTimeout == 0 {
		l.BodyReadTimeout = d.BodyReadTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = d.MaxConnections
	}
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = d.MaxBodyBytes
	}
}

// Bridge is an assembled bridge. Serve hands it listeners; Close ends every
// watch, lets in-flight requests finish and closes the backend.
type Bridge struct {
	Backend  *v3backend.Backend
	API      *v2api.Server
	Registry *prometheus.Registry

	cfg       Config
	lg        *zap.Logger
	http      *Servers // those Serve started
	closeOnce sync.Once
}

// New connects the backend (waiting at most until ctx ends) and builds the
// HTTP surface over it.
func New(ctx context.Context, cfg Config) (*Bridge, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cfg.HTTP.setDefaults()
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	bcfg := cfg.Backend
	if bcfg.Logger == nil {
		bcfg.Logger = cfg.Logger.Named("backend")
	}
	if bcfg.Registry == nil {
		bcfg.Registry = reg
	}
	if cfg.GRPCClientMetrics {
		m := grpcprom.NewClientMetrics(
			grpcprom.WithClientCounterOptions(grpcprom.WithSubsystem("v2bridge")),
			grpcprom.WithClientHandlingTimeHistogram(grpcprom.WithHistogramSubsystem("v2bridge")))
		reg.MustRegister(m)
		bcfg.DialOptions = append(bcfg.DialOptions,
			grpc.WithChainUnaryInterceptor(m.UnaryClientInterceptor()),
			grpc.WithChainStreamInterceptor(m.StreamClientInterceptor()))
	}
	be, err := v3backend.New(ctx, bcfg)
	if err != nil {
		return nil, err
	}
	if cfg.Followers != nil {
		cfg.Members, cfg.Auth = cfg.Followers(be)
	}
	var a v2api.Auth // never a nil *auth.Service in an interface
	if cfg.Auth != nil {
		a = *cfg.Auth
	}
	api := v2api.New(v2api.Config{Store: Store{B: be, Auth: cfg.Auth}, Name: cfg.Name, AdvertiseURLs: cfg.AdvertiseURLs,
		Logger: cfg.Logger.Named("v2api"), Registry: reg, Gatherer: reg, EnablePprof: cfg.EnablePprof,
		DetachWatches: cfg.DetachWatches, Members: cfg.Members, Auth: a})
	b := &Bridge{Backend: be, API: api, Registry: reg, cfg: cfg, lg: cfg.Logger, http: NewServers(cfg.HTTP, cfg.Logger)}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "v2bridge_watches_detached",
		Help: "v2 watches waiting on detached connections, outside net/http."}, b.detached))
	return b, nil
}

// detached is the number of watches detached now, over every listener.
func (b *Bridge) detached() float64 {
	if b.cfg.Parked != nil {
		return float64(b.cfg.Parked())
	}
	return float64(b.http.Parked())
}

// Ready reports what /readyz does: the backend answers, the hub's shared
// watch is created, and the auth data (with Config.Auth) is current.
func (b *Bridge) Ready() bool { return Store{B: b.Backend, Auth: b.cfg.Auth}.Ready() }

// WaitReady waits until the bridge is Ready (watches are refused until
// then), or ctx ends.
func (b *Bridge) WaitReady(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !b.Ready() {
		select {
		case <-ctx.Done():
			return errors.New("the bridge's backend, watch hub or auth data is not ready: " + ctx.Err().Error())
		case <-t.C:
		}
	}
	return nil
}

// Serve serves h (the v2 API, or the metrics handler) on ln until Close;
// errors other than a normal close go to errc when it is not nil. ln may be a
// TLS listener: its connections reach net/http as they are, so HTTP/2 is
// served where ALPN chose it.
func (b *Bridge) Serve(ln net.Listener, h http.Handler, errc chan<- error) { b.http.Serve(ln, h, errc) }

// NewHTTPServer builds the HTTP server of h on ln within the limits l
// (defaults for zero values); the caller runs srv.Serve(dl), and after
// srv.Shutdown waits for dl's parked watches with dl.Wait.
func NewHTTPServer(ln net.Listener, h http.Handler, l HTTPLimits, errorLog *log.Logger) (*http.Server, *detach.Listener) {
	l.setDefaults()
	dl := detach.NewListener(ln, l.MaxConnections)
	srv := &http.Server{Handler: bodyLimits(detach.Handler(h), l), ReadHeaderTimeout: l.ReadHeaderTimeout, IdleTimeout: l.IdleTimeout,
		ErrorLog: errorLog, ConnContext: dl.ConnContext, ConnState: dl.ConnState}
	return srv, dl
}

// bodyLimits reads a request's body within BodyReadTimeout and
// MaxBodyBytes before the handler runs, then lifts the read deadline: an
// http.Server ReadTimeout would stay on the connection and cancel a parked
// watch's context when it ran out.
func bodyLimits(h http.Handler, l HTTPLimits) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(l.BodyReadTimeout))
		body, err := io.ReadAll(io.LimitReader(r.Body, l.MaxBodyBytes))
		if err != nil {
			// A timeout or a reset: the client is gone or too slow. Leave
			// the connection no time to read more: it is closed after the
			// answer.
			_ = rc.SetReadDeadline(time.Now())
			w.Header().Set("Connection", "close")
			http.Error(w, "reading the request body: "+err.Error(), http.StatusRequestTimeout)
			return
		}
		if int64(len(body)) == l.MaxBodyBytes {
			// Too large (or exactly the cap): the handler sees the cap's
			// worth and refuses it its own way (the v2 API with v2's error
			// 210); the rest is not read and the connection is closed.
			_ = rc.SetReadDeadline(time.Now())
			w.Header().Set("Connection", "close")
		} else {
			_ = rc.SetReadDeadline(time.Time{})
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}

// Close ends every v2 watch (clients re-issue them), lets in-flight requests
// finish until ctx ends, and closes the backend.
func (b *Bridge) Close(ctx context.Context) error {
	var err error
	b.closeOnce.Do(func() {
		b.Backend.Hub().EndAll("bridge shutting down")
		err = errors.Join(b.http.Shutdown(ctx), b.Backend.Close())
	})
	return err
}

// Store adapts a backend to the HTTP layer's Store interface.
type Store struct {
	B    *v3backend.Backend
	Auth *auth.Service // nil: no auth data to wait for
}

var _ v2api.Store = Store{}

// Get serves a v2 GET from the backend.
func (s Store) Get(ctx context.Context, r *translate.Request) (*translate.Event, v2api.Meta, error) {
	ev, m, err := s.B.Get(ctx, r)
	return ev, v2api.Meta(m), err
}

func (s Store) Write(ctx context.Context, r *translate.Request) (*translate.Event, v2api.Meta, error) {
	ev, m, err := s.B.Write(ctx, r)
	return ev, v2api.Meta(m), err
}

// Watch registers a v2 watch on the backend.
func (s Store) Watch(ctx context.Context, r *translate.Request) (v2api.Watch, v2api.Meta, error) {
	w, m, err := s.B.Watch(ctx, r)
	if err != nil {
		return nil, v2api.Meta(m), err
	}
	return w, v2api.Meta(m), nil
}

// Health reports whether the backend answers a linearizable read now.
func (s Store) Health(ctx context.Context) error { return s.B.Health(ctx) }

// Version is the etcd server version of the connected member.
func (s Store) Version(ctx context.Context) (string, error) { return s.B.Version(ctx) }

// Meta is the cluster and member identity last seen in a response.
func (s Store) Meta() v2api.Meta { return v2api.Meta(s.B.Meta()) }

// Ready reports whether a member answers, the hub's watch is created and
// the auth data, if any, is current.
func (s Store) Ready() bool {
	if s.Auth != nil {
		if _, ok := s.Auth.State(); !ok {
			return false
		}
	}
	return s.B.Ready()
}

// Alive reports whether the bridge's own locks can be taken within d.
func (s Store) Alive(d time.Duration) bool { return s.B.Alive(d) }

// Watchers counts the watchers registered with the backend's hub.
func (s Store) Watchers() int { return s.B.Hub().Watchers() }
