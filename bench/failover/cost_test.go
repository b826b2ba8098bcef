// SPDX-License-Identifier: Apache-2.0

package failover

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestHeartbeatCost measures what idle bridges cost an etcd member: the
// member's CPU time over a window with no bridge, then with n bridge
// processes connected to it (their heartbeats, gRPC keepalives, lease
// renewals of their registrations and idle shared watches), for each
// heartbeat setting; the difference per bridge is extrapolated to 1,000.
// It runs only with V2BRIDGE_BENCH_HEARTBEAT_COST=1 (n: V2BRIDGE_BENCH_BRIDGES,
// 50 by default) and prints a table.
func TestHeartbeatCost(t *testing.T) {
	if os.Getenv("V2BRIDGE_BENCH_HEARTBEAT_COST") != "1" {
		t.Skip("a benchmark: V2BRIDGE_BENCH_HEARTBEAT_COST=1")
	}
	n := 50
	if s := os.Getenv("V2BRIDGE_BENCH_BRIDGES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("V2BRIDGE_BENCH_BRIDGES=%q", s)
		}
		n = v
	}
	const window, settle = 30 * time.Second, 10 * time.Second
	c := v2bridgetest.StartProcessCluster(t, 1)
	kids := children(t, os.Getpid())
	if len(kids) != 1 {
		t.Fatalf("%d child processes, want the member alone", len(kids))
	}
	member := kids[0]
	bin := v2bridgetest.BuildBridge(t, false)

	base := cpuOver(t, member, window)
	rows := []string{fmt.Sprintf("| none | 0 | %.2f %% | — | — |", 100*base)}
	for _, h := range heartbeats(t) {
		var bridges []*v2bridgetest.BridgeProcess
		for i := 0; i < n; i++ {
			var p *v2bridgetest.BridgeProcess
			v2bridgetest.RetryPortTaken(t, "a bridge", func() error {
				var err error
				p, err = v2bridgetest.StartBridgeProcess(bin, v2bridgetest.FreeURL(t), "--endpoints", c.Endpoints()[0],
					"--log-level", "warn", "--heartbeat-interval", h.interval.String(),
					"--heartbeat-timeout", h.timeout.String(), "--heartbeat-failures", strconv.Itoa(h.failures))
				return err
			})
			bridges = append(bridges, p)
		}
		time.Sleep(settle)
		used := cpuOver(t, member, window)
		for _, p := range bridges {
			p.Stop(syscall.SIGKILL)
		}
		per := (used - base) / float64(n) // of one CPU
		rows = append(rows, fmt.Sprintf("| %v | %d | %.2f %% | %.0f µs/s | %.1f %% |", h, n, 100*used, per*1e6, 100*per*1000))
		t.Logf("%v: member at %.2f %% of a CPU with %d bridges (%.2f %% without)", h, 100*used, n, 100*base)
		time.Sleep(settle) // the member forgets the bridges' leases and connections
	}
	fmt.Printf("\n| heartbeat | bridges | member CPU (of one core) | per bridge | 1,000 bridges (of one core) |\n|---|---:|---:|---:|---:|\n%s\n",
		strings.Join(rows, "\n"))
}

// children are the processes whose parent is pid.
func children(t *testing.T, pid int) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, d := range dirs {
		f, err := statFields(filepath.Join(d, "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
			p, _ := strconv.Atoi(filepath.Base(d))
			out = append(out, p)
		}
	}
	return out
}

// statFields are the fields of a /proc/<pid>/stat after the command name:
// state, ppid, ... (field 3 of proc(5) first).
func statFields(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("%s: %q", path, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return nil, fmt.Errorf("%s: %q", path, s)
	}
	return f, nil
}

// cpuOver is the share of one CPU that process pid used (user and system)
// over the next d.
func cpuOver(t *testing.T, pid int, d time.Duration) float64 {
	t.Helper()
	ticks := func() float64 {
		f, err := statFields(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		u, _ := strconv.ParseFloat(f[11], 64) // utime, field 14
		s, _ := strconv.ParseFloat(f[12], 64) // stime, field 15
		return u + s
	}
	const hz = 100 // USER_HZ on Linux
	t0, c0 := time.Now(), ticks()
	time.Sleep(d)
	return (ticks() - c0) / hz / time.Since(t0).Seconds()
}
