// SPDX-License-Identifier: Apache-2.0

package main

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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/proof/v2ref"
)

// The systems, in table order.
const (
	sysBridge = "v2bridge"
	sysV3     = "direct-v3"
	sysV2     = "etcd-v2"
	sysV2V3   = "etcd-v2v3"
	// The bridge as deployed: its own process, in front of the etcd 3.5
	// server that also serves etcd-v2 (its v3 API, on the same client URL).
	sysBridgeExt = "v2bridge-ext"
	// clientv3 straight to that etcd 3.5 server.
	sysV3Ext = "direct-v3-ext"
	// The bridge in passthrough mode (--v2-server), its own process, in
	// front of the v2 API of the etcd 3.5 server that serves etcd-v2.
	sysPassthrough = "v2bridge-passthrough" //nolint:gosec // G101: a system's name, not a credential
	// clientv3 through a gRPC forwarder, its own process, to that etcd 3.5
	// server's v3 API: what a process in between costs with no bridge.
	sysV3Hop = "direct-v3-hop"
)

var allSystems = []string{sysBridge, sysV3, sysV2, sysV2V3, sysBridgeExt, sysV3Ext, sysPassthrough, sysV3Hop}

// kvOnly reports whether sys runs only in the key-value section.
func kvOnly(sys string) bool { return sys == sysPassthrough || sys == sysV3Hop }

// passthroughRoot is the directory under which v2bridge-passthrough keeps
// its keys in the key-value section: the v2 server it forwards to is the very v2 store
// etcd-v2 is measured on, so its keys must not meet etcd-v2's.
const passthroughRoot = "/passthrough"

// isV3 reports whether sys is driven through clientv3 rather than v2 HTTP.
func isV3(sys string) bool { return sys == sysV3 || sys == sysV3Ext || sys == sysV3Hop }

// instance is one system's server: a bridge child (which, without
// -endpoints, also holds the etcd member that direct-v3 talks to), a v2ref
// child, or a bridge child in front of a v2ref child (v2bridge-ext).
type instance struct {
	kind    string // sysBridge for any bridge child, else sysV2 or sysV2V3 (a v2ref child)
	v2URL   string // v2 HTTP API
	etcdURL string // v3 gRPC (and etcd's /metrics)
	pid     int    // the process serving v2URL (the bridge child for v2bridge-ext and v2bridge-passthrough)
	// pids are every server process the system's CPU and RSS count: for
	// v2bridge-ext and v2bridge-passthrough the bridge child and the etcd
	// behind it.
	pids []int
	stop func() error

	once sync.Once
	v3   *clientv3.Client
}

func (in *instance) Stop() {
	if in.v3 != nil {
		_ = in.v3.Close()
	}
	if err := in.stop(); err != nil {
		warnf("stopping %s: %v", in.kind, err)
	}
}

// cpu is the CPU seconds all of the instance's server processes have used.
func (in *instance) cpu() float64 { return cpuSeconds(in.pids...) }

// rss is the summed VmRSS of the instance's server processes.
func (in *instance) rss() (float64, error) {
	var sum float64
	for _, p := range in.pids {
		v, err := rssKiB(p)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// V3 is a clientv3 client of the instance's etcd member.
func (in *instance) V3() *clientv3.Client {
	in.once.Do(func() {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{in.etcdURL}, DialTimeout: 5 * time.Second,
			Logger: zap.NewNop(), MaxCallSendMsgSize: 16 << 20, MaxCallRecvMsgSize: 64 << 20})
		if err != nil {
			fatalf("clientv3 %s: %v", in.etcdURL, err)
		}
		in.v3 = cli
	})
	return in.v3
}

// startInstance starts the server processes that serve system sys, fresh
// and its own: v2bridge-ext and v2bridge-passthrough get an etcd 3.5 of
// their own here (runKV shares one between etcd-v2, direct-v3-ext,
// v2bridge-ext and v2bridge-passthrough instead).
func startInstance(sys string) (*instance, error) {
	switch sys {
	case sysBridge, sysV3:
		return startBridgeChild("")
	case sysV2, sysV2V3, sysV3Ext:
		return startV2Ref(sys == sysV2V3)
	case sysBridgeExt, sysPassthrough, sysV3Hop:
		etcd, err := startV2Ref(false)
		if err != nil {
			return nil, err
		}
		start := startExtBridge
		switch sys {
		case sysPassthrough:
			start = startPassthroughBridge
		case sysV3Hop:
			start = startGRPCHop
		}
		in, err := start(etcd)
		if err != nil {
			etcd.Stop()
			return nil, err
		}
		stopBridge := in.stop
		in.stop = func() error {
			err := stopBridge()
			if err2 := etcd.stop(); err == nil {
				err = err2
			}
			return err
		}
		return in, nil
	}
	return nil, fmt.Errorf("unknown system %q", sys)
}

// startV2Ref starts etcd 3.5 (v2ref): the v2 store, or with v2v3 the
// v2-over-v3 emulation; either way its v3 gRPC API on the same client URL.
func startV2Ref(v2v3 bool) (*instance, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := v2ref.Start(ctx, v2ref.Options{V2V3: v2v3})
	if err != nil {
		return nil, err
	}
	kind := sysV2
	if v2v3 {
		kind = sysV2V3
	}
	return &instance{kind: kind, v2URL: s.URL, etcdURL: s.URL, pid: s.Pid(), pids: []int{s.Pid()}, stop: s.Stop}, nil
}

