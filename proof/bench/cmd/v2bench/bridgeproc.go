// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The bridge binary itself (cmd/bridge), run as the operator runs it: the
// shared-cluster section must reach the bridge through its command line
// (--serve-prefix), as a node's DaemonSet pod does.

// buildBridgeBinary builds ./cmd/bridge of the module the benchmark runs in
// (found with `go env GOMOD` from the working directory) into a temporary
// directory; the returned func removes it.
func buildBridgeBinary() (string, func(), error) {
	out, err := exec.Command(goTool(), "env", "GOMOD").Output()
	if err != nil {
		return "", nil, fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", nil, errors.New("not inside the v2bridge module: run from its root, or pass -bridge-bin")
	}
	dir, err := os.MkdirTemp("", "v2bench-bin-*")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	bin := filepath.Join(dir, "v2bridge")
	cmd := exec.Command(goTool(), "build", "-o", bin, "./cmd/bridge")
	cmd.Dir = filepath.Dir(gomod)
	if b, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("go build ./cmd/bridge: %w\n%s", err, b)
	}
	return bin, cleanup, nil
}

// gitRevision is the working directory's commit (with "+changes" when the
// tree differs from it), or "" outside git.
func gitRevision() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if err := exec.Command("git", "diff", "--quiet", "HEAD", "--", ".").Run(); err != nil {
		rev += "+changes"
	}
	return rev
}

// goTool is the go command of the toolchain running the benchmark when it
// can be found, else "go" on PATH.
func goTool() string {
	if r := os.Getenv("GOROOT"); r != "" {
		if p := filepath.Join(r, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// bridgeProc is one bridge binary running as a node's bridge.
type bridgeProc struct {
	url   string        // its client URL (v2 API, /readyz, /metrics)
	pid   int           //
	ready time.Duration // from exec to the first 200 from /readyz
	cmd   *exec.Cmd
	errs  *tail
	done  chan error // cmd.Wait's result
}

// startBridgeProc starts the bridge binary in front of endpoints with
// --serve-prefix prefix, as the DaemonSet example runs it (one bridge per
// node, advertising itself only), and waits until /readyz answers 200.
func startBridgeProc(bin, endpoints, prefix, name string) (*bridgeProc, error) {
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		u := freeURL()
		p, err := launchBridge(bin, endpoints, prefix, name, u)
		if err == nil {
			return p, nil
		}
		last = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, last
}

func launchBridge(bin, endpoints, prefix, name, u string) (*bridgeProc, error) {
	cmd := exec.Command(bin, "--endpoints", endpoints, "--serve-prefix", prefix, "--listen-client-urls", u,
		"--advertise-client-urls", u, "--advertise-only-self", "--name", name, "--log-level", "warn")
	cmd.Env = bridgeEnv()
	// A bridge dies with the benchmark, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &bridgeProc{url: u, cmd: cmd, errs: &tail{max: 8 << 10}, done: make(chan error, 1)}
	cmd.Stderr = p.errs
	cmd.Stdout = p.errs
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.pid = cmd.Process.Pid
	go func() { p.done <- cmd.Wait() }()
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := t0.Add(3 * time.Minute)
	for {
		resp, err := hc.Get(u + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.ready = time.Since(t0)
				return p, nil
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			return nil, fmt.Errorf("bridge %s exited before ready: %v\n%s", name, err, p.errs.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.stop()
			return nil, fmt.Errorf("bridge %s not ready after 3m\n%s", name, p.errs.String())
		}
	}
}

// bridgeEnv is the environment without V2BRIDGE_* settings, so the
// command line alone configures the bridge.
func bridgeEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "V2BRIDGE_") {
			env = append(env, e)
		}
	}
	return env
}

// stop ends the bridge with SIGTERM (SIGKILL after 15 s) and waits for it.
func (p *bridgeProc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		return nil
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		err := <-p.done
		p.done <- err
		return errors.New("bridge did not stop within 15s; killed")
	}
}

// byteForwarder is a TCP forwarder between a bridge and etcd that counts
// the bytes going each way: what etcd sends a bridge, measured on the wire
// (gRPC and HTTP/2 framing included).
type byteForwarder struct {
	ln     net.Listener
	target string
	down   atomic.Int64 // bytes etcd sent (target → client)
	up     atomic.Int64 // bytes the client sent

	wg    sync.WaitGroup // the accept loop and every copy
	mu    sync.Mutex     // guards conns
	conns []net.Conn
}

// newByteForwarder forwards a loopback port to the host:port of etcdURL.
func newByteForwarder(etcdURL string) (*byteForwarder, error) {
	eu, err := url.Parse(etcdURL)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &byteForwarder{ln: ln, target: eu.Host}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.serve(c)
		}
	}()
	return f, nil
}

func (f *byteForwarder) url() string { return "http://" + f.ln.Addr().String() }

func (f *byteForwarder) serve(c net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	e, err := (&net.Dialer{}).DialContext(ctx, "tcp", f.target)
	cancel()
	if err != nil {
		_ = c.Close()
		return
	}
	f.mu.Lock()
	f.conns = append(f.conns, c, e)
	f.mu.Unlock()
	pipe := func(dst, src net.Conn, n *atomic.Int64) {
		defer f.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			k, err := src.Read(buf)
			if k > 0 {
				n.Add(int64(k))
				if _, werr := dst.Write(buf[:k]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = dst.Close()
		_ = src.Close()
	}
	f.wg.Add(2)
	go pipe(e, c, &f.up)
	go pipe(c, e, &f.down)
}

// close stops accepting, closes every connection and waits for the copies.
func (f *byteForwarder) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
