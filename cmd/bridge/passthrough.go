// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"

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
	limits := server.HTTPLimits{IdleTimeout: c.httpIdleTimeout, BodyReadTimeout: c.httpBodyReadTimeout,
		MaxConnections: c.maxConnections}

	var (
		servers []*http.Server
		wg      sync.WaitGroup // one per Serve goroutine
	)
	errc := make(chan error, len(lns.client)+len(lns.metrics))
	serveOn := func(l urlListener, h http.Handler) {
		srv := server.NewHTTPServer(h, limits, zap.NewStdLog(lg.Named("http")))
		servers = append(servers, srv)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(limitListener(l, limits)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	lns.served = true
	for _, l := range lns.client {
		lg.Info("serving in passthrough mode", zap.String("url", l.url), zap.Strings("v2-upstream", urls))
		serveOn(l, v2api.RequestLog(p, lg.Named("request")))
	}
	for _, l := range lns.metrics {
		lg.Info("serving metrics", zap.String("url", l.url))
		serveOn(l, p.MetricsHandler())
	}
	shutdown := func() error {
		// Watches end first (clients re-issue them elsewhere), then
		// in-flight requests finish within their deadlines.
		p.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var errs []error
		for _, srv := range servers {
			errs = append(errs, srv.Shutdown(sctx))
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	return runUntilDone(ctx, lg, p.Ready, errc, shutdown)
}

// limitListener caps the connections served at once on l, as the v3 mode's
// bridge does.
func limitListener(l urlListener, limits server.HTTPLimits) net.Listener {
	if limits.MaxConnections > 0 {
		return netutil.LimitListener(l.ln, limits.MaxConnections)
	}
	return l.ln
}
