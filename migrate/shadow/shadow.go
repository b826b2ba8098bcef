// SPDX-License-Identifier: Apache-2.0

// Package shadow is the shadow comparison of passthrough mode: while a bridge
// forwards v2 requests to the v2 server and `v2bridge migrate --follow`
// keeps a copy in etcd v3, it checks, off the request path, that the copy
// holds what the v2 server answered, so operators know the copy is faithful
// before they cut over.
//
// Every forwarded write that succeeded is compared. Its answer names the
// node it made and the v2 server index it made it at. One v3 watch over the
// bridge's key range brings the follower's changes and its progress record
// (the v2 server index up to which it has applied every event). A change of
// the written key that makes the written node (value, directory or file, TTL
// or not) matches the write at once. A write is lagging while the
// follower's applied index is below the write's index; once it is not, a
// write no change matched is judged by the v3 node at its key (read from
// memory): matched if it agrees (a TTL within the tolerance), else a
// divergence by kind. A write still waiting after MaxAge counts as lagging;
// at most MaxPending wait (more are dropped).
//
// A share of reads (SampleRate; GET or HEAD of the keys, not a watch) is
// answered again by the v2 API over the v3 store and compared the way the
// conformance suite compares a bridge with a real v2 server: indexes are
// left out, TTLs agree within a tolerance, the documented divergences are
// allowed. A read's difference is re-checked with backoff for a bounded
// time; if it persists and the v2 server changed meanwhile it is lagging,
// else a divergence.
//
// Nothing here may slow or fail a client's request: Observe only hands the
// answer to a bounded queue, never waited on, after it was written to the
// client, and every call to either side has a deadline. Under pressure
// requests are dropped (counted), and the read sample rate halves while the
// read queue overflows.
package shadow

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/bridge/passthrough"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2api"
)

// Config is what a shadow comparison is built from.
type Config struct {
	// Store is the v3 side: the store a v3-mode bridge serves the v2 API
	// from (core.Store).
	Store v2api.Store

	// SampleRate is the share of forwarded reads compared, in (0, 1].
	// Every write is compared (with Updates).
	SampleRate float64
	// Prefix limits the comparison to one v2 subtree: the one the follower
	// migrates (migrate --v2-server-prefix). Default "/".
	Prefix string
	// Queue bounds the sampled reads waiting for a worker; Workers is
	// how many are compared at once.
	Queue   int
	Workers int

	// Updates brings the follower's changes and progress from the v3 side
	// (V3Updates); without one, writes are not compared.
	Updates Updates
	// MaxPending bounds the writes awaiting the follower (more are
	// dropped); MaxAge is how long one waits before it counts as lagging.
	MaxPending int
	MaxAge     time.Duration
	// Timeout bounds each call to the v3 side and each re-read of the
	// v2 server.
	Timeout time.Duration
	// CatchUp is how long a difference is re-checked, with backoff, before
	// it counts: the follower applies the v2 server's writes a moment later.
	CatchUp time.Duration
	// TTLTolerance is how far apart two TTLs (or expirations) of the same
	// node may be and still agree (migrate's --ttl-tolerance).
	TTLTolerance time.Duration
	// MaxBody skips answers larger than this many bytes.
	MaxBody int

	// V2ServerClient re-reads the v2 server; by default one of the shadow's
	// own with at most Workers connections.
	V2ServerClient *http.Client

	// Recorder, if set, receives the counters every RecordInterval, for
	// `v2bridge verify` (see V3Recorder).
	Recorder       Recorder
	RecordInterval time.Duration
	// Name and AdvertiseURLs identify the bridge in its record.
	Name          string
	AdvertiseURLs []string

	Logger *zap.Logger
	// Registry receives the v2bridge_shadow_* metrics.
	Registry prometheus.Registerer
}

