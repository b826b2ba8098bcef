// SPDX-License-Identifier: Apache-2.0

//go:build linux

package integration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// diskEnv runs TestLivenessFalsePositiveDiskSaturated (make liveness-disk):
// it needs root, a loop device and cgroup v1's blkio controller, and takes
// about 70 s.
const diskEnv = "V2BRIDGE_TEST_DISK"

// The slow disk: what the member's process may write to it each second.
const (
	diskWriteBPS  = 1 << 20 // 1 MiB
	diskWriteIOPS = 100
)

// The write load on the member: writers of large values, for loadFor.
const (
	loadWriters = 8
	loadValue   = 32 << 10
	loadFor     = 30 * time.Second
)

// walFsync is etcd's histogram of its WAL's fsyncs.
const walFsync = "etcd_disk_wal_fsync_duration_seconds"

// TestLivenessFalsePositiveDiskSaturated: the members' data directories
// sit on slow disks (a loop device each member's process may write at
// diskWriteBPS and diskWriteIOPS, by a blkio cgroup of its own), and writers
// of large values to the bridge's member keep its disk saturated, its WAL's
// fsyncs taking over 100 ms at the 99th percentile (a precondition the test
// checks from the member's own metrics), while the bridge serves watchers
// and a v2 writer. No loss is declared, and every v2 write reaches every
// watcher once, in order. Once with a single member, once with three (the
// bridge's member leading: its slow disk delays its heartbeats to the
// others).
func TestLivenessFalsePositiveDiskSaturated(t *testing.T) {
	if os.Getenv(diskEnv) == "" {
		t.Skipf("puts members on a slow loop device (root, cgroup v1 blkio; about 70 s): %s=1 to run it "+
			"(make liveness-disk)", diskEnv)
	}
	if os.Geteuid() != 0 {
		t.Skipf("%s is set, but a loop device and a blkio cgroup need root", diskEnv)
	}
	t.Run("one member", func(t *testing.T) { diskSaturated(t, 1) })
	t.Run("three members", func(t *testing.T) { diskSaturated(t, 3) })
}

