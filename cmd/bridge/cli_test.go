// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestUnknownEnvironmentVariableNamesTheClosest(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string // "" for no error
	}{
		{[]string{"V2BRIDGE_ENDPOINT=http://a:2379"}, "unknown environment variable V2BRIDGE_ENDPOINT (did you mean V2BRIDGE_ENDPOINTS?)"},
		{[]string{"V2BRIDGE_LOGLEVEL=debug"}, "did you mean V2BRIDGE_LOG_LEVEL?"},
		{[]string{"V2BRIDGE_ENDPOINTS=http://a:2379", "PATH=/bin"}, ""},
		{[]string{"V2BRIDGE_FROM=http://old:2379"}, ""},                // a migrate flag does not stop the server
		{[]string{"V2BRIDGE_EMBEDDED=true"}, ""},                       // the embedded opt-in
		{[]string{"V2BRIDGE_TEST_STRICT=1", "V2BRIDGE_BENCH_X=1"}, ""}, // the project's tooling
	} {
		err := checkEnv(c.env)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: unexpected error %v", c.env, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: error %v, want one containing %q", c.env, err, c.want)
		}
	}
}

func TestEveryServerFlagIsInOneHelpGroup(t *testing.T) {
	seen := map[string]int{}
	for _, g := range flagGroups {
		for _, n := range g.names {
			seen[n]++
		}
	}
	fs := newFlagSet(&config{}, io.Discard)
	for n, k := range seen {
		if fs.Lookup(n) == nil {
			t.Errorf("help group names %q, which is not a flag", n)
		}
		if k > 1 {
			t.Errorf("%q is in %d help groups", n, k)
		}
	}
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		if seen[f.Name] == 0 && !isAlias(f) {
			missing = append(missing, f.Name)
		}
	})
	if len(missing) > 0 {
		t.Errorf("flags missing from --help groups: %v", missing)
	}
}

func TestHelpAndVersionSucceed(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"Usage:", "The etcd v3 cluster:", "--endpoints", "$V2BRIDGE_ENDPOINTS",
			"command line > environment > config file > default", "migrate", "verify", "version"}},
		{[]string{"-h"}, []string{"Usage:"}},
		{[]string{"help"}, []string{"Usage:"}},
		{[]string{"help", "migrate"}, []string{"Usage: v2bridge migrate", "--v2-server", "--output"}},
		{[]string{"verify", "--help"}, []string{"Usage: v2bridge verify", "--max-differences"}},
		{[]string{"version"}, []string{"v2bridge version:", "go os/arch:"}},
		{[]string{"--log-level", "debug", "version"}, []string{"v2bridge version:"}},
		{[]string{"--version"}, []string{"git commit:"}},
	} {
		var out bytes.Buffer
		if err := run(c.args, nil, &out, io.Discard); err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: output lacks %q:\n%s", c.args, w, out.String())
			}
		}
	}
}

func TestCommandLineMistakesAreUsageErrors(t *testing.T) {
	// Every one is found before anything is connected to: the URLs lead
	// nowhere.
	from, eps := []string{"--v2-server", "http://127.0.0.1:1"}, []string{"--endpoints", "http://127.0.0.1:1"}
	args := func(parts ...[]string) []string {
		var a []string
		for _, p := range parts {
			a = append(a, p...)
		}
		return a
	}
	migrate, verify := []string{"migrate"}, []string{"verify"}
	cutover, rollback := []string{"migrate", "cutover"}, []string{"migrate", "rollback"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve"}, `unknown command "serve"`},
		{[]string{"--bogus"}, "flag provided but not defined"},
		{[]string{"help", "nothing"}, `unknown command "nothing"`},
		{[]string{"version", "extra"}, `version: unexpected argument "extra"`},
		{[]string{"migrate", "--output", "yaml"}, "--output must be text or json"},
		{migrate, "migrate: --v2-server is required"},
		{verify, "verify: --v2-server is required"},
		{args(migrate, from), "migrate: --endpoints is required"},
		{args(verify, from), "verify: --endpoints is required"},
		{args(verify, eps, []string{"--v2-server", "old-etcd:2379"}), `verify: bad --v2-server "old-etcd:2379"`},
		{args(migrate, from, eps, []string{"--v2-server-prefix", "/a\x01"}), "migrate: bad --v2-server-prefix"},
		{args(migrate, from, eps, []string{"--follow", "--dry-run"}), "--follow cannot be combined with --dry-run"},
		{args(migrate, from, eps, []string{"--data-prefix", "/x", "--meta-prefix", "/x/meta/"}), "overlaps"},
		{args(verify, from, eps, []string{"--log-level", "loud"}), "--log-level"},
		{args(migrate, from, eps, []string{"--progress", "fancy"}), "--progress must be auto, tty, lines or none"},
		{args(migrate, from, eps, []string{"--v2-server-user", "alice"}), "--v2-server-user must be name:password"},
		{args(verify, from, eps, []string{"--user", "alice"}), "--user must be name:password"},
		{cutover, "migrate cutover: --v2-server is required"},
		{args(rollback, from), "migrate rollback: --endpoints is required"},
		{args(cutover, eps, []string{"--v2-server", "old-etcd:2379"}), "migrate cutover: --v2-server: bad URL"},
		{args(rollback, from, eps, []string{"--v2-server-user", "alice"}), "--v2-server-user must be name:password"},
		{args(cutover, from, eps, []string{"--user", "alice"}), "--user must be name:password"},
		{args(rollback, from, eps, []string{"--data-prefix", "/x", "--meta-prefix", "/x/meta/"}), "overlaps"},
	} {
		err := run(c.args, nil, io.Discard, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error containing %q", c.args, err, c.want)
		}
	}
}

