// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runBinary runs the bridge binary to completion in a fresh directory.
func runBinary(t *testing.T, env []string, args ...string) cmdResult {
	t.Helper()
	return runBinaryIn(t, t.TempDir(), env, args...)
}

// runBinaryIn runs the bridge binary to completion in dir.
func runBinaryIn(t *testing.T, dir string, env []string, args ...string) cmdResult {
	t.Helper()
	bound(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildBridge(t), args...)
	cmd.Dir = dir
	cmd.Env = childEnv(env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return cmdResult{out.String(), errb.String(), code}
}

func TestCLIHelpVersionAndMistakes(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
		args []string
		code int
		out  []string // in stdout
		err  string   // the one line on stderr
	}{
		{"--help", nil, []string{"--help"}, 0, []string{"Usage:", "Serving the v2 API:", "--listen-client-urls",
			"$V2BRIDGE_LISTEN_CLIENT_URLS", "migrate", "verify", "version", "command line > environment > config file > default"}, ""},
		{"-h", nil, []string{"-h"}, 0, []string{"Usage:"}, ""},
		{"help", nil, []string{"help"}, 0, []string{"Usage:"}, ""},
		{"help migrate", nil, []string{"help", "migrate"}, 0, []string{"Usage: v2bridge migrate"}, ""},
		{"version", nil, []string{"version"}, 0, []string{"v2bridge version:", "go version: go1.", "go os/arch: "}, ""},
		{"--version", nil, []string{"--version"}, 0, []string{"git commit:"}, ""},
		{"unknown command", nil, []string{"serve"}, 2, nil, `v2bridge: unknown command "serve"`},
		{"unknown flag", nil, []string{"--endpoint", "x"}, 2, nil, "v2bridge: flag provided but not defined: -endpoint"},
		{"migrate without --v2-server", nil, []string{"migrate"}, 2, nil, "v2bridge: migrate: --v2-server is required: "},
		{"verify without --v2-server", nil, []string{"verify", "--endpoints", "http://127.0.0.1:1"}, 2, nil,
			"v2bridge: verify: --v2-server is required: "},
		{"verify without --endpoints", nil, []string{"verify", "--v2-server", "http://127.0.0.1:1"}, 2, nil,
			"v2bridge: verify: --endpoints is required: "},
		{"migrate with a --v2-server that is no URL", nil, []string{"migrate", "--v2-server", "old-etcd:2379", "--endpoints", "http://127.0.0.1:1"}, 2, nil,
			`v2bridge: migrate: bad --v2-server "old-etcd:2379": want the etcd v2 server's client URL`},
		{"migrate cutover without --v2-server", nil, []string{"migrate", "cutover"}, 2, nil, "v2bridge: migrate cutover: --v2-server is required: "},
		{"migrate rollback without --endpoints", nil, []string{"migrate", "rollback", "--v2-server", "http://127.0.0.1:1"}, 2, nil,
			"v2bridge: migrate rollback: --endpoints is required: "},
		{"version with an argument", nil, []string{"version", "x"}, 2, nil, `v2bridge: version: unexpected argument "x"`},
		{"verify against nothing", nil, []string{"verify", "--v2-server", "http://127.0.0.1:1", "--endpoints", "http://127.0.0.1:1",
			"--dial-timeout", "500ms", "--progress", "none"}, 1, nil, "v2bridge: cannot reach the etcd v3 cluster at http://127.0.0.1:1: "},
		{"unknown variable", []string{"V2BRIDGE_ENDPOINT=http://m1:2379"}, nil, 1, nil,
			"v2bridge: unknown environment variable V2BRIDGE_ENDPOINT (did you mean V2BRIDGE_ENDPOINTS?)"},
		{"config file without a backend", []string{"V2BRIDGE_CONFIG_FILE=/dev/null"}, nil, 1, nil, "v2bridge: no etcd v3 backend"},
		{"embedded refused as in the image", []string{"V2BRIDGE_EMBEDDED=false"}, nil, 1, nil, "v2bridge: no etcd v3 backend"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runBinary(t, c.env, c.args...)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, c.code, r.stdout, r.stderr)
			}
			for _, w := range c.out {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
				}
			}
			if c.err == "" {
				if r.stderr != "" {
					t.Errorf("stderr: %q", r.stderr)
				}
				return
			}
			if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], c.err) {
				t.Errorf("stderr %q, want one line starting %q", r.stderr, c.err)
			}
		})
	}
}

