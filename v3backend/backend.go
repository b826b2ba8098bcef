// SPDX-License-Identifier: Apache-2.0

// Package v3backend fulfils v2 requests with etcd v3. Its parts, each the
// owner of what it names:
//
//   - the connection and its liveness (session.go): one session to one
//     member at a time, a heartbeat that declares it lost, reconnection;
//     sessionChanged publishes every change to whoever listens;
//   - the feeds of the watch hub (feed.go): the shared v3 watch and the
//     history watches, decoded into v2 events; the hub itself (package hub)
//     owns the ring and every watcher;
//   - the request path (request.go, currev.go, leases.go): reads, writes,
//     watch registrations and the leases behind v2 TTLs.
//
// Backend ties them together; Close stops them in order and waits for
// every goroutine they started.
package v3backend

import (
	"context"
	"crypto/tls"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v3backend/hub"
)

// ErrUnavailable is returned at once while no backend member answers, so no
// v2 request hangs on a lost backend.
var ErrUnavailable = errors.New("v2bridge: etcd v3 backend is unavailable")

// Config configures a Backend.
type Config struct {
	Endpoints   []string
	DialTimeout time.Duration
	TLS         *tls.Config
	Username    string
	Password    string

	// gRPC keepalive on the connection (grpc-go raises times below 10 s).
	KeepAliveTime    time.Duration
	KeepAliveTimeout time.Duration
	// The application heartbeat: one quorum check per interval (a
	// linearizable member list, see quorumCheck), each with its own
	// deadline; HeartbeatFailures misses in a row declare the backend
	// lost. A member without a quorum fails it too, but is left only for
	// one that has a quorum (see monitor).
	//
	// The defaults (300 ms, 500 ms, 2) declare a silent member, or one cut
	// off from its peers, lost 1 to 1.3 s after the fault: the first check
	// after it starts within an interval, and it and the next, which
	// follows at once, time out (proof/bench/FAILOVER.md); a killed one, whose
	// checks fail at once, within two intervals. They need a second
	// without a quorum's answer, which heavy load does not cause, since
	// etcd answers the check from memory; a member whose storage is behind
	// (a defrag) and a bridge starved of CPU are excused (see monitor).
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	HeartbeatFailures int

	// RequestTimeout bounds every backend call made for a v2 request.
	RequestTimeout time.Duration

	// AutoSyncInterval > 0 refreshes the endpoint list from the cluster's
	// member list at that interval, so failover follows membership changes.
	AutoSyncInterval time.Duration

	Layout   translate.Layout
	Logger   *zap.Logger
	Registry prometheus.Registerer

	// DialOptions are added to the gRPC dial (for example client metrics
	// interceptors).
	DialOptions []grpc.DialOption

	// Hub tuning (zero values take the hub's defaults): how many recent
	// events are kept (the history horizon in events), a stream reader's
	// queue, how far back in revisions a replay may read, how many replays
	// may read at once, and after how many revisions in a row with nothing
	// for its watchers a replay skims history.
	RingSize           int
	WatcherBuffer      int
	MaxReplayRevisions int64
	MaxReplays         int
	ReplaySkimAfter    int64

	// Member, when set, is the etcd member running in this process (the
	// embedded one): the bridge calls its v3 services directly rather than
	// over a loopback gRPC connection, whose marshalling, HTTP/2 framing
	// and socket wake-ups, on both ends in one process, cost a lone write
	// about half its CPU. Endpoints then only name sessions. In-process
	// calls carry no credentials: with a Username, Member is not used.
	Member *etcdserver.EtcdServer

	// WriteBatch is how many concurrent v2 writes one v3 transaction may
	// carry, each guarded on its own (1: every write alone; 0: the
	// default).
	WriteBatch int
}

// Defaults are the values Config's zero fields take; the command line's
// flags show and use the same values.
var Defaults = Config{
	DialTimeout:        5 * time.Second,
	KeepAliveTime:      10 * time.Second,
	KeepAliveTimeout:   3 * time.Second,
	HeartbeatInterval:  300 * time.Millisecond,
	HeartbeatTimeout:   500 * time.Millisecond,
	HeartbeatFailures:  2,
	RequestTimeout:     5 * time.Second,
	RingSize:           hub.DefaultRingSize,
	WatcherBuffer:      hub.DefaultWatcherBuffer,
	MaxReplayRevisions: hub.DefaultMaxReplayRevisions,
	WriteBatch:         DefaultWriteBatch,
}

