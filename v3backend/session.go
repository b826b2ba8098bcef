// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"fmt"
	"math"
	runtimemetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
	lastOK   atomic.Int64  // unix nanoseconds of the last good heartbeat
	term     atomic.Uint64 // the member's raft term at the last good heartbeat
	lostAt   time.Time     // set by lose, under Backend.mu
	// progressBug: the member answers watch progress requests early
	// (checkVersion); its feeds never ask.
	progressBug bool
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
		// Keepalive pings only a connection with a stream: etcd (every
		// version, by default) answers pings on one without any with
		// GOAWAY too_many_pings. A session always has one (the feed's
		// watch), and the heartbeat notices a dead member within a
		// second and a half anyway.
		PermitWithoutStream: false,
		DialOptions:         b.cfg.DialOptions,
		TLS:                 b.cfg.TLS,
		Username:            b.cfg.Username,
		Password:            b.cfg.Password,
		Logger:              b.lg.Named("clientv3").WithOptions(zap.IncreaseLevel(zap.ErrorLevel)),
		Context:             ctx,
	})
}

// A verdict is what one heartbeat says of a member.
type verdict int

const (
	// quorate: a quorum confirmed the member's read index. The member
	// serves.
	quorate verdict = iota
	// applying: no read index in time, but the member has a leader and
	// has committed entries it has not applied yet (a defrag, a slow
	// disk): it hears a quorum, its storage is behind. No miss.
	applying
	// noQuorum: the member answers, but no quorum confirmed it (it has no
	// leader, or one it cannot reach): a miss, and the bridge leaves only
	// for a member that has a quorum.
	noQuorum
	// deposed: the member is the leader, in the term it had at the last
	// good heartbeat, but no quorum confirms it: it is cut off from a
	// majority, which elects another leader. A miss, and the bridge leaves
	// without asking the others (none has a quorum before that election
	// ends). A leader just elected, in a new term, may take a moment to
	// confirm reads: it is noQuorum.
	deposed
	// silent: the member did not answer (dead, frozen, unreachable): a
	// miss.
	silent
)

