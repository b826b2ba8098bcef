// SPDX-License-Identifier: Apache-2.0

package v3backend

// The liveness monitor against fake members: gRPC servers on loopback that
// answer the calls a session makes of a member (the heartbeat's member
// list and status, and the count-only read that admits it) and can be told
// to fail, to hang, or to answer as a member cut off from its peers or
// behind in applying. A member of etcd 3.4 answers its member list from
// memory, and its heartbeat is a linearizable read.
// No etcd member runs, so these run in make unit.

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime"
	runtimemetrics "runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/v2bridge/v2bridge/translate"
)

type memberMode int

const (
	serving    memberMode = iota
	notServing            // no leader: the check fails at once
	hanging               // no answer until the caller gives up
	// cutOff: the member answers its status (it believes in a leader, and
	// has applied all it committed), but no quorum confirms its reads.
	cutOff
	// cutOffLeader: the same, of the leader, in the term of its last
	// answered check.
	cutOffLeader
	// newLeader: the member has just been elected leader (in a new term),
	// and has not confirmed a read yet.
	newLeader
	// behind: the member has a leader but is applying entries it
	// committed: no read is confirmed in time either.
	behind
	// stalled: the member's storage stalls (a defrag with writes
	// pending): no read is confirmed, its status waits on its storage
	// (as etcd 3.6's does), its health check answers.
	stalled
)

type fakeMember struct {
	healthpb.UnimplementedHealthServer
	etcdserverpb.UnimplementedClusterServer
	etcdserverpb.UnimplementedMaintenanceServer
	etcdserverpb.UnimplementedKVServer
	ep      string
	version string // the release its status claims ("": none); "3.4.x" answers its member list from memory

	// mu guards the fields below.
	mu       sync.Mutex
	mode     memberMode
	failNext int           // checks still to fail (as a broken member) before mode applies again
	delay    time.Duration // how long a serving member takes to answer a check
	thenAt   int           // the check (by count) from which then applies (0: none)
	then     memberMode
	// unknownNext: hung checks still to end with etcd 3.4's own answer to
	// a passed deadline (codes.Unknown), just before the caller's.
	unknownNext int
	served      int             // checks answered
	checks      int             // checks received
	statuses    int             // status requests received
	deadlines   []time.Duration // time left to each hung check when it arrived
}

// startFakeMember serves a fake member on a loopback port until the test
// ends.
func startFakeMember(t *testing.T, mode memberMode) *fakeMember {
	t.Helper()
	return startFakeRelease(t, mode, "")
}

// startFakeRelease is startFakeMember of a member whose status claims etcd
// release version.
func startFakeRelease(t *testing.T, mode memberMode, version string) *fakeMember {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeMember{ep: "http://" + ln.Addr().String(), mode: mode, version: version}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, f)
	etcdserverpb.RegisterClusterServer(srv, f)
	etcdserverpb.RegisterMaintenanceServer(srv, f)
	etcdserverpb.RegisterKVServer(srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return f
}

// listFromMemory tells a member of etcd 3.4, which answers a linearizable
// member list from memory: its heartbeat is a linearizable read.
func (f *fakeMember) listFromMemory() bool { return strings.HasPrefix(f.version, "3.4.") }

// MemberList is the heartbeat: it must ask for a linearizable answer from
// a member that has a leader. A member of etcd 3.4 answers from memory
// whatever its quorum, unless it does not answer at all.
func (f *fakeMember) MemberList(ctx context.Context, r *etcdserverpb.MemberListRequest) (*etcdserverpb.MemberListResponse, error) {
	if f.listFromMemory() {
		f.mu.Lock()
		mode := f.mode
		f.mu.Unlock()
		if mode == hanging {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return &etcdserverpb.MemberListResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: 1, MemberId: 2,
			RaftTerm: 3}}, nil
	}
	if !r.Linearizable {
		return nil, fmt.Errorf("heartbeat: linearizable %v", r.Linearizable)
	}
	return check(ctx, f, &etcdserverpb.MemberListResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: 1,
		MemberId: 2, RaftTerm: 3}})
}