// Defaults of Config's zero values.
var Defaults = Config{
	Prefix:         "/",
	Queue:          256,
	Workers:        2,
	Timeout:        2 * time.Second,
	CatchUp:        3 * time.Second,
	TTLTolerance:   5 * time.Second,
	MaxBody:        4 << 20,
	RecordInterval: 10 * time.Second,
	MaxPending:     20000,
	MaxAge:         30 * time.Second,
}

func (c *Config) setDefaults() error {
	d := Defaults
	if c.Store == nil {
		return errors.New("shadow: no v3 store")
	}
	if math.IsNaN(c.SampleRate) || c.SampleRate <= 0 || c.SampleRate > 1 {
		return fmt.Errorf("shadow: sample rate %v: want a share in (0, 1]", c.SampleRate)
	}
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	p, verr := translate.CleanPath(c.Prefix)
	if verr != nil {
		return fmt.Errorf("shadow: bad prefix %q: %s", c.Prefix, verr.Cause)
	}
	c.Prefix = p
	if c.Queue <= 0 {
		c.Queue = d.Queue
	}
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.CatchUp <= 0 {
		c.CatchUp = d.CatchUp
	}
	if c.TTLTolerance <= 0 {
		c.TTLTolerance = d.TTLTolerance
	}
	if c.MaxBody <= 0 {
		c.MaxBody = d.MaxBody
	}
	if c.RecordInterval <= 0 {
		c.RecordInterval = d.RecordInterval
	}
	if c.MaxPending <= 0 {
		c.MaxPending = d.MaxPending
	}
	if c.MaxAge <= 0 {
		c.MaxAge = d.MaxAge
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.V2ServerClient == nil {
		c.V2ServerClient = &http.Client{
			Transport: &http.Transport{Proxy: nil, MaxConnsPerHost: c.Workers, MaxIdleConnsPerHost: c.Workers,
				IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: c.Timeout, DisableCompression: true},
			// Redirects are part of the answer compared.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return nil
}

// maxShift bounds the adaptive sampling: at most a 1024th of the rate is
// shed.
const maxShift = 10

// Shadow compares a passthrough's answers with its v3 side. It implements
// passthrough.Observer.
type Shadow struct {
	cfg     Config
	lg      *zap.Logger
	api     *v2api.Server // the v3 side's answers, as a v3-mode bridge gives them
	keys    string        // "/v2/keys" + Prefix, and keysDir that + "/": the paths sampled
	keysDir string
	m       *metrics
	started time.Time
	host    string

	queue chan *job
	// nominal is the sampling threshold of SampleRate (a random uint64
	// below it samples); shift halves it under pressure.
	nominal   uint64
	shift     atomic.Int32
	lastFull  atomic.Int64 // unix nanoseconds of the last overflow
	lastShift atomic.Int64 // unix nanoseconds of the last change of shift

	warn       *rate.Limiter
	suppressed atomic.Int64 // warnings the limiter left out since the last one

	counts counters

	// The writes: writeq hands them to the matcher goroutine, updates the
	// feed's; w is the matcher's alone. pendingNow, behindNow and
	// appliedNow are its gauges, for the record.
	writeq     chan written
	updates    chan Update
	w          *writes
	pendingNow atomic.Int64
	behindNow  atomic.Int64
	appliedNow atomic.Uint64

	ctx     context.Context // ends at Close: it bounds every comparison
	cancel  context.CancelFunc
	closed  atomic.Bool
	workers sync.WaitGroup // the workers, the matcher, the updates and the housekeeping goroutine
}

var _ passthrough.Observer = (*Shadow)(nil)

// New starts the workers (and, with a Recorder, the publishing of the
// counters). Close stops them.
func New(cfg Config) (*Shadow, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	s := &Shadow{
		cfg: cfg, lg: cfg.Logger, m: newMetrics(cfg.Registry), started: time.Now(), host: host,
		api:     v2api.New(v2api.Config{Store: cfg.Store, Logger: zap.NewNop()}),
		keys:    "/v2/keys" + strings.TrimSuffix(cfg.Prefix, "/"),
		queue:   make(chan *job, cfg.Queue),
		writeq:  make(chan written, writeQueue),
		updates: make(chan Update, 64),
		w:       newWrites(),
		// One warning a second, ten at once: a broken copy shows its
		// first keys, then a count of the rest.
		warn: rate.NewLimiter(rate.Every(time.Second), 10),
	}
	s.keysDir = s.keys + "/"
	s.nominal = math.MaxUint64
	if cfg.SampleRate < 1 {
		s.nominal = uint64(cfg.SampleRate * (1 << 63) * 2)
	}
	s.m.rate.Set(cfg.SampleRate)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for range cfg.Workers {
		s.workers.Add(1)
		go func() {
			defer s.workers.Done()
			s.work()
		}()
	}
	if cfg.Updates != nil {
		s.workers.Add(2)
		go func() {
			defer s.workers.Done()
			s.matcher()
		}()
		go func() {
			defer s.workers.Done()
			s.runUpdates()
		}()
	}
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		s.housekeeping()
	}()
	return s, nil
}

// Close stops the comparison: comparisons in flight end at their next call,
// the queue is dropped, and a last record is published. It waits for every
// goroutine the shadow started.
func (s *Shadow) Close() {
	if s.closed.Swap(true) {
		return
	}
	s.cancel()
	s.workers.Wait()
	for {
		select {
		case <-s.queue:
			s.drop(reasonClosing)
			continue
		case <-s.writeq:
			s.drop(reasonClosing)
			continue
		default:
		}
		break
	}
	if s.cfg.Recorder != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		defer cancel()
		if err := s.cfg.Recorder.Publish(ctx, s.record()); err != nil {
			s.lg.Debug("publishing the last shadow record failed", zap.Error(err))
		}
	}
}

// writeQueue bounds the forwarded writes not yet taken by the matcher.
const writeQueue = 4096

// Sample decides whether a forwarded request is compared: every write of
// the keys below Prefix (with Updates), and reads drawn at the sample rate
// (less while the read queue overflows).
func (s *Shadow) Sample(r *http.Request) bool {
	write := false
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	case http.MethodPut, http.MethodPost, http.MethodDelete:
		write = true
	default:
		return false
	}
	if p := r.URL.Path; p != s.keys && !strings.HasPrefix(p, s.keysDir) || s.closed.Load() {
		return false
	}
	if write {
		return s.cfg.Updates != nil
	}
	u := rand.Uint64() //nolint:gosec // G404: a sampling draw, not a secret
	if u >= s.nominal {
		return false
	}
	if sh := s.shift.Load(); sh > 0 && u >= s.nominal>>sh {
		s.drop(reasonBusy)
		return false
	}
	return true
}

