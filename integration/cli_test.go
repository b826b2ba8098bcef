// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

var (
	buildOnce sync.Once
	bridgeBin string
	buildErr  error
)

// coverDirEnv names a directory for the coverage of the bridge binary's
// runs (make cover): the binary is then built with -cover over every package
// of the module and each run writes its counters there (GOCOVERDIR). The
// binary ignores V2BRIDGE_TEST_* variables.
const coverDirEnv = "V2BRIDGE_TEST_COVERDIR"

// coverDir is the absolute directory named by coverDirEnv, or "".
func coverDir() string {
	d := os.Getenv(coverDirEnv)
	if d == "" {
		return ""
	}
	if abs, err := filepath.Abs(d); err == nil {
		return abs
	}
	return d
}

// buildBridge builds cmd/bridge, the v2bridge binary, once per test binary.
func buildBridge(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "v2bridge-bin")
		if err != nil {
			buildErr = err
			return
		}
		bridgeBin = filepath.Join(dir, "v2bridge")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		args := []string{"build", "-o", bridgeBin}
		if d := coverDir(); d != "" {
			if err := os.MkdirAll(d, 0o750); err != nil {
				buildErr = err
				return
			}
			args = append(args, "-cover", "-coverpkg=github.com/v2bridge/v2bridge/...")
		}
		out, err := exec.CommandContext(ctx, "go", append(args, "../cmd/bridge")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bridgeBin
}

// childEnv is this process's environment without V2BRIDGE_* variables (the
// binary refuses unknown ones, and a developer's own settings must not leak
// into a test), plus extra; under coverDirEnv, GOCOVERDIR names its
// directory (go test sets GOCOVERDIR for itself: it is replaced).
func childEnv(extra ...string) []string {
	var env []string
	cover := coverDir()
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "V2BRIDGE_") || (cover != "" && strings.HasPrefix(kv, "GOCOVERDIR=")) {
			continue
		}
		env = append(env, kv)
	}
	if cover != "" {
		env = append(env, "GOCOVERDIR="+cover)
	}
	return append(env, extra...)
}

// stopForCoverage ends a bridge process the test is done with: SIGTERM, and
// SIGKILL if it has not exited within a few seconds. A binary built for
// coverage writes its counters only when it exits by itself, so under
// coverDirEnv it is given the chance; otherwise it is killed at once.
func stopForCoverage(p *os.Process, exited <-chan error) error {
	if coverDir() != "" {
		_ = p.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(10 * time.Second):
		}
	}
	_ = p.Kill()
	return <-exited
}

// proc is a bridge binary running on an embedded etcd.
type proc struct {
	cmd  *exec.Cmd
	url  string
	logs *bytes.Buffer
	done chan error
}

func startBridgeProcess(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	bound(t)
	bin := buildBridge(t)
	p := &proc{logs: &bytes.Buffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = t.TempDir()
	p.cmd.Env = childEnv(env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = stopForCoverage(p.cmd.Process, p.done) })
	return p
}

func (p *proc) waitHealthy(t *testing.T, url string) {
	t.Helper()
	p.url = url
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			t.Fatalf("bridge exited: %v\n%s", err, p.logs)
		default:
		}
		if r, err := httpClient.Get(url + "/health"); err == nil {
			b, _ := io.ReadAll(r.Body)
			_ = r.Body.Close()
			if r.StatusCode == 200 && strings.Contains(string(b), "true") {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("bridge not healthy after 60s\n%s", p.logs)
}

// embeddedArgs runs the binary on its embedded etcd with free ports.
func embeddedArgs(t *testing.T) (url string, args []string) {
	url = v2bridgetest.FreeURL(t)
	return url, []string{"--listen-client-urls", url, "--embedded-client-urls", v2bridgetest.FreeURL(t),
		"--embedded-peer-urls", v2bridgetest.FreeURL(t), "--log-level", "warn"}
}

func TestBinaryEnvFlagsAndShutdown(t *testing.T) {
	var url, ignored string
	// The environment sets every flag; the command line wins where both do.
	p := startHealthyBridge(t, func() (string, []string, []string) {
		url, ignored = v2bridgetest.FreeURL(t), v2bridgetest.FreeURL(t)
		return url, []string{
			"V2BRIDGE_LISTEN_CLIENT_URLS=" + ignored,
			"V2BRIDGE_EMBEDDED_CLIENT_URLS=" + v2bridgetest.FreeURL(t),
			"V2BRIDGE_EMBEDDED_PEER_URLS=" + v2bridgetest.FreeURL(t),
			"V2BRIDGE_ADVERTISE_CLIENT_URLS=http://bridge.example:2379",
			"V2BRIDGE_LOG_LEVEL=warn",
		}, []string{"--listen-client-urls", url}
	})
	if r := do(t, "GET", url, "/v2/machines", nil); r.body != "http://bridge.example:2379" {
		t.Fatalf("advertise URL from the environment: %q", r.body)
	}
	if _, err := httpClient.Get(ignored + "/health"); err == nil {
		t.Fatal("the environment's listen URL was used although the flag was given")
	}
	ch := startWatch(t, url, "/w")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-ch:
		if ev.status != 200 || ev.Action != "" {
			t.Fatalf("a watch must end with an empty 200 on shutdown: %d %q", ev.status, ev.Action)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("watch not ended by shutdown")
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, p.logs)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("bridge did not exit on SIGTERM")
	}
}