// check answers a heartbeat, which must require a leader, as the member's
// mode says, with ok when it serves.
func check[R any](ctx context.Context, f *fakeMember, ok *R) (*R, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(rpctypes.MetadataRequireLeaderKey)) == 0 {
		return nil, fmt.Errorf("heartbeat: require-leader %q", md.Get(rpctypes.MetadataRequireLeaderKey))
	}
	f.mu.Lock()
	f.checks++
	if f.thenAt > 0 && f.checks >= f.thenAt {
		f.mode, f.thenAt = f.then, 0
	}
	mode := f.mode
	if f.failNext > 0 {
		f.failNext--
		f.mu.Unlock()
		return nil, status.Error(codes.Internal, "a broken member")
	}
	unknown := false
	if mode == hanging || mode == cutOff || mode == cutOffLeader || mode == newLeader || mode == behind ||
		mode == stalled {
		left := time.Duration(-1)
		if d, ok := ctx.Deadline(); ok {
			left = time.Until(d)
		}
		f.deadlines = append(f.deadlines, left)
		unknown = f.unknownNext > 0
		if unknown {
			f.unknownNext--
		}
	}
	delay := f.delay
	f.mu.Unlock()
	if mode == serving && delay > 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
	}
	if mode == serving {
		f.mu.Lock()
		f.served++
		f.mu.Unlock()
	}
	switch mode {
	case hanging, cutOff, cutOffLeader, newLeader, behind, stalled:
		if d, has := ctx.Deadline(); unknown && has {
			select { // the member's own timer, a moment ahead of the caller's
			case <-ctx.Done():
			case <-time.After(time.Until(d) - 20*time.Millisecond):
			}
			return nil, status.Error(codes.Unknown, context.DeadlineExceeded.Error())
		}
		<-ctx.Done()
		return nil, ctx.Err()
	case notServing:
		return nil, rpctypes.ErrGRPCNoLeader
	}
	return ok, nil
}

func (f *fakeMember) Status(ctx context.Context, _ *etcdserverpb.StatusRequest) (*etcdserverpb.StatusResponse, error) {
	f.mu.Lock()
	f.statuses++
	mode := f.mode
	f.mu.Unlock()
	st, err := f.status(ctx, mode)
	if st != nil {
		st.Version = f.version
	}
	return st, err
}

func (f *fakeMember) status(ctx context.Context, mode memberMode) (*etcdserverpb.StatusResponse, error) {
	switch mode {
	case cutOff:
		return &etcdserverpb.StatusResponse{Header: &etcdserverpb.ResponseHeader{MemberId: 2}, Leader: 7, RaftIndex: 40,
			RaftAppliedIndex: 40}, nil
	case cutOffLeader:
		return &etcdserverpb.StatusResponse{Header: &etcdserverpb.ResponseHeader{MemberId: 7}, Leader: 7, RaftTerm: 3,
			RaftIndex: 40, RaftAppliedIndex: 40}, nil
	case newLeader:
		return &etcdserverpb.StatusResponse{Header: &etcdserverpb.ResponseHeader{MemberId: 7}, Leader: 7, RaftTerm: 4,
			RaftIndex: 40, RaftAppliedIndex: 40}, nil
	case behind:
		return &etcdserverpb.StatusResponse{Leader: 7, RaftIndex: 40, RaftAppliedIndex: 30}, nil
	case notServing:
		return &etcdserverpb.StatusResponse{RaftIndex: 40, RaftAppliedIndex: 40}, nil
	case hanging, stalled:
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &etcdserverpb.StatusResponse{Leader: 7, RaftIndex: 40, RaftAppliedIndex: 40}, nil
}

// Check is the health service: answered from memory, failed without a
// leader.
func (f *fakeMember) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	f.mu.Lock()
	mode := f.mode
	f.mu.Unlock()
	switch mode {
	case hanging:
		<-ctx.Done()
		return nil, ctx.Err()
	case notServing:
		return nil, rpctypes.ErrGRPCNoLeader
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// Range answers a serializable read (the one that admits a member) from
// memory; a linearizable one is the heartbeat of a member of etcd 3.4.
func (f *fakeMember) Range(ctx context.Context, r *etcdserverpb.RangeRequest) (*etcdserverpb.RangeResponse, error) {
	ok := &etcdserverpb.RangeResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: 1, MemberId: 2, RaftTerm: 3}}
	if r.Serializable || !f.listFromMemory() {
		return ok, nil
	}
	return check(ctx, f, ok)
}

func (f *fakeMember) set(mode memberMode, failNext int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode, f.failNext, f.thenAt = mode, failNext, 0
}

// setThen puts the member in mode for its next n checks (and the status
// asked meanwhile), then in then.
func (f *fakeMember) setThen(mode memberMode, n int, then memberMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode, f.failNext, f.thenAt, f.then = mode, 0, f.checks+n+1, then
}

