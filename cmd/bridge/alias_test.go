// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// v2ServerFlags are the v2 server's flags of the migration commands, each
// with its deprecated name, a value to give and how to read it back.
func v2ServerFlagTable(f *v2ServerFlags) []struct {
	name, old, value string
	got              func() string
} {
	return []struct {
		name, old, value string
		got              func() string
	}{
		{"v2-server", "from", "http://old-a:2379,http://old-b:2379", func() string { return f.v2Server }},
		{"v2-server-prefix", "from-prefix", "/coreos.com/network", func() string { return f.v2ServerPrefix }},
		{"v2-server-cacert", "from-cacert", "/etc/ca.pem", func() string { return f.v2ServerCACert }},
		{"v2-server-cert", "from-cert", "/etc/cert.pem", func() string { return f.v2ServerCert }},
		{"v2-server-key", "from-key", "/etc/key.pem", func() string { return f.v2ServerKey }},
		{"v2-server-insecure-skip-tls-verify", "from-insecure-skip-tls-verify", "true", func() string { return fmt.Sprint(f.v2ServerInsecure) }},
		{"v2-server-user", "from-user", "root:pw", func() string { return f.v2ServerUser }},
		{"v2-server-timeout", "from-timeout", "7s", func() string { return f.v2ServerTimeout.String() }},
	}
}

// commandFlags parses args and env as cmd (migrate, verify, cutover or
// rollback) does, and returns its v2 server flags and the warnings.
func commandFlags(t *testing.T, cmd string, args []string, env map[string]string) (*v2ServerFlags, []string, error) {
	t.Helper()
	var c config
	var fs *flag.FlagSet
	var f *v2ServerFlags
	switch cmd {
	case "cutover", "rollback":
		var cf cutoverFlags
		fs, f = newCutoverFlagSet(cmd, &c, &cf, io.Discard), &cf.v2ServerFlags
	default:
		var mf migrateFlags
		fs, f = newMigrateFlagSet(cmd, &c, &mf, io.Discard), &mf.v2ServerFlags
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%s %v: %v", cmd, args, err)
	}
	err := applySources(fs, func(k string) string { return env[k] })
	return f, deprecationWarnings(fs), err
}

// TestEveryOldV2ServerFlagNameStillWorks: each --from* name, as a flag, a
// variable or a config file setting, sets its --v2-server* flag, with one
// warning naming the new flag; the new names work without one.
func TestEveryOldV2ServerFlagNameStillWorks(t *testing.T) {
	for _, cmd := range []string{"migrate", "verify", "cutover", "rollback"} {
		for i, fl := range v2ServerFlagTable(&v2ServerFlags{}) {
			for _, via := range []string{"flag", "environment", "config file"} {
				for _, name := range []string{fl.old, fl.name} {
					var args []string
					env := map[string]string{}
					switch via {
					case "flag":
						args = []string{"--" + name + "=" + fl.value}
					case "environment":
						env[envName(name)] = fl.value
					case "config file":
						args = []string{"--config-file", writeFile(t, name+": "+fl.value+"\n")}
					}
					f, warnings, err := commandFlags(t, cmd, args, env)
					if err != nil {
						t.Fatalf("%s: --%s by %s: %v", cmd, name, via, err)
					}
					if got := v2ServerFlagTable(f)[i].got(); got != fl.value {
						t.Errorf("%s: --%s by %s: --%s is %q, want %q", cmd, name, via, fl.name, got, fl.value)
					}
					want := []string{fmt.Sprintf("warning: --%s (%s) is deprecated: use --%s (%s)",
						fl.old, envName(fl.old), fl.name, envName(fl.name))}
					if name == fl.name {
						want = nil
					}
					if fmt.Sprint(warnings) != fmt.Sprint(want) {
						t.Errorf("%s: --%s by %s: warnings %q, want %q", cmd, name, via, warnings, want)
					}
				}
			}
		}
	}
}

// TestOldBoolFlagNameStandsAlone: --from-insecure-skip-tls-verify needs no
// value, as --v2-server-insecure-skip-tls-verify does not.
func TestOldBoolFlagNameStandsAlone(t *testing.T) {
	f, _, err := commandFlags(t, "migrate", []string{"--from-insecure-skip-tls-verify", "--from", "http://a:2379"}, nil)
	if err != nil || !f.v2ServerInsecure || f.v2Server != "http://a:2379" {
		t.Fatalf("insecure %v, from %q, err %v; want true, http://a:2379", f.v2ServerInsecure, f.v2Server, err)
	}
}

// TestOldAndNewNameTogether: the same value is accepted (with the warning);
// two values are a usage error, whatever source gives each.
func TestOldAndNewNameTogether(t *testing.T) {
	f, warnings, err := commandFlags(t, "migrate", []string{"--from", "http://a:2379", "--v2-server", "http://a:2379",
		"--from-timeout", "60s", "--v2-server-timeout", "1m"}, nil)
	if err != nil || f.v2Server != "http://a:2379" || f.v2ServerTimeout != time.Minute || len(warnings) != 2 {
		t.Fatalf("same values: from %q timeout %v warnings %q err %v", f.v2Server, f.v2ServerTimeout, warnings, err)
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"--from", "http://a:2379", "--v2-server", "http://b:2379"}, nil},
		{[]string{"--from-prefix", "/a"}, map[string]string{"V2BRIDGE_V2_SERVER_PREFIX": "/b"}},
		{[]string{"--v2-server-user", "u:p"}, map[string]string{"V2BRIDGE_FROM_USER": "u:q"}},
		{[]string{"--config-file", writeFile(t, "from-timeout: 5s\n")}, map[string]string{"V2BRIDGE_V2_SERVER_TIMEOUT": "6s"}},
	} {
		_, _, err := commandFlags(t, "cutover", c.args, c.env)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "are one setting, given two values") {
			t.Errorf("%v %v: %v, want a usage error", c.args, c.env, err)
		}
	}
	// Through the command: exit status 2, before anything is reached.
	err = run([]string{"migrate", "--from", "http://a:2379", "--v2-server", "http://b:2379", "--endpoints", "http://127.0.0.1:1"},
		nil, io.Discard, io.Discard)
	var ue usageError
	if !errors.As(err, &ue) {
		t.Fatalf("migrate with both names: %v, want a usage error", err)
	}
}

