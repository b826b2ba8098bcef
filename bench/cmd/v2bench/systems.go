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

	"github.com/v2bridge/v2bridge/internal/v2ref"
)

// The four systems, in table order.
const (
	sysBridge = "v2bridge"
	sysV3     = "direct-v3"
	sysV2     = "etcd-v2"
	sysV2V3   = "etcd-v2v3"
)

var allSystems = []string{sysBridge, sysV3, sysV2, sysV2V3}

// instance is one running server process: a bridge child (which also holds
// the etcd member that direct-v3 talks to) or a v2ref child.
type instance struct {
	kind    string // sysBridge (serves sysBridge and sysV3), sysV2 or sysV2V3
	v2URL   string // v2 HTTP API
	etcdURL string // v3 gRPC (and etcd's /metrics)
	pid     int
	stop    func() error

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

// startInstance starts the server process that serves system sys.
func startInstance(sys string) (*instance, error) {
	switch sys {
	case sysBridge, sysV3:
		return startBridgeChild()
	case sysV2, sysV2V3:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err := v2ref.Start(ctx, v2ref.Options{V2V3: sys == sysV2V3})
		if err != nil {
			return nil, err
		}
		return &instance{kind: sys, v2URL: s.URL, etcdURL: s.URL, pid: s.Pid(), stop: s.Stop}, nil
	}
	return nil, fmt.Errorf("unknown system %q", sys)
}

// bridgeHeartbeatTimeout, if set, overrides the bridge's heartbeat deadline.
var bridgeHeartbeatTimeout time.Duration

// startBridgeChild re-executes this binary as the bridge under test.
func startBridgeChild() (*instance, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{childCommand}
	if bridgeHeartbeatTimeout > 0 {
		args = append(args, "-heartbeat-timeout", bridgeHeartbeatTimeout.String())
	}
	cmd := exec.Command(exe, args...)
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
		in := &instance{kind: sysBridge, v2URL: urls[0], etcdURL: urls[1], pid: cmd.Process.Pid}
		in.stop = func() error {
			_ = stdin.Close()
			select {
			case err := <-done:
				return err
			case <-time.After(20 * time.Second):
				kill()
				return errors.New("bridge child did not exit within 20s; killed")
			}
		}
		return in, nil
	case err := <-done:
		return nil, fmt.Errorf("bridge child exited before READY: %v\n%s", err, stderr.String())
	case <-time.After(90 * time.Second):
		kill()
		return nil, fmt.Errorf("bridge child not READY after 90s\n%s", stderr.String())
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
	defer resp.Body.Close()
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
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&v)
	return v.Memstats, err
}

// cpuSeconds is the user+system CPU time pid has used (0 on error).
func cpuSeconds(pid int) float64 {
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
