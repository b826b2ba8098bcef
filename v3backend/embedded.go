// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// EmbeddedConfig configures the single-member etcd the bridge runs when no
// --endpoints are given.
type EmbeddedConfig struct {
	Name      string
	Dir       string
	ClientURL string // v3 clients share the bridge's data here
	PeerURL   string
	// AutoCompaction bounds v3 history (and so how far back a waitIndex can
	// reach); empty means one hour.
	AutoCompaction string
	LogLevel       string
	// Logger, if set, is the member's logger (at its level, LogLevel unused),
	// so its lines share the bridge's format and output.
	Logger *zap.Logger
	// Extra lets tests tune the embedded config (for example election timing).
	Extra func(*embed.Config)
}

// DefaultAutoCompaction is the embedded member's periodic compaction
// retention when none is given.
const DefaultAutoCompaction = "1h"

// StartEmbedded starts the embedded member and waits until it serves.
func StartEmbedded(c EmbeddedConfig) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	if c.Name != "" {
		cfg.Name = c.Name
	}
	cfg.Dir = c.Dir
	cu, err := url.Parse(c.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("embedded client url: %w", err)
	}
	pu, err := url.Parse(c.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("embedded peer url: %w", err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = c.AutoCompaction
	if cfg.AutoCompactionRetention == "" {
		cfg.AutoCompactionRetention = DefaultAutoCompaction
	}
	// embed.NewConfig leaves this 0, which logs every request as "expensive".
	cfg.WarningUnaryRequestDuration = 300 * time.Millisecond
	cfg.LogLevel = c.LogLevel
	if cfg.LogLevel == "" {
		cfg.LogLevel = "warn"
	}
	if c.Logger != nil {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(c.Logger)
	}
	if c.Extra != nil {
		c.Extra(cfg)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded etcd not ready after 60s")
	}
}
