// SPDX-License-Identifier: Apache-2.0

package integration

// False losses: a member that still answers must not be declared lost,
// whatever slows it or the bridge down. Each test below runs the bridge with
// its default heartbeat (or V2BRIDGE_TEST_HEARTBEAT's, to compare others)
// under one slowdown, with flannel-like watchers through it, and checks that
// no loss was declared and that every event reached every watcher once, in
// order; it logs the heartbeat's misses and the misses excused because the
// bridge itself ran late.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v2"

	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
)

// heartbeatEnv names a heartbeat for the false-loss tests' bridges, as
// interval,timeout,failures ("1s,1s,2"), instead of the defaults.
const heartbeatEnv = "V2BRIDGE_TEST_HEARTBEAT"

// testHeartbeat is the heartbeat of heartbeatEnv, or the defaults.
func testHeartbeat(t *testing.T) (interval, timeout time.Duration, failures int) {
	t.Helper()
	d := v3backend.Defaults
	s := os.Getenv(heartbeatEnv)
	if s == "" {
		return d.HeartbeatInterval, d.HeartbeatTimeout, d.HeartbeatFailures
	}
	f := strings.Split(s, ",")
	var err1, err2, err3 error
	if len(f) == 3 {
		interval, err1 = time.ParseDuration(f[0])
		timeout, err2 = time.ParseDuration(f[1])
		failures, err3 = strconv.Atoi(f[2])
	}
	if len(f) != 3 || err1 != nil || err2 != nil || err3 != nil {
		t.Fatalf("%s=%q: want interval,timeout,failures", heartbeatEnv, s)
	}
	return interval, timeout, failures
}

// heartbeatOptions are the options of an in-process bridge with the
// heartbeat under test.
func heartbeatOptions(t *testing.T) v2bridgetest.Options {
	i, to, f := testHeartbeat(t)
	t.Logf("heartbeat: every %v, timeout %v, %d misses", i, to, f)
	return v2bridgetest.Options{Backend: func(c *v3backend.Config) {
		c.HeartbeatInterval, c.HeartbeatTimeout, c.HeartbeatFailures = i, to, f
	}}
}

// heartbeatFlags are the same for the bridge binary.
func heartbeatFlags(t *testing.T) []string {
	i, to, f := testHeartbeat(t)
	t.Logf("heartbeat: every %v, timeout %v, %d misses", i, to, f)
	return []string{"--heartbeat-interval", i.String(), "--heartbeat-timeout", to.String(),
		"--heartbeat-failures", strconv.Itoa(f)}
}

// checkNoLoss logs an in-process bridge's heartbeat figures and fails the
// test on any loss.
func (r *liveRig) checkNoLoss(what string) {
	r.t.Helper()
	reg := r.br.Registry
	losses := metricValue(r.t, reg, "v2bridge_backend_losses_total")
	r.t.Logf("%s: %v losses, %v heartbeat misses, %v excused (the bridge ran late), %v heartbeats answered",
		what, losses, metricValue(r.t, reg, "v2bridge_backend_heartbeat_misses_total"),
		metricValue(r.t, reg, "v2bridge_backend_heartbeat_misses_excused_total"),
		metricValue(r.t, reg, "v2bridge_backend_heartbeat_seconds"))
	if losses != 0 {
		r.t.Errorf("%s: a member that answered was declared lost %v times", what, losses)
	}
}

// TestLivenessFalsePositiveLeaderMoves: the cluster's leader moves every
// 5 s, to and from the bridge's member; no loss is declared.
func TestLivenessFalsePositiveLeaderMoves(t *testing.T) {
	c := v2bridgetest.StartCluster(t, 3)
	r := startRig(t, c, 3, heartbeatOptions(t))
	const moves = 6
	for i := 0; i < moves; i++ {
		time.Sleep(5 * time.Second)
		// Every member in turn: the leadership moves away from the
		// bridge's member, and to it.
		to := (c.Leader() + 1) % len(c.Members)
		if err := c.MoveLeader(to); err != nil {
			t.Logf("move %d: %v", i+1, err) // an election may be under way; the next move tries again
		}
	}
	r.waitEvents(5, 20*time.Second)
	r.finish()
	r.checkNoLoss(fmt.Sprintf("%d leader moves, 5 s apart", moves))
}

