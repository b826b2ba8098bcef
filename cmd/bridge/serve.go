// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.etcd.io/etcd/client/pkg/v3/srv"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/server"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2api"
	"github.com/v2bridge/v2bridge/v3backend"
)

// serve runs the bridge until ctx ends. Its listeners are opened first, so a
// port that is taken stops it before the embedded etcd or anything else
// starts.
func serve(ctx context.Context, c *config, lg *zap.Logger) error {
	layout, err := translate.NewLayout(c.dataPrefix, c.metaPrefix)
	if err != nil {
		return err
	}
	layout = layout.WithServed(c.served)
	lns, err := openListeners(c)
	if err != nil {
		return err
	}
	defer lns.closeUnserved()
	if c.keysDetach.set {
		lg.Warn("--keys-detach (V2BRIDGE_KEYS_DETACH, keys-detach in --config-file) is deprecated and has no effect: " +
			"net/http reads every request; remove it")
	}
	if c.dual() {
		return serveDual(ctx, c, lg, lns, layout)
	}
	if c.passthrough() {
		return servePassthrough(ctx, c, lg, lns)
	}

	endpoints, err := backendEndpoints(c, lg)
	if err != nil {
		return err
	}
	var etcd *embed.Etcd
	if c.embeddedMode != "" {
		// Before anything is logged: a --data-dir in use is one error line.
		release, err := lockDataDir(c.dataDir)
		if err != nil {
			return err
		}
		defer release() // after the embedded etcd is closed
		warnEmbedded(lg, c)
		elg, closing := embeddedLogger(lg)
		etcd, err = v3backend.StartEmbeddedContext(ctx, v3backend.EmbeddedConfig{
			Name: c.name, Dir: c.dataDir, ClientURL: c.embeddedClientURLs, PeerURL: c.embeddedPeerURLs,
			AutoCompaction: c.autoCompaction, Logger: elg,
		})
		if err != nil {
			return interruptedOr(ctx, lg, err)
		}
		defer func() {
			closing.Store(true)
			etcd.Close()
		}()
		endpoints = []string{c.embeddedClientURLs}
		lg.Info("embedded etcd started", zap.String("client-url", c.embeddedClientURLs), zap.String("data-dir", c.dataDir))
	}
	bcfg, err := backendConfig(c, endpoints, layout)
	if err != nil {
		return err
	}
	if etcd != nil && c.embeddedInProcess {
		bcfg.Member = etcd.Server // not used with --user: the backend keeps credentials on gRPC
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBridgeInfo(reg, c.embeddedMode != "")
	registerMode(reg, false)
	cli, err := newControlClient(c, bcfg, lg)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }() // after the membership and auth stopped
	if c.embeddedMode == "" && !layout.Scoped() {
		if err := checkForeign(ctx, c, cli, layout, lg); err != nil {
			return err
		}
	}
	mem := newMembership(c, cli, layout, lg, true)
	au := newAuth(c, cli, layout, lg, reg)
	au.start()
	defer au.stop()
	dctx, cancel := context.WithTimeout(ctx, c.dialTimeout*time.Duration(len(endpoints))+time.Second)
	br, err := server.New(dctx, server.Config{Backend: bcfg, Name: c.name, AdvertiseURLs: splitList(c.advertiseClientURLs),
		Members: mem.members(), Auth: au.svc,
		EnablePprof: c.enablePprof, Logger: lg, Registry: reg, GRPCClientMetrics: true, DetachWatches: c.watchDetach,
		HTTP: server.HTTPLimits{IdleTimeout: c.httpIdleTimeout, BodyReadTimeout: c.httpBodyReadTimeout,
			MaxConnections: c.maxConnections}})
	cancel()
	if err != nil {
		return interruptedOr(ctx, lg, err)
	}
	mem.start()
	shutdown := func() error {
		// The registration goes first: other bridges stop advertising
		// this one. Watches are long-polls: Close ends them (clients
		// re-issue them elsewhere), then lets in-flight requests finish.
		mem.stop()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		return br.Close(sctx)
	}

	errc := make(chan error, 8)
	lns.served = true
	for _, l := range lns.client {
		lg.Info("serving", zap.String("url", l.url), zap.Strings("backend", endpoints))
		br.Serve(l.ln, v2api.RequestLog(v2api.ServedOnly(c.served, br.API), lg.Named("request")), errc)
	}
	for _, l := range lns.metrics {
		lg.Info("serving metrics", zap.String("url", l.url))
		br.Serve(l.ln, br.API.MetricsHandler(), errc)
	}
	return server.Run(ctx, lg, br.Ready, errc, shutdown)
}

