// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/cutover"
	"github.com/v2bridge/v2bridge/server"
	"github.com/v2bridge/v2bridge/shadow"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/upstream"
)

// checkShadow validates the --shadow-* settings.
func (c *config) checkShadow() error {
	switch {
	case math.IsNaN(c.shadowSampleRate) || c.shadowSampleRate < 0 || c.shadowSampleRate > 1:
		return fmt.Errorf("--shadow-sample-rate %v: want a share from 0 (off) to 1 (every request)", c.shadowSampleRate)
	case c.shadowQueue <= 0:
		return fmt.Errorf("--shadow-queue %d: want at least 1", c.shadowQueue)
	}
	if _, verr := translate.CleanPath(c.shadowPrefix); verr != nil {
		return fmt.Errorf("--shadow-prefix %q: %s", c.shadowPrefix, verr.Cause)
	}
	return nil
}

// startShadow builds the shadow comparison of a passthrough bridge against
// its v3 side br (built with server.New from the same settings): give obs to
// upstream.Config.Observer, and call stop once the passthrough is closed. obs
// is nil when --shadow-sample-rate is 0. The bridge's counters go to a
// leased record in the v3 cluster, written on a client of their own, where
// `v2bridge verify` reads them.
func startShadow(c *config, br *server.Bridge, lg *zap.Logger, reg prometheus.Registerer) (obs upstream.Observer, stop func(), err error) {
	if c.shadowSampleRate == 0 {
		return nil, func() {}, nil
	}
	layout := br.Backend.Layout()
	cli, err := newV3Client(c, br.Backend.Endpoints(), layout)
	if err != nil {
		return nil, nil, err
	}
	sh, err := shadow.New(shadow.Config{Store: server.Store{B: br.Backend}, SampleRate: c.shadowSampleRate,
		Prefix: c.shadowPrefix, Queue: c.shadowQueue,
		Recorder: shadow.NewV3Recorder(cli, layout, c.name, 0), Name: c.name, AdvertiseURLs: splitList(c.advertiseClientURLs),
		Logger: lg.Named("shadow"), Registry: reg})
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	if !cutover.Covers(c.shadowPrefix, c.servePrefix) {
		lg.Warn("--shadow-prefix compares only part of what this bridge serves: keys outside it are never checked",
			zap.String("shadow-prefix", c.shadowPrefix), zap.String("serve-prefix", c.servePrefix))
	}
	lg.Info("shadow comparison with etcd v3", zap.Float64("sample-rate", c.shadowSampleRate),
		zap.String("prefix", c.shadowPrefix), zap.Int("queue", c.shadowQueue))
	return sh, func() {
		sh.Close()
		_ = cli.Close()
	}, nil
}

// newV3Client is a plain v3 client of the cluster the settings name, with
// the backend's TLS, auth and dial timeout.
func newV3Client(c *config, endpoints []string, layout translate.Layout) (*clientv3.Client, error) {
	bcfg, err := backendConfig(c, endpoints, layout)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: bcfg.Endpoints, TLS: bcfg.TLS, Username: bcfg.Username,
		Password: bcfg.Password, DialTimeout: bcfg.DialTimeout, DialKeepAliveTime: bcfg.KeepAliveTime,
		DialKeepAliveTimeout: bcfg.KeepAliveTimeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("connecting to the etcd v3 cluster at %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

// readShadow reads the bridges' shadow records for `v2bridge verify`.
func readShadow(ctx context.Context, c *config, endpoints []string, layout translate.Layout) ([]shadow.Record, error) {
	cli, err := newV3Client(c, endpoints, layout)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Close() }()
	rctx, cancel := context.WithTimeout(ctx, max(c.requestTimeout, time.Second))
	defer cancel()
	return shadow.ReadRecords(rctx, cli, layout)
}

// printShadow prints the shadow summary after verify's own; a failure to
// read it is reported, and does not fail verify.
func printShadow(w io.Writer, recs []shadow.Record, err error) {
	if err != nil {
		_, _ = fmt.Fprintf(w, "shadow       could not read the bridges' shadow records: %v\n", err)
		return
	}
	shadow.WriteSummary(w, recs, time.Now())
}

// jsonShadow is the shadow part of verify's JSON summary.
type jsonShadow struct {
	Bridges []shadow.Record `json:"bridges"`
	Total   shadow.Counts   `json:"total"`
	Error   string          `json:"error,omitempty"`
}

func shadowJSON(recs []shadow.Record, err error) *jsonShadow {
	j := &jsonShadow{Bridges: []shadow.Record{}, Total: shadow.Total(recs)}
	if err != nil {
		j.Error = err.Error()
	}
	j.Bridges = append(j.Bridges, recs...)
	return j
}