// TestLivenessFalsePositiveLeaderKilled: the leader of a 3-member cluster is
// killed; the bridges on the followers find their members without a
// quorum while the survivors elect a leader, and the other survivor
// without one either: they stay (a loss deferred, when the election
// outlasted their misses), and no watch is ended.
func TestLivenessFalsePositiveLeaderKilled(t *testing.T) {
	c := v2bridgetest.StartProcessCluster(t, 3)
	var brs []*v2bridgetest.Bridge
	on := map[int]bool{}
	for i := 0; i < 2; i++ {
		br := v2bridgetest.StartBridge(t, c.ProxiedEndpoints(), heartbeatOptions(t))
		brs = append(brs, br)
		on[c.Index(br.Backend.Endpoint())] = true
	}
	lead := 0
	for on[lead] {
		lead++
	}
	if err := c.MoveLeader(lead); err != nil {
		t.Fatal(err)
	}
	var survivor int
	for i := range c.Members {
		if i != lead {
			survivor = i
		}
	}
	w := startWriter(t, c, survivor)
	w.waitWrites(t, 3, 20*time.Second)
	eps := make([]string, len(brs))
	for i, br := range brs {
		eps[i] = br.Backend.Endpoint()
	}

	c.Kill(lead)
	// The survivors elect a leader; writes resume; every bridge has run
	// ten more heartbeats (a deferred loss would be declared within
	// them).
	w.waitWrites(t, 10, 30*time.Second)
	hb := func(br *v2bridgetest.Bridge) float64 {
		return metricValue(t, br.Registry, "v2bridge_backend_heartbeat_seconds")
	}
	var hb0 []float64
	for _, br := range brs {
		hb0 = append(hb0, hb(br))
	}
	waitFor(t, 30*time.Second, "ten heartbeats answered at each bridge after the election", func() bool {
		for i, br := range brs {
			if hb(br) < hb0[i]+10 {
				return false
			}
		}
		return true
	})
	_, _, f := testHeartbeat(t)
	failures := float64(f)
	for i, br := range brs {
		losses := metricValue(t, br.Registry, "v2bridge_backend_losses_total")
		misses := metricValue(t, br.Registry, "v2bridge_backend_heartbeat_misses_total")
		deferred := metricValue(t, br.Registry, "v2bridge_backend_losses_deferred_total")
		t.Logf("bridge %d on member %d (leader %d killed): %v losses, %v misses, %v excused as late, %v as applying, "+
			"%v losses deferred", i, c.Index(eps[i]), lead, losses, misses,
			metricValue(t, br.Registry, "v2bridge_backend_heartbeat_misses_excused_total"),
			metricValue(t, br.Registry, "v2bridge_backend_heartbeat_applying_total"), deferred)
		if losses != 0 || br.Backend.Endpoint() != eps[i] {
			t.Errorf("bridge %d: %v losses, on %q; want none, on %q", i, losses, br.Backend.Endpoint(), eps[i])
		}
		if misses >= failures && deferred < 1 {
			t.Errorf("bridge %d: %v misses in all, yet no loss deferred", i, misses)
		}
	}
}

// TestLivenessFalsePositiveGCPressure: the bridge's process churns a heap
// of about 1 GB (a live set of 512 MB of small linked objects, replaced as
// fast as two goroutines can, so the collector runs all the time and the
// mutators assist it) while it serves watchers; its member runs in a
// process of its own. No loss is declared.
func TestLivenessFalsePositiveGCPressure(t *testing.T) {
	c := v2bridgetest.StartProcessCluster(t, 3)
	r := startRig(t, c, 3, heartbeatOptions(t))

	type node struct {
		next *node
		_    [7]*node
	} // 64 bytes, all pointers: costly to mark
	const liveBytes = 512 << 20
	live := make([]*node, liveBytes/64)
	for i := range live {
		live[i] = &node{}
	}
	var churned atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := uint64(g*7919 + 1)
			for n := 0; ; n++ {
				if n%1024 == 0 {
					select {
					case <-stop:
						return
					default:
					}
					churned.Add(1024 * 64)
				}
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				i := x % uint64(len(live))
				live[i] = &node{next: live[(i+1)%uint64(len(live))]}
			}
		}()
	}
	start := time.Now()
	time.Sleep(20 * time.Second)
	close(stop)
	wg.Wait()
	took := time.Since(start)
	t.Logf("churned %d MB of a %d MB live set in %v", churned.Load()>>20, liveBytes>>20, took.Round(time.Millisecond))
	r.waitEvents(5, 30*time.Second)
	r.finish()
	r.checkNoLoss("GC pressure")
}

