// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/cutover"
	"github.com/v2bridge/v2bridge/server"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/upstream"
	"github.com/v2bridge/v2bridge/v2api"
	"github.com/v2bridge/v2bridge/v3backend"
)

// dualSides are the two sides of a dual-mode bridge. The v3 side comes up
// in the background (the old server is served meanwhile); onV3 hands it on
// once it is there. The shadow comparison of the old server's answers with
// the v3 side's hooks in here: the passthrough is built with shadow as its
// observer, which samples nothing until onV3 has started the comparer.
type dualSides struct {
	pass   *upstream.Passthrough
	v3     atomic.Pointer[server.Bridge]
	shadow lateObserver
	// mem lists the other bridges for both sides (nil: the bridge alone).
	mem  *membership
	auth *bridgeAuth // the v3 side's auth
	// onV3 is called once, with the v3 side, when it is connected.
	onV3 func(*server.Bridge)
}

// lateObserver is an upstream.Observer whose comparer arrives after the
// passthrough was built; until then it samples nothing.
type lateObserver struct {
	obs  atomic.Pointer[upstream.Observer]
	stop atomic.Pointer[func()]
}

func (l *lateObserver) set(obs upstream.Observer, stop func()) {
	l.stop.Store(&stop)
	if obs != nil {
		l.obs.Store(&obs)
	}
}

// Sample implements upstream.Observer.
func (l *lateObserver) Sample(r *http.Request) bool {
	o := l.obs.Load()
	return o != nil && (*o).Sample(r)
}

// Observe implements upstream.Observer.
func (l *lateObserver) Observe(r *http.Request, a upstream.Answer) {
	if o := l.obs.Load(); o != nil {
		(*o).Observe(r, a)
	}
}

// close stops the comparer, if one was started.
func (l *lateObserver) close() {
	if stop := l.stop.Load(); stop != nil {
		(*stop)()
	}
}

// serveDual runs a bridge with both --v2-upstream and an etcd v3 cluster
// until ctx ends: it serves from the side the mode record in etcd v3 names,
// and switches every bridge at once when `migrate cutover` or `migrate
// rollback` rewrites the record.
func serveDual(ctx context.Context, c *config, lg *zap.Logger, lns *listeners, layout translate.Layout) error {
	endpoints, err := backendEndpoints(c, lg)
	if err != nil {
		return err
	}
	bcfg, err := backendConfig(c, endpoints, layout)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBridgeInfo(reg, false)
	mm := registerDualMode(reg)
	var v3reg atomic.Pointer[prometheus.Registry]
	gatherer := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		gs := prometheus.Gatherers{reg}
		if r := v3reg.Load(); r != nil {
			gs = append(gs, r)
		}
		return gs.Gather()
	})
	cli, err := newControlClient(c, bcfg, lg)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	d := &dualSides{mem: newMembership(c, cli, layout, lg, false), // the agent registers the bridge
		auth: newAuth(c, cli, layout, lg, reg)}
	d.auth.start()
	defer d.auth.stop() // after shutdown, before the client closes
	d.pass, err = upstream.New(upstream.Config{URLs: splitList(c.v2Upstream), Members: d.mem.members(),
		HeartbeatInterval: c.heartbeatInterval, HeartbeatTimeout: c.heartbeatTimeout,
		HeartbeatFailures: c.heartbeatFailures, RequestTimeout: c.requestTimeout,
		Name: c.name, AdvertiseURLs: splitList(c.advertiseClientURLs), EnablePprof: c.enablePprof,
		Logger: lg.Named("upstream"), Registry: reg, Gatherer: gatherer, Observer: &d.shadow})
	if err != nil {
		return err
	}
	defer d.pass.Close()
	d.onV3 = func(br *server.Bridge) {
		obs, stop, err := startShadow(c, br, lg, reg)
		if err != nil {
			lg.Warn("dual mode: no shadow comparison", zap.Error(err))
			return
		}
		d.shadow.set(obs, stop)
	}
	// The passwords the old server accepts go to the v3 side's users, for
	// the cutover.
	learn := newLearner(d.auth.svc.Store, sourceAuthEnabled(d.pass), c.requestTimeout, lg.Named("learn"), reg)
	defer learn.stop() // after the servers: no request offers any more
	sw := cutover.NewSwitch(cutover.SwitchConfig{
		Passthrough: cutover.Backend{API: learn.wrap(d.pass), Probes: d.pass.MetricsHandler(), Ready: d.pass.Ready,
			Index: d.pass.LastIndex},
		Metrics:  promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}),
		Logger:   lg.Named("mode"),
		OnChange: mm.set,
	})
	mm.fenced, mm.headroom = sw.FencedWrites, sw.CeilingHeadroom
	agent := cutover.NewAgent(cutover.AgentConfig{Client: cli, Keys: cutover.KeysFor(layout.MetaPrefix), Switch: sw,
		LeaseTTL: c.modeLeaseTTL, RequestTimeout: c.requestTimeout, Name: c.name,
		Advertise: splitList(c.advertiseClientURLs), DataPrefix: layout.DataPrefix, Prefix: c.servePrefix,
		OnlySelf: c.advertiseOnlySelf, Logger: lg.Named("mode")})

	d.mem.start()
	defer d.mem.stop() // after shutdown, before the client closes
	// The servers start first: the v3 side counts the watches parked on
	// their listeners.
	hs, errc := newHTTPServers(c, lg, lns)
	for _, l := range lns.client {
		lg.Info("serving in dual mode: from the side the mode record names", zap.String("url", l.url),
			zap.Strings("v2-upstream", splitList(c.v2Upstream)), zap.Strings("backend", endpoints))
		hs.Serve(l.ln, v2api.RequestLog(v2api.ServedOnly(c.served, sw), lg.Named("request")), errc)
	}
	for _, l := range lns.metrics {
		lg.Info("serving metrics", zap.String("url", l.url))
		hs.Serve(l.ln, sw.MetricsHandler(), errc)
	}
	bgctx, bgcancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup // the agent and the v3 side's builder
	bg.Add(2)
	go func() {
		defer bg.Done()
		agent.Run(bgctx)
	}()
	go func() {
		defer bg.Done()
		d.buildV3(bgctx, c, bcfg, endpoints, lg, sw, &v3reg, hs.Parked)
	}()
	shutdown := func() error {
		// The registration goes first (a cutover stops waiting for this
		// bridge), but only once the agent has closed the write gate and
		// the writes in flight have finished (within the request timeout;
		// else the lease is left to expire): a cutover that no longer
		// lists the bridge must not see one of its writes land. Then
		// watches end (clients re-issue them elsewhere) and the other
		// requests in flight finish within their deadlines.
		bgcancel()
		bg.Wait()
		d.pass.Close()
		d.shadow.close() // after the passthrough: no request observes it any more
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if br := d.v3.Load(); br != nil {
			br.Backend.Hub().EndAll("bridge shutting down")
		}
		errs := []error{hs.Shutdown(sctx)}
		if br := d.v3.Load(); br != nil {
			errs = append(errs, br.Close(sctx))
		}
		return errors.Join(errs...)
	}
	return server.Run(ctx, lg, sw.Ready, errc, shutdown)
}

