// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/bridge/membership"
)

// Etcd is what the agent and the commands use of an etcd v3 client;
// *clientv3.Client has it.
type Etcd interface {
	clientv3.KV
	clientv3.Lease
	clientv3.Watcher
}

// AgentConfig configures an Agent.
type AgentConfig struct {
	Client Etcd
	// Live, if set, tells whether Client reaches etcd now: a dual-mode
	// bridge's Client is its checked session (v3backend.Conn) once the v3
	// side is connected, whose calls end when the bridge loses its member.
	// While it does not, the agent waits (the lease's life bounds the
	// writes meanwhile) and starts again the moment it does.
	Live   ctxsleep.Live
	Keys   Keys
	Switch *Switch
	// LeaseTTL is the TTL of the registration's lease: a bridge that cannot
	// renew it for that long stops writing, and a cutover stops waiting
	// for it.
	LeaseTTL time.Duration
	// RequestTimeout bounds every call to etcd v3.
	RequestTimeout time.Duration
	Name           string
	Advertise      []string
	// DataPrefix and OnlySelf go into the registration (see
	// membership.Registration).
	DataPrefix string
	OnlySelf   bool
	// Prefix is the v2 subtree the bridge serves ("/" or empty: all), which
	// its registration names so that a cutover can tell what the
	// follower's copy must hold.
	Prefix string
	Logger *zap.Logger
}

// Agent keeps a dual-mode bridge in step with the mode record: it reads the
// record, registers the bridge (on a lease, only while the record is the one
// it read), watches the record and applies every change to the switch, and
// acknowledges each by rewriting its registration. It renews the lease
// itself, noting when each renewal was sent, so the switch serves writes
// only while the lease is surely alive in etcd v3 and the registration
// written on it.
//
// Every field belongs to the goroutine that calls Run: nothing else reads or
// writes them.
type Agent struct {
	cfg     AgentConfig
	lg      *zap.Logger
	reg     membership.Registration
	lease   clientv3.LeaseID
	applied State
	// registered says the registration is written on the lease: until it
	// is, a cutover listing the registrations cannot see this bridge, so
	// the lease's life opens no write.
	registered bool
	// renewedAt is when the last grant or renewal of the lease that
	// answered was sent, renewedTTL the TTL (seconds) it answered with.
	renewedAt  time.Time
	renewedTTL int64
}

// errLeaseGone ends a session whose lease etcd no longer has.
var errLeaseGone = errors.New("the registration's lease is gone")

// safety is taken off a lease's TTL when judging it alive: the bridge's
// clock may run a little fast against the leader's.
const safety = 500 * time.Millisecond

// NewAgent is an agent for cfg; Run starts it.
func NewAgent(cfg AgentConfig) *Agent {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.LeaseTTL < 2*time.Second {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	reg := membership.Self(cfg.Name, cfg.Advertise)
	reg.DataPrefix, reg.OnlySelf, reg.Prefix = cfg.DataPrefix, cfg.OnlySelf, cfg.Prefix
	return &Agent{cfg: cfg, lg: cfg.Logger, reg: reg}
}

// Run keeps the bridge registered and in step until ctx ends, then removes
// its registration.
func (a *Agent) Run(ctx context.Context) {
	ctxsleep.RetryLive(ctx, a.cfg.Live, a.session, func(err error) {
		a.lg.Warn("mode record: lost touch with etcd v3; trying again", zap.Error(err))
	})
	a.deregister()
}

// deregister closes the write gate, waits for the writes in flight, then
// revokes the lease (the registration goes with it), so a cutover does not
// wait for a bridge that shut down. The registration must outlive every
// write this bridge forwarded: a cutover that no longer lists it does not
// wait for it. Writes that do not finish within the request timeout keep
// it: the lease then expires on its own, no earlier than their deadlines.
func (a *Agent) deregister() {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.RequestTimeout)
	defer cancel()
	drainErr := a.cfg.Switch.CloseWrites(ctx)
	a.cfg.Switch.RevokeWrites()
	if a.lease == 0 {
		return
	}
	if drainErr != nil {
		a.lg.Warn("shutting down with writes in flight: leaving the registration to expire with its lease",
			zap.Duration("lease-ttl", a.cfg.LeaseTTL), zap.Error(drainErr))
		a.lease = 0
		return
	}
	rctx, rcancel := context.WithTimeout(context.Background(), a.cfg.RequestTimeout)
	defer rcancel()
	if _, err := a.cfg.Client.Revoke(rctx, a.lease); err != nil {
		a.lg.Debug("revoking the registration's lease", zap.Error(err))
	}
	a.lease = 0
}

