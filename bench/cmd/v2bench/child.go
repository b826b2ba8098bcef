// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"expvar"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2api"
	"github.com/v2bridge/v2bridge/v3backend"
)

// childCommand is the hidden first argument that turns the benchmark binary
// into the bridge under test: an embedded etcd member plus the bridge, in one
// process of their own, so the benchmark can read the server's RSS from
// /proc/<pid>/status and its CPU never mixes with the clients'.
const childCommand = "__serve-bridge"

// serveBridge runs in the child. It prints "READY <bridge-url> <etcd-url>"
// on stdout once both serve, and shuts down when stdin reaches EOF (the
// parent closed it or died).
func serveBridge(args []string) error {
	fs := flag.NewFlagSet(childCommand, flag.ContinueOnError)
	hbTimeout := fs.Duration("heartbeat-timeout", 0, "backend heartbeat deadline (0: the bridge's default)")
	hbFailures := fs.Int("heartbeat-failures", 0, "missed heartbeats that declare the backend lost (0: default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	raiseNofile()
	dir, err := os.MkdirTemp("", "v2bench-bridge-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var etcdURL string
	var stopEtcd func()
	for attempt := 0; ; attempt++ {
		cu, pu := freeURL(), freeURL()
		e, err := v3backend.StartEmbedded(v3backend.EmbeddedConfig{Name: "bench", Dir: dir + "/etcd",
			ClientURL: cu, PeerURL: pu, LogLevel: "fatal"})
		if err == nil {
			etcdURL, stopEtcd = cu, e.Close
			break
		}
		if attempt == 3 {
			return err
		}
		_ = os.RemoveAll(dir + "/etcd")
	}
	defer stopEtcd()

	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	be, err := v3backend.New(ctx, v3backend.Config{Endpoints: []string{etcdURL}, Layout: layout, Registry: reg,
		HeartbeatTimeout: *hbTimeout, HeartbeatFailures: *hbFailures})
	cancel()
	if err != nil {
		return err
	}
	defer be.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	u := "http://" + ln.Addr().String()
	api := v2api.New(v2api.Config{Store: be, AdvertiseURLs: []string{u}, Registry: reg, Gatherer: reg,
		Watchers: be.Hub().Watchers})
	mux := http.NewServeMux()
	mux.Handle("/", api)
	// pprof for profiling the bridge while a workload runs (loopback only).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.Handle("/debug/vars", expvar.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()

	fmt.Printf("READY %s %s\n", u, etcdURL)
	_, _ = io.Copy(io.Discard, os.Stdin)

	be.Hub().EndAll("benchmark ending")
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// freeURL is http://127.0.0.1:<a port the OS just handed out>.
func freeURL() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return "http://" + ln.Addr().String()
}