// TestOldServeFlagNameStillWorks: --v2-upstream, V2BRIDGE_V2_UPSTREAM and
// the config file's v2-upstream set --v2-server, with one warning.
func TestOldServeFlagNameStillWorks(t *testing.T) {
	const want = "warning: --v2-upstream (V2BRIDGE_V2_UPSTREAM) is deprecated: use --v2-server (V2BRIDGE_V2_SERVER)"
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"flag", []string{"--v2-upstream", "http://a:2379,http://b:2379"}, nil},
		{"environment", nil, map[string]string{"V2BRIDGE_V2_UPSTREAM": "http://a:2379,http://b:2379"}},
		{"config file", []string{"--config-file", writeFile(t, "v2-upstream: [http://a:2379, http://b:2379]\n")}, nil},
		{"both, one value", []string{"--v2-server", "http://a:2379,http://b:2379"},
			map[string]string{"V2BRIDGE_V2_UPSTREAM": "http://a:2379,http://b:2379"}},
	} {
		cfg, err := parseConfig(c.args, func(k string) string { return c.env[k] }, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.v2Server != "http://a:2379,http://b:2379" || !cfg.passthrough() || fmt.Sprint(cfg.deprecated) != fmt.Sprint([]string{want}) {
			t.Errorf("%s: v2 server %q, passthrough %v, warnings %q; want both URLs, passthrough, %q",
				c.name, cfg.v2Server, cfg.passthrough(), cfg.deprecated, want)
		}
	}
	_, err := parseConfig([]string{"--v2-server", "http://a:2379"}, func(k string) string {
		return map[string]string{"V2BRIDGE_V2_UPSTREAM": "http://b:2379"}[k]
	}, io.Discard)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--v2-upstream and --v2-server are one setting") {
		t.Fatalf("two values: %v, want a usage error", err)
	}
	// The warning reaches stderr once.
	var stderr bytes.Buffer
	if err := run([]string{"--v2-upstream", "http://a:2379", "--version"}, nil, io.Discard, &stderr); err != nil {
		t.Fatal(err)
	}
	if got := stderr.String(); got != "v2bridge: "+want+"\n" {
		t.Fatalf("stderr %q, want the one warning", got)
	}
	if err := checkEnv([]string{"V2BRIDGE_V2_UPSTREAM=x", "V2BRIDGE_FROM=x", "V2BRIDGE_FROM_TIMEOUT=1s"}); err != nil {
		t.Fatalf("the old names' variables: %v", err)
	}
}

// TestServeFlagOldNameIsIgnoredByTheCommands: the commands ignored the
// server's --v2-upstream (a bridge's V2BRIDGE_* variables or config file),
// and still do; their v2 server is --v2-server.
func TestServeFlagOldNameIsIgnoredByTheCommands(t *testing.T) {
	env := map[string]string{"V2BRIDGE_V2_UPSTREAM": "http://a:2379,http://b:2379"}
	for _, cmd := range []string{"migrate", "cutover"} {
		f, warnings, err := commandFlags(t, cmd, []string{"--v2-server", "http://c:2379"}, env)
		if err != nil || f.v2Server != "http://c:2379" || len(warnings) != 0 {
			t.Errorf("%s: v2 server %q, warnings %q, err %v; want http://c:2379 alone", cmd, f.v2Server, warnings, err)
		}
		f, _, err = commandFlags(t, cmd, []string{"--config-file", writeFile(t, "v2-upstream: http://a:2379\n")}, nil)
		if err != nil || f.v2Server != "" {
			t.Errorf("%s: config file's v2-upstream: v2 server %q, err %v; want it ignored", cmd, f.v2Server, err)
		}
	}
}

// TestHelpShowsTheNewNames: help lists --v2-server*, never an old name.
func TestHelpShowsTheNewNames(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"--v2-server string", "$V2BRIDGE_V2_SERVER"}},
		{[]string{"help", "migrate"}, []string{"Usage: v2bridge migrate --v2-server URLS", "--v2-server string", "--v2-server-prefix string",
			"--v2-server-cacert string", "--v2-server-cert string", "--v2-server-key string", "--v2-server-insecure-skip-tls-verify",
			"--v2-server-user string", "--v2-server-timeout duration", "$V2BRIDGE_V2_SERVER_TIMEOUT"}},
		{[]string{"help", "verify"}, []string{"Usage: v2bridge verify --v2-server URLS", "--v2-server string", "--v2-server-prefix string"}},
		{[]string{"help", "cutover"}, []string{"Usage: v2bridge migrate cutover --v2-server URLS", "--v2-server string", "--v2-server-timeout duration"}},
		{[]string{"help", "rollback"}, []string{"Usage: v2bridge migrate rollback --v2-server URLS", "--v2-server string", "--v2-server-user string"}},
	} {
		var out bytes.Buffer
		if err := run(c.args, nil, &out, io.Discard); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: no %q in\n%s", c.args, w, out.String())
			}
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(line, "  --from") || strings.HasPrefix(line, "  --v2-upstream") {
				t.Errorf("%v lists a deprecated name: %s", c.args, line)
			}
		}
	}
}