// quorumCheck is the heartbeat: a linearizable member list, which etcd
// (3.5 and later) answers from memory once the leader has confirmed its
// read index with a quorum, and the member has applied up to that index.
// It carries the require-leader mark, so a member that knows it has no
// leader fails it at once; a member cut off from its peers, which has not
// noticed yet, gets no read index confirmed and times out. An etcd older
// than 3.5 ignores the linearizable field and answers from memory: the
// check of such a member reads a key instead (see listFromMemory).
//
// A check still unanswered at half its deadline (rare: it takes a
// millisecond) asks two more questions, so that a timeout tells a member
// whose storage is behind from one without a quorum, and both from a
// silent one. A defrag with writes pending holds every linearizable read
// until it ends, as the member cannot apply what it commits.
//   - The member's status: its leader, committed and applied indexes (from
//     memory in etcd 3.5; 3.6 also reads its storage version, so a stalled
//     storage holds it too). Applied behind committed: the member commits,
//     so it hears a quorum; its storage is behind.
//   - The gRPC health check with require-leader, answered from memory: the
//     member is alive and has a leader. With the status held up, that is a
//     member whose storage stalls; a cut-off member's storage answers.
//
// In the common case it is one call.
//
// ep is the member's endpoint; term is its raft term at its last good
// heartbeat (0: none); the term it answers with is returned. A member that
// answers the member list from memory (before 3.5) is asked a
// linearizable count-only read of the journal key instead, which a quorum
// confirms on every release: a leader cut off then fails it as a silent
// one does, not only once it steps down (an election timeout or two
// later). The release decides, not the caller: the heartbeat, connect and
// the poll of the other members ask the same question of the same member.
func (b *Backend) quorumCheck(ctx context.Context, cli *clientv3.Client, ep string, term uint64) (verdict, uint64, error) {
	if m := b.cfg.Member; m != nil {
		select {
		case <-m.StopNotify():
			return silent, 0, errors.New("the embedded member has stopped")
		default:
		}
		if m.Leader() == 0 {
			return noQuorum, 0, errors.New("the embedded member has no leader")
		}
		return quorate, m.Term(), nil
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return silent, 0, errors.New("v3backend: a heartbeat without a deadline")
	}
	byRead, err := b.listFromMemory(ctx, cli, ep)
	if err != nil {
		return silent, 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: every call ends with ctx
	defer cancel()
	conn := cli.ActiveConnection()
	type listAnswer struct {
		term uint64
		err  error
	}
	quorum := make(chan listAnswer, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var h *etcdserverpb.ResponseHeader
		var err error
		if byRead {
			var resp *etcdserverpb.RangeResponse
			resp, err = etcdserverpb.NewKVClient(conn).Range(clientv3.WithRequireLeader(ctx),
				&etcdserverpb.RangeRequest{Key: []byte(b.layout.JournalKey()), CountOnly: true})
			if err == nil {
				h = resp.Header
			}
		} else {
			var resp *etcdserverpb.MemberListResponse
			resp, err = etcdserverpb.NewClusterClient(conn).MemberList(clientv3.WithRequireLeader(ctx),
				&etcdserverpb.MemberListRequest{Linearizable: true})
			if err == nil {
				h = resp.Header
			}
		}
		var t uint64
		if h != nil {
			t = h.RaftTerm
		}
		quorum <- listAnswer{t, err}
	}()
	var (
		st     *etcdserverpb.StatusResponse
		stErr  error
		hc     *healthpb.HealthCheckResponse
		hcErr  error
		asked  bool
		others sync.WaitGroup // the two questions; their answers are read after Wait
	)
	half := time.NewTimer(time.Until(deadline) / 2)
	defer half.Stop()
	for {
		select {
		case <-half.C:
			asked = true
			wg.Add(2)
			others.Add(2)
			go func() {
				defer wg.Done()
				defer others.Done()
				st, stErr = etcdserverpb.NewMaintenanceClient(conn).Status(ctx, &etcdserverpb.StatusRequest{})
			}()
			go func() {
				defer wg.Done()
				defer others.Done()
				hc, hcErr = healthpb.NewHealthClient(conn).Check(clientv3.WithRequireLeader(ctx),
					&healthpb.HealthCheckRequest{})
			}()
			continue
		case a := <-quorum:
			err := a.err
			if err == nil {
				return quorate, a.term, nil
			}
			if deadlinePassed(err) {
				err = status.Error(codes.DeadlineExceeded, "context deadline exceeded (the member's answer)")
			}
			if quorumError(err) {
				return noQuorum, 0, err
			}
			if !asked || status.Code(err) != codes.DeadlineExceeded {
				return silent, 0, err
			}
			others.Wait() // they end by the same deadline
			switch {
			case stErr == nil && st.Leader != 0 && st.RaftAppliedIndex > 0 && st.RaftAppliedIndex < st.RaftIndex:
				return applying, st.RaftTerm, fmt.Errorf("%w (leader %x; applied %d of %d committed)", err, st.Leader,
					st.RaftAppliedIndex, st.RaftIndex)
			case stErr == nil && st.Header != nil && st.Leader != 0 && st.Leader == st.Header.MemberId &&
				st.RaftTerm == term:
				return deposed, st.RaftTerm, fmt.Errorf("%w: no quorum confirmed a read of the leader of term %d "+
					"(applied %d of %d committed)", err, term, st.RaftAppliedIndex, st.RaftIndex)
			case stErr == nil:
				return noQuorum, st.RaftTerm, fmt.Errorf("%w: no quorum confirmed a read (leader %x, term %d; applied "+
					"%d of %d committed)", err, st.Leader, st.RaftTerm, st.RaftAppliedIndex, st.RaftIndex)
			case hcErr == nil && hc.Status == healthpb.HealthCheckResponse_SERVING:
				return applying, 0, fmt.Errorf("%w (it has a leader, its status waits on its storage)", err)
			case quorumError(hcErr):
				return noQuorum, 0, fmt.Errorf("%w: %w", err, hcErr)
			}
			return silent, 0, err
		}
	}
}

// listFromMemory reports whether the member at ep answers a linearizable
// member list from memory, as checkVersion last read it; a member never
// read (one polled by quorumElsewhere before any connect read it) is read
// now.
func (b *Backend) listFromMemory(ctx context.Context, cli *clientv3.Client, ep string) (bool, error) {
	if v, ok := b.listsFromMemory.Load(ep); ok {
		return v.(bool), nil
	}
	if _, err := b.checkVersion(ctx, cli, ep); err != nil {
		return false, err
	}
	v, _ := b.listsFromMemory.Load(ep) // stored by checkVersion
	fromMemory, _ := v.(bool)
	return fromMemory, nil
}

// deadlinePassed reports whether err is a member's own answer that the
// request's deadline passed: etcd 3.4's gRPC server answers a context
// error with codes.Unknown. The deadline is the caller's, passed on with
// the request, so the member's timer and the caller's end it at the same
// moment, and either answer may come first: both are a timeout.
func deadlinePassed(err error) bool {
	st := status.Convert(err)
	return st.Code() == codes.Unknown && st.Message() == context.DeadlineExceeded.Error()
}

// quorumError reports whether err is etcd's answer that it has no quorum
// to serve a linearizable request: no leader, a leader change, a timeout.
func quorumError(err error) bool {
	e := rpctypes.Error(err)
	for _, q := range []error{rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrTimeout,
		rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost} {
		if errors.Is(e, q) {
			return true
		}
	}
	return false
}

// quorumElsewhere asks every other endpoint at once, each bounded by the
// heartbeat timeout, whether a quorum confirms it, and names the first
// that does ("" if none).
func (b *Backend) quorumElsewhere(s *session) string {
	ctx, cancel := context.WithTimeout(s.ctx, b.cfg.HeartbeatTimeout)
	var others []string
	for _, ep := range b.Endpoints() {
		if ep != s.endpoint {
			others = append(others, ep)
		}
	}
	found := make(chan string, len(others))
	var wg sync.WaitGroup
	for _, ep := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli, err := b.dial(ctx, ep)
			if err != nil {
				found <- ""
				return
			}
			defer func() { _ = cli.Close() }()
			if v, _, _ := b.quorumCheck(ctx, cli, ep, 0); v == quorate {
				found <- ep
				return
			}
			found <- ""
		}()
	}
	defer wg.Wait() // after cancel
	defer cancel()
	for range others {
		if ep := <-found; ep != "" {
			return ep
		}
	}
	return ""
}