// buildV3 connects the v3 side, retrying until it answers or ctx ends, and
// hands it to the switch.
func (d *dualSides) buildV3(ctx context.Context, c *config, bcfg v3backend.Config, endpoints []string, lg *zap.Logger,
	sw *cutover.Switch, v3reg *atomic.Pointer[prometheus.Registry], parked func() int) {
	backoff := time.Second
	for attempt := 1; ctx.Err() == nil; attempt++ {
		// A registry per attempt: a failed attempt may have registered
		// some of its metrics.
		reg := prometheus.NewRegistry()
		dctx, cancel := context.WithTimeout(ctx, c.dialTimeout*time.Duration(len(endpoints))+time.Second)
		br, err := server.New(dctx, server.Config{Backend: bcfg, Name: c.name, AdvertiseURLs: splitList(c.advertiseClientURLs),
			Members: d.mem.members(), Auth: d.auth.svc, EnablePprof: c.enablePprof, Logger: lg, Registry: reg, GRPCClientMetrics: true,
			DetachWatches: c.watchDetach, Parked: parked, HTTP: server.HTTPLimits{IdleTimeout: c.httpIdleTimeout, BodyReadTimeout: c.httpBodyReadTimeout,
				MaxConnections: c.maxConnections}})
		cancel()
		if err == nil {
			v3reg.Store(reg)
			d.v3.Store(br)
			sw.SetV3(cutover.Backend{API: br.API, Probes: br.API.MetricsHandler(), Ready: br.Ready,
				EndWatches: br.Backend.Hub().EndAll})
			lg.Info("dual mode: the etcd v3 side is connected", zap.Strings("backend", endpoints), zap.Int("attempt", attempt))
			if d.onV3 != nil {
				d.onV3(br)
			}
			return
		}
		lg.Warn("dual mode: cannot reach etcd v3 yet; the old server is served meanwhile if the mode record says so",
			zap.Strings("backend", endpoints), zap.Error(err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 10*time.Second)
	}
}

// newControlClient is the etcd v3 client of the mode record, the
// registration and the cutover commands: the server's TLS, auth and
// keepalive settings, over every endpoint. It does not block: while etcd v3
// is unreachable its calls fail within their deadlines.
func newControlClient(c *config, bcfg v3backend.Config, lg *zap.Logger) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            bcfg.Endpoints,
		DialTimeout:          c.dialTimeout,
		DialKeepAliveTime:    bcfg.KeepAliveTime,
		DialKeepAliveTimeout: bcfg.KeepAliveTimeout,
		PermitWithoutStream:  true,
		TLS:                  bcfg.TLS,
		Username:             bcfg.Username,
		Password:             bcfg.Password,
		Logger:               lg.Named("clientv3").WithOptions(zap.IncreaseLevel(zap.ErrorLevel)),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd v3 client for the mode record: %w", err)
	}
	return cli, nil
}