// answerUnknown makes the next n hung checks end as etcd 3.4 ends a read
// whose deadline passed.
func (f *fakeMember) answerUnknown(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unknownNext = n
}

func (f *fakeMember) stats() (served int, deadlines []time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served, append([]time.Duration(nil), f.deadlines...)
}

// counts are the checks and status requests the member received.
func (f *fakeMember) counts() (checks, statuses int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checks, f.statuses
}

// newMonitored connects to eps and runs the liveness monitor, as New does,
// without the watch hub (which would need a member's watch and ranges).
func newMonitored(t *testing.T, cfg Config, eps ...string) *Backend {
	t.Helper()
	return newMonitoredLag(t, cfg, nil, eps...)
}

// newMonitoredLag is newMonitored with the monitor told how late the
// bridge runs by lag (nil: measured, as New does).
func newMonitoredLag(t *testing.T, cfg Config, lag lagMeter, eps ...string) *Backend {
	t.Helper()
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Endpoints, cfg.Layout, cfg.Logger = eps, layout, zap.NewNop()
	cfg.setDefaults()
	b := &Backend{cfg: cfg, layout: layout, lg: cfg.Logger, sessCh: make(chan struct{}), eps: eps,
		metrics: newMetrics(nil), lag: lag}
	if lag == nil {
		b.lag = pacedMeter{pace: heartbeatPace(cfg.HeartbeatTimeout)}
	}
	b.ctx, b.stop = context.WithCancel(context.Background())
	b.closeCh = b.ctx.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := b.connect(ctx, false)
	if err != nil {
		b.stop()
		b.wg.Wait()
		t.Fatal(err)
	}
	b.setSession(s, "")
	b.wg.Add(1)
	go b.monitor()
	t.Cleanup(func() {
		b.mu.Lock()
		b.closed = true
		s := b.sess
		b.mu.Unlock()
		b.stop()
		b.wg.Wait()
		if s != nil {
			s.end()
		}
	})
	return b
}

// waitUntil polls cond until it holds, failing the test after a generous
// deadline (the machine may be busy).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestHeartbeatMissesDeclareTheMemberLostAtTheThreshold: misses fewer than
// HeartbeatFailures in a row are forgiven; that many declare the member
// lost, and the monitor connects again as soon as it answers.
func TestHeartbeatMissesDeclareTheMemberLostAtTheThreshold(t *testing.T) {
	m := startFakeMember(t, serving)
	b := newMonitored(t, Config{HeartbeatInterval: 10 * time.Millisecond, HeartbeatTimeout: 5 * time.Second,
		HeartbeatFailures: 3}, m.ep)

	served, _ := m.stats()
	m.set(serving, 2)
	waitUntil(t, "the member answered 3 heartbeats after 2 misses", func() bool {
		n, _ := m.stats()
		return n >= served+3
	})
	if got := counterValue(t, b.metrics.heartbeatMisses); got != 2 {
		t.Fatalf("%v heartbeat misses counted, want 2", got)
	}
	if got := counterValue(t, b.metrics.losses); got != 0 || !b.Up() {
		t.Fatalf("2 misses of 3 allowed: %v losses, up %v", got, b.Up())
	}

	served, _ = m.stats()
	m.set(serving, 3)
	waitUntil(t, "the member is declared lost", func() bool { return counterValue(t, b.metrics.losses) == 1 })
	waitUntil(t, "the bridge connected again", func() bool {
		n, _ := m.stats()
		return b.Up() && n > served
	})
	if got := counterValue(t, b.metrics.heartbeatMisses); got != 5 {
		t.Fatalf("%v heartbeat misses counted, want 5", got)
	}
	if got := counterValue(t, b.metrics.losses); got != 1 {
		t.Fatalf("%v losses, want 1", got)
	}
	if n := histogramCount(t, b.metrics.recoverSeconds); n != 1 {
		t.Fatalf("%d recoveries observed, want 1", n)
	}
	if b.Endpoint() != m.ep || b.Meta() != (Meta{ClusterID: 1, MemberID: 2, RaftTerm: 3}) {
		t.Fatalf("connected to %q as %+v", b.Endpoint(), b.Meta())
	}
}

