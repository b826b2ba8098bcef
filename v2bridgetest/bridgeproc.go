// SPDX-License-Identifier: Apache-2.0

//go:build unix

package v2bridgetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// BuildBridge builds the v2bridge binary (cmd/bridge) into the test's
// temporary directory and returns its path; race builds it with the race
// detector. It must run inside this module.
func BuildBridge(t TB, race bool) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "v2bridge")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "github.com/v2bridge/v2bridge/cmd/bridge")
	if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// BridgeProcess is one run of the v2bridge binary, a process of its own, so
// a test can kill it (SIGKILL: a crash) or stop it (SIGTERM: a graceful
// shutdown) as an operator would.
type BridgeProcess struct {
	URL    string // where it serves the v2 API
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process is reaped
	log    *tailBuffer   // its last output
}

// StartBridgeProcess runs bin serving url with the given flags (besides
// --listen-client-urls) and waits until /readyz answers 200 (its backend
// answers and its shared watch exists), at most 60 s. V2BRIDGE_* variables
// of this process do not reach it. The process dies with this one (on
// Linux); stop it with Stop.
func StartBridgeProcess(bin, url string, flags ...string) (*BridgeProcess, error) {
	p := &BridgeProcess{URL: url, exited: make(chan struct{}), log: &tailBuffer{max: 8 << 10}}
	p.cmd = exec.Command(bin, append([]string{"--listen-client-urls", url}, flags...)...)
	p.cmd.Dir = os.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "V2BRIDGE_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.SysProcAttr = memberSysProcAttr()
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { // owned by the process: ends when it is reaped
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	if err := p.waitReady(60 * time.Second); err != nil {
		p.Stop(syscall.SIGKILL)
		if strings.Contains(p.log.String(), "address already in use") {
			err = fmt.Errorf("%w: %w", err, syscall.EADDRINUSE) // for PortTaken
		}
		return nil, fmt.Errorf("%w; its output:\n%s", err, p.log.String())
	}
	return p, nil
}

func (p *BridgeProcess) waitReady(d time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return errors.New("the bridge exited")
		default:
		}
		if resp, err := hc.Get(p.URL + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the bridge at %s is not ready after %v", p.URL, d)
}

// Stop sends sig and waits until the process is gone, killing it when it
// has not ended 15 s after the signal. It returns how the process ended
// (its exit status, "" for a clean exit), or that it had exited before.
func (p *BridgeProcess) Stop(sig syscall.Signal) string {
	select {
	case <-p.exited:
		return "exited by itself: " + p.cmd.ProcessState.String()
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return "did not stop within 15 s of " + sig.String() + ": killed"
	}
	if sig == syscall.SIGKILL || p.cmd.ProcessState.Success() {
		return ""
	}
	return p.cmd.ProcessState.String()
}

// Log is the end of the process's output (its last 8 KiB).
func (p *BridgeProcess) Log() string { return p.log.String() }
