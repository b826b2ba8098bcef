// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.etcd.io/etcd/client/pkg/v3/srv"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"

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
	lns, err := openListeners(c)
	if err != nil {
		return err
	}
	defer lns.closeUnserved()

	endpoints := splitList(c.endpoints)
	if c.discoverySRV != "" {
		srvs, err := srv.GetClient("etcd-client", c.discoverySRV, c.discoverySRVName)
		if err != nil {
			return fmt.Errorf("--discovery-srv %s: %w", c.discoverySRV, err)
		}
		endpoints = srvs.Endpoints
		lg.Info("backend endpoints from DNS SRV", zap.String("domain", c.discoverySRV), zap.Strings("endpoints", endpoints))
	}
	var etcd *embed.Etcd
	if c.embeddedMode != "" {
		warnEmbedded(lg, c)
		elg, closing := embeddedLogger(lg)
		etcd, err = v3backend.StartEmbedded(v3backend.EmbeddedConfig{
			Name: c.name, Dir: c.dataDir, ClientURL: c.embeddedClientURLs, PeerURL: c.embeddedPeerURLs,
			AutoCompaction: c.autoCompaction, Logger: elg,
		})
		if err != nil {
			return err
		}
		defer func() {
			closing.Store(true)
			etcd.Close()
		}()
		endpoints = []string{c.embeddedClientURLs}
		lg.Info("embedded etcd started", zap.String("client-url", c.embeddedClientURLs), zap.String("data-dir", c.dataDir))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBridgeInfo(reg, c.embeddedMode != "")
	grpcMetrics := grpcprom.NewClientMetrics(
		grpcprom.WithClientCounterOptions(grpcprom.WithSubsystem("v2bridge")),
		grpcprom.WithClientHandlingTimeHistogram(grpcprom.WithHistogramSubsystem("v2bridge")))
	reg.MustRegister(grpcMetrics)
	bcfg := v3backend.Config{
		Endpoints: endpoints, DialTimeout: c.dialTimeout,
		KeepAliveTime: c.dialKeepAliveTime, KeepAliveTimeout: c.dialKeepAliveTimeout,
		HeartbeatInterval: c.heartbeatInterval, HeartbeatTimeout: c.heartbeatTimeout, HeartbeatFailures: c.heartbeatFailures,
		RequestTimeout: c.requestTimeout, AutoSyncInterval: c.autoSyncInterval,
		Layout: layout, Logger: lg.Named("backend"), Registry: reg,
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(grpcMetrics.UnaryClientInterceptor()),
			grpc.WithChainStreamInterceptor(grpcMetrics.StreamClientInterceptor()),
		},
	}
	if c.user != "" {
		bcfg.Username, bcfg.Password, _ = strings.Cut(c.user, ":")
	}
	if c.cacert != "" || c.cert != "" || c.insecureSkipTLSVerify {
		ti := transport.TLSInfo{CertFile: c.cert, KeyFile: c.key, TrustedCAFile: c.cacert, InsecureSkipVerify: c.insecureSkipTLSVerify}
		if bcfg.TLS, err = ti.ClientConfig(); err != nil {
			return fmt.Errorf("backend TLS: %w", err)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, c.dialTimeout*time.Duration(len(endpoints))+time.Second)
	be, err := v3backend.New(dctx, bcfg)
	cancel()
	if err != nil {
		return err
	}
	defer be.Close()
	api := v2api.New(v2api.Config{Store: be, Name: c.name, AdvertiseURLs: splitList(c.advertiseClientURLs),
		Logger: lg.Named("v2api"), Registry: reg, Gatherer: reg, Watchers: be.Hub().Watchers, EnablePprof: c.enablePprof})

	errc := make(chan error, 8)
	var servers []*http.Server
	serveOn := func(lns []urlListener, h http.Handler) {
		for _, l := range lns {
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(lg.Named("http"))}
			servers = append(servers, srv)
			lg.Info("serving", zap.String("url", l.url), zap.Strings("backend", endpoints))
			go func() { errc <- srv.Serve(l.ln) }()
		}
	}
	lns.served = true
	serveOn(lns.client, v2api.RequestLog(api, lg.Named("request")))
	serveOn(lns.metrics, api.MetricsHandler())
	go notifyReady(ctx, be.Ready, lg)
	select {
	case <-ctx.Done():
		lg.Info("shutting down")
		notifyStopping(lg)
	case err := <-errc:
		return err
	}
	// Watches are long-polls: end them (clients re-issue them elsewhere), then
	// let in-flight requests finish.
	be.Hub().EndAll("bridge shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	var errs []error
	for _, srv := range servers {
		errs = append(errs, srv.Shutdown(sctx))
	}
	return errors.Join(errs...)
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
