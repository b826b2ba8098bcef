// SPDX-License-Identifier: Apache-2.0

package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// The bridge under test is the v2bridge binary in a process of its own, so
// that its goroutines and RSS (read from its /metrics) are its own and a
// restart is a real one. Under -race it is built with -race too.

// buildBridge builds cmd/bridge into a temporary directory.
func buildBridge(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "v2bridge")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := []string{"build", "-o", bin}
	if raceBuild {
		args = append(args, "-race")
	}
	if out, err := exec.CommandContext(ctx, "go", append(args, "../../cmd/bridge")...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// bridgeProc is one run of the bridge binary.
type bridgeProc struct {
	url     string
	started time.Time
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process is reaped
	logDone chan struct{} // closed once its output is read to the end

	mu       sync.Mutex // guards every field below
	endpoint string     // the member it is connected to, from its log
	losses   []lossLog
	notable  map[string]int // warn and error log messages, by "level: msg"
	// lossMetric is v2bridge_backend_losses_total as last read.
	lossMetric float64
	races      int      // "WARNING: DATA RACE" reports (a -race build)
	panics     int      // lines starting a Go panic or fatal error
	exit       string   // how it ended, when not as the soak asked
	tail       []string // its last log lines, for failure messages
}

// lossLog is one "etcd v3 backend lost" line of the bridge's log.
type lossLog struct {
	at               time.Time
	endpoint, reason string
}

const tailLines = 40

// bridgeFlags are the flags of every bridge run besides its listen URL.
func bridgeFlags(endpoints []string, historyEvents int) []string {
	// The soak's cluster is the bridge's alone, v3 clients' keys included:
	// it serves the whole tree by name.
	return []string{"--endpoints", strings.Join(endpoints, ","), "--serve-prefix", "/", "--log-level", "info", "--log-format", "json",
		"--enable-pprof", "--watch-history-events", strconv.Itoa(historyEvents)}
}

// startBridgeProc starts the binary on url and waits until it is ready
// (its backend answers and its shared watch is open); the error carries its
// output when it exits first (a port taken, say).
func startBridgeProc(bin, dir, url string, flags []string) (*bridgeProc, error) {
	p := &bridgeProc{url: url, exited: make(chan struct{}), logDone: make(chan struct{}), notable: map[string]int{}}
	p.cmd = exec.Command(bin, append([]string{"--listen-client-urls", url}, flags...)...)
	p.cmd.Dir = dir
	p.cmd.Env = childEnv()
	p.cmd.SysProcAttr = childSysProcAttr()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	p.started = time.Now()
	err = p.cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	go func() { // owned by the process: ends when it exits and its output is read
		defer close(p.logDone)
		defer func() { _ = r.Close() }()
		p.readLog(r)
	}()
	go func() { // owned by the process: ends when it is reaped
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.waitReady(ctx); err != nil {
		p.stop(syscall.SIGKILL)
		return nil, fmt.Errorf("%w; its log:\n%s", err, p.logTail())
	}
	return p, nil
}

// childEnv is this process's environment without V2BRIDGE_* variables
// (the binary refuses those it does not know, and settings of the shell that
// runs the soak must not reach the bridge) but the liveness settings,
// V2BRIDGE_HEARTBEAT_*, which the soak passes on (livenessEnv).
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "V2BRIDGE_") {
			env = append(env, kv)
		}
	}
	return append(env, livenessEnv()...)
}

// livenessEnv is the V2BRIDGE_HEARTBEAT_* variables of this process's
// environment, which set the bridge's heartbeat (--heartbeat-interval,
// --heartbeat-timeout, --heartbeat-failures), sorted.
func livenessEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "V2BRIDGE_HEARTBEAT_") {
			env = append(env, kv)
		}
	}
	slices.Sort(env)
	return env
}

func (p *bridgeProc) waitReady(ctx context.Context) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-p.exited:
			return errors.New("the bridge exited")
		default:
		}
		if resp, err := hc.Get(p.url + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !ctxsleep.Sleep(ctx, 100*time.Millisecond) {
			return fmt.Errorf("the bridge at %s is not ready after 60s", p.url)
		}
	}
}

// stop sends sig (SIGTERM: a graceful stop; SIGKILL: a crash) and waits
// until the process is gone, killing it if SIGTERM has not ended it in 15 s.
func (p *bridgeProc) stop(sig syscall.Signal) {
	select {
	case <-p.exited:
		p.noteExit("exited by itself: " + p.cmd.ProcessState.String())
	default:
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			p.noteExit("did not stop within 15 s of SIGTERM: killed")
		}
		if sig == syscall.SIGTERM && !p.cmd.ProcessState.Success() {
			// 66: the race detector found a race.
			p.noteExit("SIGTERM: " + p.cmd.ProcessState.String())
		}
	}
	<-p.logDone
}