// connect dials every endpoint at once and keeps the first that a quorum
// confirms (see quorumCheck) and that answers a read requiring a leader: a dead
// member cannot hold up the others, and a member cut off from quorum is
// not chosen. With retry, an endpoint that fails is tried again every
// heartbeat interval until ctx ends, so the attempt ends as soon as any
// member serves (the end of an election, say), not when the slowest
// endpoint gives up.
func (b *Backend) connect(ctx context.Context, retry bool) (*session, error) {
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
			for {
				s, err := b.tryEndpoint(ctx, ep, i)
				if err == nil || !retry {
					results <- result{s, ep, err}
					return
				}
				select {
				case <-ctx.Done():
					results <- result{nil, ep, err}
					return
				case <-time.After(b.cfg.HeartbeatInterval):
				}
			}
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
	err := errors.Join(errs...)
	if errors.Is(err, ErrUnsupportedVersion) {
		return nil, fmt.Errorf("no etcd v3 endpoint the bridge can use answered: %w", err)
	}
	return nil, fmt.Errorf("no etcd v3 endpoint answered: %w", err)
}

func (b *Backend) tryEndpoint(ctx context.Context, ep string, idx int) (*session, error) {
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel) // an abandoned attempt ends its dial too
	cli, err := b.dial(sctx, ep)
	if err != nil {
		cancel()
		return nil, err
	}
	cctx, ccancel := context.WithTimeout(ctx, b.cfg.DialTimeout)
	defer ccancel()
	var progressBug bool
	if b.cfg.Member == nil { // the member in this process is this build's etcd
		progressBug, err = b.checkVersion(cctx, cli, ep)
	}
	// The release first: it decides the quorum check's question (a member
	// that answers its member list from memory, 3.4, would otherwise look
	// quorate just cut off from its peers, not yet aware of it).
	var term uint64
	if err == nil {
		_, term, err = b.quorumCheck(cctx, cli, ep, 0)
	}
	if err == nil {
		var resp *clientv3.GetResponse
		resp, err = cli.Get(clientv3.WithRequireLeader(cctx), b.layout.JournalKey(), clientv3.WithSerializable(), clientv3.WithCountOnly()) // a key the bridge may read under RBAC
		if err == nil {
			b.noteHeader(resp.Header)
		}
	}
	if !stop() && err == nil { // connect no longer waits for it
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		_ = cli.Close()
		return nil, err
	}
	s := &session{cli: cli, ctx: sctx, cancel: cancel, endpoint: ep, index: idx, started: time.Now(),
		progressBug: progressBug}
	s.lastOK.Store(time.Now().UnixNano())
	s.term.Store(term)
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
// answering, or that a quorum no longer confirms (cut off from its peers),
// is declared lost an interval plus HeartbeatFailures timeouts after the
// fault at most (see Config); a member that knows it has no leader, within
// HeartbeatFailures intervals.
//
// A check that times out while this process itself was held for more than
// a quarter of the timeout (see lagMeter) is excused: a bridge starved of
// CPU (a CPU limit, a stop, a busy node) cannot tell whether the member
// answered. It neither counts nor forgives a miss, and
// v2bridge_backend_heartbeat_misses_excused_total counts it. Excuses end
// once the member has been silent for excuseLimit heartbeats: a bridge
// starved for good still notices a dead member. A member whose storage is
// behind (see quorumCheck) is excused the same way, without a limit (a defrag of
// a large database takes as long as it takes; a member cut off meanwhile
// notices that it has no leader), and
// v2bridge_backend_heartbeat_applying_total counts it.
//
// A member that answers but has no quorum is left only for one that has
// had a quorum at its last two misses: at each such miss, the other
// endpoints are asked (see quorumElsewhere). If none has a quorum either,
// the cluster is electing a leader, and leaving would end every watch for
// nothing: the bridge stays and keeps checking
// (v2bridge_backend_losses_deferred_total), for excuseLimit heartbeats of
// silence at most. Two misses, not one: the other members may be asked
// just as one of them wins the election, a moment before the bridge's
// member hears of it. A leader without a quorum is left after its misses:
// it is cut off, and the majority elects another. So is a member found so
// at an earlier miss of the same run: cut off, a leader steps down an
// election timeout or two later, and then has no leader (on etcd 3.4,
// without pre-vote, it campaigns in ever higher terms), but it is still
// the member cut off, while the majority elects another.
func (b *Backend) monitor() {
	defer b.wg.Done()
	t := time.NewTicker(b.cfg.HeartbeatInterval)
	defer t.Stop()
	var last *session
	misses := 0
	deferring := false     // a loss is deferred: no other member had a quorum
	deposedSeen := false   // a miss since the last good check was deposed
	quorumSeen := 0        // checks in a row at whose miss another member had a quorum
	elsewhere := ""        // the last such member
	var held time.Duration // the longest this process was held during the last check
	for {
		s, changed := b.sessionChanged()
		if s == nil {
			if !b.reconnect(last) {
				return
			}
			continue
		}
		if s != last {
			last, misses, deferring, deposedSeen, quorumSeen, held = s, 0, false, false, 0, 0
		}
		select {
		case <-b.closeCh:
			return
		case <-changed:
			continue
		case <-t.C:
		}
		start := time.Now()
		late, v, err := b.check(s, checkTimeout(b.cfg.HeartbeatTimeout, held, b.excuseLeft(s)))
		held = late
		if v == quorate {
			b.metrics.heartbeat.Observe(time.Since(start).Seconds())
			s.lastOK.Store(time.Now().UnixNano())
			misses, deposedSeen, quorumSeen = 0, false, 0
			if deferring {
				deferring = false
				b.lg.Info("etcd v3 backend has a quorum again", zap.String("endpoint", s.endpoint))
			}
			continue
		}
		if s.ctx.Err() != nil {
			continue // lost meanwhile
		}
		if status.Code(err) == codes.DeadlineExceeded {
			if v == silent && b.lastAnswer.Load() > start.UnixNano() && b.mayDefer(s) {
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
			if v == applying && b.silentFor(s) < applyingLimit {
				b.metrics.applying.Inc()
				b.lg.Debug("heartbeat timed out while the member applies what it committed: excused",
					zap.String("endpoint", s.endpoint), zap.Error(err))
				continue
			}
		}
		misses++
		b.metrics.heartbeatMisses.Inc()
		b.lg.Debug("heartbeat missed", zap.String("endpoint", s.endpoint), zap.Int("misses", misses),
			zap.Duration("late", late), zap.Duration("silent", b.silentFor(s)), zap.Error(err))
		deposedSeen = deposedSeen || v == deposed
		polled := v == noQuorum && !deposedSeen && b.cfg.Member == nil
		if polled {
			if ep := b.quorumElsewhere(s); ep != "" {
				quorumSeen++
				elsewhere = ep
			} else {
				quorumSeen = 0
			}
		}
		if misses < b.cfg.HeartbeatFailures {
			continue
		}
		reason := fmt.Sprintf("%d heartbeats missed: %v (the bridge held up to %v, silent for %v)", misses, err,
			late.Round(time.Millisecond), b.silentFor(s).Round(time.Millisecond))
		if deposedSeen && v != deposed {
			reason += "; an earlier miss found it the leader of its term without a quorum"
		}
		if polled {
			switch {
			case quorumSeen >= min(2, b.cfg.HeartbeatFailures):
				reason += "; " + elsewhere + " has a quorum"
			case quorumSeen > 0 || b.mayDefer(s):
				if !deferring {
					deferring = true
					b.metrics.deferred.Inc()
					msg := "etcd v3 backend has no quorum, nor has any other member: staying while the cluster " +
						"elects a leader"
					if quorumSeen > 0 {
						msg = "etcd v3 backend has no quorum, another member has had one for a check: checking once " +
							"more, as the election may just have ended"
					}
					b.lg.Warn(msg, zap.String("endpoint", s.endpoint), zap.Error(err))
				}
				continue
			}
		}
		b.lose(s, reason)
	}
}

// mayDefer reports whether a loss of s may still wait for the cluster to
// elect a leader: s has been without a good heartbeat for fewer than
// excuseLimit heartbeats.
func (b *Backend) mayDefer(s *session) bool {
	return b.excuseLeft(s) > 0
}

// excuseLeft is how long s may still go without a good heartbeat before
// excuses end: excuseLimit heartbeats of silence, less the silence so far.
func (b *Backend) excuseLeft(s *session) time.Duration {
	return excuseLimit*(b.cfg.HeartbeatInterval+b.cfg.HeartbeatTimeout) - b.silentFor(s)
}

// checkTimeout is the deadline of a check, given the heartbeat timeout,
// how long this process was held during the last check (held), and how
// long excuses still last (left). A process held for more than a quarter
// of the timeout (see lagMeter) reads a member's answer that much later:
// ten thousand watchers woken by one event keep the goroutine that reads
// it waiting its turn to run for a second or more, on a busy machine,
// while the member answered in a millisecond. Such a check gets the time
// the process was held on top of the timeout, so that the answer can be
// read; without it every check times out, each excused, until excuses
// end and a member that answers is declared lost. The extra time ends
// when excuses do: a silent member is declared lost within the same
// bounds as before, and a bridge that runs on time gets the timeout.
func checkTimeout(timeout, held, left time.Duration) time.Duration {
	if held <= timeout/lateShare {
		return timeout
	}
	return max(timeout, min(timeout+held, left))
}

// silentFor is how long s has gone without a good heartbeat.
func (b *Backend) silentFor(s *session) time.Duration {
	return time.Since(time.Unix(0, s.lastOK.Load()))
}

const (
	// lateShare: a timed-out check is excused when this process was held
	// for more than this share of the timeout while it was in flight.
	lateShare = 4 // a quarter
	// excuseLimit: no check is excused once the member has been silent
	// for this many heartbeats (interval plus timeout each).
	excuseLimit = 10
)

// applyingLimit: a member that has applied behind what it committed for
// this long (a defrag of several GB takes about a minute) is no longer
// excused: its storage is stuck, and reads, writes and watch events with
// it. A variable for the test that shortens it.
var applyingLimit = 2 * time.Minute

// excused reports whether a check on s that timed out while this process
// was held for late says nothing of the member.
func (b *Backend) excused(s *session, late time.Duration) bool {
	return late > b.cfg.HeartbeatTimeout/lateShare && b.mayDefer(s)
}

// check runs one heartbeat on s, bounded by timeout, and reports the
// longest this process was held while it was in flight.
func (b *Backend) check(s *session, timeout time.Duration) (time.Duration, verdict, error) {
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	var (
		v    verdict
		term uint64
		err  error
	)
	done := make(chan struct{})
	go func() { // waited for below; the deadline bounds it
		defer close(done)
		v, term, err = b.quorumCheck(ctx, s.cli, s.endpoint, s.term.Load())
	}()
	late := b.lag.wait(done)
	if v == quorate {
		s.term.Store(term)
	}
	return late, v, err
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
//
// It also keeps the longest any goroutine of this process waited to run
// meanwhile (see longestWait): a woken timer runs next, ahead of the
// queue, but the goroutines that write the check to its connection and
// read the answer wait their turn behind every other runnable one. Ten
// thousand watchers woken by one event hold the check as long as they
// take to run, and the timers see only part of it.
type pacedMeter struct {
	pace time.Duration
	// waits reads the scheduler's histogram of waits (nil: schedWaits).
	waits func() *runtimemetrics.Float64Histogram
}

func (m pacedMeter) wait(done <-chan struct{}) time.Duration {
	read := m.waits
	if read == nil {
		read = schedWaits
	}
	var late time.Duration
	waits := read()
	due := time.Now().Add(m.pace)
	t := time.NewTimer(m.pace)
	defer t.Stop()
	for {
		select {
		case <-done:
			return max(late, time.Since(due), longestWait(waits, read()))
		case <-t.C:
			now := time.Now()
			late = max(late, now.Sub(due))
			due = now.Add(m.pace)
			t.Reset(m.pace)
		}
	}
}

// schedWaitsMetric is the runtime's histogram of the time goroutines
// spent runnable before they ran, since the process started.
const schedWaitsMetric = "/sched/latencies:seconds"

// schedWaits reads schedWaitsMetric (nil if the runtime has none).
func schedWaits() *runtimemetrics.Float64Histogram {
	s := []runtimemetrics.Sample{{Name: schedWaitsMetric}}
	runtimemetrics.Read(s)
	if s[0].Value.Kind() != runtimemetrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// longestWait is the longest a goroutine waited to run between two
// readings of schedWaits: the lower bound of the highest bucket whose
// count grew (0 if none did, or a reading is missing).
func longestWait(before, after *runtimemetrics.Float64Histogram) time.Duration {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return 0
	}
	for i := len(after.Counts) - 1; i >= 0; i-- {
		if after.Counts[i] > before.Counts[i] {
			lo := after.Buckets[i] // Buckets[i] is bucket i's lower bound
			if math.IsInf(lo, -1) || lo < 0 {
				return 0
			}
			return time.Duration(lo * float64(time.Second))
		}
	}
	return 0
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
		ns, err := b.connect(ctx, true)
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
