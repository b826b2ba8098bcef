// Command v2bridge (built from cmd/bridge) serves the etcd v2 keys and watch API from etcd v3.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
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

// progName is the installed binary's name, in help, errors and logs.
const progName = "v2bridge"

// Set at build time with -ldflags "-X main.version=... -X main.gitCommit=...".
var (
	version   = "dev"
	gitCommit = "unknown"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, progName+":", err)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 && (args[0] == "migrate" || args[0] == "verify") {
		return runMigrateCommand(args[0], args[1:])
	}
	c, err := parseConfig(args, getenv, os.Stderr)
	if err != nil {
		return err
	}
	if c.showVersion {
		commit := gitCommit
		if bi, ok := debug.ReadBuildInfo(); ok && commit == "unknown" {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					commit = s.Value
				}
			}
		}
		fmt.Printf("v2bridge version: %s\ngit commit: %s\ngo version: %s\n", version, commit, runtime.Version())
		return nil
	}
	lg, err := newLogger(c.logLevel, c.logFormat)
	if err != nil {
		return err
	}
	defer func() { _ = lg.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, c, lg)
}

func newLogger(level, format string) (*zap.Logger, error) {
	lvl, err := zap.ParseAtomicLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	zc := zap.NewProductionConfig()
	if format == "console" {
		zc = zap.NewDevelopmentConfig()
	}
	zc.Level = lvl
	return zc.Build()
}

func serve(ctx context.Context, c *config, lg *zap.Logger) error {
	layout, err := translate.NewLayout(c.dataPrefix, c.metaPrefix)
	if err != nil {
		return err
	}
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
	if len(endpoints) == 0 {
		etcd, err = v3backend.StartEmbedded(v3backend.EmbeddedConfig{
			Name: c.name, Dir: c.dataDir, ClientURL: c.embeddedClientURLs, PeerURL: c.embeddedPeerURLs,
			AutoCompaction: c.autoCompaction,
		})
		if err != nil {
			return err
		}
		defer etcd.Close()
		endpoints = []string{c.embeddedClientURLs}
		lg.Info("embedded etcd started", zap.String("client-url", c.embeddedClientURLs), zap.String("data-dir", c.dataDir))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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

	tlsInfo := serverTLS(c)
	errc := make(chan error, 8)
	var servers []*http.Server
	serveOn := func(urls string, h http.Handler) error {
		for _, u := range splitList(urls) {
			ln, err := listen(u, tlsInfo)
			if err != nil {
				return err
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(lg.Named("http"))}
			servers = append(servers, srv)
			lg.Info("serving", zap.String("url", u), zap.Strings("backend", endpoints))
			go func() { errc <- srv.Serve(ln) }()
		}
		return nil
	}
	if err := serveOn(c.listenClientURLs, api); err != nil {
		return err
	}
	if err := serveOn(c.listenMetricsURLs, api.MetricsHandler()); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		lg.Info("shutting down")
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

// serverTLS is the served-side TLS of https listeners. etcd's transport
// re-reads the certificate files on every new connection, so a rotated
// certificate is picked up without a restart, and checks the CRL.
func serverTLS(c *config) *transport.TLSInfo {
	if c.certFile == "" {
		return nil
	}
	ti := &transport.TLSInfo{CertFile: c.certFile, KeyFile: c.keyFile, TrustedCAFile: c.trustedCAFile,
		ClientCertAuth: c.clientCertAuth, CRLFile: c.clientCRLFile, MinVersion: tls.VersionTLS12}
	if c.tlsMinVersion == "TLS1.3" {
		ti.MinVersion = tls.VersionTLS13
	}
	return ti
}

// listen opens one listen URL: http://host:port, https://host:port or
// unix:///path.
func listen(u string, ti *transport.TLSInfo) (net.Listener, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return nil, err
	}
	switch pu.Scheme {
	case "unix":
		_ = os.Remove(pu.Path) // a stale socket from an earlier run
		return net.Listen("unix", pu.Path)
	case "https":
		ln, err := transport.NewListenerWithOpts(pu.Host, "https", transport.WithTLSInfo(ti))
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", u, err)
		}
		return ln, nil
	default:
		ln, err := net.Listen("tcp", pu.Host)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", u, err)
		}
		return ln, nil
	}
}
