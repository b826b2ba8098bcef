// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"slices"

	"go.etcd.io/etcd/client/pkg/v3/logutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger builds the one logger of the process, the embedded etcd's
// included: etcd's own encoder settings (ISO 8601 time with microseconds,
// lowercase levels, the same keys), so a bridge line and an etcd line look
// alike. Stack traces only on errors, and only in JSON (one field of one
// line): a console log stays one line per entry for grep and journald.
// Fields with nothing in them are left out (omitEmpty).
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
	lg, err := zc.Build(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return omitEmpty{c} }))
	if err != nil {
		return nil, fmt.Errorf("logger: %w", err)
	}
	return lg.Named(progName), nil
}

// omitEmpty is a core that leaves out of every line the fields with nothing
// in them, an empty string or list ("reason":"", etcd's
// "discovery-url":"" or "listen-metrics-urls":[]): they tell an operator
// nothing and read like something missing.
type omitEmpty struct{ zapcore.Core }

func (c omitEmpty) With(fs []zapcore.Field) zapcore.Core { return omitEmpty{c.Core.With(nonEmpty(fs))} }

// Check adds c itself, so that Write, not the wrapped core's, writes.
func (c omitEmpty) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c omitEmpty) Write(e zapcore.Entry, fs []zapcore.Field) error {
	return c.Core.Write(e, nonEmpty(fs))
}

// nonEmpty is fs without its empty fields: fs itself when it has none.
func nonEmpty(fs []zapcore.Field) []zapcore.Field {
	if !slices.ContainsFunc(fs, isEmptyField) {
		return fs
	}
	return slices.DeleteFunc(slices.Clone(fs), isEmptyField)
}

// isEmptyField reports an empty string, byte string or list.
func isEmptyField(f zapcore.Field) bool {
	switch f.Type {
	case zapcore.StringType:
		return f.String == ""
	case zapcore.ByteStringType:
		b, _ := f.Interface.([]byte)
		return len(b) == 0
	case zapcore.ArrayMarshalerType:
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		l, _ := enc.Fields[f.Key].([]any)
		return len(l) == 0
	}
	return false
}
