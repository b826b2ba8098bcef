// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"math"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/v2bridge/v2bridge/migrate/cutover"
)

// registerBridgeInfo adds the process's constant facts: which build runs, and
// whether it serves a private embedded store (a dashboard should show that).
func registerBridgeInfo(reg prometheus.Registerer, ver, commit string, embedded bool) {
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "v2bridge_build_info",
		Help:        "Always 1; the labels say which build of v2bridge runs.",
		ConstLabels: prometheus.Labels{"version": ver, "commit": commit, "goversion": runtime.Version()},
	})
	info.Set(1)
	store := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "v2bridge_embedded_store",
		Help: "1 when the bridge serves its private embedded etcd instead of an etcd v3 cluster.",
	})
	if embedded {
		store.Set(1)
	}
	reg.MustRegister(info, store)
}

// registerMode adds v2bridge_mode: 1 for the mode the bridge serves in
// ("passthrough" to a v2 server, or "v3"), 0 for the other.
func registerMode(reg prometheus.Registerer, passthrough bool) {
	mode := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "v2bridge_mode",
		Help: "1 for the mode the bridge serves in: passthrough (to a v2 server) or v3.",
	}, []string{"mode"})
	on, off := "v3", "passthrough"
	if passthrough {
		on, off = off, on
	}
	mode.WithLabelValues(on).Set(1)
	mode.WithLabelValues(off).Set(0)
	reg.MustRegister(mode)
}

// dualModeMetrics say which mode a dual-mode bridge serves in and since
// when; they follow every change of the mode record.
type dualModeMetrics struct {
	mode       *prometheus.GaugeVec
	since      prometheus.Gauge
	generation prometheus.Gauge
	// fenced reads the switch's count of refused writes.
	fenced func() int64
	// headroom reads how far the v2 server's index is below a rollback's
	// watch ceiling, and whether one applies.
	headroom func() (uint64, bool)
}

// registerDualMode adds v2bridge_mode (with a "fencing" value besides
// "passthrough" and "v3"; all 0 until the record is read),
// v2bridge_mode_since_seconds, v2bridge_mode_generation,
// v2bridge_writes_fenced_total and v2bridge_mode_watch_ceiling_headroom.
func registerDualMode(reg prometheus.Registerer) *dualModeMetrics {
	m := &dualModeMetrics{
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "v2bridge_mode",
			Help: "1 for the mode the bridge serves in: passthrough (to a v2 server), fencing (a cutover or rollback is switching: writes refused) or v3.",
		}, []string{"mode"}),
		since: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "v2bridge_mode_since_seconds",
			Help: "Unix time at which the bridge began serving from its current side (the v2 server or etcd v3).",
		}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "v2bridge_mode_generation",
			Help: "Generation of the mode record the bridge applied (0: no record, or not read yet).",
		}),
	}
	for _, l := range []string{"passthrough", "fencing", "v3"} {
		m.mode.WithLabelValues(l).Set(0)
	}
	fenced := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "v2bridge_writes_fenced_total",
		Help: "v2 writes refused while a cutover or rollback fenced them, or while the bridge could not renew its registration in etcd v3.",
	}, func() float64 {
		if m.fenced == nil {
			return 0
		}
		return float64(m.fenced())
	})
	headroom := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "v2bridge_mode_watch_ceiling_headroom",
		Help: "After a rollback that set a watch ceiling: how many more indexes the v2 server can take before its own index reaches the ceiling (0: it has; run the next cutover well before). +Inf when no ceiling applies.",
	}, func() float64 {
		if m.headroom == nil {
			return math.Inf(1)
		}
		if room, ok := m.headroom(); ok {
			return float64(room)
		}
		return math.Inf(1)
	})
	reg.MustRegister(m.mode, m.since, m.generation, fenced, headroom)
	return m
}

func (m *dualModeMetrics) set(st cutover.State, since time.Time) {
	for _, l := range []string{"passthrough", "fencing", "v3"} {
		v := 0.0
		if l == st.Mode {
			v = 1
		}
		m.mode.WithLabelValues(l).Set(v)
	}
	m.since.Set(float64(since.UnixNano()) / 1e9)
	m.generation.Set(float64(st.Generation))
}
