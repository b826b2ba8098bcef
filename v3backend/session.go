// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// session is one connection to one backend member. Everything that runs on
// it (requests, the hub's watch) is bound to ctx, which ends when the
// liveness monitor declares the member lost: nothing outlives its feed.
type session struct {
	cli      *clientv3.Client
	ctx      context.Context
	cancel   context.CancelFunc
	endpoint string
	index    int
	started  time.Time
	lastOK   atomic.Int64 // unix nanoseconds of the last good heartbeat
	lostAt   time.Time    // set by lose, under Backend.mu
}

func (s *session) end() {
	s.cancel()
	_ = s.cli.Close()
}

func (b *Backend) dial(ctx context.Context, endpoint string) (*clientv3.Client, error) {
	if b.cfg.Member != nil {
		return v3client.New(b.cfg.Member), nil
	}
	return clientv3.New(clientv3.Config{
		Endpoints:            []string{endpoint},
		DialTimeout:          b.cfg.DialTimeout,
		DialKeepAliveTime:    b.cfg.KeepAliveTime,
		DialKeepAliveTimeout: b.cfg.KeepAliveTimeout,
		PermitWithoutStream:  true,
		DialOptions:          b.cfg.DialOptions,
		TLS:                  b.cfg.TLS,
		Username:             b.cfg.Username,
		Password:             b.cfg.Password,
		Logger:               b.lg.Named("clientv3").WithOptions(zap.IncreaseLevel(zap.ErrorLevel)),
		Context:              ctx,
	})
}

// health is the heartbeat: the gRPC health service, which etcd answers
// without touching its storage, so a defrag or a slow disk is not mistaken
// for a dead member (a read, or a progress request on the watch stream,
// waits for storage: a defrag of a few hundred MB stalls them for seconds).
//
// It carries the require-leader mark, which etcd checks (for every unary
// call, this one included) before answering: a member that has no leader,
// such as one cut off from its peers, fails the heartbeat as well, which is
// sooner than etcd cancels require-leader watches (three election
// timeouts). A leader moved leaves the followers without one for
// milliseconds, fewer than the misses need (the leader-move test: no miss
// at all); a cluster whose leader died has none until an election ends, and
// a member that reports so for HeartbeatFailures checks in a row is left.
func (b *Backend) health(ctx context.Context, cli *clientv3.Client) error {
	if m := b.cfg.Member; m != nil {
		select {
		case <-m.StopNotify():
			return errors.New("the embedded member has stopped")
		default:
		}
		if m.Leader() == 0 {
			return errors.New("the embedded member has no leader")
		}
		return nil
	}
	resp, err := healthpb.NewHealthClient(cli.ActiveConnection()).Check(clientv3.WithRequireLeader(ctx),
		&healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health status %v", resp.Status)
	}
	return nil
}

// connect dials every endpoint at once and keeps the first that answers a
// health check and a read, both requiring a leader: a dead member cannot
// hold up the others, and a member cut off from quorum is not chosen.
func (b *Backend) connect(ctx context.Context) (*session, error) {
	type result struct {
		s   *session
		ep  string
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	eps := b.Endpoints()
	n := len(eps)
	results := make(chan result, n)
	b.wg.Add(n)
	for i, ep := range eps {
		go func() {
			defer b.wg.Done()
			s, err := b.tryEndpoint(ctx, ep, i)
			results <- result{s, ep, err}
		}()
	}
	var errs []error
	for k := 0; k < n; k++ {
		r := <-results
		if r.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.ep, r.err))
			continue
		}
		// The others are canceled; close any that answered too.
		b.wg.Add(1)
		go func(left int) {
			defer b.wg.Done()
			for ; left > 0; left-- {
				if o := <-results; o.s != nil {
					o.s.end()
				}
			}
		}(n - k - 1)
		return r.s, nil
	}
	return nil, fmt.Errorf("no etcd v3 endpoint answered: %w", errors.Join(errs...))
}

func (b *Backend) tryEndpoint(ctx context.Context, ep string, idx int) (*session, error) {
	sctx, cancel := context.WithCancel(context.Background())
	cli, err := b.dial(sctx, ep)
	if err != nil {
		cancel()
		return nil, err
	}
	cctx, ccancel := context.WithTimeout(ctx, b.cfg.DialTimeout)
	defer ccancel()
	err = b.health(cctx, cli)
	if err == nil {
		var resp *clientv3.GetResponse
		resp, err = cli.Get(clientv3.WithRequireLeader(cctx), b.layout.JournalKey(), clientv3.WithSerializable(), clientv3.WithCountOnly()) // a key the bridge may read under RBAC
		if err == nil {
			b.noteHeader(resp.Header)
		}
	}
	if err != nil {
		cancel()
		_ = cli.Close()
		return nil, err
	}
	s := &session{cli: cli, ctx: sctx, cancel: cancel, endpoint: ep, index: idx, started: time.Now()}
	s.lastOK.Store(time.Now().UnixNano())
	return s, nil
}

