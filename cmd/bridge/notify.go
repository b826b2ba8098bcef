// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
)

// notifyReady tells systemd (Type=notify) the bridge is ready once the
// backend answers and the shared watch exists — what /readyz reports — so
// units ordered after it (flanneld) start against a working bridge. Without
// NOTIFY_SOCKET it does nothing.
func notifyReady(ctx context.Context, ready func() bool, lg *zap.Logger) {
	const poll = 50 * time.Millisecond
	start := time.Now()
	warned := false
	t := time.NewTicker(poll)
	defer t.Stop()
	for !ready() {
		if !warned && time.Since(start) > 10*time.Second {
			lg.Warn("backend or its watch not ready yet; readiness not reported to systemd until it is")
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	sent, err := daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS=serving the v2 API")
	switch {
	case err != nil:
		lg.Warn("sd_notify READY=1 failed", zap.Error(err))
	case sent:
		lg.Info("readiness reported to systemd", zap.Duration("after", time.Since(start)))
	}
}

// notifyStopping tells systemd the bridge is shutting down.
func notifyStopping(lg *zap.Logger) {
	if _, err := daemon.SdNotify(false, daemon.SdNotifyStopping); err != nil {
		lg.Warn("sd_notify STOPPING=1 failed", zap.Error(err))
	}
}