// diskSaturated runs TestLivenessFalsePositiveDiskSaturated on a cluster of
// n members, the bridge on the first.
func diskSaturated(t *testing.T, n int) {
	dir, procs := slowDisk(t, n, diskWriteBPS, diskWriteIOPS)
	c := v2bridgetest.StartProcessClusterIn(t, n, dir)
	for i := range c.Members {
		if err := os.WriteFile(procs[i], []byte(strconv.Itoa(c.PID(i))), 0o600); err != nil {
			t.Fatalf("moving member %d into its throttled cgroup: %v", i, err)
		}
	}
	if n > 1 {
		if err := c.MoveLeader(0); err != nil {
			t.Fatal(err)
		}
	}
	changes0 := memberMetric(t, c.Members[0].ClientURL, "etcd_server_leader_changes_seen_total").GetCounter().GetValue()
	cli := c.MemberClient(t, 0)

	o := heartbeatOptions(t)
	o.DataPrefix = "/v2" // the load's keys are outside the bridge's data
	br := v2bridgetest.StartBridge(t, []string{c.Members[0].ProxyURL}, o)
	reg := br.Registry
	tr := startV2Traffic(t, br.URL)

	// The bridge's heartbeat figures, sampled while the load runs: when a
	// miss or a loss happened.
	type sample struct {
		at                        time.Duration
		misses, excused, answered float64
		losses                    float64
	}
	figures := func(at time.Duration) sample {
		return sample{at: at, misses: metricValue(t, reg, "v2bridge_backend_heartbeat_misses_total"),
			excused:  metricValue(t, reg, "v2bridge_backend_heartbeat_misses_excused_total"),
			answered: metricValue(t, reg, "v2bridge_backend_heartbeat_seconds"),
			losses:   metricValue(t, reg, "v2bridge_backend_losses_total")}
	}
	fsync0 := memberHistogram(t, c.Members[0].ClientURL, walFsync)
	hb0 := bridgeHistogram(t, reg, "v2bridge_backend_heartbeat_seconds")
	t0 := time.Now()
	timeline := []sample{figures(0)}
	loadCtx, cancelLoad := context.WithTimeout(context.Background(), loadFor)
	defer cancelLoad()
	var puts, failed atomic.Int64
	var wg sync.WaitGroup
	value := strings.Repeat("x", loadValue)
	for i := 0; i < loadWriters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; loadCtx.Err() == nil; j++ {
				if _, err := cli.Put(loadCtx, fmt.Sprintf("/load/w%d/k%d", i, j%50), value); err == nil {
					puts.Add(1)
				} else if loadCtx.Err() == nil {
					failed.Add(1)
				}
			}
		}()
	}
	for loadCtx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		if s, l := figures(time.Since(t0)), timeline[len(timeline)-1]; s.misses != l.misses || s.excused != l.excused ||
			s.losses != l.losses {
			timeline = append(timeline, s)
		}
	}
	wg.Wait()
	took := time.Since(t0)
	fsync := histDelta(memberHistogram(t, c.Members[0].ClientURL, walFsync), fsync0)
	hb := histDelta(bridgeHistogram(t, reg, "v2bridge_backend_heartbeat_seconds"), hb0)
	// The heartbeat runs one check at a time: two more answered, and every
	// check that overlapped the load is over.
	hb1 := metricValue(t, reg, "v2bridge_backend_heartbeat_seconds")
	waitFor(t, 30*time.Second, "two heartbeats after the load", func() bool {
		return metricValue(t, reg, "v2bridge_backend_heartbeat_seconds") >= hb1+2
	})
	timeline = append(timeline, figures(time.Since(t0)))
	writes := tr.check(t)

	fsyncP99 := histQuantile(0.99, fsync)
	changes := memberMetric(t, c.Members[0].ClientURL, "etcd_server_leader_changes_seen_total").GetCounter().GetValue() -
		changes0
	t.Logf("load: %d writers of %d KiB values for %v: %d puts (%d failed); each member's disk: %d KiB/s, %d writes/s; "+
		"the bridge's member's WAL fsyncs: %d, p50 %v, p99 %v; leader changes: %v", loadWriters, loadValue>>10,
		took.Round(time.Millisecond), puts.Load(), failed.Load(), diskWriteBPS>>10, diskWriteIOPS,
		fsync.GetSampleCount(), seconds(histQuantile(0.5, fsync)), seconds(fsyncP99), changes)
	if fsyncP99 <= 0.1 {
		t.Fatalf("precondition: the member's WAL fsync p99 over the load is %v, want > 100ms: the disk was not saturated",
			seconds(fsyncP99))
	}

	last := timeline[len(timeline)-1]
	t.Logf("%d v2 writes through the bridge; heartbeats during the load: %d answered, p50 %v, p99 %v; "+
		"%v losses, %v misses, %v excused (the bridge ran late), %v excused as applying", writes, hb.GetSampleCount(),
		seconds(histQuantile(0.5, hb)), seconds(histQuantile(0.99, hb)), last.losses, last.misses, last.excused,
		metricValue(t, reg, "v2bridge_backend_heartbeat_applying_total"))
	if last.misses > 0 || last.losses > 0 {
		var b strings.Builder
		for _, s := range timeline {
			fmt.Fprintf(&b, "\n  %8v: %v misses, %v excused, %v answered, %v losses", s.at.Round(time.Millisecond),
				s.misses, s.excused, s.answered, s.losses)
		}
		t.Logf("the heartbeat's figures as they changed:%s", b.String())
	}
	if last.losses != 0 {
		t.Errorf("a member whose disk was saturated was declared lost %v times", last.losses)
	}
}

// seconds is s seconds as a duration, to the millisecond.
func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

