// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/bridge/core"
	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/v2api"
	"github.com/v2bridge/v2bridge/v3backend"
)

// v3Side is the v3 bridge as a Side.
type v3Side struct {
	br *core.Bridge
	// mem is the bridge's own membership (v3 mode); in dual mode the
	// bridge's is dual mode's.
	mem *bridgeMembers
}

func (s *v3Side) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.br.API.ServeHTTP(w, r) }

func (s *v3Side) Metrics() http.Handler { return s.br.API.MetricsHandler() }

func (s *v3Side) Ready() bool { return s.br.Ready() }

// EndWatches ends every watch the side serves, parked ones too.
func (s *v3Side) EndWatches(reason string) { s.br.Backend.Hub().EndAll(reason) }

// Leave revokes the registration first (other bridges stop advertising
// this one), then ends every watch: watches are long-polls, whose clients
// re-issue them elsewhere.
func (s *v3Side) Leave() {
	s.mem.stop()
	s.EndWatches("bridge shutting down")
}

// Close lets the requests in flight finish and closes the backend.
func (s *v3Side) Close(ctx context.Context) error { return s.br.Close(ctx) }

// newV3Side connects the v3 side, within the dial timeout of each endpoint;
// followers gives the members and auth, once the backend is connected.
func newV3Side(ctx context.Context, cfg *Config, bcfg v3backend.Config,
	followers func(*v3backend.Backend) (v2api.Members, *auth.Service), reg *prometheus.Registry,
	parked func() int) (*v3Side, error) {
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout*time.Duration(len(bcfg.Endpoints))+time.Second)
	defer cancel()
	br, err := core.New(dctx, core.Config{Backend: bcfg, Name: cfg.Name, AdvertiseURLs: cfg.AdvertiseURLs,
		Followers: followers, EnablePprof: cfg.EnablePprof, Logger: cfg.Logger, Registry: reg,
		GRPCClientMetrics: true, DetachWatches: cfg.WatchDetach, Parked: parked, HTTP: cfg.HTTP})
	if err != nil {
		return nil, err
	}
	return &v3Side{br: br}, nil
}

// buildV3 builds a v3-mode bridge: its embedded etcd if it has one, the
// bridge, and over the backend's checked session the auth and the
// membership, which so move with the bridge's member. Its listeners were
// opened first, so a port that is taken stopped it before anything here
// started.
func buildV3(ctx context.Context, cfg *Config, res *cleanups, parked func() int) (*built, error) {
	lg := cfg.Logger
	bcfg := cfg.Backend
	if e := cfg.Embedded; e != nil {
		// Before anything is logged: a --data-dir in use is one error line.
		release, err := lockDataDir(e.Dir)
		if err != nil {
			return nil, err
		}
		res.add(release) // after the embedded etcd is closed
		warnEmbedded(lg, e)
		ecfg := e.EmbeddedConfig
		elg, closing := embeddedLogger(lg)
		ecfg.Logger = elg
		etcd, err := v3backend.StartEmbeddedContext(ctx, ecfg)
		if err != nil {
			if interrupted(ctx, lg) {
				return nil, nil
			}
			return nil, err
		}
		res.add(func() {
			closing.Store(true)
			etcd.Close()
		})
		lg.Info("embedded etcd started", zap.String("client-url", e.ClientURL), zap.String("data-dir", e.Dir))
		if e.InProcess {
			bcfg.Member = etcd.Server // not used with --user: the backend keeps credentials on gRPC
		}
	}
	reg := newRegistry(cfg, cfg.Embedded != nil)
	registerMode(reg, false)
	if cfg.Embedded == nil && !cfg.Layout.Scoped() {
		cli, err := ControlClient(bcfg, lg) // for this check only
		if err != nil {
			return nil, err
		}
		err = checkForeign(ctx, cfg, cli)
		_ = cli.Close()
		if err != nil {
			if interrupted(ctx, cfg.Logger) {
				return nil, nil
			}
			return nil, err
		}
	}
	var mem *bridgeMembers
	var au *bridgeAuth
	s, err := newV3Side(ctx, cfg, bcfg, func(be *v3backend.Backend) (v2api.Members, *auth.Service) {
		conn := be.Conn()
		mem = newBridgeMembers(cfg, conn, conn.Live, lg, true)
		au = newAuth(cfg, conn, conn.Live, reg)
		au.start()
		res.add(au.stop) // after the backend closed: the store waits for a session no more
		return mem.members(), au.svc
	}, reg, parked)
	if err != nil {
		if interrupted(ctx, lg) {
			return nil, nil
		}
		return nil, err
	}
	s.mem = mem
	mem.start()
	return &built{side: s, serving: "serving", auth: au.svc, fields: []zap.Field{zap.Strings("backend", bcfg.Endpoints)}}, nil
}

