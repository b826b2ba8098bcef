// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"expvar"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/bridge/core"
	"github.com/v2bridge/v2bridge/bridge/passthrough"
	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/migrate/engine"
	"github.com/v2bridge/v2bridge/migrate/shadow"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2api"
	"github.com/v2bridge/v2bridge/v3backend"
)

// childCommand is the hidden first argument that turns the benchmark binary
// into the bridge under test: an embedded etcd member plus the bridge, in one
// process of their own, so the benchmark can read the server's RSS from
// /proc/<pid>/status and its CPU never mixes with the clients'. With
// -endpoints the child starts no etcd and runs the bridge alone in front of
// those (the v2bridge-ext system: the bridge as deployed, its own process in
// front of an external etcd). With -etcd-only it runs the embedded member
// alone, so that bridges can be started and restarted in front of it, each a
// process of its own (the history section).
const childCommand = "__serve-bridge"

// serveBridge runs in the child. It prints "READY <bridge-url> <etcd-url>"
// on stdout once both serve (with -endpoints, etcd-url is the first of
// them; with -etcd-only, "READY <etcd-url> <etcd-url>"; with -v2-server,
// "READY <bridge-url> <v2-server-url>"), and shuts down when
// stdin reaches EOF (the parent closed it or died).
func serveBridge(args []string) error {
	fs := flag.NewFlagSet(childCommand, flag.ContinueOnError)
	hbTimeout := fs.Duration("heartbeat-timeout", 0, "backend heartbeat deadline (0: the bridge's default)")
	hbFailures := fs.Int("heartbeat-failures", 0, "missed heartbeats that declare the backend lost (0: default)")
	watchDetach := fs.Bool("watch-detach", true, "waiting one-shot watches leave net/http (the bridge's --watch-detach)")
	endpoints := fs.String("endpoints", "", "comma-separated client URLs of an external etcd (empty: start an embedded member)")
	etcdOnly := fs.Bool("etcd-only", false, "start the embedded member only, no bridge")
	v2Server := fs.String("v2-server", "", "run the bridge in passthrough mode in front of this v2 server")
	grpcHop := fs.String("grpc-hop", "", "run no bridge: forward etcd's KV and Lease gRPC services to this client URL")
	shadowEndpoints := fs.String("shadow-endpoints", "", "with -v2-server: compare every forwarded write with the copy in this etcd v3")
	follow := fs.String("follow", "", "run no bridge: copy this v2 server's "+shadowRoot+" into -endpoints and follow it")
	logPath := fs.String("log", "", "append the bridge's log to this file, at debug level (empty: no log)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	raiseNofile()
	if *grpcHop != "" {
		if *etcdOnly || *endpoints != "" || *v2Server != "" {
			return errors.New("-grpc-hop runs a gRPC forwarder alone: it takes no other mode")
		}
		return serveGRPCHop(*grpcHop)
	}
	if *follow != "" {
		if *etcdOnly || *endpoints == "" || *v2Server != "" {
			return errors.New("-follow runs the follower alone, into -endpoints")
		}
		return serveFollower(*follow, *endpoints)
	}
	if *v2Server != "" {
		if *etcdOnly || *endpoints != "" {
			return errors.New("-v2-server runs passthrough mode: it takes no -endpoints nor -etcd-only")
		}
		return servePassthrough(*v2Server, *shadowEndpoints)
	}

	var eps []string
	for _, e := range strings.Split(*endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if *etcdOnly && len(eps) > 0 {
		return errors.New("-etcd-only starts an embedded member: it takes no -endpoints")
	}
	var member *etcdserver.EtcdServer
	if len(eps) == 0 {
		dir, err := os.MkdirTemp("", "v2bench-bridge-*")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		for attempt := 0; ; attempt++ {
			cu, pu := freeURL(), freeURL()
			e, err := v3backend.StartEmbedded(v3backend.EmbeddedConfig{Name: "bench", Dir: dir + "/etcd",
				ClientURL: cu, PeerURL: pu, LogLevel: "fatal"})
			if err == nil {
				eps = []string{cu}
				member = e.Server
				defer e.Close()
				break
			}
			if attempt == 3 {
				return err
			}
			_ = os.RemoveAll(dir + "/etcd")
		}
	}

	if *etcdOnly {
		fmt.Printf("READY %s %s\n", eps[0], eps[0])
		_, _ = io.Copy(io.Discard, os.Stdin)
		return nil
	}

	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		return err
	}
	ln, u, reg, err := childListener()
	if err != nil {
		return err
	}
	// v2 auth as the binary runs it: a Store following the users and
	// roles on the backend's session, and the Checker (auth stays disabled
	// until a workload enables it).
	actx, acancel := context.WithCancel(context.Background())
	var awg sync.WaitGroup // the Store's goroutine, once started
	defer func() { acancel(); awg.Wait() }()
	followers := func(be *v3backend.Backend) (v2api.Members, *auth.Service) {
		conn := be.Conn()
		st := auth.NewStore(auth.StoreConfig{Client: conn, Live: conn.Live, Keys: auth.KeysFor(layout.MetaPrefix, layout.DataPrefix, layout.Served),
			RequestTimeout: 5 * time.Second})
		awg.Add(1)
		go func() {
			defer awg.Done()
			st.Run(actx)
		}()
		return nil, &auth.Service{Store: st, Checker: auth.NewChecker(auth.CheckerConfig{State: st.State, Await: st.Current, Registry: reg})}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lg, closeLog, err := childLogger(*logPath)
	if err != nil {
		return err
	}
	defer closeLog()
	br, err := core.New(ctx, core.Config{Registry: reg, Logger: lg, AdvertiseURLs: []string{u}, DetachWatches: *watchDetach,
		Followers: followers, Backend: v3backend.Config{Endpoints: eps, Layout: layout, Member: member,
			HeartbeatTimeout: *hbTimeout, HeartbeatFailures: *hbFailures}})
	if err == nil {
		err = br.WaitReady(ctx)
	}
	cancel()
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", br.API)
	// pprof for profiling the bridge while a workload runs (loopback only).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/debug/vars", expvar.Handler())
	br.Serve(ln, mux, nil)

	fmt.Printf("READY %s %s\n", u, eps[0])
	_, _ = io.Copy(io.Discard, os.Stdin)

	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	return br.Close(sctx)
}

// childLogger is the bridge child's logger: JSON lines at debug level,
// appended to path (a bench's several bridges share one file, each line
// naming its pid), or none when path is empty. Debug shows every
// heartbeat missed or excused, and why, beside the loss it leads to.
func childLogger(path string) (*zap.Logger, func(), error) {
	if path == "" {
		return zap.NewNop(), func() {}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	c := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(f), zapcore.DebugLevel)
	lg := zap.New(c).With(zap.Int("pid", os.Getpid()))
	return lg, func() { _ = lg.Sync(); _ = f.Close() }, nil
}

// servePassthrough runs the bridge in passthrough mode in front of the v2
// server at up, assembled as the binary's passthrough mode does (the
// passthrough package's Passthrough as the handler, the bridge's HTTP server
// limits), with its defaults for the heartbeat and the request timeout and
// no request log. With shadowEndpoints, its shadow comparison checks every
// forwarded write against the copy there, as a dual-mode bridge does.
func servePassthrough(up, shadowEndpoints string) error {
	ln, u, reg, err := childListener()
	if err != nil {
		return err
	}
	var obs passthrough.Observer
	if shadowEndpoints != "" {
		sh, stop, err := startShadow(shadowEndpoints, reg)
		if err != nil {
			return err
		}
		defer stop()
		obs = sh
	}
	p, err := passthrough.New(passthrough.Config{URLs: []string{up}, Name: "bench", AdvertiseURLs: []string{u},
		Registry: reg, Gatherer: reg, Observer: obs})
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = p.WaitReady(ctx)
	cancel()
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", p)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.Handle("/debug/vars", expvar.Handler())
	limits := core.DefaultHTTPLimits
	srv, l := core.NewHTTPServer(ln, mux, limits, nil)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()

	fmt.Printf("READY %s %s\n", u, up)
	_, _ = io.Copy(io.Discard, os.Stdin)

	p.Close()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	err = srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// freeURL is http://127.0.0.1:<a port the OS just handed out>.
func freeURL() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer func() { _ = ln.Close() }()
	return "http://" + ln.Addr().String()
}

// childListener is a loopback listener on a port the OS picks, its URL, and
// a registry for the child's metrics.
func childListener() (net.Listener, string, *prometheus.Registry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	return ln, "http://" + ln.Addr().String(), reg, nil
}

// startShadow builds the shadow comparison of a passthrough bridge against
// the etcd v3 at endpoints, as the binary's dual mode does: the v3 side a
// bridge (core.New) would serve, and a client of its own for the feed.
func startShadow(endpoints string, reg *prometheus.Registry) (*shadow.Shadow, func(), error) {
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		return nil, nil, err
	}
	eps := strings.Split(endpoints, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	br, err := core.New(ctx, core.Config{Registry: prometheus.NewRegistry(),
		Backend: v3backend.Config{Endpoints: eps, Layout: layout}})
	if err != nil {
		return nil, nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		_ = br.Close(ctx)
		return nil, nil, err
	}
	sh, err := shadow.New(shadow.Config{Store: core.Store{B: br.Backend}, SampleRate: 1, Registry: reg,
		Updates: &shadow.V3Updates{Client: cli, Layout: layout}})
	if err != nil {
		_ = cli.Close()
		_ = br.Close(ctx)
		return nil, nil, err
	}
	return sh, func() {
		sh.Close()
		_ = cli.Close()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = br.Close(sctx)
	}, nil
}

// serveFollower copies the v2 server from's shadowRoot into the etcd v3 at
// endpoints and follows it, recording its progress as `v2bridge migrate
// --follow` does. It prints "READY <from> <etcd-url>" once the copy is
// done, and stops when stdin reaches EOF.
func serveFollower(from, endpoints string) error {
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		return err
	}
	eps := strings.Split(endpoints, ",")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	be, err := v3backend.New(sctx, v3backend.Config{Endpoints: eps, Layout: layout, Logger: zap.NewNop()})
	scancel()
	if err != nil {
		return err
	}
	defer func() { _ = be.Close() }()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	src, err := cutover.NewV2Server([]string{from}, nil, "", 10*time.Second)
	if err != nil {
		return err
	}
	defer src.Close()
	o := engine.Options{V2Server: []string{from}, V2ServerPrefix: shadowRoot, Target: be, NoHiddenDiscovery: true,
		Log: func(s string) { fmt.Fprintln(os.Stderr, "follower:", s) }}
	sum, err := engine.Copy(ctx, o)
	if err != nil {
		return err
	}
	rep := &cutover.FollowReporter{Client: cli, Keys: cutover.KeysFor(layout.MetaPrefix), V2Server: src,
		Prefix: shadowRoot}
	rep.Applied(sum.Index)
	o.Applied = rep.Applied
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = rep.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		if _, err := engine.Follow(ctx, o, sum); err != nil {
			fmt.Fprintln(os.Stderr, "follower:", err)
		}
	}()
	fmt.Printf("READY %s %s\n", from, eps[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	wg.Wait()
	return nil
}
