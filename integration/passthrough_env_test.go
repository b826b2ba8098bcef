// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/v2bridge/v2bridge/bridge/core"
	"github.com/v2bridge/v2bridge/bridge/passthrough"
	"github.com/v2bridge/v2bridge/proof/v2ref"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// passEnv is a bridge in passthrough mode in front of a real etcd v2 server,
// reached through a fault proxy.
type passEnv struct {
	ref   *v2ref.Server
	proxy *v2bridgetest.TCPProxy
	pass  *passthrough.Passthrough
	url   string // the bridge
	reg   *prometheus.Registry
}

// fastLiveness declares a silent v2 server lost within about a second.
var fastLiveness = passthrough.Config{HeartbeatInterval: 200 * time.Millisecond, HeartbeatTimeout: 300 * time.Millisecond,
	HeartbeatFailures: 2, RequestTimeout: 2 * time.Second}

func newPassEnv(t *testing.T, cfg passthrough.Config) *passEnv {
	t.Helper()
	ref := v2ref.StartT(t, v2ref.Options{})
	proxy := v2bridgetest.StartTCPProxy(t, ref.URL)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &passEnv{ref: ref, proxy: proxy, url: "http://" + ln.Addr().String(), reg: prometheus.NewRegistry()}
	cfg.URLs = []string{proxy.URL}
	cfg.AdvertiseURLs = []string{e.url}
	cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	cfg.Registry, cfg.Gatherer = e.reg, e.reg
	e.pass, err = passthrough.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, dl := core.NewHTTPServer(ln, e.pass, core.HTTPLimits{}, nil)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(dl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving the passthrough: %v", err)
		}
	}()
	t.Cleanup(func() {
		e.pass.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
		_ = dl.Wait(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.pass.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}
