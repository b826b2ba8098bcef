// SPDX-License-Identifier: Apache-2.0

// Package passthrough is passthrough mode: the bridge forwards every v2 request
// to the v2 server, which stays the single authority,
// while v2 clients move to their local bridge node by node. It holds the
// forwarding handler, the liveness heartbeat against the v2 server (with
// failover along a list of v2 server URLs), and the HTTP transport they share.
//
// Each request costs at most one round trip to the v2 server. Only the
// bridges' membership (/v2/members, /v2/machines, /v2/stats/self and
// /v2/stats/leader) and the probes (/readyz, /livez, /metrics) are answered
// locally, so clients that sync their member list keep talking to bridges,
// and the leader the stats name is a member listed.
package passthrough

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2api"
)

// Config is what a passthrough is built from.
type Config struct {
	// URLs are the v2 server's client URLs, in failover order.
	URLs []string

	// The heartbeat: a GET /health every HeartbeatInterval, each bounded
	// by HeartbeatTimeout; HeartbeatFailures misses in a row declare the
	// v2 server lost.
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	HeartbeatFailures int
	// RequestTimeout bounds every forwarded request that is not a watch,
	// and the wait for a watch's response headers.
	RequestTimeout time.Duration

	// Name and AdvertiseURLs are what /v2/members and /v2/machines report
	// of the bridge itself, Members the other live bridges (nil: none).
	Name          string
	AdvertiseURLs []string
	Members       v2api.Members
	EnablePprof   bool

	// Served are the served subtrees (translate.ParseServed's; nil: all):
	// a watch is shown no event outside them.
	Served []string

	// Observer, if set, sees the forwarded requests that are not watches
	// (the shadow comparison against etcd v3).
	Observer Observer

	Logger *zap.Logger
	// Registry receives the metrics; Gatherer is served on /metrics.
	Registry prometheus.Registerer
	Gatherer prometheus.Gatherer
}

// Observer watches forwarded requests from beside the request path. Sample
// runs for every forwarded request that is not a watch, before it is
// forwarded, and must be cheap; Observe gets the answer of a sampled one once
// it is written to the client, and must not block.
type Observer interface {
	Sample(r *http.Request) bool
	Observe(r *http.Request, a Answer)
}

// Answer is the v2 server's answer to a sampled request, as relayed.
type Answer struct {
	// URL is the base URL of the v2 server that answered.
	URL    string
	Status int
	Header http.Header // a copy
	// Body is the whole body; the observer must not change it.
	Body []byte
}

// Defaults of Config's zero values.
var Defaults = Config{
	HeartbeatInterval: time.Second,
	HeartbeatTimeout:  time.Second,
	HeartbeatFailures: 2,
	RequestTimeout:    5 * time.Second,
}