func TestCLITakenPortIsOneErrorBeforeAnythingStarts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	taken := "http://" + ln.Addr().String()
	_, args := embeddedArgs(t)
	for _, c := range []struct{ name, flag string }{
		{"client listener", "--listen-client-urls"},
		{"embedded etcd's client port", "--embedded-client-urls"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			r := runBinary(t, nil, append(append([]string{}, args...), c.flag, taken)...)
			want := "v2bridge: cannot listen on " + taken + ": address already in use"
			if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, want) {
				t.Fatalf("exit %d, stderr %q; want exit 1 and the one line %q", r.code, r.stderr, want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v to refuse", d)
			}
		})
	}
	// Nothing started: no embedded etcd data directory was created.
	dataDir := filepath.Join(t.TempDir(), "data")
	if r := runBinary(t, nil, append(append([]string{}, args...), "--listen-client-urls", taken, "--data-dir", dataDir)...); r.code != 1 {
		t.Fatalf("exit %d", r.code)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("the embedded etcd started before the taken port was found: %s exists (%v)", dataDir, err)
	}
}

// logLinesOf starts the binary, waits until it serves, runs f, stops it and
// returns its log lines.
func logLinesOf(t *testing.T, env []string, args []string, f func(url string)) []string {
	t.Helper()
	url, base := embeddedArgs(t)
	p := startBridgeProcess(t, env, append(base, args...)...)
	p.waitHealthy(t, url)
	if f != nil {
		f(url)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(20 * time.Second):
		t.Fatal("no exit on SIGTERM")
	}
	return strings.Split(strings.TrimSpace(p.logs.String()), "\n")
}

// etcdTime is etcd's log timestamp: ISO 8601, microseconds, UTC as Z.
var etcdTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)

func TestCLILogFormatIsEtcds(t *testing.T) {
	t.Run("json", func(t *testing.T) {
		lines := logLinesOf(t, []string{"TZ=UTC"}, []string{"--log-level", "info"}, nil)
		var sawEtcd, sawWarn bool
		for _, l := range lines {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("not a JSON log line: %q", l)
			}
			if ts, _ := m["ts"].(string); !etcdTime.MatchString(ts) {
				t.Errorf("ts %q is not etcd's format: %s", ts, l)
			}
			if lvl, _ := m["level"].(string); lvl != strings.ToLower(lvl) {
				t.Errorf("level %q is not lowercase", lvl)
			}
			if m["level"] == "error" {
				t.Errorf("an error logged by a clean start and shutdown: %s", l)
			}
			logger, _ := m["logger"].(string)
			sawEtcd = sawEtcd || strings.HasPrefix(logger, "v2bridge.etcd")
			if m["level"] == "warn" && strings.Contains(l, "PRIVATE EMBEDDED") {
				sawWarn = true
			}
		}
		if !sawEtcd || !sawWarn {
			t.Errorf("want the embedded etcd's lines in the bridge's log (%v) and the embedded-store warning (%v):\n%s",
				sawEtcd, sawWarn, strings.Join(lines, "\n"))
		}
	})
	t.Run("console", func(t *testing.T) {
		lines := logLinesOf(t, []string{"TZ=UTC"}, []string{"--log-level", "warn", "--log-format", "console"}, nil)
		sawWarn := false
		for _, l := range lines {
			f := strings.Split(l, "\t")
			if len(f) < 4 || !etcdTime.MatchString(f[0]) {
				t.Errorf("not a console line with etcd's time (stack trace?): %q", l)
				continue
			}
			sawWarn = sawWarn || f[1] == "warn" && strings.Contains(l, "PRIVATE EMBEDDED")
		}
		if !sawWarn {
			t.Errorf("no embedded-store warning:\n%s", strings.Join(lines, "\n"))
		}
	})
}