// warnEmbedded says loudly that the bridge serves a store of its own, which
// no other bridge or v3 client shares unless pointed at its client URL.
func warnEmbedded(lg *zap.Logger, e *Embedded) {
	why := "--embedded was given"
	if e.Implicit {
		why = "no --endpoints, --discovery-srv, --embedded or --config-file was given"
	}
	lg.Warn("serving a PRIVATE EMBEDDED etcd, not a cluster: its data lives only in --data-dir; "+
		"give --endpoints to serve a real etcd v3 cluster",
		zap.String("reason", why), zap.String("data-dir", e.Dir), zap.String("client-url", e.ClientURL))
}

// ControlClient is the etcd v3 client of the commands (migrate, cutover),
// of a dual-mode bridge's mode record, registration and auth until its v3
// side connects (handover), and of a bridge's check of what it serves at
// start: the backend's TLS, auth, dial and keepalive settings, over every
// endpoint. It does not block: while etcd v3 is unreachable its calls fail
// within their deadlines. Keepalive pings only connections with a stream
// (etcd refuses others' with GOAWAY too_many_pings); a dead connection
// without one is noticed by the next call's deadline.
func ControlClient(bcfg v3backend.Config, lg *zap.Logger) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            bcfg.Endpoints,
		DialTimeout:          bcfg.DialTimeout,
		DialKeepAliveTime:    bcfg.KeepAliveTime,
		DialKeepAliveTimeout: bcfg.KeepAliveTimeout,
		PermitWithoutStream:  false,
		TLS:                  bcfg.TLS,
		Username:             bcfg.Username,
		Password:             bcfg.Password,
		Logger:               lg.Named("clientv3").WithOptions(zap.IncreaseLevel(zap.ErrorLevel)),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd v3 client for the mode record: %w", err)
	}
	return cli, nil
}

// waitForeign is FindForeign retried until it answers, for at most
// --start-timeout: a bridge serving / by default starts only once it knows
// that it reaches nothing of another tenant.
func waitForeign(ctx context.Context, cfg *Config, cli *clientv3.Client) ([]v3backend.ForeignDir, error) {
	sctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	backoff := 100 * time.Millisecond
	for {
		found, err := v3backend.FindForeign(sctx, cli, cfg.Layout)
		if err == nil {
			return found, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		cfg.Logger.Warn("could not look for keys no v2 client wrote yet; retrying", zap.Error(err))
		if !ctxsleep.Sleep(sctx, backoff) {
			return nil, fmt.Errorf("could not tell within --start-timeout %v whether the cluster holds keys no v2 client wrote, "+
				"which a bridge serving the whole key space (--serve-prefix / by default) must not serve: %w; "+
				"set --serve-prefix to the v2 subtrees your clients use, or make etcd answer", cfg.StartTimeout, err)
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// checkForeign looks, for a bridge serving the whole tree of a cluster it
// does not own, for keys no v2 client wrote: another tenant's (a
// Kubernetes registry), which any client of the bridge could then read and
// overwrite. Unless --serve-prefix / asked for that, the bridge refuses to
// start; if it did, the bridge says what it reaches, once.
func checkForeign(ctx context.Context, cfg *Config, cli *clientv3.Client) error {
	lg := cfg.Logger
	var found []v3backend.ForeignDir
	if cfg.ServePrefixSet { // / by name: what it reaches is only told
		fctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
		var err error
		found, err = v3backend.FindForeign(fctx, cli, cfg.Layout)
		cancel()
		if err != nil {
			lg.Warn("could not look for keys no v2 client wrote", zap.Error(err))
			return nil
		}
	} else {
		var err error
		if found, err = waitForeign(ctx, cfg, cli); err != nil {
			return err
		}
	}
	if len(found) == 0 {
		return nil
	}
	var total int64
	var dirs []string
	for _, f := range found {
		total += f.Keys
		dirs = append(dirs, fmt.Sprintf("%s (%d keys)", f.Path, f.Keys))
	}
	if !cfg.ServePrefixSet {
		return UsageError{fmt.Errorf("refusing to serve the whole key space: --serve-prefix is / by default, and the cluster holds %d keys "+
			"no v2 client wrote, under %s; any client of this bridge could read and overwrite them. Set --serve-prefix to the "+
			"v2 subtrees your clients use (flannel: --serve-prefix /coreos.com/network), or --serve-prefix / to serve everything",
			total, strings.Join(dirs, ", "))}
	}
	lg.Warn("serving the whole key space (--serve-prefix /): it holds keys no v2 client wrote, which every client of this "+
		"bridge can read and overwrite, and which the bridge mirrors and follows; a narrower --serve-prefix costs only what it serves",
		zap.Int64("keys", total), zap.Strings("directories", dirs))
	return nil
}
