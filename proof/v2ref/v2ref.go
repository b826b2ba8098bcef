// SPDX-License-Identifier: Apache-2.0

// Package v2ref builds and runs the etcd v2 reference server (the v2ref
// binary of the separate Go module in proof/reference/) for tests of the main
// module.
//
// The reference is a real etcd 3.5 server with the v2 API enabled. It lives in
// its own module because etcd 3.5 and the etcd 3.6 used by the main module
// cannot share one module graph; this package therefore uses only the
// standard library and talks to the reference as a child process.
//
// Typical use in a test:
//
//	srv := v2ref.StartT(t, v2ref.Options{})
//	resp, err := http.Get(srv.URL + "/v2/keys/foo")
//
// Set V2REF_BIN to the path of a prebuilt v2ref binary to skip the build.
package v2ref

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StartTimeout bounds how long Start waits for the READY line, on top of
// whatever deadline the caller's context carries.
const StartTimeout = 60 * time.Second

// stopTimeout bounds how long Stop waits after SIGTERM before it kills.
const stopTimeout = 15 * time.Second

// Options configures a reference server.
type Options struct {
	// V2V3 serves the v2 API through etcd 3.5's experimental v2-over-v3
	// emulation (--v2v3) instead of the real v2 store.
	V2V3 bool
	// DataDir is the etcd data directory. Empty means a fresh temporary
	// directory that Stop removes.
	DataDir string
	// Stderr, if set, receives the server's stderr (etcd's logs, warn level
	// and above). The last few KiB are kept for error messages either way.
	Stderr io.Writer
	// ExtraArgs are appended to the v2ref command line, e.g.
	// []string{"--auto-compaction-retention", "1h"}.
	ExtraArgs []string
}

// Server is a running reference server.
type Server struct {
	// URL is the client URL, e.g. "http://127.0.0.1:41234". It serves the
	// etcd v2 HTTP API (and etcd's v3 gRPC API on the same port).
	URL string
	// DataDir is the data directory in use.
	DataDir string

	cmd      *exec.Cmd
	stdin    io.WriteCloser
	tmpDir   string // removed by Stop; empty if the caller owns DataDir
	stderr   *tailBuffer
	waitDone chan struct{}
	waitErr  error

	stopOnce sync.Once
	stopErr  error
}

var (
	buildMu  sync.Mutex
	builtBin string
)

// Build builds the v2ref binary (once per process; successful builds are also
// cached across processes under os.TempDir(), keyed by a hash of the
// reference module's sources) and returns its path. If the environment
// variable V2REF_BIN is set, Build returns it without building.
func Build(ctx context.Context) (string, error) {
	if p := os.Getenv("V2REF_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("v2ref: V2REF_BIN: %w", err)
		}
		return p, nil
	}

	buildMu.Lock()
	defer buildMu.Unlock()
	if builtBin != "" {
		return builtBin, nil
	}

	dir, err := referenceDir()
	if err != nil {
		return "", err
	}
	sum, err := sourceHash(dir)
	if err != nil {
		return "", err
	}
	cacheDir := filepath.Join(os.TempDir(), "v2bridge-v2ref-"+sum)
	bin := filepath.Join(cacheDir, "v2ref")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		builtBin = bin
		return bin, nil
	}

	if err := os.MkdirAll(cacheDir, 0o750); err != nil {
		return "", fmt.Errorf("v2ref: %w", err)
	}
	// Build under a unique name and rename into place, so concurrent test
	// processes never see a half-written binary.
	tmp, err := os.CreateTemp(cacheDir, "v2ref-build-*")
	if err != nil {
		return "", fmt.Errorf("v2ref: %w", err)
	}
	tmpName := tmp.Name()
	_ = tmp.Close()
	defer func() { _ = os.Remove(tmpName) }() // no-op after a successful rename

	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", tmpName, ".")
	cmd.Dir = dir
	// The reference module must never be resolved through a go.work of the
	// main module: its etcd 3.5 graph would clash with etcd 3.6.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = fmt.Errorf("%w (%v)", ctxErr, err)
		}
		return "", fmt.Errorf("v2ref: go build in %s: %w\n%s", dir, err, out)
	}
	if err := os.Rename(tmpName, bin); err != nil {
		return "", fmt.Errorf("v2ref: %w", err)
	}
	builtBin = bin
	return bin, nil
}