// TestAHungHeartbeatIsAMissAfterItsTimeout: a member that stops answering
// is declared lost after HeartbeatFailures checks, each given up after
// HeartbeatTimeout (never sooner); the bridge then moves to the member
// that answers.
func TestAHungHeartbeatIsAMissAfterItsTimeout(t *testing.T) {
	// The default timeout: a shorter one could expire on a loaded machine
	// before the member answers, and count misses the test did not cause.
	const timeout = time.Second
	m1, m2 := startFakeMember(t, serving), startFakeMember(t, notServing)
	// A bridge that runs on time (a held one gives a check more time; see
	// TestALateBridgeReadsALateAnswer).
	b := newMonitoredLag(t, Config{HeartbeatInterval: 10 * time.Millisecond, HeartbeatTimeout: timeout,
		HeartbeatFailures: 2, DialTimeout: 2 * time.Second}, &fakeLag{}, m1.ep, m2.ep)
	if b.Endpoint() != m1.ep {
		t.Fatalf("connected to %q, want the serving %q", b.Endpoint(), m1.ep)
	}

	start := time.Now()
	m1.set(hanging, 0)
	m2.set(serving, 0)
	waitUntil(t, "the hung member is declared lost", func() bool { return counterValue(t, b.metrics.losses) == 1 })
	if took := time.Since(start); took < 2*timeout {
		t.Fatalf("declared lost %v after it hung: sooner than 2 checks of %v", took, timeout)
	}
	_, deadlines := m1.stats()
	if len(deadlines) < 2 {
		t.Fatalf("%d hung checks seen, want 2 at least", len(deadlines))
	}
	for i, left := range deadlines[:2] {
		if left <= 0 || left > timeout {
			t.Fatalf("hung heartbeat %d arrived with %v left, want a deadline within %v", i, left, timeout)
		}
	}
	if got := counterValue(t, b.metrics.heartbeatMisses); got != 2 {
		t.Fatalf("%v heartbeat misses counted, want 2", got)
	}

	waitUntil(t, "the bridge moved to the answering member", func() bool { return b.Endpoint() == m2.ep })
	if !b.Up() || counterValue(t, b.metrics.losses) != 1 || histogramCount(t, b.metrics.recoverSeconds) != 1 {
		t.Fatalf("after the move: up %v, %v losses, %d recoveries", b.Up(), counterValue(t, b.metrics.losses),
			histogramCount(t, b.metrics.recoverSeconds))
	}
}

// fakeLag is a lagMeter that says the bridge ran as late as it is told.
type fakeLag struct{ late atomic.Int64 }

func (f *fakeLag) wait(done <-chan struct{}) time.Duration {
	<-done
	return time.Duration(f.late.Load())
}

// TestALateBridgeExcusesItsMisses: checks that time out while the bridge
// itself was held (for more than a quarter of the timeout) count as no miss
// and are counted as excused; once it runs on time again, the silent member
// is declared lost after HeartbeatFailures misses.
func TestALateBridgeExcusesItsMisses(t *testing.T) {
	// A timeout long enough that the excuses, which end after ten
	// heartbeats of silence (over 10 s here), outlast the test's wait on a
	// loaded machine.
	const timeout = time.Second
	m := startFakeMember(t, serving)
	lag := &fakeLag{}
	b := newMonitoredLag(t, Config{HeartbeatInterval: 10 * time.Millisecond, HeartbeatTimeout: timeout,
		HeartbeatFailures: 2}, lag, m.ep)

	lag.late.Store(int64(timeout/4 + time.Millisecond))
	m.set(hanging, 0)
	waitUntil(t, "two misses excused", func() bool { return counterValue(t, b.metrics.excused) >= 2 })
	if misses, losses := counterValue(t, b.metrics.heartbeatMisses), counterValue(t, b.metrics.losses); misses != 0 ||
		losses != 0 || !b.Up() {
		t.Fatalf("while the bridge ran late: %v misses, %v losses, up %v; want 0, 0, up", misses, losses, b.Up())
	}

	lag.late.Store(int64(timeout / 4)) // on time enough: not more than a quarter late
	excused := counterValue(t, b.metrics.excused)
	waitUntil(t, "the silent member is declared lost", func() bool { return counterValue(t, b.metrics.losses) == 1 })
	if got := counterValue(t, b.metrics.heartbeatMisses); got != 2 {
		t.Fatalf("%v misses counted, want 2", got)
	}
	// The check in flight when the bridge came back on time may have been
	// excused still; none after it.
	if got := counterValue(t, b.metrics.excused); got > excused+1 {
		t.Fatalf("%v misses excused after the bridge ran on time, want at most 1", got-excused)
	}
	if b.Up() {
		t.Fatal("up after the loss, with the only member hung")
	}
}

