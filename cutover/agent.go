// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// AgentConfig configures an Agent.
type AgentConfig struct {
	Client *clientv3.Client
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
	Logger         *zap.Logger
}

// Agent keeps a dual-mode bridge in step with the mode record: it reads the
// record, registers the bridge (on a lease, only while the record is the one
// it read), watches the record and applies every change to the switch, and
// acknowledges each by rewriting its registration. It renews the lease
// itself, noting when each renewal was sent, so the switch serves writes
// only while the lease is surely alive in etcd v3.
type Agent struct {
	cfg     AgentConfig
	lg      *zap.Logger
	reg     Registration
	lease   clientv3.LeaseID
	regKey  string
	applied State
}

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
	host, _ := os.Hostname()
	return &Agent{cfg: cfg, lg: cfg.Logger,
		reg: Registration{Name: cfg.Name, Host: host, PID: os.Getpid(), Advertise: cfg.Advertise, Started: time.Now().UTC()}}
}

// Run keeps the bridge registered and in step until ctx ends, then removes
// its registration.
func (a *Agent) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := a.session(ctx)
		if ctx.Err() != nil {
			break
		}
		a.lg.Warn("mode record: lost touch with etcd v3; trying again", zap.Error(err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 2*time.Second)
	}
	a.deregister()
}

// deregister revokes the lease (the registration goes with it), so a
// cutover does not wait for a bridge that shut down.
func (a *Agent) deregister() {
	a.cfg.Switch.RevokeWrites()
	if a.lease == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.RequestTimeout)
	defer cancel()
	if _, err := a.cfg.Client.Revoke(ctx, a.lease); err != nil {
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
func (a *Agent) apply(ctx context.Context, rec *Record) error {
	st := StateOf(rec)
	if err := a.cfg.Switch.Apply(ctx, st); err != nil {
		return err
	}
	if st != a.applied {
		a.applied = st
		_, since := a.cfg.Switch.State()
		a.reg.Mode, a.reg.Generation, a.reg.Since = st.Mode, st.Generation, since.UTC()
	}
	return nil
}

// session is one lease's life: read, apply, register (guarded by the
// record's revision, so no bridge registers on a record a cutover has
// replaced without seeing it), then follow the record and renew the lease
// until something fails.
func (a *Agent) session(ctx context.Context) error {
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
		g, err := a.cfg.Client.Grant(cctx, int64((a.cfg.LeaseTTL+time.Second-1)/time.Second))
		cancel()
		if err != nil {
			return fmt.Errorf("granting the registration's lease: %w", err)
		}
		a.lease = g.ID
		a.regKey = a.cfg.Keys.Bridges + strconv.FormatInt(int64(g.ID), 16)
		a.extend(sent, g.TTL)
	}
	for {
		ok, err := a.register(ctx, modRev)
		if err != nil {
			return err
		}
		if ok {
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
	a.lg.Info("registered in etcd v3", zap.String("key", a.regKey), zap.String("mode", a.applied.Mode),
		zap.Uint64("generation", a.applied.Generation))
	return a.follow(ctx, rev)
}

// register writes the registration if the record is still at modRev.
func (a *Agent) register(ctx context.Context, modRev int64) (bool, error) {
	val, _ := json.Marshal(a.reg)
	cctx, cancel := a.call(ctx)
	defer cancel()
	resp, err := a.cfg.Client.Txn(cctx).
		If(clientv3.Compare(clientv3.ModRevision(a.cfg.Keys.Mode), "=", modRev)).
		Then(clientv3.OpPut(a.regKey, string(val), clientv3.WithLease(a.lease))).
		Commit()
	if err != nil {
		return false, a.leaseErr(fmt.Errorf("registering: %w", err))
	}
	return resp.Succeeded, nil
}

// ack rewrites the registration with the state applied.
func (a *Agent) ack(ctx context.Context) error {
	val, _ := json.Marshal(a.reg)
	cctx, cancel := a.call(ctx)
	defer cancel()
	if _, err := a.cfg.Client.Put(cctx, a.regKey, string(val), clientv3.WithLease(a.lease)); err != nil {
		return a.leaseErr(fmt.Errorf("acknowledging generation %d: %w", a.reg.Generation, err))
	}
	return nil
}

// leaseErr forgets a lease etcd no longer has, so the next session grants
// a new one, and stops writes at once.
func (a *Agent) leaseErr(err error) error {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		a.cfg.Switch.RevokeWrites()
		a.lease = 0
	}
	return err
}

// extend lets writes run until the lease, renewed by a request sent at
// sent with ttl seconds, can have expired.
func (a *Agent) extend(sent time.Time, ttl int64) {
	a.cfg.Switch.ExtendWrites(sent.Add(time.Duration(ttl)*time.Second - safety))
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
			sent := time.Now()
			cctx, ccancel := a.call(ctx)
			k, err := a.cfg.Client.KeepAliveOnce(cctx, a.lease)
			ccancel()
			if err != nil {
				err = a.leaseErr(fmt.Errorf("renewing the registration's lease: %w", err))
				if a.lease == 0 {
					return err
				}
				a.lg.Debug("renewing the registration's lease failed", zap.Error(err))
				continue
			}
			a.extend(sent, k.TTL)
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
