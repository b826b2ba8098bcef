// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, `
endpoints: [http://f1:2379, http://f2:2379]
dial-timeout: 7s
name: from-file
log-level: debug
data-prefix: /file
`)
	env := map[string]string{
		"V2BRIDGE_CONFIG_FILE": file,
		"V2BRIDGE_NAME":        "from-env",
		"V2BRIDGE_LOG_LEVEL":   "warn",
	}
	c, err := parseConfig([]string{"--log-level", "error"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, chk := range []struct{ got, want string }{
		{c.endpoints, "http://f1:2379,http://f2:2379"}, // file only
		{c.dialTimeout.String(), (7 * time.Second).String()},
		{c.name, "from-env"},    // env beats file
		{c.logLevel, "error"},   // flag beats env
		{c.dataPrefix, "/file"}, // file beats default
		{c.metaPrefix, "_v2bridge/"},
		{c.advertiseClientURLs, "http://127.0.0.1:2379"},
	} {
		if chk.got != chk.want {
			t.Errorf("got %q, want %q", chk.got, chk.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		file string
		want string
	}{
		{"unknown file key", nil, nil, "endpoint: x\n", `unknown setting "endpoint"`},
		{"bad file value", nil, nil, "dial-timeout: soon\n", "dial-timeout"},
		{"bad env value", nil, map[string]string{"V2BRIDGE_DIAL_TIMEOUT": "soon"}, "", "V2BRIDGE_DIAL_TIMEOUT"},
		{"https without cert", []string{"--listen-client-urls", "https://127.0.0.1:1"}, nil, "", "--cert-file"},
		{"cert without key", []string{"--listen-client-urls", "https://127.0.0.1:1", "--cert-file", "c"}, nil, "", "go together"},
		{"cert without https", []string{"--cert-file", "c", "--key-file", "k"}, nil, "", "no listen URL is https"},
		{"client auth without CA", []string{"--listen-client-urls", "https://127.0.0.1:1", "--cert-file", "c", "--key-file", "k", "--client-cert-auth"}, nil, "", "--trusted-ca-file"},
		{"bad listen url", []string{"--listen-client-urls", "127.0.0.1:2379"}, nil, "", "bad listen URL"},
		{"bad user", []string{"--user", "root"}, nil, "", "name:password"},
		{"bad tls version", []string{"--tls-min-version", "TLS1.0"}, nil, "", "--tls-min-version"},
		{"extra argument", []string{"serve"}, nil, "", "unexpected argument"},
		{"srv and endpoints", []string{"--discovery-srv", "example.com"}, map[string]string{"V2BRIDGE_ENDPOINTS": "http://a:2379"}, "", "--discovery-srv and --endpoints conflict"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range c.env {
				env[k] = v
			}
			if c.file != "" {
				env["V2BRIDGE_CONFIG_FILE"] = writeFile(t, c.file)
			}
			_, err := parseConfig(c.args, func(k string) string { return env[k] }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

func TestConfigDecidesDualMode(t *testing.T) {
	none := func(string) string { return "" }
	for _, c := range []struct {
		name              string
		args              []string
		dual, passthrough bool
		err               string
	}{
		{"v2 server alone is passthrough", []string{"--v2-server", "http://old:2379"}, false, true, ""},
		{"v2 server and endpoints is dual", []string{"--v2-server", "http://old:2379", "--endpoints", "http://m1:2379"}, true, true, ""},
		{"v2 server and SRV discovery is dual", []string{"--v2-server", "http://old:2379", "--discovery-srv", "example.com"}, true, true, ""},
		{"a lease shorter than etcd's shortest is refused", []string{"--v2-server", "http://old:2379", "--endpoints", "http://m1:2379",
			"--mode-lease-ttl", "1s"}, false, false, "--mode-lease-ttl"},
		{"endpoints and SRV discovery conflict in dual mode too", []string{"--v2-server", "http://old:2379", "--endpoints", "http://m1:2379",
			"--discovery-srv", "example.com"}, false, false, "conflict"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseConfig(c.args, none, io.Discard)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.dual() != c.dual || cfg.passthrough() != c.passthrough {
				t.Errorf("dual %v passthrough %v", cfg.dual(), cfg.passthrough())
			}
		})
	}
}

// --keys-detach is deprecated: still accepted from every source (the
// command-line contract only grows), remembered so that the bridge warns.
func TestDeprecatedKeysDetachIsAcceptedFromEverySource(t *testing.T) {
	file := writeFile(t, "keys-detach: false\nembedded: true\n")
	for name, src := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"flag":        {[]string{"--keys-detach=false"}, nil},
		"environment": {nil, map[string]string{"V2BRIDGE_KEYS_DETACH": "true"}},
		"config file": {[]string{"--config-file", file}, nil},
		"not given":   {nil, nil},
	} {
		c, err := parseConfig(src.args, func(k string) string { return src.env[k] }, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.keysDetach.set != (name != "not given") {
			t.Errorf("%s: set=%v", name, c.keysDetach.set)
		}
	}
}

// TestAdvertiseOnlySelf: off by default (every live bridge is listed), on
// from the flag, V2BRIDGE_ADVERTISE_ONLY_SELF or the config file.
func TestAdvertiseOnlySelf(t *testing.T) {
	file := writeFile(t, "endpoints: http://e:2379\nadvertise-only-self: true\n")
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{"default", []string{"--endpoints", "http://e:2379"}, nil, false},
		{"flag", []string{"--endpoints", "http://e:2379", "--advertise-only-self"}, nil, true},
		{"env", []string{"--endpoints", "http://e:2379"}, map[string]string{"V2BRIDGE_ADVERTISE_ONLY_SELF": "true"}, true},
		{"file", []string{"--config-file", file}, nil, true},
		{"flag beats env", []string{"--endpoints", "http://e:2379", "--advertise-only-self=false"},
			map[string]string{"V2BRIDGE_ADVERTISE_ONLY_SELF": "true"}, false},
	} {
		cfg, err := parseConfig(c.args, func(k string) string { return c.env[k] }, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.advertiseOnlySelf != c.want {
			t.Errorf("%s: advertise-only-self %v, want %v", c.name, cfg.advertiseOnlySelf, c.want)
		}
	}
}

// TestServePrefixList: --serve-prefix takes a comma-separated list from
// every source; a bad element is a command-line mistake (exit status 2)
// naming it.
func TestServePrefixList(t *testing.T) {
	c, err := parseConfig([]string{"--serve-prefix", "/service/pg,/coreos.com/network", "--endpoints", "http://a:2379"},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.servePrefix != "/coreos.com/network,/service/pg" || !c.servePrefixSet || len(c.served) != 2 {
		t.Errorf("served %q (%q, set %v)", c.served, c.servePrefix, c.servePrefixSet)
	}
	c, err = parseConfig([]string{"--endpoints", "http://a:2379"}, func(string) string { return "" }, io.Discard)
	if err != nil || c.servePrefix != "/" || c.servePrefixSet {
		t.Errorf("default: %q set %v, %v", c.servePrefix, c.servePrefixSet, err)
	}
	c, err = parseConfig([]string{"--endpoints", "http://a:2379"},
		func(k string) string { return map[string]string{"V2BRIDGE_SERVE_PREFIX": "/"}[k] }, io.Discard)
	if err != nil || c.servePrefix != "/" || !c.servePrefixSet {
		t.Errorf("/ by name from the environment: %q set %v, %v", c.servePrefix, c.servePrefixSet, err)
	}
	for in, want := range map[string]string{
		"coreos.com/network":              `--serve-prefix: prefix "coreos.com/network" is relative: want an absolute v2 path such as /coreos.com/network`,
		"/coreos.com/network/":            `--serve-prefix: prefix "/coreos.com/network/" is not clean: want "/coreos.com/network"`,
		"/a,,/b":                          `--serve-prefix: an empty prefix in "/a,,/b"`,
		"/coreos.com,/coreos.com/network": `--serve-prefix: prefixes "/coreos.com" and "/coreos.com/network" overlap`,
		strings.Repeat("/d", 49):          `--serve-prefix: prefix "` + strings.Repeat("/d", 49) + `": key is deeper than 48 levels`,
	} {
		_, err := parseConfig([]string{"--serve-prefix", in}, func(string) string { return "" }, io.Discard)
		var ue usageError
		if err == nil || err.Error() != want || !errors.As(err, &ue) {
			t.Errorf("--serve-prefix %q: %v, want the command-line mistake %q", in, err, want)
		}
	}
	// A list is no path: together, its prefixes may be deeper than 48
	// levels and longer than 4096 bytes.
	var many []string
	for i := range 300 {
		many = append(many, fmt.Sprintf("/tenant-%03d/coreos.com/network", i))
	}
	c, err = parseConfig([]string{"--serve-prefix", strings.Join(many, ","), "--endpoints", "http://a:2379"},
		func(string) string { return "" }, io.Discard)
	if err != nil || len(c.served) != 300 {
		t.Errorf("300 prefixes: %d served, %v", len(c.served), err)
	}
	_, err = parseConfig([]string{"--serve-prefix", "/a,/b", "--v2-server", "http://old:2379"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "serves one subtree") {
		t.Errorf("two prefixes with --v2-server: %v", err)
	}
}