// TestExcusesEndAfterTenHeartbeatsOfSilence: a bridge that runs late for
// good still declares a silent member lost, once it has been silent for ten
// heartbeats (interval plus timeout each), never sooner.
func TestExcusesEndAfterTenHeartbeatsOfSilence(t *testing.T) {
	const interval, timeout = 10 * time.Millisecond, 100 * time.Millisecond
	m := startFakeMember(t, serving)
	lag := &fakeLag{}
	lag.late.Store(int64(timeout))
	b := newMonitoredLag(t, Config{HeartbeatInterval: interval, HeartbeatTimeout: timeout, HeartbeatFailures: 2},
		lag, m.ep)

	start := time.Now()
	m.set(hanging, 0)
	waitUntil(t, "the silent member is declared lost", func() bool { return counterValue(t, b.metrics.losses) == 1 })
	if took, limit := time.Since(start), excuseLimit*(interval+timeout); took < limit {
		t.Fatalf("declared lost %v after it hung, sooner than the %v of silence excuses last", took, limit)
	}
	if got := counterValue(t, b.metrics.heartbeatMisses); got != 2 {
		t.Fatalf("%v misses counted, want 2", got)
	}
	if got := counterValue(t, b.metrics.excused); got < 1 {
		t.Fatalf("%v misses excused, want some", got)
	}
}