func TestBinaryRefusesOverlappingPrefixes(t *testing.T) {
	bin := buildBridge(t)
	command := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = childEnv()
		return cmd
	}
	out, err := command("--data-prefix", "/x", "--meta-prefix", "/x/meta/").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "overlaps") {
		t.Fatalf("want a refusal, got %v: %s", err, out)
	}
	out, err = command("--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "go version") {
		t.Fatalf("--version: %v %s", err, out)
	}
}

// etcdctlV2 is the path of an etcdctl that still has the v2 commands, or
// skips the test saying why there is none: etcdctl 3.6 dropped them with
// etcd's v2 API.
func etcdctlV2(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("etcdctl")
	if err != nil {
		missingClient(t, "etcdctl not installed (Debian package etcd-client; .ci/run installs it)")
	}
	if reason := etcdctlLacksV2(path); reason != "" {
		missingClient(t, reason)
	}
	return path
}

// etcdctlLacksV2 says why the etcdctl at path cannot speak v2, or "" if it can.
func etcdctlLacksV2(path string) string {
	out, err := exec.Command(path, "version").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("cannot tell etcdctl's version (%v: %s)", err, bytes.TrimSpace(out))
	}
	return etcdctlVersionLacksV2(string(out))
}

// etcdctlVersionLacksV2 reads `etcdctl version` output: 3.6 and later have
// no v2 commands.
func etcdctlVersionLacksV2(out string) string {
	for _, line := range strings.Split(out, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "etcdctl version: ")
		if !ok {
			continue
		}
		var major, minor int
		if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
			return fmt.Sprintf("cannot parse etcdctl's version %q", v)
		}
		if major > 3 || major == 3 && minor >= 6 {
			return fmt.Sprintf("etcdctl %d.%d has no v2 commands (removed in 3.6 with etcd's v2 API); install etcdctl 3.5 or older", major, minor)
		}
		return ""
	}
	return fmt.Sprintf("no version in etcdctl's output %q", out)
}

func TestEtcdctlVersionDecidesV2Support(t *testing.T) {
	for _, c := range []struct {
		out    string
		skipIf string // "" when v2 commands exist
	}{
		{"etcdctl version: 3.4.23\nAPI version: 3.4\n", ""},
		{"etcdctl version: 3.5.17\nAPI version: 3.5\n", ""},
		{"etcdctl version: 3.6.0\nAPI version: 3.6\n", "etcdctl 3.6 has no v2 commands"},
		{"etcdctl version: 4.0.1\n", "etcdctl 4.0 has no v2 commands"},
		{"something else\n", "no version"},
	} {
		got := etcdctlVersionLacksV2(c.out)
		if c.skipIf == "" && got != "" || c.skipIf != "" && !strings.Contains(got, c.skipIf) {
			t.Errorf("%q: %q, want %q", c.out, got, c.skipIf)
		}
	}
}

// TestEtcdctlV2 drives the bridge binary with the real etcdctl v2.
func TestEtcdctlV2(t *testing.T) {
	etcdctl := etcdctlV2(t)
	url := startHealthyBridge(t, embedded(t)).url
	run := func(want string, a ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, etcdctl, append([]string{"--endpoints", url}, a...)...)
		cmd.Env = append(os.Environ(), "ETCDCTL_API=2")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("etcdctl %v: %v\n%s\nwant %q", a, err, out, want)
		}
	}
	run("bar", "set", "/foo", "bar")
	run("bar", "get", "/foo")
	run("v", "mk", "/new", "v")
	run("", "mkdir", "/dir")
	run("baz", "update", "/foo", "baz")
	run("/dir\n/foo\n/new", "ls", "-r", "--sort", "/")
	run("", "rm", "/foo")
	run("", "rmdir", "/dir")
	run("cluster is healthy", "cluster-health")
	run("clientURLs="+url, "member", "list")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, etcdctl, "--endpoints", url, "get", "/foo")
	cmd.Env = append(os.Environ(), "ETCDCTL_API=2")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 || !strings.Contains(string(out), "100: Key not found (/foo)") {
		t.Fatalf("get of a removed key: %v %s", err, out)
	}
}

// TestPythonEtcd drives the bridge binary with python-etcd.
func TestPythonEtcd(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import etcd").Run(); err != nil {
		missingClient(t, "python3-etcd not installed (Debian package python3-etcd; .ci/run installs it)")
	}
	url := startHealthyBridge(t, embedded(t)).url
	port := url[strings.LastIndex(url, ":")+1:]
	script := `
import etcd, sys
c = etcd.Client(host="127.0.0.1", port=` + port + `, protocol="http")
c.write("/py/a", "1")
assert c.read("/py/a").value == "1"
r = c.write("/py/a", "2", prevValue="1")
assert r.value == "2"
try:
    c.write("/py/a", "3", prevValue="nope")
    sys.exit("CAS should have failed")
except etcd.EtcdCompareFailed:
    pass
c.write("/py/dir", None, dir=True)
c.write("/py/ttl", "t", ttl=30)
assert 0 < c.read("/py/ttl").ttl <= 30
keys = sorted(ch.key for ch in c.read("/py", recursive=True).children)
assert keys == ["/py/a", "/py/dir", "/py/ttl"], keys
idx = c.read("/py/a").modifiedIndex
c.write("/py/a", "4")
assert c.watch("/py/a", index=idx + 1, timeout=10).value == "4"
c.delete("/py/a")
try:
    c.read("/py/a")
    sys.exit("read of a deleted key should fail")
except etcd.EtcdKeyNotFound:
    pass
print("ok")
`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", script).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("python-etcd: %v\n%s", err, out)
	}
}