func (c *Config) setDefaults() {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = Defaults.HeartbeatInterval
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = Defaults.HeartbeatTimeout
	}
	if c.HeartbeatFailures <= 0 {
		c.HeartbeatFailures = Defaults.HeartbeatFailures
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = Defaults.RequestTimeout
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// errLost is the cause with which a lost v2 server ends the requests in flight.
var errLost = errors.New("v2 server lost")

// Passthrough forwards the v2 API to the v2 server.
type Passthrough struct {
	cfg     Config
	lg      *zap.Logger
	targets []*url.URL
	tr      *http.Transport // forwarded requests
	probeTr *http.Transport // the heartbeat, on connections of its own
	api     *v2api.Server   // the locally answered part of the surface
	metrics *metrics
	layout  translate.Layout // only its served subtrees

	// current is the index in targets of the v2 server in use; up says
	// whether it answers the heartbeat.
	current atomic.Int64
	up      atomic.Bool
	// lastIndex is the last X-Etcd-Index a v2 server sent, for the index
	// of the errors the bridge writes itself; clusterID the last
	// X-Etcd-Cluster-Id.
	lastIndex atomic.Uint64
	clusterID atomic.Uint64
	// beat is when the heartbeat loop last went round (for /livez).
	beat atomic.Int64

	mu       sync.Mutex // guards inflight and closed
	inflight map[*forwarding]struct{}
	closed   bool

	stop    context.CancelFunc
	monitor sync.WaitGroup // the heartbeat goroutine
}

// forwarding is one request in flight to the v2 server, ended by its loss
// (and, when it is a watch, by the bridge's shutdown).
type forwarding struct {
	cancel context.CancelCauseFunc
	watch  bool
}

// New checks cfg and starts the heartbeat. The v2 server counts as lost until
// it answers once (Ready).
func New(cfg Config) (*Passthrough, error) {
	cfg.setDefaults()
	if len(cfg.URLs) == 0 {
		return nil, errors.New("passthrough: no URL of the v2 server")
	}
	p := &Passthrough{cfg: cfg, lg: cfg.Logger, inflight: map[*forwarding]struct{}{},
		layout: translate.Layout{}.WithServed(cfg.Served)}
	for _, s := range cfg.URLs {
		u, err := url.Parse(strings.TrimSuffix(s, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("passthrough: bad URL of the v2 server %q: want http://host:port or https://host:port", s)
		}
		p.targets = append(p.targets, u)
	}
	p.tr = newTransport(cfg.RequestTimeout)
	p.probeTr = newProbeTransport(cfg.HeartbeatTimeout)
	p.metrics = newMetrics(cfg.Registry)
	p.api = v2api.New(v2api.Config{Store: localStore{p}, Name: cfg.Name, AdvertiseURLs: cfg.AdvertiseURLs, Members: cfg.Members,
		Logger: cfg.Logger.Named("v2api"), Registry: cfg.Registry, Gatherer: cfg.Gatherer, EnablePprof: cfg.EnablePprof})
	p.beat.Store(time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	p.monitor.Add(1)
	go func() {
		defer p.monitor.Done()
		p.heartbeat(ctx)
	}()
	return p, nil
}

// Ready reports whether the v2 server in use answers the heartbeat.
func (p *Passthrough) Ready() bool { return p.up.Load() }

// V2Server is the URL of the v2 server in use.
func (p *Passthrough) V2Server() string { return p.targets[p.current.Load()].String() }

// WaitReady waits until the v2 server answers, or ctx ends.
func (p *Passthrough) WaitReady(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !p.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the v2 server %s does not answer: %w", p.V2Server(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Close stops the heartbeat and ends every forwarded watch (clients re-issue
// them); requests still in flight end within their deadlines. It waits for
// the heartbeat goroutine, not for the requests: their owner is the HTTP
// server, whose Shutdown waits for them.
func (p *Passthrough) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.stop()
	p.monitor.Wait()
	p.end(errors.New("bridge shutting down"), false)
	p.tr.CloseIdleConnections()
	p.probeTr.CloseIdleConnections()
}

// register adds a request to be ended on loss; false when the bridge closed.
func (p *Passthrough) register(f *forwarding) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.inflight[f] = struct{}{}
	return true
}

func (p *Passthrough) unregister(f *forwarding) {
	p.mu.Lock()
	delete(p.inflight, f)
	p.mu.Unlock()
}

// end ends the watches in flight with cause, and the other requests too when
// all is set; it returns how many watches it ended.
func (p *Passthrough) end(cause error, all bool) int {
	p.mu.Lock()
	var fs []*forwarding
	watches := 0
	for f := range p.inflight {
		if f.watch || all {
			fs = append(fs, f)
		}
		if f.watch {
			watches++
		}
	}
	p.mu.Unlock()
	for _, f := range fs {
		f.cancel(cause)
	}
	return watches
}

// Watchers is the number of forwarded watches in flight.
func (p *Passthrough) Watchers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for f := range p.inflight {
		if f.watch {
			n++
		}
	}
	return n
}