// cpuCgroup makes a cgroup whose processes get at most share of one CPU
// (cgroup v2's cpu.max, or v1's CFS quota), removed when the test ends; it
// returns the file a process's id is written to, and the file of its
// throttling statistics. It skips the test where no cgroup can be made
// (not root, no cpu controller).
func cpuCgroup(t *testing.T, share float64) (procs, stat string) {
	t.Helper()
	const period = 100000 // µs
	quota := strconv.Itoa(int(share * period))
	name := fmt.Sprintf("v2bridge-test-%d", os.Getpid())
	var dir string
	var limit func() error
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(b), "cpu") {
		dir = filepath.Join("/sys/fs/cgroup", name)
		limit = func() error {
			return os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(quota+" "+strconv.Itoa(period)), 0o600)
		}
	} else if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil {
		dir = filepath.Join("/sys/fs/cgroup/cpu", name)
		limit = func() error {
			if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(period)), 0o600); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(quota), 0o600)
		}
	} else {
		t.Skip("no cgroup cpu controller (v2 cpu.max or v1 cpu.cfs_quota_us)")
	}
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Rmdir(dir) }) // after the process in it is gone
	if err := limit(); err != nil {
		t.Skipf("cannot limit a cgroup's CPU: %v", err)
	}
	return filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cpu.stat")
}

// TestLivenessFalsePositiveCPULimit: the bridge binary runs with 10 % of
// one CPU (a cgroup's CPU limit, as a pod's) while it serves watchers and
// a writer; its members run unlimited. No loss is declared.
func TestLivenessFalsePositiveCPULimit(t *testing.T) {
	procs, stat := cpuCgroup(t, 0.10)
	// The binary enters the cgroup before it starts.
	_, p := startBridgeWritingItsPID(t, procs, "the CPU-limited bridge")

	kapi := v2client(t, p.URL)
	ws := startWatchers(t, p.URL, "/cpu")
	// Two writers through the bridge, as fast as it takes them, for 20 s.
	var writes, failed atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline); n++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := kapi.Set(ctx, fmt.Sprintf("/cpu/w%d/k%d", i, n%20), "v", nil)
				cancel()
				if err != nil {
					failed.Add(1)
					time.Sleep(100 * time.Millisecond)
					continue
				}
				writes.Add(1)
			}
		}()
	}
	wg.Wait()
	if writes.Load() == 0 {
		t.Fatal("no write went through the CPU-limited bridge")
	}
	ctx := ctxT(t, 60*time.Second)
	for i, w := range ws {
		if !w.WaitFor(ctx, func(evs []v2bridgetest.WatchedEvent) bool { return len(evs) >= int(writes.Load()) }) {
			t.Errorf("watcher %d: %d events of %d writes", i, len(w.Events()), writes.Load())
		}
	}
	st, _ := os.ReadFile(stat)
	losses := scrapeMetric(t, p.URL, "v2bridge_backend_losses_total")
	t.Logf("10%% of a CPU: %d writes (%d failed) in 20 s; %v losses, %v heartbeat misses, %v excused (the bridge ran late), "+
		"%v heartbeats answered; cgroup cpu.stat: %s", writes.Load(), failed.Load(), losses,
		scrapeMetric(t, p.URL, "v2bridge_backend_heartbeat_misses_total"),
		scrapeMetric(t, p.URL, "v2bridge_backend_heartbeat_misses_excused_total"),
		scrapeMetric(t, p.URL, "v2bridge_backend_heartbeat_seconds_count"), strings.Join(strings.Fields(string(st)), " "))
	if losses != 0 {
		t.Errorf("a CPU-limited bridge declared its answering member lost %v times; its log:\n%s", losses, p.Log())
	}
}

