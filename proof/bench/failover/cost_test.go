// SPDX-License-Identifier: Apache-2.0

package failover

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
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
	n := bridgeCount(t)
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
	return cpuOverAll(t, []int{pid}, d)[0]
}

// cpuOverAll is cpuOver of several processes over the same time.
func cpuOverAll(t *testing.T, pids []int, d time.Duration) []float64 {
	t.Helper()
	ticks := func() []float64 {
		var out []float64
		for _, pid := range pids {
			f, err := statFields(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				t.Fatal(err)
			}
			u, _ := strconv.ParseFloat(f[11], 64) // utime, field 14
			s, _ := strconv.ParseFloat(f[12], 64) // stime, field 15
			out = append(out, u+s)
		}
		return out
	}
	const hz = 100 // USER_HZ on Linux
	t0, c0 := time.Now(), ticks()
	time.Sleep(d)
	c1, dt := ticks(), time.Since(t0).Seconds()
	out := make([]float64, len(pids))
	for i := range pids {
		out[i] = (c1[i] - c0[i]) / hz / dt
	}
	return out
}

// callKind is one kind of call an idle bridge makes to its member, or that
// a heartbeat could make: set up once per client connection, then issued
// at a fixed pace.
type callKind struct {
	name string
	pace time.Duration // between two calls of one client: a bridge's own pace
	// prepare readies one client for the calls (nil: nothing to ready) and
	// returns what ends its preparations.
	prepare func(ctx context.Context, cli *clientv3.Client) (call func(context.Context) error, stop func(), err error)
}

// heartbeatPace is the default heartbeat interval.
var heartbeatPace = v3backend.Defaults.HeartbeatInterval

