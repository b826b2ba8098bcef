// SPDX-License-Identifier: Apache-2.0

//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

func TestCLITakenDataDirIsOneErrorNamingItsHolder(t *testing.T) {
	// Both in the same directory, with the default --data-dir.
	a := startHealthyBridge(t, embedded(t))
	_, args := embeddedArgs(t)
	start := time.Now()
	r := runBinaryIn(t, a.cmd.Dir, nil, args...)
	took := time.Since(start)
	want := fmt.Sprintf("v2bridge: --data-dir default.v2bridge is in use by another process (pid %d): "+
		"stop it or give another --data-dir\n", a.cmd.Process.Pid)
	if r.code != 1 || r.stderr != want || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and only the line %q", r.code, r.stdout, r.stderr, want)
	}
	if took > 15*time.Second {
		t.Errorf("took %v to refuse", took)
	}
	if resp := do(t, "GET", a.url, "/v2/keys/", nil); resp.status != 200 {
		t.Errorf("the first bridge after the second one's attempt: %d %s", resp.status, resp.body)
	}
}

func TestCLIDataDirWhoseDatabaseIsOpenElsewhereIsOneError(t *testing.T) {
	// As an etcd, or a bridge from before v2bridge.lock, holds it.
	dir := t.TempDir()
	db := filepath.Join(dir, "member", "snap", "db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	_, args := embeddedArgs(t)
	start := time.Now()
	r := runBinary(t, nil, append(args, "--data-dir", dir)...)
	took := time.Since(start)
	want := fmt.Sprintf("v2bridge: --data-dir %s is in use by another process (it has %s open: an etcd, "+
		"or an older v2bridge): stop it or give another --data-dir\n", dir, db)
	if r.code != 1 || r.stderr != want || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and only the line %q", r.code, r.stdout, r.stderr, want)
	}
	if took > 15*time.Second {
		t.Errorf("took %v to refuse", took)
	}
}

func TestCLISignalWhileTheEmbeddedEtcdStartsStopsTheBridge(t *testing.T) {
	// A data directory whose member can never be elected again: a second
	// voting member that never starts is added, and the first is stopped
	// (cleanly: its database then records two members). Started on it, the
	// embedded etcd waits for a leader forever.
	dataDir := filepath.Join(t.TempDir(), "data")
	var args []string
	a := startHealthyBridge(t, func() (string, []string, []string) {
		url, base := embeddedArgs(t)
		args = append(base, "--data-dir", dataDir)
		return url, nil, args
	})
	ep := args[3] // --embedded-client-urls
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cli.MemberAdd(ctxT(t, 30*time.Second), []string{v2bridgetest.FreeURL(t)})
	_ = cli.Close()
	if err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	stopping := time.Now()
	select {
	case err := <-a.done:
		a.done <- err // for the cleanup, which waits for it
		t.Logf("the first start stopped in %v", time.Since(stopping))
		if err != nil {
			t.Fatalf("the first start's exit: %v\n%s", err, a.logs)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the first start did not exit on SIGTERM\n%s", a.logs)
	}

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			// A restart on the same ports and data.
			cmd := exec.Command(buildBridge(t), append(append([]string{}, args...), "--log-level", "info")...)
			cmd.Dir = t.TempDir()
			cmd.Env = childEnv()
			out := &syncBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
					<-done
				}
			}()
			// The embedded etcd listens once it has opened its data; it
			// serves nothing until it has a leader, which it never will: the
			// bridge is waiting for it from then on.
			host := strings.TrimPrefix(ep, "http://")
			waitFor(t, 30*time.Second, "the embedded etcd's client port", func() bool {
				c, err := net.DialTimeout("tcp", host, time.Second)
				if err == nil {
					_ = c.Close()
				}
				return err == nil
			})
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("exit: %v, want status 0\n%s", err, out)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("no exit within 15s of %v\n%s", sig, out)
			}
			t.Logf("exited %v after %v", sig, time.Since(start))
			logs := out.String()
			if !strings.Contains(logs, `"msg":"interrupted while starting: shutting down"`) || strings.Contains(logs, `"msg":"serving"`) {
				t.Errorf("want the interruption logged and nothing served:\n%s", logs)
			}
		})
	}
}

func TestCLILogsEtcdsInfoOnlyAtDebugAndNoEmptyField(t *testing.T) {
	t.Run("info", func(t *testing.T) {
		raw := logLinesOf(t, nil, []string{"--log-level", "info"}, nil)
		lines := parseLogLines(t, raw)
		serving, connected := -1, false
		for i, l := range lines {
			if l.fromEtcd() && l.fields["level"] != "warn" && l.fields["level"] != "error" {
				t.Errorf("an embedded etcd line below warn at --log-level info: %s", l.raw)
			}
			if l.fields["msg"] == "serving" && serving < 0 {
				serving = i
			}
			connected = connected || l.fields["msg"] == "etcd v3 backend connected"
		}
		// The bridge's own few lines, and etcd's warnings at most.
		if serving < 0 || serving > 10 || !connected {
			t.Errorf("want a few lines before \"serving\" (%d), \"etcd v3 backend connected\" among them (%v):\n%s",
				serving, connected, strings.Join(raw, "\n"))
		}
	})
	t.Run("debug", func(t *testing.T) {
		raw := logLinesOf(t, nil, []string{"--log-level", "debug"}, nil)
		etcdInfo := 0
		for _, l := range parseLogLines(t, raw) {
			if l.fromEtcd() && l.fields["level"] == "debug" {
				t.Errorf("an embedded etcd debug line: %s", l.raw)
			}
			if l.fromEtcd() && l.fields["level"] == "info" {
				etcdInfo++
			}
		}
		if etcdInfo < 10 {
			t.Errorf("%d embedded etcd info lines at --log-level debug, want its startup and shutdown:\n%s",
				etcdInfo, strings.Join(raw, "\n"))
		}
	})
}

// logLine is a JSON log line and its fields.
type logLine struct {
	raw    string
	fields map[string]any
}

func (l logLine) fromEtcd() bool {
	logger, _ := l.fields["logger"].(string)
	return strings.HasPrefix(logger, "v2bridge.etcd")
}

// parseLogLines parses JSON log lines, failing t on any other, and reports
// every empty field (an empty string or list).
func parseLogLines(t *testing.T, lines []string) []logLine {
	t.Helper()
	var out []logLine
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON log line: %q", l)
		}
		for k, v := range m {
			s, isString := v.(string)
			a, isList := v.([]any)
			if isString && s == "" || isList && len(a) == 0 {
				t.Errorf("empty field %q: %s", k, l)
			}
		}
		out = append(out, logLine{l, m})
	}
	return out
}