// setSession makes s the current session; it reports false (and ends s)
// when the backend is closed.
func (b *Backend) setSession(s *session, reason string) bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		s.end()
		return false
	}
	b.sess = s
	ch := b.sessCh
	b.sessCh = make(chan struct{})
	b.mu.Unlock()
	close(ch)
	b.metrics.backendUp.Set(1)
	fields := []zap.Field{zap.String("endpoint", s.endpoint)}
	if reason != "" { // a first connection has none
		fields = append(fields, zap.String("reason", reason))
	}
	b.lg.Info("etcd v3 backend connected", fields...)
	return true
}

// sessionChanged returns a channel closed at the next session change.
func (b *Backend) sessionChanged() (*session, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sess, b.sessCh
}

// lose declares session s lost (if it is still the current one): every
// request and watch on it ends at once, and new requests fail fast until the
// monitor connects again, which it starts doing at once.
func (b *Backend) lose(s *session, reason string) {
	b.mu.Lock()
	if b.sess != s || s == nil {
		b.mu.Unlock()
		return
	}
	b.sess = nil
	s.lostAt = time.Now()
	ch := b.sessCh
	b.sessCh = make(chan struct{})
	b.mu.Unlock()
	// Cancel first: that ends the hub's watch and so every v2 watch fed by
	// it, and every request in flight. Closing the client may wait on
	// the connection; it must not hold up the monitor or the hub.
	s.cancel()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		_ = s.cli.Close()
	}()
	close(ch)
	b.metrics.backendUp.Set(0)
	b.metrics.losses.Inc()
	b.metrics.detectSeconds.Observe(s.lostAt.Sub(time.Unix(0, s.lastOK.Load())).Seconds())
	b.lg.Warn("etcd v3 backend lost", zap.String("endpoint", s.endpoint), zap.String("reason", reason))
}

// Up reports whether a backend member is connected and answering.
func (b *Backend) Up() bool {
	s, _ := b.sessionChanged()
	return s != nil
}

// Endpoint is the member the bridge is connected to ("" while lost).
func (b *Backend) Endpoint() string {
	s, _ := b.sessionChanged()
	if s == nil {
		return ""
	}
	return s.endpoint
}

// monitor runs the heartbeat on the current session and, as soon as the
// session is lost (by the heartbeat, or by the hub when its watch fails),
// reconnects.
//
// Detection: the first check after the fault starts within an interval of
// it; a check that times out is followed at once by the next (its tick is
// due when the interval is at most the timeout), so a member that stops
// answering is declared lost an interval plus HeartbeatFailures timeouts
// after the fault at most (see Config); a member without a leader, within
// HeartbeatFailures intervals of noticing that it has none.
//
// A check that times out while this process itself was held for more than
// a quarter of the timeout (see lagMeter) is excused: a bridge starved of
// CPU (a CPU limit, a stop, a busy node) cannot tell whether the member
// answered. It neither counts nor forgives a miss, and
// v2bridge_backend_heartbeat_misses_excused_total counts it. Excuses end
// once the member has been silent for excuseLimit heartbeats: a bridge
// starved for good still notices a dead member.
func (b *Backend) monitor() {
	defer b.wg.Done()
	t := time.NewTicker(b.cfg.HeartbeatInterval)
	defer t.Stop()
	var last *session
	misses := 0
	for {
		s, changed := b.sessionChanged()
		if s == nil {
			if !b.reconnect(last) {
				return
			}
			continue
		}
		if s != last {
			last, misses = s, 0
		}
		select {
		case <-b.closeCh:
			return
		case <-changed:
			continue
		case <-t.C:
		}
		start := time.Now()
		late, err := b.check(s)
		if err == nil {
			b.metrics.heartbeat.Observe(time.Since(start).Seconds())
			s.lastOK.Store(time.Now().UnixNano())
			misses = 0
			continue
		}
		if s.ctx.Err() != nil {
			continue // lost meanwhile
		}
		if status.Code(err) == codes.DeadlineExceeded {
			if b.lastAnswer.Load() > start.UnixNano() {
				// The member answered other requests while this check
				// waited: it is overloaded, not gone. A dead, frozen or
				// cut-off member answers nothing.
				b.lg.Debug("heartbeat slow but the backend answers", zap.String("endpoint", s.endpoint))
				continue
			}
			if b.excused(s, late) {
				b.metrics.excused.Inc()
				b.lg.Debug("heartbeat timed out while the bridge ran late: excused", zap.String("endpoint", s.endpoint),
					zap.Duration("late", late))
				continue
			}
		}
		misses++
		b.metrics.heartbeatMisses.Inc()
		b.lg.Debug("heartbeat missed", zap.String("endpoint", s.endpoint), zap.Int("misses", misses),
			zap.Duration("late", late), zap.Error(err))
		if misses >= b.cfg.HeartbeatFailures {
			b.lose(s, fmt.Sprintf("%d heartbeats missed: %v", misses, err))
		}
	}
}