// TestALateBridgeReadsALateAnswer: a bridge held for longer than its
// heartbeat timeout at every check (a herd of watchers ahead of the
// goroutine that reads the answer) gives each check the time it was held,
// so a member that answers, although the answer is read late, is never
// declared lost; excuses alone would end after ten heartbeats of silence.
func TestALateBridgeReadsALateAnswer(t *testing.T) {
	const interval, timeout = 10 * time.Millisecond, 100 * time.Millisecond
	m := startFakeMember(t, serving)
	lag := &fakeLag{}
	lag.late.Store(int64(time.Second))
	b := newMonitoredLag(t, Config{HeartbeatInterval: interval, HeartbeatTimeout: timeout, HeartbeatFailures: 2},
		lag, m.ep)

	m.mu.Lock()
	m.delay = 3 * timeout // read after the timeout, within the time the bridge was held
	m.mu.Unlock()
	served, _ := m.stats()
	// Three times as long as excuses last (ten heartbeats: 1.1 s).
	deadline := time.Now().Add(3 * excuseLimit * (interval + timeout))
	for time.Now().Before(deadline) {
		if got := counterValue(t, b.metrics.losses); got != 0 || !b.Up() {
			t.Fatalf("a member answering within the time the bridge was held: %v losses, up %v", got, b.Up())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, _ := m.stats(); n < served+3 {
		t.Fatalf("%d checks answered while the bridge ran late, want 3 at least", n-served)
	}
	if got := counterValue(t, b.metrics.heartbeatMisses); got != 0 {
		t.Fatalf("%v heartbeat misses counted, want 0", got)
	}
}

// TestCheckTimeout: a check gets the time this process was held during
// the last check on top of the heartbeat timeout when that was more than
// a quarter of it, and never beyond the end of the excuses (nor less than
// the timeout).
func TestCheckTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	for _, c := range []struct {
		held, left, want time.Duration
	}{
		{0, 8 * time.Second, timeout},                                           // on time
		{timeout / 4, 8 * time.Second, timeout},                                 // a quarter: on time enough
		{timeout/4 + time.Millisecond, 8 * time.Second, 626 * time.Millisecond}, // held: the time it was held more
		{2 * time.Second, 8 * time.Second, 2500 * time.Millisecond},             //
		{2 * time.Second, time.Second, time.Second},                             // no further than the excuses last
		{2 * time.Second, 100 * time.Millisecond, timeout},                      // excuses (nearly) over: the timeout
		{2 * time.Second, -time.Second, timeout},                                //
		{0, -time.Second, timeout},                                              //
	} {
		if got := checkTimeout(timeout, c.held, c.left); got != c.want {
			t.Errorf("checkTimeout(%v, held %v, left %v) = %v, want %v", timeout, c.held, c.left, got, c.want)
		}
	}
}

// TestPacedMeterSeesTheProcessHeld: the meter reports at least the time
// this process was held (here stopped with SIGSTOP for 300 ms by a child
// process, then resumed) while it waited.
func TestPacedMeterSeesTheProcessHeld(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	const held = 300 * time.Millisecond
	done := make(chan struct{})
	got := make(chan time.Duration, 1)
	go func() { got <- pacedMeter{pace: 10 * time.Millisecond}.wait(done) }()
	// The meter must be pacing before the stop: started after it, it
	// would see nothing (as it did once on a loaded machine).
	time.Sleep(50 * time.Millisecond)
	cmd := exec.Command("sh", "-c", fmt.Sprintf("kill -STOP %d; sleep %g; kill -CONT %d", os.Getpid(),
		held.Seconds(), os.Getpid()))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	close(done)
	// The stop lands a little after the child starts, and the meter may
	// have been mid-step (up to its pace) when it did.
	if late := <-got; late < held-50*time.Millisecond {
		t.Fatalf("the meter saw the process %v late, held %v", late, held)
	}
}

// TestPacedMeterSeesGoroutinesQueued: the meter reports how long a
// goroutine of this process waited its turn to run while it waited (as
// the scheduler's histogram of waits says), although its own wake-ups came
// on time: a goroutine woken by a timer runs ahead of that queue, and the
// goroutines that write a check to its connection and read the answer do
// not.
func TestPacedMeterSeesGoroutinesQueued(t *testing.T) {
	before := &runtimemetrics.Float64Histogram{Counts: []uint64{0, 7, 0}, Buckets: []float64{0, 0.001, 0.3, 0.6}}
	after := &runtimemetrics.Float64Histogram{Counts: []uint64{0, 9, 1}, Buckets: before.Buckets}
	readings := []*runtimemetrics.Float64Histogram{before, after}
	var mu sync.Mutex // guards readings
	m := pacedMeter{pace: time.Hour, waits: func() *runtimemetrics.Float64Histogram {
		mu.Lock()
		defer mu.Unlock()
		h := readings[0]
		readings = readings[1:]
		return h
	}}
	done := make(chan struct{})
	close(done)
	if late := m.wait(done); late != 300*time.Millisecond {
		t.Fatalf("the meter saw the process %v late; a goroutine waited 300 ms to run", late)
	}
}

// TestSchedWaitsSeesAQueue: on one processor, 200 goroutines with 2 ms
// of work each, made runnable at once (as one event wakes a herd of
// watchers): the last of them waits about 400 ms to run, and schedWaits
// shows it.
func TestSchedWaitsSeesAQueue(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	h0 := schedWaits()
	if h0 == nil {
		t.Fatalf("the runtime has no %s", schedWaitsMetric)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	var spins atomic.Int64 // the work
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for t0 := time.Now(); time.Since(t0) < 2*time.Millisecond; {
				spins.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	// The runtime times one wake-up in eight: 25 of 200 goroutines that
	// waited 0 to 400 ms each.
	if got := longestWait(h0, schedWaits()); got < 100*time.Millisecond {
		t.Fatalf("longest wait to run %v, with 200 goroutines queued for 2 ms each", got)
	}
}

// TestLongestWait: the longest wait is the lower bound of the highest
// bucket of the scheduler's histogram that grew between two readings.
func TestLongestWait(t *testing.T) {
	h := func(counts ...uint64) *runtimemetrics.Float64Histogram {
		return &runtimemetrics.Float64Histogram{Counts: counts, Buckets: []float64{math.Inf(-1), 0, 0.001, 0.1, 0.5}}
	}
	for _, c := range []struct {
		name          string
		before, after *runtimemetrics.Float64Histogram
		want          time.Duration
	}{
		{"the highest bucket that grew", h(1, 5, 2, 0), h(1, 9, 3, 0), time.Millisecond},
		{"the top bucket grew", h(0, 0, 0, 0), h(0, 1, 0, 1), 100 * time.Millisecond},
		{"nothing grew", h(0, 5, 2, 1), h(0, 5, 2, 1), 0},
		{"only the unbounded bottom grew", h(0, 0, 0, 0), h(3, 0, 0, 0), 0},
		{"no reading before", nil, h(0, 0, 0, 1), 0},
		{"readings of different shapes", h(0, 0, 0), h(0, 0, 0, 1), 0},
	} {
		if got := longestWait(c.before, c.after); got != c.want {
			t.Errorf("%s: longestWait = %v, want %v", c.name, got, c.want)
		}
	}
}