func (c *Config) setDefaults() {
	d := Defaults
	if c.DialTimeout == 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.KeepAliveTime == 0 {
		c.KeepAliveTime = d.KeepAliveTime
	}
	if c.KeepAliveTimeout == 0 {
		c.KeepAliveTimeout = d.KeepAliveTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = d.HeartbeatInterval
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = d.HeartbeatTimeout
	}
	if c.HeartbeatFailures == 0 {
		c.HeartbeatFailures = d.HeartbeatFailures
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	if c.WriteBatch == 0 {
		c.WriteBatch = d.WriteBatch
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Meta is what a v2 response's headers report besides the index.
type Meta struct {
	ClusterID uint64
	MemberID  uint64
	RaftTerm  uint64
}

// Backend serves v2 operations from etcd v3.
type Backend struct {
	cfg     Config
	layout  translate.Layout
	lg      *zap.Logger
	metrics *metrics
	leases  *leaseCache
	pool    *leasePool // the leases TTL writes share
	// journalPool: the leases of journal records (journalTTL)
	journalPool *leasePool
	hub         *hub.Hub
	cur         curRev // shares the current-revision reads of watch requests
	quorum      curRev // shares the linearizable reads of quorum GETs
	mirror      *mirror
	batch       batcher // sends concurrent writes together, in one transaction
	// shared is the shared feed now open (nil between feeds), for progress
	// requests.
	shared atomic.Pointer[feed]
	// acked is the newest revision of a write this bridge acknowledged: a
	// read served from the mirror waits until the mirror has it, so a
	// client reads its own writes.
	acked atomic.Int64
	// recent holds, by hash of a v2 path, the newest revision of a write
	// this bridge acknowledged to that path or below it: a write decides
	// on a mirror that has its own path's recent writes, without waiting
	// for every other write in flight.
	recent [recentSlots]atomic.Int64
	// writeSlots serialize this bridge's writes to the same path (by hash).
	writeSlots [1024]writeSlot
	// forged counts journal records ignored (for rate-limited warnings).
	forged atomic.Int64
	// bugsLogged holds the members ("endpoint version") whose known bug
	// was logged (checkVersion), so each is logged once.
	bugsLogged sync.Map
	// listsFromMemory holds, by endpoint, whether the member's release
	// answers a linearizable member list from memory, as last read
	// (checkVersion): quorumCheck decides its question by it.
	listsFromMemory sync.Map

	// mu guards the fields below it. It is never held while another lock
	// is taken, nor across a backend call.
	mu      sync.Mutex
	eps     []string      // the endpoints failover chooses from
	sess    *session      // nil while the backend is lost
	sessCh  chan struct{} // closed (and replaced) at every session change
	meta    Meta          // identity of the member that answered last
	closed  bool
	closeCh <-chan struct{} // ctx.Done(): the monitor and auto-sync stop
	// lastAnswer is when the backend last answered any request (unix ns):
	// a heartbeat that times out while other requests are answered is a
	// busy member, not a dead one.
	lastAnswer atomic.Int64
	// lag tells the monitor how late this process ran during a heartbeat.
	lag lagMeter
	// ctx ends at Close; stop ends it.
	ctx  context.Context
	stop context.CancelFunc
	// wg waits for the monitor, auto-sync and the goroutines
	// they start (endpoint dials, client closes).
	wg sync.WaitGroup
}

// New connects to the first answering endpoint and starts the liveness
// monitor and the watch hub.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	cfg.setDefaults()
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("v3backend: no endpoints")
	}
	if cfg.Username != "" {
		cfg.Member = nil // credentials go over gRPC, where the member checks them
	}
	b := &Backend{cfg: cfg, layout: cfg.Layout, lg: cfg.Logger, sessCh: make(chan struct{}),
		eps: append([]string(nil), cfg.Endpoints...)}
	b.ctx, b.stop = context.WithCancel(context.Background())
	b.closeCh = b.ctx.Done()
	b.metrics = newMetrics(cfg.Registry)
	b.lag = pacedMeter{pace: heartbeatPace(cfg.HeartbeatTimeout)}
	b.leases = newLeaseCache()
	b.pool = newLeasePool(cfg.Layout, poolWindow, true)
	b.journalPool = newLeasePool(cfg.Layout, journalWindow, false)
	b.mirror = newMirror(cfg.Layout)
	registerMirror(cfg.Registry, b.mirror)
	b.quorum.linearizable = true
	b.batch = batcher{b: b, max: cfg.WriteBatch, queueWait: maxQueueWait}
	for i := range b.writeSlots {
		b.writeSlots[i].turn = make(chan struct{}, 1)
	}
	s, err := b.connect(ctx, false)
	if err != nil {
		b.stop()
		b.wg.Wait() // the dials that did not answer
		return nil, err
	}
	b.setSession(s, "")
	maxReplay := cfg.MaxReplayRevisions
	if cfg.Layout.Scoped() {
		// A replay reads only the served subtrees, however many other
		// tenants' revisions it passes: its horizon is v3's compaction.
		maxReplay = math.MaxInt64
	}
	b.hub = hub.New(hub.Config{Source: hubSource{b}, RingSize: cfg.RingSize, WatcherBuffer: cfg.WatcherBuffer,
		MaxReplayRevisions: maxReplay, MaxReplays: cfg.MaxReplays, SkimAfter: cfg.ReplaySkimAfter,
		Logger: cfg.Logger.Named("hub"), Registry: cfg.Registry})
	b.wg.Add(2)
	go b.monitor()
	go b.expireLeases()
	if cfg.AutoSyncInterval > 0 {
		b.wg.Add(1)
		go b.autoSync()
	}
	return b, nil
}

// Close stops the hub and the monitor and closes the v3 client.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.stop()
	s := b.sess
	b.mu.Unlock()
	b.hub.Close()
	b.wg.Wait()
	if s != nil {
		s.end()
	}
	return nil
}