func (a *Agent) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.cfg.RequestTimeout)
}

// read gets the record and its revision (0 when absent) at store revision rev.
func (a *Agent) read(ctx context.Context) (*Record, int64, int64, error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	resp, err := a.cfg.Client.Get(cctx, a.cfg.Keys.Mode)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("reading the mode record: %w", err)
	}
	var rec *Record
	var modRev int64
	if len(resp.Kvs) > 0 {
		modRev = resp.Kvs[0].ModRevision
		if rec, err = Decode(resp.Kvs[0].Value); err != nil {
			return nil, 0, 0, err
		}
	}
	return rec, modRev, resp.Header.Revision, nil
}

// apply moves the switch to the record's state (waiting for writes in
// flight when fencing) and notes what the registration will acknowledge.
// A record that disappears after this bridge applied one keeps the bridge
// on its side with writes fenced (Vanished): the end of a migration deletes
// the bookkeeping, and an absent record must not send a bridge serving
// etcd v3 back to the v2 server.
func (a *Agent) apply(ctx context.Context, rec *Record) error {
	st := StateOf(rec)
	if rec == nil && a.applied.Generation > 0 {
		st = Vanished(a.applied)
		if !a.applied.Vanished {
			a.lg.Warn("the mode record was deleted: keeping the side of the last record applied, with writes refused "+
				"until an operator writes a record", zap.String("mode", a.applied.Mode),
				zap.String("side", a.applied.Side.String()), zap.Uint64("generation", a.applied.Generation))
		}
	}
	if err := a.applyRenewing(ctx, st); err != nil {
		return err
	}
	if st != a.applied {
		a.applied = st
		_, since := a.cfg.Switch.State()
		a.reg.Mode, a.reg.Generation, a.reg.Since = st.Mode, st.Generation, since.UTC()
	}
	return nil
}

// applyRenewing applies st to the switch, renewing the lease meanwhile:
// leaving a state that writes, Apply waits for the writes in flight, which
// may take up to the request timeout, and a lease left unrenewed that long
// would close the write window and could let the registration lapse.
func (a *Agent) applyRenewing(ctx context.Context, st State) error {
	done := make(chan error, 1)
	go func() { done <- a.cfg.Switch.Apply(ctx, st) }()
	renew := time.NewTicker(a.cfg.LeaseTTL / 4)
	defer renew.Stop()
	for {
		select {
		case err := <-done: // Apply ends when ctx does
			return err
		case <-renew.C:
			if a.lease != 0 {
				if err := a.renew(ctx); err != nil {
					a.lg.Debug("renewing the registration's lease while applying the mode record", zap.Error(err))
				}
			}
		}
	}
}

// session is one lease's life: read, apply, register (guarded by the
// record's revision, so no bridge registers on a record a cutover has
// replaced without seeing it), then follow the record and renew the lease
// until something fails.
func (a *Agent) session(ctx context.Context) error {
	if a.lease != 0 {
		// The lease kept from the last session is renewed at once: the
		// writes' window closes a TTL after its last renewal, which may
		// be a while ago.
		if err := a.renew(ctx); err != nil && a.lease != 0 {
			return err
		}
	}
	rec, modRev, rev, err := a.read(ctx)
	if err != nil {
		return err
	}
	if err := a.apply(ctx, rec); err != nil {
		return err
	}
	if a.lease == 0 {
		sent := time.Now()
		cctx, cancel := a.call(ctx)
		g, err := membership.Grant(cctx, a.cfg.Client, a.cfg.LeaseTTL)
		cancel()
		if err != nil {
			return fmt.Errorf("granting the registration's lease: %w", err)
		}
		a.lease, a.registered = g.ID, false
		a.renewedAt, a.renewedTTL = time.Time{}, 0
		// Writes open only once the registration is written (below), but
		// from the time the grant was sent: the lease can be no older.
		a.extend(sent, g.TTL)
	}
	for {
		ok, err := a.register(ctx, modRev)
		if err != nil {
			return err
		}
		if ok {
			if !a.registered {
				a.registered = true
				a.extend(a.renewedAt, a.renewedTTL)
			}
			break
		}
		// The record changed since it was read: read and apply it again.
		if rec, modRev, rev, err = a.read(ctx); err != nil {
			return err
		}
		if err := a.apply(ctx, rec); err != nil {
			return err
		}
	}
	a.lg.Info("registered in etcd v3", zap.String("key", membership.Key(a.cfg.Keys.Bridges, a.lease)),
		zap.String("mode", a.applied.Mode), zap.Uint64("generation", a.applied.Generation))
	return a.follow(ctx, rev)
}