// Start builds the reference if needed, starts it as a child process and
// waits (bounded by ctx and StartTimeout) until it reports READY. ctx only
// bounds the start: cancelling it later does not stop the server; call Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := Build(ctx)
	if err != nil {
		return nil, err
	}

	s := &Server{
		DataDir:  opts.DataDir,
		stderr:   &tailBuffer{max: 16 << 10},
		waitDone: make(chan struct{}),
	}
	if s.DataDir == "" {
		d, err := os.MkdirTemp("", "v2ref-data-*")
		if err != nil {
			return nil, fmt.Errorf("v2ref: %w", err)
		}
		s.tmpDir, s.DataDir = d, d
	}
	cleanupTmp := func() {
		if s.tmpDir != "" {
			_ = os.RemoveAll(s.tmpDir)
		}
	}

	args := []string{
		"--data-dir", s.DataDir,
		"--listen-client-url", "http://127.0.0.1:0",
		"--listen-peer-url", "http://127.0.0.1:0",
		// The child shuts down when our end of its stdin closes, i.e. also
		// when this process dies without calling Stop.
		"--exit-on-stdin-eof",
	}
	if opts.V2V3 {
		args = append(args, "--v2v3")
	}
	args = append(args, opts.ExtraArgs...)

	cmd := exec.Command(bin, args...)
	var stderr io.Writer = s.stderr
	if opts.Stderr != nil {
		stderr = io.MultiWriter(s.stderr, opts.Stderr)
	}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		cleanupTmp()
		return nil, fmt.Errorf("v2ref: %w", err)
	}
	// A pipe of our own (rather than cmd.StdoutPipe) so that reading it
	// does not race with cmd.Wait.
	outR, outW, err := os.Pipe()
	if err != nil {
		cleanupTmp()
		return nil, fmt.Errorf("v2ref: %w", err)
	}
	cmd.Stdout = outW
	if err := cmd.Start(); err != nil {
		_ = outR.Close()
		_ = outW.Close()
		cleanupTmp()
		return nil, fmt.Errorf("v2ref: starting %s: %w", bin, err)
	}
	_ = outW.Close()
	s.cmd, s.stdin = cmd, stdin

	go func() {
		s.waitErr = cmd.Wait()
		close(s.waitDone)
	}()

	ready := make(chan string, 1)
	go func() {
		defer func() { _ = outR.Close() }()
		br := bufio.NewReader(outR)
		for {
			line, err := br.ReadString('\n')
			if u, ok := strings.CutPrefix(strings.TrimSpace(line), "READY "); ok {
				ready <- u
				break
			}
			if err != nil {
				close(ready)
				return
			}
		}
		// Keep draining so the child can never block on a full pipe.
		_, _ = io.Copy(io.Discard, br)
	}()

	timer := time.NewTimer(StartTimeout)
	defer timer.Stop()
	var failure error
	select {
	case u, ok := <-ready:
		if ok {
			s.URL = u
			return s, nil
		}
		<-s.waitDone
		failure = fmt.Errorf("exited before READY: %v", s.waitErr)
	case <-s.waitDone:
		failure = fmt.Errorf("exited before READY: %v", s.waitErr)
	case <-ctx.Done():
		failure = fmt.Errorf("waiting for READY: %w", ctx.Err())
	case <-timer.C:
		failure = fmt.Errorf("not READY after %v", StartTimeout)
	}
	s.kill()
	cleanupTmp()
	return nil, fmt.Errorf("v2ref: %w%s", failure, s.stderrSuffix())
}

// StartT is Start for tests: it bounds the start by the test's deadline (if
// any), fails the test on error and registers Stop with t.Cleanup.
func StartT(t testing.TB, opts Options) *Server {
	t.Helper()
	ctx := context.Background()
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, dl)
			defer cancel()
		}
	}
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping v2ref: %v", err)
		}
	})
	return s
}

// Stop sends SIGTERM, waits for a clean exit (killing the process if it takes
// longer than 15 s) and removes the data directory if Start created it. It
// returns an error if the server did not exit cleanly. Stop is idempotent.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.stopErr = s.stop()
	})
	return s.stopErr
}

func (s *Server) stop() error {
	var err error
	select {
	case <-s.waitDone:
		err = fmt.Errorf("v2ref: exited before Stop: %v%s", s.waitErr, s.stderrSuffix())
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(stopTimeout)
		select {
		case <-s.waitDone:
			timer.Stop()
			if s.waitErr != nil {
				err = fmt.Errorf("v2ref: unclean exit: %v%s", s.waitErr, s.stderrSuffix())
			}
		case <-timer.C:
			s.kill()
			err = fmt.Errorf("v2ref: no exit %v after SIGTERM; killed%s", stopTimeout, s.stderrSuffix())
		}
	}
	_ = s.stdin.Close()
	if s.tmpDir != "" {
		if rerr := os.RemoveAll(s.tmpDir); rerr != nil && err == nil {
			err = fmt.Errorf("v2ref: %w", rerr)
		}
	}
	return err
}

// Stderr returns the last few KiB the server wrote to stderr.
func (s *Server) Stderr() string { return s.stderr.String() }

// Pid is the server's process id (benchmarks read its RSS from /proc).
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// kill kills the child and waits (bounded) for it to be reaped.
func (s *Server) kill() {
	_ = s.cmd.Process.Kill()
	select {
	case <-s.waitDone:
	case <-time.After(5 * time.Second):
	}
	_ = s.stdin.Close()
}

func (s *Server) stderrSuffix() string {
	tail := strings.TrimSpace(s.stderr.String())
	if tail == "" {
		return ""
	}
	return "\nstderr (tail):\n" + tail
}

// referenceDir finds the reference module: next to this source file when the
// source tree is available, else by walking up from the working directory.
func referenceDir() (string, error) {
	var candidates []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		candidates = append(candidates, filepath.Join(filepath.Dir(file), "..", "reference"))
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			candidates = append(candidates, filepath.Join(d, "proof", "reference"))
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, c := range candidates {
		if _, err := os.Stat(filepath.Join(c, "go.mod")); err == nil {
			return filepath.Clean(c), nil
		}
	}
	return "", errors.New("v2ref: cannot find proof/reference/go.mod (set V2REF_BIN to a prebuilt binary)")
}

// sourceHash hashes everything that determines the binary: the reference
// module's go.mod, go.sum and Go sources, plus the toolchain and platform.
func sourceHash(dir string) (string, error) {
	names := []string{"go.mod", "go.sum"}
	gos, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	for _, g := range gos {
		names = append(names, filepath.Base(g))
	}
	sort.Strings(names[2:])
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return "", fmt.Errorf("v2ref: %w", err)
		}
		_, _ = fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// goTool returns the go command: from PATH, else from GOROOT.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}

// tailBuffer is an io.Writer keeping only the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
