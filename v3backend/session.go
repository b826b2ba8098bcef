package v3backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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
}

func (s *session) end() {
	s.cancel()
	_ = s.cli.Close()
}

func (b *Backend) dial(ctx context.Context, endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            []string{endpoint},
		DialTimeout:          b.cfg.DialTimeout,
		DialKeepAliveTime:    b.cfg.KeepAliveTime,
		DialKeepAliveTimeout: b.cfg.KeepAliveTimeout,
		PermitWithoutStream:  true,
		TLS:                  b.cfg.TLS,
		Username:             b.cfg.Username,
		Password:             b.cfg.Password,
		Logger:               b.lg.Named("clientv3").WithOptions(zap.IncreaseLevel(zap.ErrorLevel)),
		Context:              ctx,
	})
}

// health is the heartbeat: the gRPC health service, which etcd answers
// without touching its storage, so a defrag or a slow disk is not mistaken
// for a dead member.
func (b *Backend) health(ctx context.Context, cli *clientv3.Client) error {
	resp, err := healthpb.NewHealthClient(cli.ActiveConnection()).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health status %v", resp.Status)
	}
	return nil
}

// connect dials the endpoints in turn, starting at index start, and keeps
// the first one that answers a health check and a read.
func (b *Backend) connect(ctx context.Context, start int) (*session, error) {
	var errs []error
	n := len(b.cfg.Endpoints)
	for i := 0; i < n; i++ {
		idx := (start + i) % n
		ep := b.cfg.Endpoints[idx]
		s, err := b.tryEndpoint(ctx, ep, idx)
		if err == nil {
			return s, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", ep, err))
		if ctx.Err() != nil {
			break
		}
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
		resp, err = cli.Get(cctx, "health", clientv3.WithSerializable(), clientv3.WithCountOnly())
		if err == nil {
			b.noteHeader(resp.Header)
		}
	}
	if err != nil {
		cancel()
		_ = cli.Close()
		return nil, err
	}
	return &session{cli: cli, ctx: sctx, cancel: cancel, endpoint: ep, index: idx, started: time.Now()}, nil
}

func (b *Backend) setSession(s *session, reason string) {
	b.mu.Lock()
	b.sess = s
	ch := b.sessCh
	b.sessCh = make(chan struct{})
	b.mu.Unlock()
	close(ch)
	b.metrics.backendUp.Set(1)
	b.lg.Info("etcd v3 backend connected", zap.String("endpoint", s.endpoint), zap.String("reason", reason))
}

// sessionChanged returns a channel closed at the next session change.
func (b *Backend) sessionChanged() (*session, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sess, b.sessCh
}

// lose declares session s lost (if it is still the current one): every
// request and watch on it ends, and new requests fail fast until the monitor
// connects again.
func (b *Backend) lose(s *session, reason string) {
	b.mu.Lock()
	if b.sess != s || s == nil {
		b.mu.Unlock()
		return
	}
	b.sess = nil
	ch := b.sessCh
	b.sessCh = make(chan struct{})
	b.mu.Unlock()
	close(ch)
	s.end()
	b.metrics.backendUp.Set(0)
	b.metrics.losses.Inc()
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

// monitor runs the heartbeat and, while the backend is lost, reconnects.
func (b *Backend) monitor() {
	defer b.wg.Done()
	t := time.NewTicker(b.cfg.HeartbeatInterval)
	defer t.Stop()
	misses := 0
	var lostAt time.Time
	next := 0
	for {
		select {
		case <-b.closeCh:
			return
		case <-t.C:
		}
		s, _ := b.sessionChanged()
		if s == nil {
			ctx, cancel := context.WithTimeout(context.Background(), b.cfg.DialTimeout)
			ns, err := b.connect(ctx, next)
			cancel()
			if err != nil {
				b.lg.Debug("reconnect failed", zap.Error(err))
				continue
			}
			select {
			case <-b.closeCh:
				ns.end()
				return
			default:
			}
			b.setSession(ns, "reconnected")
			if !lostAt.IsZero() {
				b.metrics.recoverSeconds.Observe(time.Since(lostAt).Seconds())
			}
			misses = 0
			continue
		}
		ctx, cancel := context.WithTimeout(s.ctx, b.cfg.HeartbeatTimeout)
		start := time.Now()
		err := b.health(ctx, s.cli)
		cancel()
		if err == nil {
			b.metrics.heartbeat.Observe(time.Since(start).Seconds())
			misses = 0
			continue
		}
		misses++
		b.metrics.heartbeatMisses.Inc()
		b.lg.Debug("heartbeat missed", zap.String("endpoint", s.endpoint), zap.Int("misses", misses), zap.Error(err))
		if misses >= b.cfg.HeartbeatFailures {
			lostAt = time.Now()
			b.lose(s, fmt.Sprintf("%d heartbeats missed: %v", misses, err))
			next = (s.index + 1) % len(b.cfg.Endpoints)
			misses = 0
		}
	}
}
