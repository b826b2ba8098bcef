// SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestEmptyFieldsAreLeftOut(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	lg := zap.New(omitEmpty{core}).With(zap.String("member", ""), zap.String("name", "m1"))
	lg.Info("connected", zap.String("endpoint", "http://a:2379"), zap.String("reason", ""),
		zap.Strings("urls", nil), zap.Strings("peers", []string{"p"}), zap.ByteString("b", nil), zap.Int("n", 0))
	lg.Info("plain", zap.String("k", "v"))
	var got [][]string
	for _, e := range logs.All() {
		var keys []string
		for _, f := range e.Context {
			keys = append(keys, f.Key)
		}
		got = append(got, keys)
	}
	want := [][]string{{"name", "endpoint", "peers", "n"}, {"name", "k"}}
	if len(got) != len(want) {
		t.Fatalf("logged %v, want %v", got, want)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("line %d has fields %v, want %v", i, got[i], want[i])
		}
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("line %d has fields %v, want %v", i, got[i], want[i])
			}
		}
	}
}
