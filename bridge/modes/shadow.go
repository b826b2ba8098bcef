// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/core"
	"github.com/v2bridge/v2bridge/bridge/passthrough"
	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/migrate/shadow"
)

// startShadow builds the shadow comparison of a dual-mode bridge's
// passthrough against its v3 side br: give obs to the passthrough's
// observer, and call stop once the passthrough is closed. obs is nil when
// the sample rate is 0. On a client of their own, the shadow watches the
// follower's changes and progress, and the bridge's counters go to a
// leased record in the v3 cluster, where `v2bridge verify` reads them.
func startShadow(cfg *Config, br *core.Bridge, reg prometheus.Registerer) (obs passthrough.Observer, stop func(), err error) {
	if cfg.ShadowSampleRate == 0 {
		return nil, func() {}, nil
	}
	lg := cfg.Logger
	layout := br.Backend.Layout()
	endpoints := br.Backend.Endpoints()
	b := cfg.Backend
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: b.TLS, Username: b.Username,
		Password: b.Password, DialTimeout: b.DialTimeout, DialKeepAliveTime: b.KeepAliveTime,
		DialKeepAliveTimeout: b.KeepAliveTimeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to the etcd v3 cluster at %s: %w", strings.Join(endpoints, ","), err)
	}
	sh, err := shadow.New(shadow.Config{Store: core.Store{B: br.Backend}, SampleRate: cfg.ShadowSampleRate,
		Prefix: cfg.ShadowPrefix, Queue: cfg.ShadowQueue,
		Updates:  &shadow.V3Updates{Client: cli, Layout: layout, Timeout: cfg.RequestTimeout},
		Recorder: shadow.NewV3Recorder(cli, layout, cfg.Name, 0), Name: cfg.Name, AdvertiseURLs: cfg.AdvertiseURLs,
		Logger: lg.Named("shadow"), Registry: reg})
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	if !cutover.Covers(cfg.ShadowPrefix, cfg.ServePrefix) {
		lg.Warn("--shadow-prefix compares only part of what this bridge serves: keys outside it are never checked",
			zap.String("shadow-prefix", cfg.ShadowPrefix), zap.String("serve-prefix", cfg.ServePrefix))
	}
	lg.Info("shadow comparison with etcd v3", zap.Float64("sample-rate", cfg.ShadowSampleRate),
		zap.String("prefix", cfg.ShadowPrefix), zap.Int("queue", cfg.ShadowQueue))
	return sh, func() {
		sh.Close()
		_ = cli.Close()
	}, nil
}
