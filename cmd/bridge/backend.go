// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v3backend"
)

// backendConfig is the v3 side of the bridge as the settings describe it:
// endpoints, TLS, auth, timeouts, liveness and the hub's limits. The server
// and the migrate and verify commands connect the same way.
func backendConfig(c *config, endpoints []string, layout translate.Layout) (v3backend.Config, error) {
	bcfg := v3backend.Config{
		Endpoints: endpoints, DialTimeout: c.dialTimeout,
		KeepAliveTime: c.dialKeepAliveTime, KeepAliveTimeout: c.dialKeepAliveTimeout,
		HeartbeatInterval: c.heartbeatInterval, HeartbeatTimeout: c.heartbeatTimeout, HeartbeatFailures: c.heartbeatFailures,
		RequestTimeout: c.requestTimeout, AutoSyncInterval: c.autoSyncInterval,
		RingSize: c.watchHistoryEvents, MaxReplayRevisions: c.watchReplayMaxRevisions,
		WriteBatch: c.writeBatch, Layout: layout,
	}
	if c.user != "" {
		if !strings.Contains(c.user, ":") {
			return bcfg, usageErrorf("--user must be name:password") // a command-line mistake (exit status 2)
		}
		bcfg.Username, bcfg.Password, _ = strings.Cut(c.user, ":")
	}
	if c.cacert != "" || c.cert != "" || c.insecureSkipTLSVerify {
		ti := transport.TLSInfo{CertFile: c.cert, KeyFile: c.key, TrustedCAFile: c.cacert, InsecureSkipVerify: c.insecureSkipTLSVerify}
		var err error
		if bcfg.TLS, err = ti.ClientConfig(); err != nil {
			return bcfg, fmt.Errorf("backend TLS: %w", err)
		}
	}
	return bcfg, nil
}
