// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/passthrough"
	"github.com/v2bridge/v2bridge/v2api"
)

// passSide is the passthrough to the v2 server as a Side.
type passSide struct {
	p *passthrough.Passthrough
	h http.Handler // p, or p seen by dual mode's password learner
}

func (s *passSide) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.h.ServeHTTP(w, r) }

func (s *passSide) Metrics() http.Handler { return s.p.MetricsHandler() }

func (s *passSide) Ready() bool { return s.p.Ready() }

// LastIndex is the last X-Etcd-Index the v2 server answered with.
func (s *passSide) LastIndex() uint64 { return s.p.LastIndex() }

// Leave ends the watches (clients re-issue them elsewhere); the requests
// in flight finish within their deadlines.
func (s *passSide) Leave() { s.p.Close() }

// Close has nothing left to do: Leave closed the passthrough.
func (s *passSide) Close(context.Context) error { return nil }

// newPassSide forwards to the v2 server; members and obs may be nil.
func newPassSide(cfg *Config, reg prometheus.Registerer, g prometheus.Gatherer, members v2api.Members,
	obs passthrough.Observer) (*passSide, error) {
	p, err := passthrough.New(passthrough.Config{URLs: cfg.V2Server, Members: members,
		HeartbeatInterval: cfg.HeartbeatInterval, HeartbeatTimeout: cfg.HeartbeatTimeout,
		HeartbeatFailures: cfg.HeartbeatFailures, RequestTimeout: cfg.RequestTimeout,
		Name: cfg.Name, AdvertiseURLs: cfg.AdvertiseURLs, EnablePprof: cfg.EnablePprof, Served: cfg.Served,
		Logger: cfg.Logger.Named("passthrough"), Registry: reg, Gatherer: g, Observer: obs})
	if err != nil {
		return nil, err
	}
	return &passSide{p: p, h: p}, nil
}

// buildPassthrough builds a passthrough-mode bridge: every v2 request is
// forwarded to the v2 server; no etcd v3 (nor an embedded one) is used.
func buildPassthrough(cfg *Config, res *cleanups) (*built, error) {
	reg := newRegistry(cfg, false)
	registerMode(reg, true)
	s, err := newPassSide(cfg, reg, reg, nil, nil)
	if err != nil {
		return nil, err
	}
	res.add(s.p.Close)
	return &built{side: s, serving: "serving in passthrough mode",
		fields: []zap.Field{zap.Strings("v2-server", cfg.V2Server)}}, nil
}