// TestLivenessFalsePositiveBridgeStarved: the bridge binary runs in bursts
// of 5 ms between stops (SIGSTOP) of 600 ms, longer than a heartbeat's
// timeout, for 15 s, as a bridge starved by a noisy neighbour or long pauses
// would, while it serves watchers; its members run freely. A check whose
// timeout passes while the bridge is held is excused, since the bridge ran
// late: no loss is declared.
func TestLivenessFalsePositiveBridgeStarved(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	c, p := startBridgeWritingItsPID(t, pidFile, "the bridge")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %q", b)
	}

	ws := startWatchers(t, p.URL, "/starved")
	// A writer through a member (the bridge answers slowly while held).
	cli := c.MemberClient(t, 0)
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := cli.Put(ctx, fmt.Sprintf("/starved/k%d", n%20), "v")
			cancel()
			if err == nil {
				n++
			}
		}
	}()
	cont := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(cont)
	const held, run = 600 * time.Millisecond, 5 * time.Millisecond
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(held)
		cont()
		time.Sleep(run)
	}
	close(stop)
	writes := <-done
	ctx := ctxT(t, 60*time.Second)
	for i, w := range ws {
		if !w.WaitFor(ctx, func(evs []v2bridgetest.WatchedEvent) bool { return len(evs) >= writes }) {
			t.Errorf("watcher %d: %d events of %d writes", i, len(w.Events()), writes)
		}
	}
	losses := scrapeMetric(t, p.URL, "v2bridge_backend_losses_total")
	t.Logf("held %v, run %v, for 15 s: %d writes; %v losses, %v heartbeat misses, %v excused (the bridge ran "+
		"late), %v heartbeats answered", held, run, writes, losses, scrapeMetric(t, p.URL, "v2bridge_backend_heartbeat_misses_total"),
		scrapeMetric(t, p.URL, "v2bridge_backend_heartbeat_misses_excused_total"),
		scrapeMetric(t, p.URL, "v2bridge_backend_heartbeat_seconds_count"))
	if losses != 0 {
		t.Errorf("a starved bridge declared its answering member lost %v times; its log:\n%s", losses, p.Log())
	}
}

// defragEnv sets the size, in MiB, of the database
// TestLivenessFalsePositiveDefrag fills and defragments; unset, the test is
// skipped (it writes that much to disk and takes minutes).
const defragEnv = "V2BRIDGE_TEST_DEFRAG_MB"

// TestLivenessFalsePositiveDefrag: the bridge's member holds a database of
// V2BRIDGE_TEST_DEFRAG_MB MiB of live values (outside the bridge's data
// prefix) and is defragmented while the bridge serves watchers and a v2
// writer: the defrag stalls the member's storage for as long as it copies
// the database, but no loss is declared and every write reaches every
// watcher once, in order.
func TestLivenessFalsePositiveDefrag(t *testing.T) {
	mb, err := strconv.Atoi(os.Getenv(defragEnv))
	if err != nil || mb < 1 {
		t.Skipf("writes a large database: %s=1024 to run it", defragEnv)
	}
	c := v2bridgetest.StartProcessCluster(t, 1)
	cli := c.MemberClient(t, 0)
	value := strings.Repeat("x", 1<<20)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(mb); i = next.Add(1) - 1 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err := cli.Put(ctx, fmt.Sprintf("/fill/%06d", i), value)
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("filling the database: %v", err)
	}
	st, err := cli.Status(ctxT(t, 30*time.Second), c.Members[0].ClientURL)
	if err != nil {
		t.Fatal(err)
	}

	o := heartbeatOptions(t)
	o.DataPrefix = "/v2" // the bridge's copy leaves /fill out
	br := v2bridgetest.StartBridge(t, c.ProxiedEndpoints(), o)
	tr := startV2Traffic(t, br.URL)
	hb0 := metricValue(t, br.Registry, "v2bridge_backend_heartbeat_seconds")
	applying0 := metricValue(t, br.Registry, "v2bridge_backend_heartbeat_applying_total")
	t0 := time.Now()
	if _, err := cli.Defragment(ctxT(t, 10*time.Minute), c.Members[0].ClientURL); err != nil {
		t.Fatalf("defrag: %v", err)
	}
	took := time.Since(t0)
	hb := metricValue(t, br.Registry, "v2bridge_backend_heartbeat_seconds") - hb0
	time.Sleep(time.Second) // writes after the defrag
	n := tr.check(t)
	losses := metricValue(t, br.Registry, "v2bridge_backend_losses_total")
	t.Logf("defrag of a %d MiB database (%d MiB of values) took %v; %d writes; %v heartbeats answered and %v excused "+
		"as applying meanwhile; %v losses, %v misses, %v excused as late", st.DbSize>>20, mb, took.Round(time.Millisecond),
		n, hb, metricValue(t, br.Registry, "v2bridge_backend_heartbeat_applying_total")-applying0, losses,
		metricValue(t, br.Registry, "v2bridge_backend_heartbeat_misses_total"),
		metricValue(t, br.Registry, "v2bridge_backend_heartbeat_misses_excused_total"))
	if losses != 0 {
		t.Errorf("a member in a defrag was declared lost %v times", losses)
	}
}

