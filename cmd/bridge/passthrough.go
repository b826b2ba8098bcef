// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

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
	hs, errc := newHTTPServers(c, lg, lns)
	for _, l := range lns.client {
		lg.Info("serving in passthrough mode", zap.String("url", l.url), zap.Strings("v2-upstream", urls))
		hs.Serve(l.ln, v2api.RequestLog(v2api.ServedOnly(c.served, p), lg.Named("request")), errc)
	}
	for _, l := range lns.metrics {
		lg.Info("serving metrics", zap.String("url", l.url))
		hs.Serve(l.ln, p.MetricsHandler(), errc)
	}
	shutdown := func() error {
		// Watches end first (clients re-issue them elsewhere), then
		// in-flight requests finish within their deadlines.
		p.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return hs.Shutdown(sctx)
	}
	return server.Run(ctx, lg, p.Ready, errc, shutdown)
}

// newHTTPServers takes over lns: from now on the servers own and close its
// listeners. errc has room for a failure of each.
func newHTTPServers(c *config, lg *zap.Logger, lns *listeners) (*server.Servers, chan error) {
	lns.served = true
	return server.NewServers(server.HTTPLimits{IdleTimeout: c.httpIdleTimeout, BodyReadTimeout: c.httpBodyReadTimeout,
		MaxConnections: c.maxConnections}, lg), make(chan error, len(lns.client)+len(lns.metrics))
}
