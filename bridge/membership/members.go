// SPDX-License-Identifier: Apache-2.0

package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/v2api"
)

// RegistrarConfig configures a Registrar.
type RegistrarConfig struct {
	Client clientv3.Lease
	KV     clientv3.KV
	// Live, if set, tells whether Client reaches etcd now (the bridge's
	// checked session): while it does not, the registrar waits, and
	// renews its lease the moment it does.
	Live    ctxsleep.Live
	Bridges string // the registrations' key prefix (Bridges)
	// TTL of the registration's lease: a bridge that dies leaves the
	// member lists within it.
	TTL            time.Duration
	RequestTimeout time.Duration
	Name           string
	Advertise      []string
	DataPrefix     string
	Prefix         string // the v2 subtree served (--serve-prefix)
	Logger         *zap.Logger
}

// Registrar keeps a bridge without --v2-server registered under
// Bridges (as a Static registration, which the cutover does not wait for),
// so the other bridges list it. A dual-mode bridge's agent registers it
// instead.
//
// Every field belongs to the goroutine that calls Run.
type Registrar struct {
	cfg   RegistrarConfig
	reg   Registration
	lease clientv3.LeaseID
}

// staticMode is a static registration's Mode: the mode record's "v3", the
// side such a bridge serves whatever the record says.
const staticMode = "v3"

// NewRegistrar is a registrar for cfg; Run starts it.
func NewRegistrar(cfg RegistrarConfig) *Registrar {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cfg.TTL = max(cfg.TTL, 2*time.Second)
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	reg := Self(cfg.Name, cfg.Advertise)
	reg.Mode, reg.DataPrefix, reg.Prefix, reg.Static = staticMode, cfg.DataPrefix, cfg.Prefix, true
	return &Registrar{cfg: cfg, reg: reg}
}

// Run keeps the registration on a lease until ctx ends, then revokes the
// lease: a bridge that stops cleanly leaves the lists at once. A lease lost
// (not renewed within its TTL, or revoked) is replaced by a new one; one
// whose renewals ended with a connection is renewed again on the next.
func (r *Registrar) Run(ctx context.Context) {
	defer r.revoke()
	ctxsleep.RetryLive(ctx, r.cfg.Live, r.keep, func(err error) {
		r.cfg.Logger.Warn("member registration in etcd v3: trying again", zap.Error(err))
	})
}

// keep registers the bridge on a new lease and keeps the lease alive until
// it is lost or ctx ends. clientv3 renews it on one stream, every third of
// the TTL: a renewal on a stream of its own (KeepAliveOnce) costs the
// member several times as much.
func (r *Registrar) keep(ctx context.Context) error {
	if err := r.renewOrRegister(ctx); err != nil {
		return err
	}
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	kept, err := r.cfg.Client.KeepAlive(kctx, r.lease)
	if err != nil {
		return fmt.Errorf("keeping the lease alive: %w", err)
	}
	renewals := 0
	for range kept { // an answer per renewal; closed once the lease is lost, the connection lost, or ctx ends
		renewals++
	}
	return fmt.Errorf("the registration's lease was lost after %d renewals", renewals)
}

// renewOrRegister renews the lease of the registration, if there is one
// and it is still alive (its renewals ended with a connection, say: the
// bridge is listed once, not twice until the old lease expires), or
// registers the bridge on a new lease.
func (r *Registrar) renewOrRegister(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	if r.lease != 0 {
		resp, err := r.cfg.Client.KeepAliveOnce(cctx, r.lease)
		switch {
		case err == nil && resp.TTL > 0:
			return nil
		case err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound):
			r.lease = 0
		default:
			return fmt.Errorf("renewing the lease: %w", err)
		}
	}
	g, err := Grant(cctx, r.cfg.Client, r.cfg.TTL)
	if err != nil {
		return fmt.Errorf("granting a lease: %w", err)
	}
	if _, err = Put(cctx, r.cfg.KV, r.cfg.Bridges, g.ID, r.reg); err != nil {
		return fmt.Errorf("registering: %w", err) // the lease expires on its own
	}
	r.lease = g.ID
	r.cfg.Logger.Info("registered in etcd v3 as a member", zap.String("key", Key(r.cfg.Bridges, g.ID)),
		zap.Duration("ttl", r.cfg.TTL))
	return nil
}