// Observe queues a sampled request and the v2 server's answer for the
// matcher (a write) or a worker (a read); it never waits.
func (s *Shadow) Observe(r *http.Request, a passthrough.Answer) {
	switch {
	case s.closed.Load():
		s.drop(reasonClosing)
		return
	case len(a.Body) > s.cfg.MaxBody:
		s.drop(reasonTooLarge)
		return
	case a.Status == http.StatusUnauthorized:
		// v2 refused the credentials (error 110; its 403s are answers
		// about the data): the v3 side's answer is not the same request's.
		s.drop(reasonAuthRefused)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		select {
		case s.writeq <- written{method: r.Method, query: r.URL.RawQuery, ans: a.Body, status: a.Status, at: time.Now()}:
			s.counts.sampled.Add(1)
			s.m.sampled.Inc()
		default:
			s.drop(reasonQueueFull)
		}
		return
	}
	j := &job{method: r.Method, path: r.URL.EscapedPath(), query: r.URL.RawQuery,
		auth: r.Header.Get("Authorization"), ans: a}
	select {
	case s.queue <- j:
		s.counts.sampled.Add(1)
		s.m.sampled.Inc()
		s.m.queue.Set(float64(len(s.queue)))
	default:
		s.drop(reasonQueueFull)
		s.overflowed()
	}
}