// interruptedOr is err, a failure to start, unless ctx ended meanwhile: a
// signal before the bridge serves stops it as cleanly as one after (exit
// status 0).
func interruptedOr(ctx context.Context, lg *zap.Logger, err error) error {
	if ctx.Err() == nil {
		return err
	}
	lg.Info("interrupted while starting: shutting down")
	return nil
}

// backendEndpoints are the etcd v3 endpoints: --endpoints, or those the
// --discovery-srv domain's SRV records list.
func backendEndpoints(c *config, lg *zap.Logger) ([]string, error) {
	if c.discoverySRV == "" {
		return splitList(c.endpoints), nil
	}
	srvs, err := srv.GetClient("etcd-client", c.discoverySRV, c.discoverySRVName)
	if err != nil {
		return nil, fmt.Errorf("--discovery-srv %s: %w", c.discoverySRV, err)
	}
	lg.Info("backend endpoints from DNS SRV", zap.String("domain", c.discoverySRV), zap.Strings("endpoints", srvs.Endpoints))
	return srvs.Endpoints, nil
}

// warnEmbedded says loudly that the bridge serves a store of its own, which
// no other bridge or v3 client shares unless pointed at its client URL.
func warnEmbedded(lg *zap.Logger, c *config) {
	why := "--embedded was given"
	if c.embeddedMode == "implicit" {
		why = "no --endpoints, --discovery-srv, --embedded or --config-file was given"
	}
	lg.Warn("serving a PRIVATE EMBEDDED etcd, not a cluster: its data lives only in --data-dir; "+
		"give --endpoints to serve a real etcd v3 cluster",
		zap.String("reason", why), zap.String("data-dir", c.dataDir), zap.String("client-url", c.embeddedClientURLs))
}

// checkForeign looks, for a bridge serving the whole tree of a cluster it
// does not own, for keys no v2 client wrote: another tenant's (a
// Kubernetes registry), which any client of the bridge could then read and
// overwrite. Unless --serve-prefix / asked for that, the bridge refuses to
// start; if it did, the bridge says what it reaches, once.
func checkForeign(ctx context.Context, c *config, cli *clientv3.Client, layout translate.Layout, lg *zap.Logger) error {
	fctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	found, err := v3backend.FindForeign(fctx, cli, layout)
	if err != nil {
		lg.Warn("could not look for keys no v2 client wrote", zap.Error(err))
		return nil
	}
	if len(found) == 0 {
		return nil
	}
	var total int64
	var dirs []string
	for _, f := range found {
		total += f.Keys
		dirs = append(dirs, fmt.Sprintf("%s (%d keys)", f.Path, f.Keys))
	}
	if !c.servePrefixSet {
		return usageErrorf("refusing to serve the whole key space: --serve-prefix is / by default, and the cluster holds %d keys "+
			"no v2 client wrote, under %s; any client of this bridge could read and overwrite them. Set --serve-prefix to the "+
			"v2 subtrees your clients use (flannel: --serve-prefix /coreos.com/network), or --serve-prefix / to serve everything",
			total, strings.Join(dirs, ", "))
	}
	lg.Warn("serving the whole key space (--serve-prefix /): it holds keys no v2 client wrote, which every client of this "+
		"bridge can read and overwrite, and which the bridge mirrors and follows; a narrower --serve-prefix costs only what it serves",
		zap.Int64("keys", total), zap.Strings("directories", dirs))
	return nil
}