// startPassthroughBridge starts a bridge child in passthrough mode in front
// of etcd's v2 API. The returned instance's stop stops the bridge only; its
// CPU and RSS count both processes.
func startPassthroughBridge(etcd *instance) (*instance, error) {
	in, err := startChild("-v2-server", etcd.v2URL)
	if err != nil {
		return nil, err
	}
	in.pids = append(in.pids, etcd.pid)
	return in, nil
}

// startGRPCHop starts a gRPC forwarder child in front of etcd's v3 API. The
// returned instance's stop stops the forwarder only; its CPU and RSS count
// both processes.
func startGRPCHop(etcd *instance) (*instance, error) {
	in, err := startChild("-grpc-hop", etcd.etcdURL)
	if err != nil {
		return nil, err
	}
	in.kind, in.v2URL = sysV3Hop, ""
	in.pids = append(in.pids, etcd.pid)
	return in, nil
}

// startExtBridge starts a bridge child in front of etcd's v3 API. The
// returned instance's stop stops the bridge only; its CPU and RSS count
// both processes.
func startExtBridge(etcd *instance) (*instance, error) {
	in, err := startBridgeChild(etcd.etcdURL)
	if err != nil {
		return nil, err
	}
	in.pids = append(in.pids, etcd.pid)
	return in, nil
}

// bridgeHeartbeatTimeout, if set, overrides the bridge's heartbeat deadline.
var bridgeHeartbeatTimeout time.Duration

// bridgeWatchDetach is the bridge's --watch-detach.
var bridgeWatchDetach = true

// bridgeLog, if set, is the file each bridge child appends its log to.
var bridgeLog string

// startBridgeChild re-executes this binary as the bridge under test: over
// an embedded etcd member, or with endpoints in front of that etcd.
func startBridgeChild(endpoints string) (*instance, error) {
	var args []string
	if !bridgeWatchDetach {
		args = append(args, "-watch-detach=false")
	}
	if bridgeHeartbeatTimeout > 0 {
		args = append(args, "-heartbeat-timeout", bridgeHeartbeatTimeout.String())
	}
	if bridgeLog != "" {
		args = append(args, "-log", bridgeLog)
	}
	if endpoints != "" {
		args = append(args, "-endpoints", endpoints)
	}
	return startChild(args...)
}

// startEtcdChild starts a child holding an embedded etcd member and no
// bridge; its v2URL is empty.
func startEtcdChild() (*instance, error) {
	in, err := startChild("-etcd-only")
	if err != nil {
		return nil, err
	}
	in.kind, in.v2URL = "etcd", ""
	return in, nil
}

// startChild re-executes this binary as a child with these flags.
func startChild(flags ...string) (*instance, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, append([]string{childCommand}, flags...)...)
	stderr := &tail{max: 8 << 10}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	ready := make(chan []string, 1)
	go func() {
		br := bufio.NewReader(out)
		for {
			line, err := br.ReadString('\n')
			if f := strings.Fields(line); len(f) == 3 && f[0] == "READY" {
				ready <- f[1:]
				break
			}
			if err != nil {
				break
			}
		}
		_, _ = io.Copy(io.Discard, br)
		done <- cmd.Wait()
	}()
	kill := func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	select {
	case urls := <-ready:
		in := &instance{kind: sysBridge, v2URL: urls[0], etcdURL: urls[1], pid: cmd.Process.Pid, pids: []int{cmd.Process.Pid}}
		in.stop = func() error {
			_ = stdin.Close()
			select {
			case err := <-done:
				return err
			case <-time.After(20 * time.Second):
				kill()
				return errors.New("child did not exit within 20s; killed")
			}
		}
		return in, nil
	case err := <-done:
		return nil, fmt.Errorf("child exited before READY: %v\n%s", err, stderr.String())
	case <-time.After(90 * time.Second):
		kill()
		return nil, fmt.Errorf("child not READY after 90s\n%s", stderr.String())
	}
}

// rssKiB is VmRSS of pid.
func rssKiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				return strconv.ParseFloat(f[0], 64)
			}
		}
	}
	return 0, errors.New("no VmRSS")
}

// scrapeGauge reads one unlabelled metric from a Prometheus text endpoint.
func scrapeGauge(url, name string) (float64, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found at %s", name, url)
}

// raiseNofile lifts the soft open-files limit to the hard one (10,000
// watchers need 10,000 sockets on each side); children inherit it.
func raiseNofile() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	return rl.Cur
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// goMem is the Go runtime's view of a bridge child's memory (expvar).
type goMem struct {
	HeapInuse, StackInuse, Sys uint64
	NumGC                      uint32
}

func bridgeGoMem(in *instance) (goMem, error) {
	var v struct {
		Memstats goMem `json:"memstats"`
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(in.v2URL + "/debug/vars")
	if err != nil {
		return goMem{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	err = json.NewDecoder(resp.Body).Decode(&v)
	return v.Memstats, err
}

// cpuSeconds is the user+system CPU time the processes have used together.
func cpuSeconds(pids ...int) float64 {
	var sum float64
	for _, p := range pids {
		sum += cpuSecondsOf(p)
	}
	return sum
}

// cpuSecondsOf is the user+system CPU time pid has used (0 on error).
func cpuSecondsOf(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields count from the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}