// v2Traffic is what the false-loss tests run through a bridge while the
// member is slowed: three v2 watchers of /d from the bridge's index, and
// a writer creating /d/k000000, /d/k000001, ... every 20 ms; a write the
// slowdown outlasts is retried until it is known to exist (PrevNoExist).
type v2Traffic struct {
	ws      []*v2bridgetest.V2Watcher
	stop    chan struct{}
	written chan int
	once    sync.Once
	n       int
}

func startV2Traffic(t *testing.T, url string) *v2Traffic {
	t.Helper()
	kapi := v2client(t, url)
	tr := &v2Traffic{ws: startWatchers(t, url, "/d"), stop: make(chan struct{}), written: make(chan int)}
	go func() {
		n := 0
		defer func() { tr.written <- n }()
		for {
			select {
			case <-tr.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := kapi.Set(ctx, fmt.Sprintf("/d/k%06d", n), "v", &client.SetOptions{PrevExist: client.PrevNoExist})
			cancel()
			var cerr client.Error
			if err == nil || (errors.As(err, &cerr) && cerr.Code == client.ErrorCodeNodeExist) {
				n++
			}
		}
	}()
	t.Cleanup(func() { tr.stopWriter() })
	return tr
}

// stopWriter stops the writer (once) and returns how many keys it wrote.
func (tr *v2Traffic) stopWriter() int {
	tr.once.Do(func() {
		close(tr.stop)
		tr.n = <-tr.written
	})
	return tr.n
}

// check stops the writer and checks that every watcher saw every write
// once, in order; it returns the writes.
func (tr *v2Traffic) check(t *testing.T) int {
	t.Helper()
	n := tr.stopWriter()
	ctx := ctxT(t, time.Minute)
	for i, w := range tr.ws {
		if !w.WaitFor(ctx, func(evs []v2bridgetest.WatchedEvent) bool { return len(evs) >= n }) {
			t.Errorf("watcher %d: %d events, want %d", i, len(w.Events()), n)
			continue
		}
		var prev uint64
		for j, e := range w.Events() {
			if want := fmt.Sprintf("/d/k%06d", j); e.Key != want || e.Index <= prev {
				t.Errorf("watcher %d: event %d is %s at %d, want %s after %d", i, j, e.Key, e.Index, want, prev)
				break
			}
			prev = e.Index
		}
	}
	return n
}

// startWatchers starts three v2 watchers of dir (recursive) through the
// bridge at url, from its index now; they stop with the test.
func startWatchers(t *testing.T, url, dir string) []*v2bridgetest.V2Watcher {
	t.Helper()
	g, err := v2client(t, url).Get(ctxT(t, 30*time.Second), "/", nil)
	if err != nil {
		t.Fatal(err)
	}
	var ws []*v2bridgetest.V2Watcher
	for i := 0; i < 3; i++ {
		w, err := v2bridgetest.StartV2Watcher([]string{url}, dir, g.Index)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		ws = append(ws, w)
	}
	return ws
}

// startBridgeWritingItsPID starts the bridge binary on a 3-member cluster
// through a shell that first writes its own process id, which the bridge
// then has, into idFile (a cgroup's cgroup.procs, or a file the test
// reads); it is killed with the test.
func startBridgeWritingItsPID(t *testing.T, idFile, what string) (*v2bridgetest.Cluster, *v2bridgetest.BridgeProcess) {
	t.Helper()
	bin := buildBridge(t)
	wrapper := filepath.Join(t.TempDir(), "v2bridge-wrapped")
	script := fmt.Sprintf("#!/bin/sh\necho $$ > '%s' || exit 1\nexec '%s' \"$@\"\n", idFile, bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil { //nolint:gosec // G306: an executable
		t.Fatal(err)
	}
	c := v2bridgetest.StartCluster(t, 3)
	var p *v2bridgetest.BridgeProcess
	v2bridgetest.RetryPortTaken(t, what, func() error {
		var err error
		p, err = v2bridgetest.StartBridgeProcess(wrapper, v2bridgetest.FreeURL(t),
			append([]string{"--endpoints", strings.Join(c.Endpoints(), ",")}, heartbeatFlags(t)...)...)
		return err
	})
	t.Cleanup(func() { p.Stop(syscall.SIGKILL) })
	return c, p
}