// slowDisk makes an ext4 file system on a loop device of its own, mounted
// in a temporary directory (returned), and n blkio cgroups (cgroup v1) whose
// processes may each write to that device at most bps bytes and iops writes
// a second; it returns the files a process id is written to to join each.
// All of it is undone when the test ends, after the test's later cleanups
// (the members' processes must be gone first). It fails the test when any
// step fails.
func slowDisk(t *testing.T, n, bps, iops int) (dir string, procs []string) {
	t.Helper()
	root := "/sys/fs/cgroup/blkio"
	if _, err := os.Stat(filepath.Join(root, "blkio.throttle.write_bps_device")); err != nil {
		t.Fatalf("no cgroup v1 blkio controller at %s: %v", root, err)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	tmp := t.TempDir() // removed after everything below is undone
	img := filepath.Join(tmp, "disk.img")
	f, err := os.Create(img)
	if err == nil {
		err = errors.Join(f.Truncate(1<<30), f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	dev := run("losetup", "--find", "--show", img)
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	// Initialised now, not lazily by the kernel while the test runs.
	run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev)
	dir = filepath.Join(tmp, "mnt")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	run("mount", dev, dir)
	t.Cleanup(func() {
		var err error
		for i := 0; i < 50; i++ { // a process just killed may still hold a file
			if err = syscall.Unmount(dir, 0); err == nil || errors.Is(err, syscall.EINVAL) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("umount %s: %v; detached lazily", dir, err)
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
	})
	majmin := run("cat", filepath.Join("/sys/block", filepath.Base(dev), "dev"))

	for i := 0; i < n; i++ {
		cg := filepath.Join(root, fmt.Sprintf("v2bridge-disk-%d-%d", os.Getpid(), i))
		if err := os.Mkdir(cg, 0o750); err != nil {
			t.Fatalf("making a blkio cgroup: %v", err)
		}
		t.Cleanup(func() {
			var err error
			for i := 0; i < 50; i++ { // until the member's process has left it
				if err = syscall.Rmdir(cg); err == nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Errorf("rmdir %s: %v", cg, err)
		})
		for file, v := range map[string]int{"blkio.throttle.write_bps_device": bps, "blkio.throttle.write_iops_device": iops} {
			if err := os.WriteFile(filepath.Join(cg, file), []byte(majmin+" "+strconv.Itoa(v)), 0o600); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
		}
		procs = append(procs, filepath.Join(cg, "cgroup.procs"))
	}
	return dir, procs
}

// memberMetric is the metric name (one series) on an etcd member's
// /metrics.
func memberMetric(t *testing.T, base, name string) *dto.Metric {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 30*time.Second), "GET", base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s/metrics: %v", base, err)
	}
	defer func() { _ = resp.Body.Close() }()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s/metrics: %v", base, err)
	}
	mf, ok := mfs[name]
	if !ok || len(mf.GetMetric()) != 1 {
		t.Fatalf("%s/metrics: no single series %s", base, name)
	}
	return mf.GetMetric()[0]
}

// memberHistogram is the histogram name on an etcd member's /metrics.
func memberHistogram(t *testing.T, base, name string) *dto.Histogram {
	t.Helper()
	h := memberMetric(t, base, name).GetHistogram()
	if h == nil {
		t.Fatalf("%s/metrics: %s is no histogram", base, name)
	}
	return h
}

// bridgeHistogram is the histogram name (one series) of a bridge's registry.
func bridgeHistogram(t *testing.T, reg interface {
	Gather() ([]*dto.MetricFamily, error)
}, name string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetHistogram() != nil {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no histogram %s", name)
	return nil
}

// histDelta is what a cumulative histogram gained from before to after
// (the same buckets).
func histDelta(after, before *dto.Histogram) *dto.Histogram {
	count := after.GetSampleCount() - before.GetSampleCount()
	d := &dto.Histogram{SampleCount: &count}
	for i, b := range after.GetBucket() {
		c := b.GetCumulativeCount() - before.GetBucket()[i].GetCumulativeCount()
		d.Bucket = append(d.Bucket, &dto.Bucket{UpperBound: b.UpperBound, CumulativeCount: &c})
	}
	return d
}

// histQuantile estimates the q quantile of h as Prometheus's
// histogram_quantile does: linearly within the bucket it falls in; 0
// without samples, the highest finite bound beyond it.
func histQuantile(q float64, h *dto.Histogram) float64 {
	n := float64(h.GetSampleCount())
	if n == 0 {
		return 0
	}
	bs := h.GetBucket()
	sort.Slice(bs, func(i, j int) bool { return bs[i].GetUpperBound() < bs[j].GetUpperBound() })
	rank := q * n
	lower, below := 0.0, 0.0
	for _, b := range bs {
		c := float64(b.GetCumulativeCount())
		if math.IsInf(b.GetUpperBound(), 1) {
			break
		}
		if c >= rank {
			if c == below {
				return b.GetUpperBound()
			}
			return lower + (b.GetUpperBound()-lower)*(rank-below)/(c-below)
		}
		lower, below = b.GetUpperBound(), c
	}
	return lower
}