// callKinds are the calls measured by TestHeartbeatCallCost, each at the
// pace an idle bridge makes it (the heartbeat's for those that could be
// one), before and after the auth store's progress requests and the
// registration's renewals were made cheaper.
var callKinds = []callKind{
	{"health check (require leader): the heartbeat", heartbeatPace, func(_ context.Context, cli *clientv3.Client) (func(context.Context) error, func(), error) {
		h := healthpb.NewHealthClient(cli.ActiveConnection())
		return func(ctx context.Context) error {
			_, err := h.Check(clientv3.WithRequireLeader(ctx), &healthpb.HealthCheckRequest{})
			return err
		}, func() {}, nil
	}},
	{"watch progress request, every 0.5 s (the auth store before)", 500 * time.Millisecond, progressCalls},
	{"watch progress request, every 1.67 s (the auth store now)", v3backend.Defaults.RequestTimeout / 3, progressCalls},
	{"lease KeepAliveOnce, every 2.5 s (the registration before)", 2500 * time.Millisecond, func(ctx context.Context, cli *clientv3.Client) (func(context.Context) error, func(), error) {
		g, err := cli.Grant(ctx, 600)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) error {
			_, err := cli.KeepAliveOnce(ctx, g.ID)
			return err
		}, func() {}, nil
	}},
	{"lease renewal on a kept stream (clientv3 KeepAlive, TTL 10 s: every 3.3 s; the registration now)", time.Millisecond, func(ctx context.Context, cli *clientv3.Client) (func(context.Context) error, func(), error) {
		g, err := cli.Grant(ctx, 10)
		if err != nil {
			return nil, nil, err
		}
		kctx, cancel := context.WithCancel(ctx)
		ch, err := cli.KeepAlive(kctx, g.ID)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		// A call is the next renewal's answer: clientv3 paces them.
		return func(ctx context.Context) error {
			select {
			case _, ok := <-ch:
				if !ok {
					return errors.New("keepalive channel closed")
				}
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, cancel, nil
	}},
	{"MemberList, linearizable", heartbeatPace, func(_ context.Context, cli *clientv3.Client) (func(context.Context) error, func(), error) {
		return func(ctx context.Context) error {
			_, err := cli.MemberList(clientv3.WithRequireLeader(ctx))
			return err
		}, func() {}, nil
	}},
	{"Maintenance Status on the client's connection", heartbeatPace, func(_ context.Context, cli *clientv3.Client) (func(context.Context) error, func(), error) {
		m := pb.NewMaintenanceClient(cli.ActiveConnection())
		return func(ctx context.Context) error {
			_, err := m.Status(clientv3.WithRequireLeader(ctx), &pb.StatusRequest{})
			return err
		}, func() {}, nil
	}},
	{"Maintenance Status via clientv3 (a connection per call)", heartbeatPace, func(_ context.Context, cli *clientv3.Client) (func(context.Context) error, func(), error) {
		ep := cli.Endpoints()[0]
		return func(ctx context.Context) error {
			_, err := cli.Status(clientv3.WithRequireLeader(ctx), ep)
			return err
		}, func() {}, nil
	}},
	{"serializable count-only Get (for reference)", heartbeatPace, func(_ context.Context, cli *clientv3.Client) (func(context.Context) error, func(), error) {
		return func(ctx context.Context) error {
			_, err := cli.Get(clientv3.WithRequireLeader(ctx), "/cost", clientv3.WithSerializable(), clientv3.WithCountOnly())
			return err
		}, func() {}, nil
	}},
}

// progressCalls are progress requests on a stream holding one idle watch,
// whose answers are read.
var progressCalls = func(ctx context.Context, cli *clientv3.Client) (func(context.Context) error, func(), error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := cli.Watch(wctx, "/cost/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if r := <-wch; !r.Created {
		cancel()
		return nil, nil, fmt.Errorf("watch not created: %v", r.Err())
	}
	done := make(chan struct{})
	go func() { // drains the answers; ends with the watch
		defer close(done)
		for range wch { //nolint:revive // drained
		}
	}()
	return func(ctx context.Context) error {
			return cli.RequestProgress(clientv3.WithRequireLeader(ctx))
		}, func() {
			cancel()
			<-done
		}, nil
}

// TestHeartbeatCallCost measures what one call of each kind an idle bridge
// makes (or a heartbeat could make) costs an etcd member in a process of
// its own: the member's CPU time while V2BRIDGE_BENCH_BRIDGES (50) clients,
// each on a connection of its own, make calls of one kind at the pace a
// bridge makes them, less its CPU time with the clients connected and
// silent, per call. gRPC keepalive pings are measured the same way, with
// 500 connections pinging every 10 s (grpc-go's shortest) against as many
// that do not. It runs only with V2BRIDGE_BENCH_HEARTBEAT_COST=1;
// V2BRIDGE_BENCH_CALLS picks kinds by substrings of their names
// ("health|MemberList"); with V2BRIDGE_BENCH_MEMBERS=3 the clients call a
// follower of three members, and the others' CPU is told too;
// V2BRIDGE_BENCH_DENSITY=d has each client call d times as often, standing
// for d bridges (a member carrying 333 bridges: 50 clients, d=7).
func TestHeartbeatCallCost(t *testing.T) {
	if os.Getenv("V2BRIDGE_BENCH_HEARTBEAT_COST") != "1" {
		t.Skip("a benchmark: V2BRIDGE_BENCH_HEARTBEAT_COST=1")
	}
	n := bridgeCount(t)
	density := 1
	if s := os.Getenv("V2BRIDGE_BENCH_DENSITY"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("V2BRIDGE_BENCH_DENSITY=%q", s)
		}
		density = v
	}
	const window = 30 * time.Second
	size := 1
	if os.Getenv("V2BRIDGE_BENCH_MEMBERS") == "3" {
		size = 3
	}
	c := v2bridgetest.StartProcessCluster(t, size)
	kids := children(t, os.Getpid())
	if len(kids) != size {
		t.Fatalf("%d child processes, want the %d members alone", len(kids), size)
	}
	ctx := context.Background()
	ep := calledEndpoint(t, c.Endpoints())
	// The member called first, then the others.
	slices.SortFunc(kids, func(a, b int) int {
		return cmp.Compare(memberOf(t, b, ep), memberOf(t, a, ep))
	})
	var clis []*clientv3.Client
	for i := 0; i < n; i++ {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cli.Close() }()
		if _, err := cli.Get(ctx, "/cost", clientv3.WithCountOnly()); err != nil { // connected
			t.Fatal(err)
		}
		clis = append(clis, cli)
	}
	// others sums the CPU of the members not called.
	others := func(cpu []float64) float64 {
		var sum float64
		for _, c := range cpu[1:] {
			sum += c
		}
		return sum
	}
	baseAll := cpuOverAll(t, kids, window)
	base := baseAll[0]
	head := "| call | calls/s | member CPU (of one core) | member CPU per call |\n|---|---:|---:|---:|"
	rows := []string{fmt.Sprintf("| %d connections, silent | — | %.2f %% | — |", n, 100*base)}
	if size > 1 {
		head = "| call | calls/s | called member's CPU (of one core) | called member's CPU per call | the others' CPU per call |\n|---|---:|---:|---:|---:|"
		rows[0] = fmt.Sprintf("| %d connections to a follower, silent | — | %.2f %% | — | — |", n, 100*base)
	}
	only := os.Getenv("V2BRIDGE_BENCH_CALLS")
	for _, k := range callKinds {
		if !picked(k.name, only) {
			continue
		}
		var calls []func(context.Context) error
		for _, cli := range clis {
			call, stop, err := k.prepare(ctx, cli)
			if err != nil {
				t.Fatalf("%s: %v", k.name, err)
			}
			defer stop()
			calls = append(calls, call)
		}
		var made, failed atomic.Int64
		cctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i, call := range calls {
			wg.Add(1)
			go func() { // paced; staggered so that the calls spread evenly
				defer wg.Done()
				pace := k.pace / time.Duration(density)
				if !ctxSleep(cctx, pace*time.Duration(i)/time.Duration(len(calls))) {
					return
				}
				tick := time.NewTicker(pace)
				defer tick.Stop()
				for {
					rctx, rcancel := context.WithTimeout(cctx, 5*time.Second)
					err := call(rctx)
					rcancel()
					if cctx.Err() != nil {
						return
					}
					if made.Add(1); err != nil {
						failed.Add(1)
					}
					select {
					case <-cctx.Done():
						return
					case <-tick.C:
					}
				}
			}()
		}
		time.Sleep(k.pace/time.Duration(density) + time.Second) // every client under way
		m0 := made.Load()
		t0 := time.Now()
		usedAll := cpuOverAll(t, kids, window)
		used := usedAll[0]
		rate := float64(made.Load()-m0) / time.Since(t0).Seconds()
		cancel()
		wg.Wait()
		if f := failed.Load(); f > 0 {
			t.Errorf("%s: %d of %d calls failed", k.name, f, made.Load())
		}
		per := (used - base) / rate // seconds of member CPU per call
		row := fmt.Sprintf("| %s | %.0f | %.2f %% | %.0f µs |", k.name, rate, 100*used, per*1e6)
		if size > 1 {
			row += fmt.Sprintf(" %.0f µs |", (others(usedAll)-others(baseAll))/rate*1e6)
		}
		rows = append(rows, row)
		t.Logf("%s: %.0f calls/s, member at %.2f %% of a CPU (%.2f %% silent)", k.name, rate, 100*used, 100*base)
	}
	if size == 1 && picked("gRPC keepalive ping", only) {
		rows = append(rows, pingCost(t, ep, kids[0], window))
	}
	fmt.Printf("\n%s\n%s\n", head, strings.Join(rows, "\n"))
}