// runUpdates runs the v3 updates until the shadow closes, again after a failure.
func (s *Shadow) runUpdates() {
	backoff := 100 * time.Millisecond
	for s.ctx.Err() == nil {
		start := time.Now()
		err := s.cfg.Updates.Run(s.ctx, s.updates)
		if s.ctx.Err() != nil {
			return
		}
		s.lg.Debug("shadow comparison: the v3 updates ended; starting it again", zap.Error(err))
		if time.Since(start) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		if !ctxsleep.Sleep(s.ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// overflowed halves the sample rate, at most every 100 ms so that one burst
// does not shed everything at once.
func (s *Shadow) overflowed() {
	now := time.Now().UnixNano()
	s.lastFull.Store(now)
	last := s.lastShift.Load()
	if now-last < int64(100*time.Millisecond) || !s.lastShift.CompareAndSwap(last, now) {
		return
	}
	if sh := s.shift.Load(); sh < maxShift && s.shift.CompareAndSwap(sh, sh+1) {
		s.m.rate.Set(s.cfg.SampleRate / float64(int(1)<<(sh+1)))
	}
}

// recover doubles the sample rate back, one step a second without overflow.
func (s *Shadow) recover(now time.Time) {
	sh := s.shift.Load()
	if sh == 0 || now.UnixNano()-s.lastFull.Load() < int64(time.Second) ||
		now.UnixNano()-s.lastShift.Load() < int64(time.Second) {
		return
	}
	if s.shift.CompareAndSwap(sh, sh-1) {
		s.lastShift.Store(now.UnixNano())
		s.m.rate.Set(s.cfg.SampleRate / float64(int(1)<<(sh-1)))
	}
}

func (s *Shadow) work() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case j := <-s.queue:
			s.m.queue.Set(float64(len(s.queue)))
			s.compare(j)
		}
	}
}

// housekeeping restores the sample rate after pressure and publishes the
// counters.
func (s *Shadow) housekeeping() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var published, written time.Time
	var last *Counts // the counts last written, nil until a write succeeds
	prev, prevAt := s.counts.snapshot(), time.Now()
	var idle bool // the last record written had no traffic per second
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-tick.C:
			s.recover(now)
			if s.cfg.Recorder == nil || now.Sub(published) < s.cfg.RecordInterval {
				continue
			}
			published = now
			rec := s.record()
			rec.PerSecond = perSecond(&prev, &rec.Counts, now.Sub(prevAt))
			prev, prevAt = rec.Counts, now
			ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
			var err error
			if last != nil && idle && rec.Counts.equal(last) && now.Sub(written) < rewriteAfter {
				err = s.cfg.Recorder.Refresh(ctx) // nothing new: keep the record alive only
			} else if err = s.cfg.Recorder.Publish(ctx, rec); err == nil {
				last, written, idle = &rec.Counts, now, rec.PerSecond.zero()
			}
			cancel()
			if err != nil {
				if s.ctx.Err() == nil {
					s.lg.Debug("publishing the shadow record failed", zap.Error(err))
				}
				last = nil
			}
		}
	}
}

// rewriteAfter bounds how old a record's Updated time gets while its
// counters stand still.
const rewriteAfter = 5 * time.Minute

// Stats is a snapshot of the counters.
func (s *Shadow) Stats() Counts { return s.counts.snapshot() }

// drop counts a request not compared.
func (s *Shadow) drop(reason int) {
	s.counts.dropped[reason].Add(1)
	s.m.dropped.WithLabelValues(dropReasons[reason]).Inc()
}

// Reasons a sampled request is not compared (dropped_total's reason label).
const (
	reasonBusy = iota
	reasonQueueFull
	reasonV3Unavailable
	reasonV2Server
	reasonTooLarge
	reasonClosing
	reasonNotComparable
	reasonPendingFull
	reasonSuperseded
	reasonAuthRefused
	nReasons
)

var dropReasons = [nReasons]string{"busy", "queue_full", "v3_unavailable", "upstream_unavailable", "too_large", "closing",
	"not_comparable", "pending_full", "superseded", "auth_refused"}
