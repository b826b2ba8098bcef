// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/bridge/passthrough"
	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/v2api"
	"github.com/v2bridge/v2bridge/v3backend"
)

// dualSide is a dual-mode bridge: the cutover.Switch over the passthrough
// and the v3 side. The v3 side comes up in the background (the v2 server is
// served meanwhile). The shadow comparison of the v2 server's answers with
// the v3 side's hooks in here: the passthrough is built with shadow as its
// observer, which samples nothing until the v3 side has started the
// comparer.
type dualSide struct {
	*cutover.Switch
	pass   *passSide
	v3     atomic.Pointer[v3Side]
	shadow lateObserver
	// stopBg stops the agent and the v3 side's builder, and waits for them.
	stopBg func()
}

// Metrics serves every side's metrics and the switch's probes.
func (d *dualSide) Metrics() http.Handler { return d.MetricsHandler() }

// Leave: the registration goes first (a cutover stops waiting for this
// bridge), but only once the agent has closed the write gate and the writes
// in flight have finished (within the request timeout; else the lease is
// left to expire): a cutover that no longer lists the bridge must not see
// one of its writes land. Then watches end (clients re-issue them
// elsewhere); the other requests in flight finish within their deadlines.
func (d *dualSide) Leave() {
	d.stopBg()
	d.pass.Leave()
	d.shadow.close() // after the passthrough: no request observes it any more
	if s := d.v3.Load(); s != nil {
		s.EndWatches("bridge shutting down")
	}
}

// Close closes the v3 side, if it was connected.
func (d *dualSide) Close(ctx context.Context) error {
	if s := d.v3.Load(); s != nil {
		return s.Close(ctx)
	}
	return nil
}

// asSideHandlers is a Side as one of the Switch's.
func asSideHandlers(s Side) cutover.SideHandlers {
	b := cutover.SideHandlers{API: s, Probes: s.Metrics(), Ready: s.Ready}
	if e, ok := s.(interface{ EndWatches(string) }); ok {
		b.EndWatches = e.EndWatches
	}
	if i, ok := s.(interface{ LastIndex() uint64 }); ok {
		b.Index = i.LastIndex
	}
	return b
}

// buildDual builds a bridge with both the v2 server and an etcd v3
// cluster: it serves from the side the mode record in etcd v3 names, and
// switches every bridge at once when `migrate cutover` or `migrate
// rollback` rewrites the record.
func buildDual(ctx context.Context, cfg *Config, res *cleanups, parked func() int) (*built, error) {
	lg := cfg.Logger
	reg := newRegistry(cfg, false)
	mm := registerDualMode(reg)
	var v3reg atomic.Pointer[prometheus.Registry]
	gatherer := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		gs := prometheus.Gatherers{reg}
		if r := v3reg.Load(); r != nil {
			gs = append(gs, r)
		}
		return gs.Gather()
	})
	cli, err := ControlClient(cfg.Backend, lg)
	if err != nil {
		return nil, err
	}
	res.add(func() { _ = cli.Close() })
	h := newHandover(cli)                              // to the v3 side's session once it connects
	mem := newBridgeMembers(cfg, h, h.Live, lg, false) // the agent registers the bridge
	au := newAuth(cfg, h, h.Live, reg)
	au.start()
	res.add(au.stop) // after shutdown, before the client closes
	d := &dualSide{stopBg: func() {}}
	d.pass, err = newPassSide(cfg, reg, gatherer, mem.members(), &d.shadow)
	if err != nil {
		return nil, err
	}
	res.add(d.pass.p.Close)
	// The passwords the v2 server accepts go to the v3 side's users, for
	// the cutover.
	learn := auth.NewLearner(au.svc.Store, auth.V2ServerAuthEnabled(d.pass.p), cfg.RequestTimeout, lg.Named("learn"), reg)
	res.add(learn.Stop) // after the servers: no request offers any more
	d.pass.h = learn.Wrap(d.pass.p)
	d.Switch = cutover.NewSwitch(cutover.SwitchConfig{
		Passthrough: asSideHandlers(d.pass),
		Metrics:     promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}),
		Logger:      lg.Named("mode"),
		OnChange:    mm.set,
	})
	mm.fenced, mm.headroom = d.FencedWrites, d.CeilingHeadroom
	agent := cutover.NewAgent(cutover.AgentConfig{Client: h, Live: h.Live, Keys: cutover.KeysFor(cfg.Layout.MetaPrefix), Switch: d.Switch,
		LeaseTTL: cfg.ModeLeaseTTL, RequestTimeout: cfg.RequestTimeout, Name: cfg.Name,
		Advertise: cfg.AdvertiseURLs, DataPrefix: cfg.Layout.DataPrefix, Prefix: cfg.ServePrefix,
		OnlySelf: cfg.AdvertiseOnlySelf, Logger: lg.Named("mode")})
	mem.start()
	res.add(mem.stop) // after shutdown, before the client closes
	start := func() {
		bgctx, bgcancel := context.WithCancel(context.Background())
		var bg sync.WaitGroup // the agent and the v3 side's builder
		bg.Add(2)
		go func() {
			defer bg.Done()
			agent.Run(bgctx)
		}()
		go func() {
			defer bg.Done()
			d.connectV3(bgctx, cfg, h, mem, au.svc, reg, &v3reg, parked)
		}()
		d.stopBg = func() {
			bgcancel()
			bg.Wait()
		}
	}
	return &built{side: d, serving: "serving in dual mode: from the side the mode record names", start: start, auth: au.svc,
		fields: []zap.Field{zap.Strings("v2-server", cfg.V2Server), zap.Strings("backend", cfg.Backend.Endpoints)}}, nil
}