const (
	// lateShare: a timed-out check is excused when this process was held
	// for more than this share of the timeout while it was in flight.
	lateShare = 4 // a quarter
	// excuseLimit: no check is excused once the member has been silent
	// for this many heartbeats (interval plus timeout each).
	excuseLimit = 10
)

// excused reports whether a check on s that timed out while this process
// was held for late says nothing of the member.
func (b *Backend) excused(s *session, late time.Duration) bool {
	silent := time.Since(time.Unix(0, s.lastOK.Load()))
	return late > b.cfg.HeartbeatTimeout/lateShare &&
		silent < excuseLimit*(b.cfg.HeartbeatInterval+b.cfg.HeartbeatTimeout)
}

// check runs one heartbeat on s, bounded by the heartbeat timeout, and
// reports the longest this process was held while it was in flight.
func (b *Backend) check(s *session) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(s.ctx, b.cfg.HeartbeatTimeout)
	defer cancel()
	var err error
	done := make(chan struct{})
	go func() { // waited for below; the deadline bounds it
		defer close(done)
		err = b.health(ctx, s.cli)
	}()
	late := b.lag.wait(done)
	return late, err
}

// A lagMeter tells how late this process runs.
type lagMeter interface {
	// wait returns once done is closed, with the longest this process's
	// timers fired late meanwhile: the longest it was held.
	wait(done <-chan struct{}) time.Duration
}

// pacedMeter is the lagMeter of a running bridge: while it waits, it
// wakes every pace and keeps the longest any wake-up came late. A process
// held that long (a CPU limit's throttling, a stop, a pause of its VM, a
// node too busy to schedule it) could not read a member's answer
// meanwhile either; a silent member leaves the wake-ups on time. The
// longest delay, not their sum: a process woken a few milliseconds late
// each time, on a busy machine, still reads an answer within milliseconds.
type pacedMeter struct{ pace time.Duration }

func (m pacedMeter) wait(done <-chan struct{}) time.Duration {
	var late time.Duration
	due := time.Now().Add(m.pace)
	t := time.NewTimer(m.pace)
	defer t.Stop()
	for {
		select {
		case <-done:
			return max(late, time.Since(due))
		case <-t.C:
			now := time.Now()
			late = max(late, now.Sub(due))
			due = now.Add(m.pace)
			t.Reset(m.pace)
		}
	}
}

// heartbeatPace is how often a pacedMeter wakes during a heartbeat of the
// given timeout: a hold shows as a wake-up late by the hold less at most
// a pace, small beside a quarter of the timeout; 40 wake-ups a second at
// the default timeout, and only while a check is in flight.
func heartbeatPace(timeout time.Duration) time.Duration {
	return min(max(timeout/20, 5*time.Millisecond), 25*time.Millisecond)
}

// reconnect connects again after session lost (nil at start) ended: at
// once, then every heartbeat interval until a member answers. It reports
// false when the backend is closing.
func (b *Backend) reconnect(lost *session) bool {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.DialTimeout)
		// Close need not wait for the attempt: closing cancels it.
		stop := context.AfterFunc(b.ctx, cancel)
		ns, err := b.connect(ctx)
		stop()
		cancel()
		if err == nil {
			if !b.setSession(ns, "reconnected") {
				return false
			}
			if lost != nil {
				b.mu.Lock()
				lostAt := lost.lostAt
				b.mu.Unlock()
				if !lostAt.IsZero() {
					b.metrics.recoverSeconds.Observe(time.Since(lostAt).Seconds())
				}
			}
			return true
		}
		b.lg.Debug("reconnect failed", zap.Error(err))
		select {
		case <-b.closeCh:
			return false
		case <-time.After(b.cfg.HeartbeatInterval):
		}
	}
}
