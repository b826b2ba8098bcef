// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
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
	return StartEmbeddedContext(context.Background(), c)
}

// abandonWait bounds how long StartEmbeddedContext, once ctx ends, waits
// for embed.StartEtcd to return so that it can close what it started.
const abandonWait = 5 * time.Second

// StartEmbeddedContext starts the embedded member and waits until it
// serves, or until ctx ends (a signal to the bridge): then it stops the
// member and returns ctx's error.
func StartEmbeddedContext(ctx context.Context, c EmbeddedConfig) (*embed.Etcd, error) {
	cfg, err := c.embedConfig()
	if err != nil {
		return nil, err
	}
	// embed.StartEtcd cannot be interrupted, and opening the member's
	// database waits for as long as another process holds its lock; it runs
	// on its own so that ctx is honoured meanwhile.
	type started struct {
		e   *embed.Etcd
		err error
	}
	startc := make(chan started, 1)
	go func() {
		e, err := embed.StartEtcd(cfg)
		startc <- started{e, err}
	}()
	var e *embed.Etcd
	select {
	case s := <-startc:
		if s.err != nil {
			return nil, fmt.Errorf("start embedded etcd: %w", s.err)
		}
		e = s.e
	case <-ctx.Done():
		// Close what it starts if it returns soon (the usual case: it was
		// just slow). If it does not, it is stuck on a lock that only
		// another process's exit releases; it is abandoned, which only a
		// caller about to exit may do (the bridge on a signal): the
		// goroutine ends with the process.
		select {
		case s := <-startc:
			if s.err == nil {
				stopEmbedded(s.e)
			}
		case <-time.After(abandonWait):
		}
		return nil, fmt.Errorf("embedded etcd not started: %w", ctx.Err())
	}
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		stopEmbedded(e)
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-ctx.Done():
		stopEmbedded(e)
		return nil, fmt.Errorf("embedded etcd not ready: %w", ctx.Err())
	case <-timeout.C:
		stopEmbedded(e)
		return nil, fmt.Errorf("embedded etcd not ready after 60s")
	}
}

// stopEmbedded closes a member that is not ready: etcd's Close waits for
// its client servers, which start only once the member is ready or
// stopping, so the server is stopped first.
func stopEmbedded(e *embed.Etcd) {
	e.Server.Stop()
	e.Close()
}

// embedConfig is etcd's configuration of the member.
func (c EmbeddedConfig) embedConfig() (*embed.Config, error) {
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
	return cfg, nil
}