// register writes the registration if the record is still at modRev.
func (a *Agent) register(ctx context.Context, modRev int64) (bool, error) {
	if a.lease == 0 { // lost while applying: a registration without one would never go
		return false, errLeaseGone
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	ok, err := membership.Put(cctx, a.cfg.Client, a.cfg.Keys.Bridges, a.lease, a.reg,
		clientv3.Compare(clientv3.ModRevision(a.cfg.Keys.Mode), "=", modRev))
	if err != nil {
		return false, a.leaseErr(fmt.Errorf("registering: %w", err))
	}
	return ok, nil
}

// ack rewrites the registration with the state applied.
func (a *Agent) ack(ctx context.Context) error {
	if a.lease == 0 {
		return errLeaseGone
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	if _, err := membership.Put(cctx, a.cfg.Client, a.cfg.Keys.Bridges, a.lease, a.reg); err != nil {
		return a.leaseErr(fmt.Errorf("acknowledging generation %d: %w", a.reg.Generation, err))
	}
	return nil
}

// leaseErr forgets a lease etcd no longer has, so the next session grants
// a new one, and stops writes at once.
func (a *Agent) leaseErr(err error) error {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		a.cfg.Switch.RevokeWrites()
		a.lease, a.registered = 0, false
	}
	return err
}

// extend notes that the lease was granted or renewed by a request sent at
// sent, answered with ttl seconds, and, once the registration is written,
// lets writes run until the lease can have expired. sent comes from
// time.Now, so the bound keeps its monotonic clock reading.
func (a *Agent) extend(sent time.Time, ttl int64) {
	if sent.After(a.renewedAt) {
		a.renewedAt, a.renewedTTL = sent, ttl
	}
	if a.registered && !a.renewedAt.IsZero() {
		a.cfg.Switch.ExtendWrites(a.renewedAt.Add(time.Duration(a.renewedTTL)*time.Second - safety))
	}
}

// renew renews the lease once; it forgets a lease etcd no longer has.
func (a *Agent) renew(ctx context.Context) error {
	sent := time.Now()
	cctx, cancel := a.call(ctx)
	k, err := a.cfg.Client.KeepAliveOnce(cctx, a.lease)
	cancel()
	if err != nil {
		return a.leaseErr(fmt.Errorf("renewing the registration's lease: %w", err))
	}
	a.extend(sent, k.TTL)
	return nil
}

// watch opens a watch of the record from revision from; it ends with the
// returned cancel, or when its member loses its leader.
func (a *Agent) watch(ctx context.Context, from int64) (clientv3.WatchChan, context.CancelFunc) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	return a.cfg.Client.Watch(wctx, a.cfg.Keys.Mode, clientv3.WithRev(from)), cancel
}

// follow watches the record from rev+1, applying and acknowledging every
// change, and renews the lease; it returns when either fails for good.
func (a *Agent) follow(ctx context.Context, rev int64) error {
	wch, stop := a.watch(ctx, rev+1)
	defer func() { stop() }()
	renew := time.NewTicker(a.cfg.LeaseTTL / 4)
	defer renew.Stop()
	unacked := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-renew.C:
			if a.lease == 0 {
				return errLeaseGone
			}
			if err := a.renew(ctx); err != nil {
				if a.lease == 0 {
					return err
				}
				a.lg.Debug("renewing the registration's lease failed", zap.Error(err))
				continue
			}
			if unacked {
				if err := a.ack(ctx); err == nil {
					unacked = false
				} else if a.lease == 0 {
					return err
				}
			}
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				if ok && errors.Is(wr.Err(), rpctypes.ErrCompacted) {
					a.lg.Info("mode record watch compacted; reading the record again")
				}
				// Read again and watch from there, keeping the lease.
				rec, _, rev2, err := a.read(ctx)
				if err != nil {
					return err
				}
				if err := a.apply(ctx, rec); err != nil {
					return err
				}
				unacked = a.ack(ctx) != nil
				stop()
				wch, stop = a.watch(ctx, rev2+1)
				continue
			}
			for _, ev := range wr.Events {
				var rec *Record
				if ev.Type == clientv3.EventTypePut {
					r, err := Decode(ev.Kv.Value)
					if err != nil {
						a.lg.Error("ignoring a mode record that does not decode", zap.Error(err))
						continue
					}
					rec = r
				}
				if err := a.apply(ctx, rec); err != nil {
					return err
				}
			}
			if err := a.ack(ctx); err != nil {
				if a.lease == 0 {
					return err
				}
				unacked = true
			}
		}
	}
}
