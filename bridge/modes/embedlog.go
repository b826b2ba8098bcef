// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// embeddedLogger is the embedded etcd's logger: the bridge's, one level up
// from the bridge's down to warn, and without stack traces, which locate
// etcd's code, not an operator's problem. At the default level, info, etcd
// logs only its warnings and errors: its info lines (some fifty at every
// start: its configuration, raft's elections, each listener) would bury the
// bridge's own. At debug, etcd logs at info, never at debug: etcd's debug
// lines are bbolt transactions and raw applied requests, values included,
// which would drown the bridge's own request lines and leak what they
// deliberately leave out. Once closing is set, it drops the errors etcd logs
// about its own listeners on every clean Close.
func embeddedLogger(lg *zap.Logger) (*zap.Logger, *atomic.Bool) {
	closing := new(atomic.Bool)
	lg = lg.Named("etcd").WithOptions(zap.AddStacktrace(zapcore.DPanicLevel),
		zap.WrapCore(func(c zapcore.Core) zapcore.Core { return closeNoiseFilter{c, closing} }))
	// IncreaseLevel only raises: each case applies to a level it raises.
	switch {
	case lg.Core().Enabled(zapcore.DebugLevel):
		lg = lg.WithOptions(zap.IncreaseLevel(zapcore.InfoLevel))
	case lg.Core().Enabled(zapcore.InfoLevel):
		lg = lg.WithOptions(zap.IncreaseLevel(zapcore.WarnLevel))
	}
	return lg, closing
}

// closeNoise are the messages embed.Etcd.Close logs for listeners it has
// just closed itself.
var closeNoise = map[string]bool{
	"setting up serving from embedded etcd failed.": true,
	"stopping insecure grpc server due to error":    true,
	"stopped insecure grpc server due to error":     true,
	"stopping secure grpc server due to error":      true,
	"stopped secure grpc server due to error":       true,
}

type closeNoiseFilter struct {
	zapcore.Core
	closing *atomic.Bool
}

func (f closeNoiseFilter) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if f.closing.Load() && closeNoise[e.Message] {
		return ce
	}
	return f.Core.Check(e, ce)
}

func (f closeNoiseFilter) With(fields []zapcore.Field) zapcore.Core {
	return closeNoiseFilter{f.Core.With(fields), f.closing}
}