// picked reports whether the kind named name is measured: V2BRIDGE_BENCH_CALLS
// is empty, or one of its |-separated parts is in the name.
func picked(name, only string) bool {
	if only == "" {
		return true
	}
	for _, part := range strings.Split(only, "|") {
		if part != "" && strings.Contains(name, part) {
			return true
		}
	}
	return false
}

// calledEndpoint is the endpoint the clients call: a follower's, in a
// cluster of several members, as most bridges' members are.
func calledEndpoint(t *testing.T, eps []string) string {
	t.Helper()
	if len(eps) == 1 {
		return eps[0]
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	for _, ep := range eps {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if st.Leader != 0 && st.Leader != st.Header.MemberId {
			return ep
		}
	}
	t.Fatal("no follower among the members")
	return ""
}

// memberOf is 1 if process pid is the member serving clients at endpoint
// ep (its spec in its environment names it), else 0.
func memberOf(t *testing.T, pid int, ep string) int {
	t.Helper()
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), `"`+ep+`"`) {
		return 1
	}
	return 0
}

// pingCost measures a gRPC keepalive ping: conns connections that ping
// every 10 s against as many that do not, both silent otherwise.
func pingCost(t *testing.T, endpoint string, member int, window time.Duration) string {
	t.Helper()
	const conns, every = 500, 10 * time.Second
	var ctx context.Context
	var cancel context.CancelFunc
	open := func(ka bool) []*grpc.ClientConn {
		ctx, cancel = context.WithCancel(context.Background())
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if ka {
			opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: every, Timeout: 3 * time.Second,
				PermitWithoutStream: true}))
		}
		var out []*grpc.ClientConn
		for i := 0; i < conns; i++ {
			cc, err := grpc.NewClient(strings.TrimPrefix(endpoint, "http://"), opts...)
			if err != nil {
				t.Fatal(err)
			}
			// etcd counts a ping on a connection without a stream as
			// abuse: each holds an idle watch stream, as a bridge's do.
			if _, err := pb.NewWatchClient(cc).Watch(ctx); err != nil {
				t.Fatal(err)
			}
			out = append(out, cc)
		}
		time.Sleep(3 * time.Second) // connected
		return out
	}
	closeAll := func(ccs []*grpc.ClientConn) {
		cancel()
		for _, cc := range ccs {
			_ = cc.Close()
		}
	}
	quiet := open(false)
	silent := cpuOver(t, member, window)
	closeAll(quiet)
	pinging := open(true)
	used := cpuOver(t, member, window)
	closeAll(pinging)
	rate := conns / every.Seconds()
	per := (used - silent) / rate
	t.Logf("keepalive pings: %.0f/s, member at %.2f %% of a CPU (%.2f %% with as many connections not pinging)",
		rate, 100*used, 100*silent)
	return fmt.Sprintf("| gRPC keepalive ping (%d connections, one each %v) | %.0f | %.2f %% | %.0f µs |", conns, every, rate, 100*used, per*1e6)
}

// ctxSleep sleeps for d unless ctx ends first; it reports whether it slept.
func ctxSleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// bridgeCount is V2BRIDGE_BENCH_BRIDGES, 50 by default.
func bridgeCount(t *testing.T) int {
	t.Helper()
	n := 50
	if s := os.Getenv("V2BRIDGE_BENCH_BRIDGES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("V2BRIDGE_BENCH_BRIDGES=%q", s)
		}
		n = v
	}
	return n
}