func (r *Registrar) revoke() {
	if r.lease == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.RequestTimeout)
	defer cancel()
	if _, err := r.cfg.Client.Revoke(ctx, r.lease); err != nil {
		r.cfg.Logger.Debug("revoking the member registration's lease", zap.Error(err))
	}
	r.lease = 0
}

// MemberListConfig configures a MemberList.
type MemberListConfig struct {
	Client interface {
		clientv3.KV
		clientv3.Watcher
	}
	// Live, if set, tells whether Client reaches etcd now (the bridge's
	// checked session): while it does not, the list waits, and reads again
	// the moment it does.
	Live    ctxsleep.Live
	Bridges string // the registrations' key prefix (Bridges)
	// DataPrefix and Prefix: only bridges serving this key space, and this
	// v2 subtree of it (--serve-prefix), are listed.
	DataPrefix     string
	Prefix         string
	RequestTimeout time.Duration
	Logger         *zap.Logger
}

// MemberList is the registrations under Bridges, kept by a watch: the
// v2api.Members of /v2/members. While etcd v3 is out of reach it keeps the
// last list it read.
type MemberList struct {
	cfg MemberListConfig

	mu   sync.Mutex              // guards regs
	regs map[string]Registration // by ID (Key)
}

// NewMemberList is an empty list for cfg; Run fills it.
func NewMemberList(cfg MemberListConfig) *MemberList {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	return &MemberList{cfg: cfg, regs: map[string]Registration{}}
}

var _ v2api.Members = (*MemberList)(nil)

// Members returns the listed bridges: those registered for the same data
// prefix and served subtree, advertising client URLs and not only themselves.
func (l *MemberList) Members() []v2api.Member {
	l.mu.Lock()
	defer l.mu.Unlock()
	served := Registration{Prefix: l.cfg.Prefix}.Served()
	out := make([]v2api.Member, 0, len(l.regs))
	for _, g := range l.regs {
		if g.OnlySelf || g.DataPrefix != l.cfg.DataPrefix || g.Served() != served || len(g.Advertise) == 0 {
			continue
		}
		out = append(out, v2api.Member{ID: v2api.MemberID(g.Advertise), Name: g.Name, ClientURLs: g.Advertise})
	}
	return out
}

// Run reads the registrations and follows them with a watch until ctx ends,
// reading them again whenever the watch fails.
func (l *MemberList) Run(ctx context.Context) {
	ctxsleep.RetryLive(ctx, l.cfg.Live, l.follow, func(err error) {
		l.cfg.Logger.Debug("member list: watch ended; reading the registrations again", zap.Error(err))
	})
}

// follow reads the registrations, then applies the watch's events until it
// fails.
func (l *MemberList) follow(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	regs, rev, err := Read(cctx, l.cfg.Client, l.cfg.Bridges)
	cancel()
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.regs = regs
	l.mu.Unlock()
	// Require a leader: a member cut off from the others ends the watch
	// instead of keeping it silent. On a stream of its own (its own
	// metadata): on the bridge's session it would otherwise share the
	// feed's, whose progress answers wait for every watch of the stream.
	wctx, wcancel := context.WithCancel(metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx),
		"v2bridge-watch", "members"))
	defer wcancel()
	wch := l.cfg.Client.Watch(wctx, l.cfg.Bridges, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok = <-wch:
		}
		if !ok {
			return errors.New("watch closed")
		}
		if err := wr.Err(); err != nil {
			return err
		}
		l.mu.Lock()
		for _, ev := range wr.Events {
			id := strings.TrimPrefix(string(ev.Kv.Key), l.cfg.Bridges)
			if ev.Type == clientv3.EventTypeDelete {
				delete(l.regs, id)
			} else {
				l.decode(id, ev.Kv.Value)
			}
		}
		l.mu.Unlock()
	}
}

// decode puts the registration of bridge id into the list (l.mu held); one
// that does not decode is left out.
func (l *MemberList) decode(id string, val []byte) {
	var g Registration
	if err := json.Unmarshal(val, &g); err != nil {
		l.cfg.Logger.Debug("ignoring a registration that does not decode", zap.String("id", id), zap.Error(err))
		delete(l.regs, id)
		return
	}
	l.regs[id] = g
}
