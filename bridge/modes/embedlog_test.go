// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestEmbeddedEtcdLogsItsInfoOnlyAtDebugAndNeverItsDebug(t *testing.T) {
	for _, c := range []struct {
		bridge, want zapcore.Level
	}{
		{zapcore.DebugLevel, zapcore.InfoLevel},
		{zapcore.InfoLevel, zapcore.WarnLevel},
		{zapcore.WarnLevel, zapcore.WarnLevel},
		{zapcore.ErrorLevel, zapcore.ErrorLevel},
	} {
		core, _ := observer.New(c.bridge)
		lg, _ := embeddedLogger(zap.New(core))
		if got := zapcore.LevelOf(lg.Core()); got != c.want {
			t.Errorf("bridge at %v: embedded etcd at %v, want %v", c.bridge, got, c.want)
		}
	}
}

func TestEmbeddedEtcdCloseNoiseIsDroppedOnlyWhileClosing(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel) // etcd at info
	lg, closing := embeddedLogger(zap.New(core))
	noise := "setting up serving from embedded etcd failed."
	lg.Error(noise)
	closing.Store(true)
	lg.With(zap.String("k", "v")).Error(noise)
	lg.Info("closed etcd server")
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Message)
	}
	if len(msgs) != 2 || msgs[0] != noise || msgs[1] != "closed etcd server" {
		t.Fatalf("logged %q; want the error before closing and the info line after", msgs)
	}
}