func TestCLIDebugLogsEachRequestWithoutValues(t *testing.T) {
	lines := logLinesOf(t, nil, []string{"--log-level", "debug"}, func(url string) {
		if r := do(t, "PUT", url, "/v2/keys/app/k", form("value", "s3cr3t-value")); r.status != 201 {
			t.Fatalf("PUT: %d %s", r.status, r.body)
		}
		if r := do(t, "GET", url, "/v2/keys/app/k?wait=true&waitIndex=1", nil); r.status != 200 {
			t.Fatalf("watch: %d %s", r.status, r.body)
		}
	})
	want := map[string]bool{
		`"msg":"request","method":"PUT","path":"/v2/keys/app/k"`:       false,
		`"msg":"watch started","method":"GET","path":"/v2/keys/app/k"`: false,
		`"reason":"event delivered"`:                                   false,
		`"status":201`:                                                 false,
		`"duration":`:                                                  false,
	}
	for _, l := range lines {
		if strings.Contains(l, "s3cr3t-value") {
			t.Errorf("a value reached the log: %s", l)
		}
		for w := range want {
			if strings.Contains(l, w) {
				want[w] = true
			}
		}
	}
	for w, ok := range want {
		if !ok {
			t.Errorf("no log line contains %s", w)
		}
	}
}

func TestCLIEmbeddedStoreAndBuildAreMetrics(t *testing.T) {
	url, args := embeddedArgs(t)
	p := startBridgeProcess(t, nil, args...)
	p.waitHealthy(t, url)
	r := do(t, "GET", url, "/metrics", nil)
	for _, w := range []string{"v2bridge_embedded_store 1", `v2bridge_build_info{commit="`, `goversion="go1.`} {
		if !strings.Contains(r.body, w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}
}

func TestCLINotifiesSystemdWhenReadyAndStopping(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	msgs := make(chan string, 8)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	url, args := embeddedArgs(t)
	p := startBridgeProcess(t, []string{"NOTIFY_SOCKET=" + sock}, args...)
	expect := func(want string) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for {
			select {
			case m := <-msgs:
				if strings.Contains(m, want) {
					return
				}
			case <-deadline:
				t.Fatalf("no %s on NOTIFY_SOCKET\n%s", want, p.logs)
			}
		}
	}
	expect("READY=1")
	if r, err := httpClient.Get(url + "/readyz"); err != nil || r.StatusCode != 200 {
		t.Fatalf("READY=1 sent but /readyz: %v %v", r, err)
	} else {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	expect("STOPPING=1")
}

func TestCLIMigrateAndVerifyPrintOneJSONSummary(t *testing.T) {
	// The v2 server is the bridge itself, the target its embedded etcd: every
	// node is already there.
	url, args := embeddedArgs(t)
	ep := args[3] // --embedded-client-urls
	p := startBridgeProcess(t, nil, args...)
	p.waitHealthy(t, url)
	do(t, "PUT", url, "/v2/keys/src/a", form("value", "1"))
	do(t, "PUT", url, "/v2/keys/src/b", form("value", "2"))
	common := []string{"--v2-server", url, "--v2-server-prefix", "/src", "--endpoints", ep, "--progress", "none", "--output", "json"}

	// A global flag before the command reaches it.
	r := runBinary(t, nil, append([]string{"--log-level", "error", "migrate"}, common...)...)
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || r.code != 0 {
		t.Fatalf("migrate --output json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if m["command"] != "migrate" || m["ok"] != true || m["unchanged"] != float64(3) {
		t.Errorf("migrate summary: %s", r.stdout)
	}
	r = runBinary(t, nil, append([]string{"verify"}, common...)...)
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || r.code != 0 || m["ok"] != true {
		t.Fatalf("verify --output json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if d, _ := m["differences"].([]any); len(d) != 0 || m["sourceNodes"] != float64(3) {
		t.Errorf("verify summary: %s", r.stdout)
	}
	// A command that fails before it counts anything still prints one object
	// (here a command-line mistake: exit status 2).
	r = runBinary(t, nil, "verify", "--output", "json", "--v2-server", url, "--progress", "none")
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || r.code != 2 || m["ok"] != false ||
		!strings.Contains(m["error"].(string), "--endpoints is required") {
		t.Fatalf("failed verify --output json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
}
