// SPDX-License-Identifier: Apache-2.0

package main

import (
	"io"
	"strings"
	"testing"
)

func TestShadowSettings(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string // "" for none
	}{
		{"defaults", nil, nil, ""},
		{"off", []string{"--shadow-sample-rate", "0"}, nil, ""},
		{"from the environment", nil, map[string]string{"V2BRIDGE_SHADOW_SAMPLE_RATE": "0.5",
			"V2BRIDGE_SHADOW_QUEUE": "10", "V2BRIDGE_SHADOW_PREFIX": "/coreos.com/network"}, ""},
		{"a rate above 1", []string{"--shadow-sample-rate", "2"}, nil, "--shadow-sample-rate"},
		{"a negative rate", []string{"--shadow-sample-rate", "-0.1"}, nil, "--shadow-sample-rate"},
		{"an empty queue", []string{"--shadow-queue", "0"}, nil, "--shadow-queue"},
		{"a bad prefix", []string{"--shadow-prefix", "/a\x01"}, nil, "--shadow-prefix"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--endpoints", "http://127.0.0.1:1"}, c.args...)
			_, err := parseConfig(args, func(k string) string { return c.env[k] }, io.Discard)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("error %v, want one mentioning %q", err, c.want)
			}
		})
	}
}
