// SPDX-License-Identifier: Apache-2.0

package main

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// registerBridgeInfo adds the process's constant facts: which build runs, and
// whether it serves a private embedded store (a dashboard should show that).
func registerBridgeInfo(reg prometheus.Registerer, embedded bool) {
	ver, commit := buildVersion()
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
// ("passthrough" to a v2 upstream, or "v3"), 0 for the other.
func registerMode(reg prometheus.Registerer, passthrough bool) {
	mode := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "v2bridge_mode",
		Help: "1 for the mode the bridge serves in: passthrough (to an old v2 server) or v3.",
	}, []string{"mode"})
	on, off := "v3", "passthrough"
	if passthrough {
		on, off = off, on
	}
	mode.WithLabelValues(on).Set(1)
	mode.WithLabelValues(off).Set(0)
	reg.MustRegister(mode)
}
