// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/client/pkg/v3/srv"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/core"
	"github.com/v2bridge/v2bridge/bridge/modes"
	"github.com/v2bridge/v2bridge/translate"
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
	if c.keysDetach.set {
		lg.Warn("--keys-detach (V2BRIDGE_KEYS_DETACH, keys-detach in --config-file) is deprecated and has no effect: " +
			"net/http reads every request; remove it")
	}
	ver, commit := buildVersion()
	acfg := modes.Config{Mode: modes.V3, Logger: lg, Version: ver, Commit: commit,
		Client: lns.client, Metrics: lns.metrics,
		HTTP: core.HTTPLimits{IdleTimeout: c.httpIdleTimeout, BodyReadTimeout: c.httpBodyReadTimeout,
			MaxConnections: c.maxConnections},
		Name: c.name, AdvertiseURLs: splitList(c.advertiseClientURLs), EnablePprof: c.enablePprof,
		Served: c.served, ServePrefix: c.servePrefix, ServePrefixSet: c.servePrefixSet,
		AdvertiseOnlySelf: c.advertiseOnlySelf, Layout: layout,
		RequestTimeout: c.requestTimeout, DialTimeout: c.dialTimeout, ModeLeaseTTL: c.modeLeaseTTL,
		StartTimeout:      c.startTimeout,
		HideClientMetrics: !c.clientMetrics,
		HeartbeatInterval: c.heartbeatInterval, HeartbeatTimeout: c.heartbeatTimeout, HeartbeatFailures: c.heartbeatFailures,
		ClientCertAuth: c.clientCertAuth, WatchDetach: c.watchDetach,
		ShadowSampleRate: c.shadowSampleRate, ShadowPrefix: c.shadowPrefix, ShadowQueue: c.shadowQueue}
	if c.passthrough() {
		acfg.Mode, acfg.V2Server = modes.Passthrough, splitList(c.v2Server)
	}
	if acfg.Mode == modes.V3 || c.dual() {
		if c.dual() {
			acfg.Mode = modes.Dual
		}
		endpoints, err := backendEndpoints(c, lg)
		if err != nil {
			lns.close()
			return err
		}
		if c.embeddedMode != "" {
			endpoints = []string{c.embeddedClientURLs}
			acfg.Embedded = &modes.Embedded{EmbeddedConfig: v3backend.EmbeddedConfig{
				Name: c.name, Dir: c.dataDir, ClientURL: c.embeddedClientURLs, PeerURL: c.embeddedPeerURLs,
				AutoCompaction: c.autoCompaction}, Implicit: c.embeddedMode == "implicit", InProcess: c.embeddedInProcess}
		}
		if acfg.Backend, err = backendConfig(c, endpoints, layout); err != nil {
			lns.close()
			return err
		}
	}
	err = modes.Run(ctx, acfg)
	var ue modes.UsageError
	if errors.As(err, &ue) {
		return usageError{err}
	}
	return err
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
