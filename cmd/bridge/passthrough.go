// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/detach"
	"github.com/v2bridge/v2bridge/server"
	"github.com/v2bridge/v2bridge/upstream"
	"github.com/v2bridge/v2bridge/v2api"
)

// servePassthrough runs the bridge in passthrough mode until ctx ends: every
// v2 request is forwarded to the --v2-upstream v2 server; no etcd v3 (nor an
// embedded one) is used. With an etcd v3 cluster as well, serveDual runs
// instead.
func servePassthrough(ctx context.Context, c *config, lg *zap.Logger, lns *listeners) error {
	urls := splitList(c.v2Upstream)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBridgeInfo(reg, false)
	registerMode(reg, true)
	p, err := upstream.New(upstream.Config{URLs: urls,
		HeartbeatInterval: c.heartbeatInterval, HeartbeatTimeout: c.heartbeatTimeout,
		HeartbeatFailures: c.heartbeatFailures, RequestTimeout: c.requestTimeout,
		Name: c.name, AdvertiseURLs: splitList(c.advertiseClientURLs), EnablePprof: c.enablePprof,
		Logger: lg.Named("upstream"), Registry: reg, Gatherer: reg})
	if err != nil {
		return err
	}
	defer p.Close()
	hs := newHTTPServers(c, lg, lns)
	for _, l := range lns.client {
		lg.Info("serving in passthrough mode", zap.String("url", l.url), zap.Strings("v2-upstream", urls))
		hs.serve(l, v2api.RequestLog(v2api.ServedOnly(c.served, p), lg.Named("request")))
	}
	for _, l := range lns.metrics {
		lg.Info("serving metrics", zap.String("url", l.url))
		hs.serve(l, p.MetricsHandler())
	}
	shutdown := func() error {
		// Watches end first (clients re-issue them elsewhere), then
		// in-flight requests finish within their deadlines.
		p.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return hs.shutdown(sctx)
	}
	return runUntilDone(ctx, lg, p.Ready, hs.errc, shutdown)
}

// httpServers serves the passthrough's and dual mode's handlers, one HTTP
// server per listener, and shuts them all down together (the v3 mode's
// server.Bridge does the same for its own).
type httpServers struct {
	limits    server.HTTPLimits
	lg        *zap.Logger
	servers   []*http.Server
	listeners []*detach.Listener
	wg        sync.WaitGroup // one per Serve goroutine
	errc      chan error     // a Serve that failed; room for one per listener
}

// newHTTPServers takes over lns: from now on the servers own and close its
// listeners.
func newHTTPServers(c *config, lg *zap.Logger, lns *listeners) *httpServers {
	lns.served = true
	return &httpServers{lg: lg, errc: make(chan error, len(lns.client)+len(lns.metrics)),
		limits: server.HTTPLimits{IdleTimeout: c.httpIdleTimeout, BodyReadTimeout: c.httpBodyReadTimeout,
			MaxConnections: c.maxConnections}}
}

// serve serves h on l until shutdown.
func (hs *httpServers) serve(l urlListener, h http.Handler) {
	srv, dl := server.NewHTTPServer(l.ln, h, hs.limits, zap.NewStdLog(hs.lg.Named("http")))
	hs.servers = append(hs.servers, srv)
	hs.listeners = append(hs.listeners, dl)
	hs.wg.Add(1)
	go func() {
		defer hs.wg.Done()
		if err := srv.Serve(dl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			hs.errc <- err
		}
	}()
}

// parked is the number of watches parked on the servers' listeners.
func (hs *httpServers) parked() int {
	n := 0
	for _, l := range hs.listeners {
		n += l.Parked()
	}
	return n
}

// shutdown lets the requests in flight finish within ctx, closes every
// server and waits for their Serve goroutines.
func (hs *httpServers) shutdown(ctx context.Context) error {
	var errs []error
	for _, srv := range hs.servers {
		errs = append(errs, srv.Shutdown(ctx))
	}
	hs.wg.Wait()
	for _, l := range hs.listeners {
		_ = l.Close()
		errs = append(errs, l.Wait(ctx))
	}
	return errors.Join(errs...)
}
