// SPDX-License-Identifier: Apache-2.0

// Package modes builds and runs a bridge in any of its modes around the v3
// core of package core: v3, passthrough (to a v2 server) or dual (the
// cutover.Switch over both).
// Every mode has the same HTTP lifecycle (core.Servers), the same request
// chain (limits, request log, served subtrees, auth, then the Side that
// answers: auth is the v3 side's first step, v2api.Server's, deciding each
// request before its handler; the old server decides its own) and the same
// shutdown order: the Side leaves (its registration, its watches), the HTTP
// servers stop, the Side closes, then what it stood on (auth, the etcd v3
// client, an embedded etcd).
package modes

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/core"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2api"
	"github.com/v2bridge/v2bridge/v3backend"
)

// Mode is which sides a bridge has.
type Mode int

// The modes: etcd v3 only, the v2 server only, or both.
const (
	V3 Mode = iota
	Passthrough
	Dual
)

// Listener is an open listener and the URL it was opened for.
type Listener struct {
	URL string
	Ln  net.Listener
}

// Config is a bridge's settings, as the command line gives them.
type Config struct {
	Mode   Mode
	Logger *zap.Logger
	// Version and Commit label v2bridge_build_info.
	Version, Commit string

	// Client and Metrics are the open listeners of the v2 API and of
	// /metrics; Run owns them and closes them.
	Client, Metrics []Listener
	HTTP            core.HTTPLimits

	Name          string
	AdvertiseURLs []string
	EnablePprof   bool
	// Served are the served subtrees (translate.ParseServed's);
	// ServePrefix, the same joined with ","; ServePrefixSet, whether
	// --serve-prefix was given.
	Served            []string
	ServePrefix       string
	ServePrefixSet    bool
	AdvertiseOnlySelf bool
	Layout            translate.Layout

	RequestTimeout, DialTimeout, ModeLeaseTTL time.Duration
	// HideClientMetrics leaves /metrics to the Metrics listeners.
	HideClientMetrics bool
	// StartTimeout bounds how long a bridge serving / by default waits
	// for etcd to say what else the cluster holds before giving up.
	StartTimeout                        time.Duration
	HeartbeatInterval, HeartbeatTimeout time.Duration
	HeartbeatFailures                   int
	ClientCertAuth, WatchDetach         bool
	ShadowSampleRate                    float64
	ShadowPrefix                        string
	ShadowQueue                         int

	// V2Server are the v2 server's URLs (passthrough, dual mode).
	V2Server []string
	// Backend is the v3 side (v3, dual mode).
	Backend v3backend.Config
	// Embedded, if set, is the private etcd a v3-mode bridge starts and
	// serves (Backend.Endpoints is its client URL).
	Embedded *Embedded
}

// Embedded is a v3-mode bridge's private etcd.
type Embedded struct {
	v3backend.EmbeddedConfig // its Logger is set by Run
	// Implicit says no backend was named at all, for the warning.
	Implicit bool
	// InProcess lets the backend read the member in process.
	InProcess bool
}

// Side is what answers the v2 API: the v3 bridge, the passthrough to the v2
// server, or, in dual mode, the Switch over those two.
type Side interface {
	http.Handler // the v2 API, auth its first step
	// Metrics serves the metrics listeners: /metrics and the probes.
	Metrics() http.Handler
	// Ready reports what /readyz does.
	Ready() bool
	// Leave, at shutdown, ends what ties clients to the side before the
	// HTTP servers stop: its registration, its watches.
	Leave()
	// Close releases the side once the HTTP servers have stopped.
	Close(ctx context.Context) error
}

// UsageError is a refusal to start that a setting can mend.
type UsageError struct{ error }

func (e UsageError) Unwrap() error { return e.error }

// built is a mode's side, ready to serve.
type built struct {
	side Side
	// serving is the line logged for each client listener, with fields.
	serving string
	fields  []zap.Field
	// start runs once the listeners serve (nil: nothing to start).
	start func()
	// auth is the auth the v3 side enforces (nil: none), which refuses an
	// unserved key before it is not found.
	auth v2api.Auth
}

// Run builds the bridge cfg describes and serves it until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	lg := cfg.Logger
	served := false
	defer func() {
		if !served {
			for _, l := range append(cfg.Client, cfg.Metrics...) {
				_ = l.Ln.Close()
			}
		}
	}()
	var res cleanups
	defer res.run()
	// The servers come first: the v3 side counts the watches parked on
	// their listeners.
	hs := core.NewServers(cfg.HTTP, lg)
	var b *built
	var err error
	switch cfg.Mode {
	case Passthrough:
		b, err = buildPassthrough(&cfg, &res)
	case Dual:
		b, err = buildDual(ctx, &cfg, &res, hs.Parked)
	default:
		b, err = buildV3(ctx, &cfg, &res, hs.Parked)
	}
	if err != nil {
		return err
	}
	if b == nil {
		return nil // interrupted while starting
	}
	served = true
	errc := make(chan error, len(cfg.Client)+len(cfg.Metrics))
	client := v2api.ServedOnly(cfg.Served, b.auth, b.side)
	if cfg.HideClientMetrics {
		client = withoutMetrics(client)
	}
	for _, l := range cfg.Client {
		lg.Info(b.serving, append([]zap.Field{zap.String("url", l.URL)}, b.fields...)...)
		hs.Serve(l.Ln, v2api.RequestLog(client, lg.Named("request")), errc)
	}
	for _, l := range cfg.Metrics {
		lg.Info("serving metrics", zap.String("url", l.URL))
		hs.Serve(l.Ln, b.side.Metrics(), errc)
	}
	if b.start != nil {
		b.start()
	}
	shutdown := func() error {
		b.side.Leave()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return errors.Join(hs.Shutdown(sctx), b.side.Close(sctx))
	}
	return core.Run(ctx, lg, b.side.Ready, errc, shutdown)
}

// cleanups are what a bridge stands on, released in the reverse order of
// their acquisition once it has shut down.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// newRegistry is a bridge's metrics registry, with the Go and process
// collectors and v2bridge_build_info.
func newRegistry(cfg *Config, embedded bool) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBridgeInfo(reg, cfg.Version, cfg.Commit, embedded)
	return reg
}

// interrupted says whether ctx ended while the bridge was starting: a
// signal then stops it as cleanly as one after (exit status 0).
func interrupted(ctx context.Context, lg *zap.Logger) bool {
	if ctx.Err() == nil {
		return false
	}
	lg.Info("interrupted while starting: shutting down")
	return true
}

// withoutMetrics is h but for /metrics, which it does not serve.
func withoutMetrics(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}