func (p *bridgeProc) noteExit(how string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit == "" {
		p.exit = how
	}
}

// readLog follows the bridge's JSON log: the member it connects to, the
// losses it declares, and its warnings and errors.
func (p *bridgeProc) readLog(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var e struct {
			Level    string `json:"level"`
			TS       string `json:"ts"`
			Logger   string `json:"logger"`
			Msg      string `json:"msg"`
			Endpoint string `json:"endpoint"`
			Reason   string `json:"reason"`
		}
		_ = json.Unmarshal([]byte(line), &e)
		at, err := time.Parse(time.RFC3339Nano, e.TS)
		if err != nil {
			at = time.Now()
		}
		p.mu.Lock()
		p.tail = append(p.tail, line)
		if len(p.tail) > tailLines {
			p.tail = p.tail[1:]
		}
		switch {
		case strings.Contains(line, "WARNING: DATA RACE"):
			p.races++
		case strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: "):
			p.panics++
		}
		switch e.Msg {
		case "etcd v3 backend connected":
			p.endpoint = e.Endpoint
		case "etcd v3 backend lost":
			p.endpoint = ""
			p.losses = append(p.losses, lossLog{at: at, endpoint: e.Endpoint, reason: e.Reason})
		}
		if e.Level == "warn" || e.Level == "error" || e.Level == "dpanic" || e.Level == "panic" || e.Level == "fatal" {
			if e.Msg != "etcd v3 backend lost" && !strings.HasPrefix(e.Logger, "v2bridge.backend.clientv3") {
				p.notable[e.Level+": "+e.Msg]++
			}
		}
		p.mu.Unlock()
	}
}

// connected is the endpoint of the member the bridge uses now ("" while it
// has none).
func (p *bridgeProc) connected() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.endpoint
}

func (p *bridgeProc) logTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// procStats are figures from the bridge's /metrics.
type procStats struct {
	goroutines int
	rss, heap  float64 // bytes: resident set, heap in use after a GC
	losses     float64 // v2bridge_backend_losses_total
}

// stats asks the bridge to collect garbage (its pprof heap handler with
// gc=1) and reads its metrics.
func (p *bridgeProc) stats(ctx context.Context) (procStats, error) {
	hc := &http.Client{Timeout: 10 * time.Second}
	if err := get(ctx, hc, p.url+"/debug/pprof/heap?gc=1", io.Discard); err != nil {
		return procStats{}, err
	}
	var b strings.Builder
	if err := get(ctx, hc, p.url+"/metrics", &b); err != nil {
		return procStats{}, err
	}
	m := parseMetrics(b.String())
	st := procStats{goroutines: int(m["go_goroutines"]), rss: m["process_resident_memory_bytes"],
		heap: m["go_memstats_heap_inuse_bytes"], losses: m["v2bridge_backend_losses_total"]}
	p.mu.Lock()
	p.lossMetric = st.losses
	p.mu.Unlock()
	return st, nil
}

func get(ctx context.Context, hc *http.Client, u string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// parseMetrics reads the unlabelled samples of Prometheus' text format.
func parseMetrics(text string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = f
		}
	}
	return out
}

// bridgeRunner starts and restarts the bridge on one address.
type bridgeRunner struct {
	t     *testing.T
	bin   string
	dir   string
	flags []string
	tgt   *target
	cur   *bridgeProc
	past  []*bridgeProc
}

// start starts the bridge on url, or on a fresh port when another process
// took url's port meanwhile (clients follow tgt).
func (r *bridgeRunner) start(url string) {
	r.t.Helper()
	first := true
	v2bridgetest.RetryPortTaken(r.t, "start the bridge", func() error {
		if !first || url == "" {
			url = v2bridgetest.FreeURL(r.t)
		}
		first = false
		p, err := startBridgeProc(r.bin, r.dir, url, r.flags)
		if err != nil {
			return err
		}
		r.cur = p
		return nil
	})
	if r.tgt == nil {
		r.tgt = newTarget(r.cur.url)
	} else {
		r.tgt.set(r.cur.url)
	}
}

// restart stops the running bridge with sig and starts a new one on the
// same address.
func (r *bridgeRunner) restart(sig syscall.Signal) {
	r.t.Helper()
	old := r.cur
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, _ = old.stats(ctx) // its losses metric, before it goes
	cancel()
	old.stop(sig)
	r.past = append(r.past, old)
	r.start(old.url)
}

// all are every bridge run so far, the current one last.
func (r *bridgeRunner) all() []*bridgeProc {
	if r.cur == nil {
		return r.past
	}
	return append(append([]*bridgeProc(nil), r.past...), r.cur)
}

func (r *bridgeRunner) close() {
	if r.cur != nil {
		r.cur.stop(syscall.SIGTERM)
		r.past = append(r.past, r.cur)
		r.cur = nil
	}
}