// Hub is the watch hub fed by this backend.
func (b *Backend) Hub() *hub.Hub { return b.hub }

// Layout is the key layout the backend serves.
func (b *Backend) Layout() translate.Layout { return b.layout }

// Meta is the cluster and member identity last seen in a response.
func (b *Backend) Meta() Meta {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.meta
}

func (b *Backend) noteHeader(h *etcdserverpb.ResponseHeader) Meta {
	if h == nil {
		return b.Meta()
	}
	m := Meta{ClusterID: h.ClusterId, MemberID: h.MemberId, RaftTerm: h.RaftTerm}
	b.lastAnswer.Store(time.Now().UnixNano())
	b.mu.Lock()
	b.meta = m
	b.mu.Unlock()
	return m
}

// client returns the live session or ErrUnavailable.
func (b *Backend) client() (*session, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sess == nil {
		return nil, ErrUnavailable
	}
	return b.sess, nil
}

func (b *Backend) reqCtx(ctx context.Context, s *session) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	// A request must not outlive the session it runs on.
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// mapErr turns a failed backend call into what the v2 API reports.
func (b *Backend) mapErr(s *session, err error) error {
	if err == nil {
		return nil
	}
	if s.ctx.Err() != nil {
		return ErrUnavailable
	}
	if errors.Is(err, rpctypes.ErrRequestTooLarge) || status.Code(err) == codes.ResourceExhausted ||
		strings.Contains(err.Error(), "request is too large") {
		return translate.NewError(translate.EcodeInvalidField,
			"value too large: the request exceeds the etcd v3 backend's request size limit (--max-request-bytes)", 0)
	}
	if errors.Is(err, rpctypes.ErrTooManyOps) {
		return translate.NewError(translate.EcodeInvalidField, "key is too deep for the backend's transaction limit (--max-txn-ops)", 0)
	}
	return err
}

// Ready reports whether a member answers and the hub's watch is created.
func (b *Backend) Ready() bool { return b.Up() && b.hub.Live() }

// Health reports whether the backend answers a linearizable read now, as
// etcd's own /health does.
func (b *Backend) Health(ctx context.Context) error {
	s, err := b.client()
	if err != nil {
		return err
	}
	ctx, cancel := b.reqCtx(ctx, s)
	defer cancel()
	resp, err := s.cli.Get(ctx, b.layout.JournalKey(), clientv3.WithCountOnly())
	if err != nil {
		return b.mapErr(s, err)
	}
	b.noteHeader(resp.Header)
	return nil
}

// Version is the etcd server version of the connected member.
func (b *Backend) Version(ctx context.Context) (string, error) {
	s, err := b.client()
	if err != nil {
		return "", err
	}
	ctx, cancel := b.reqCtx(ctx, s)
	defer cancel()
	st, err := s.cli.Status(ctx, s.endpoint)
	if err != nil {
		return "", b.mapErr(s, err)
	}
	return st.Version, nil
}

// Endpoints is the endpoint list failover chooses from.
func (b *Backend) Endpoints() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.eps...)
}

// autoSync follows cluster membership: the member list's client URLs
// replace the endpoint list, as clientv3's AutoSyncInterval does for its own.
func (b *Backend) autoSync() {
	defer b.wg.Done()
	b.everyTick(b.cfg.AutoSyncInterval, func(s *session) {
		ctx, cancel := b.reqCtx(context.Background(), s)
		resp, err := s.cli.MemberList(ctx)
		cancel()
		if err != nil {
			b.lg.Debug("endpoint auto-sync failed", zap.Error(err))
			return
		}
		var eps []string
		for _, m := range resp.Members {
			if !m.IsLearner {
				eps = append(eps, m.ClientURLs...)
			}
		}
		if len(eps) == 0 {
			return
		}
		b.mu.Lock()
		changed := strings.Join(eps, ",") != strings.Join(b.eps, ",")
		b.eps = eps
		b.mu.Unlock()
		if changed {
			b.lg.Info("backend endpoints synced from the member list", zap.Strings("endpoints", eps))
		}
	})
}

// everyTick calls f with the current session every d while there is one,
// until the backend closes.
func (b *Backend) everyTick(d time.Duration, f func(s *session)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-b.closeCh:
			return
		case <-t.C:
		}
		if s, err := b.client(); err == nil {
			f(s)
		}
	}
}

// Alive reports whether the bridge's own machinery still makes progress:
// its locks can be taken within d. It says nothing of the backend (that is
// /health and /readyz); a false here means the process is wedged. It polls
// with TryLock, so a wedged lock leaves no goroutine behind.
func (b *Backend) Alive(d time.Duration) bool {
	deadline := time.Now().Add(d)
	lockable := func() bool {
		if b.mu.TryLock() {
			b.mu.Unlock()
			return true
		}
		return false
	}
	for _, try := range []func() bool{lockable, b.hub.TryProbe} {
		for !try() {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(time.Millisecond)
		}
	}
	return true
}