// connectV3 connects the v3 side, retrying until it answers or ctx ends,
// hands it to the switch, and hands h over to its session.
func (d *dualSide) connectV3(ctx context.Context, cfg *Config, h *handover, mem *bridgeMembers, au *auth.Service,
	shadowReg prometheus.Registerer, v3reg *atomic.Pointer[prometheus.Registry], parked func() int) {
	lg := cfg.Logger
	backoff := time.Second
	for attempt := 1; ctx.Err() == nil; attempt++ {
		// A registry per attempt: a failed attempt may have registered
		// some of its metrics.
		reg := prometheus.NewRegistry()
		s, err := newV3Side(ctx, cfg, cfg.Backend, func(*v3backend.Backend) (v2api.Members, *auth.Service) {
			return mem.members(), au
		}, reg, parked)
		if err == nil {
			h.to(s.br.Backend.Conn())
			v3reg.Store(reg)
			d.v3.Store(s)
			d.SetV3(asSideHandlers(s))
			lg.Info("dual mode: the etcd v3 side is connected", zap.Strings("backend", cfg.Backend.Endpoints), zap.Int("attempt", attempt))
			obs, stop, err := startShadow(cfg, s.br, shadowReg)
			if err != nil {
				lg.Warn("dual mode: no shadow comparison", zap.Error(err))
				return
			}
			d.shadow.set(obs, stop)
			return
		}
		lg.Warn("dual mode: cannot reach etcd v3 yet; the v2 server is served meanwhile if the mode record says so",
			zap.Strings("backend", cfg.Backend.Endpoints), zap.Error(err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 10*time.Second)
	}
}

// lateObserver is a passthrough.Observer whose comparer arrives after the
// passthrough was built; until then it samples nothing.
type lateObserver struct {
	obs  atomic.Pointer[passthrough.Observer]
	stop atomic.Pointer[func()]
}

func (l *lateObserver) set(obs passthrough.Observer, stop func()) {
	l.stop.Store(&stop)
	if obs != nil {
		l.obs.Store(&obs)
	}
}

// Sample implements passthrough.Observer.
func (l *lateObserver) Sample(r *http.Request) bool {
	o := l.obs.Load()
	return o != nil && (*o).Sample(r)
}

// Observe implements passthrough.Observer.
func (l *lateObserver) Observe(r *http.Request, a passthrough.Answer) {
	if o := l.obs.Load(); o != nil {
		(*o).Observe(r, a)
	}
}

// close stops the comparer, if one was started.
func (l *lateObserver) close() {
	if stop := l.stop.Load(); stop != nil {
		(*stop)()
	}
}
