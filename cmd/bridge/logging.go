// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"

	"go.etcd.io/etcd/client/pkg/v3/logutil"
	"go.uber.org/zap"
)

// newLogger builds the one logger of the process, the embedded etcd's
// included: etcd's own encoder settings (ISO 8601 time with microseconds,
// lowercase levels, the same keys), so a bridge line and an etcd line look
// alike. Stack traces only on errors, and only in JSON (one field of one
// line): a console log stays one line per entry for grep and journald.
func newLogger(level, format string) (*zap.Logger, error) {
	lvl, err := zap.ParseAtomicLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	zc := logutil.DefaultZapLoggerConfig
	zc.Level = lvl
	zc.Encoding = format
	// Sampling would drop request lines at debug, the one time they are
	// wanted; the bridge logs little otherwise.
	zc.Sampling = nil
	zc.DisableStacktrace = format == "console"
	lg, err := zc.Build()
	if err != nil {
		return nil, fmt.Errorf("logger: %w", err)
	}
	return lg.Named(progName), nil
}