func TestOperationalFailuresAreNotUsageErrors(t *testing.T) {
	common := []string{"--v2-server", "http://127.0.0.1:1", "--endpoints", "http://127.0.0.1:1",
		"--dial-timeout", "200ms", "--request-timeout", "200ms", "--progress", "none"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append([]string{"verify"}, common...), "cannot reach the etcd v3 cluster"},
		{append([]string{"migrate"}, common...), "cannot reach the etcd v3 cluster"},
		{append([]string{"migrate", "cutover"}, common[:8]...), "migrate cutover: "},
	} {
		err := run(c.args, nil, io.Discard, io.Discard)
		var ue usageError
		if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error (not a usage error) containing %q", c.args, err, c.want)
		}
	}
}

func TestGlobalFlagsBeforeACommandReachIt(t *testing.T) {
	// Parsed as migrate's own flags: the command gets as far as its first check.
	err := run([]string{"--log-level", "debug", "--endpoints", "http://127.0.0.1:1", "migrate"}, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--v2-server is required") {
		t.Fatalf("got %v, want migrate's --v2-server check", err)
	}
}

func TestEmbeddedEtcdOnlyWhenAskedOrUnconfigured(t *testing.T) {
	file := writeFile(t, "name: node-1\n")
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		mode string // embeddedMode, or "error: ..."
	}{
		{"no backend settings (make run)", nil, nil, "implicit"},
		{"--embedded", []string{"--embedded"}, nil, "explicit"},
		{"V2BRIDGE_EMBEDDED=true", nil, map[string]string{"V2BRIDGE_EMBEDDED": "true"}, "explicit"},
		{"endpoints", []string{"--endpoints", "http://a:2379"}, nil, ""},
		{"V2BRIDGE_EMBEDDED=false (the image)", nil, map[string]string{"V2BRIDGE_EMBEDDED": "false"}, "error: no etcd v3 backend"},
		{"config file without a backend", []string{"--config-file", file}, nil, "error: no etcd v3 backend"},
		{"config file opting in", []string{"--config-file", writeFile(t, "embedded: true\n")}, nil, "explicit"},
		{"embedded and endpoints", []string{"--embedded", "--endpoints", "http://a:2379"}, nil, "error: --embedded conflicts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseConfig(c.args, func(k string) string { return c.env[k] }, io.Discard)
			if want, ok := strings.CutPrefix(c.mode, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("error %v, want %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.embeddedMode != c.mode {
				t.Fatalf("embedded mode %q, want %q", cfg.embeddedMode, c.mode)
			}
		})
	}
}

func TestConfigFileNumbersKeepTheirDigits(t *testing.T) {
	file := writeFile(t, "name: 1000000\nheartbeat-failures: 1000000\nendpoints: [http://a:2379]\n")
	c, err := parseConfig([]string{"--config-file", file}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.name != "1000000" || c.heartbeatFailures != 1000000 {
		t.Fatalf("name %q, heartbeat-failures %d; want 1000000 for both", c.name, c.heartbeatFailures)
	}
}

func TestAdvertiseDefaultNamesTheHostForAWildcardListener(t *testing.T) {
	host := func() (string, error) { return "node-7", nil }
	for _, c := range []struct{ listen, want string }{
		{"http://127.0.0.1:2379", "http://127.0.0.1:2379"},
		{"http://0.0.0.0:2379", "http://node-7:2379"},
		{"https://[::]:2379,unix:///run/v2.sock", "https://node-7:2379,unix:///run/v2.sock"},
	} {
		if got := advertiseDefault(c.listen, host); got != c.want {
			t.Errorf("%s: got %s, want %s", c.listen, got, c.want)
		}
	}
}

func TestV2ServerSelectsPassthroughWithoutAnEtcd(t *testing.T) {
	for _, c := range []struct {
		name     string
		args     []string
		env      map[string]string
		v2Server string // the v2 server list, or "error: ..."
	}{
		{"flag", []string{"--v2-server", "http://old-etcd:2379"}, nil, "http://old-etcd:2379"},
		{"environment", nil, map[string]string{"V2BRIDGE_V2_SERVER": "http://a:2379,http://b:2379"}, "http://a:2379,http://b:2379"},
		{"in the image (V2BRIDGE_EMBEDDED=false)", []string{"--v2-server", "http://a:2379"},
			map[string]string{"V2BRIDGE_EMBEDDED": "false"}, "http://a:2379"},
		{"endpoints given too (kept unused)", []string{"--v2-server", "http://a:2379", "--endpoints", "http://m1:2379"}, nil, "http://a:2379"},
		{"with --embedded", []string{"--v2-server", "http://a:2379", "--embedded"}, nil, "error: --embedded conflicts with --v2-server"},
		{"not an http URL", []string{"--v2-server", "old-etcd:2379"}, nil, "error: bad --v2-server URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseConfig(c.args, func(k string) string { return c.env[k] }, io.Discard)
			if want, ok := strings.CutPrefix(c.v2Server, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("error %v, want %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !cfg.passthrough() || cfg.v2Server != c.v2Server || cfg.embeddedMode != "" {
				t.Fatalf("passthrough %v v2 server %q embedded %q, want passthrough to %q without an embedded etcd",
					cfg.passthrough(), cfg.v2Server, cfg.embeddedMode, c.v2Server)
			}
		})
	}
}
