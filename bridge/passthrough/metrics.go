// SPDX-License-Identifier: Apache-2.0

package passthrough

import "github.com/prometheus/client_golang/prometheus"

// metrics are the passthrough's own series.
type metrics struct {
	up        prometheus.Gauge
	losses    prometheus.Counter
	misses    prometheus.Counter
	heartbeat prometheus.Histogram
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "v2bridge_upstream_up",
			Help: "1 while the v2 server in use answers the heartbeat (passthrough mode)."}),
		losses: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_upstream_losses_total",
			Help: "Times the v2 server in use was declared lost."}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_upstream_heartbeat_misses_total",
			Help: "Heartbeats to a v2 server that failed or timed out."}),
		heartbeat: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "v2bridge_upstream_heartbeat_seconds",
			Help: "Latency of the heartbeat to the v2 server.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "v2bridge_upstream_requests_total",
			Help: "v2 requests forwarded to the v2 server, by method and HTTP status (0: the v2 server gave no answer)."},
			[]string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "v2bridge_upstream_request_duration_seconds",
			Help:    "Latency of v2 requests forwarded to the v2 server (watches excluded), by method.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}, []string{"method"}),
	}
	if reg != nil {
		reg.MustRegister(m.up, m.losses, m.misses, m.heartbeat, m.requests, m.latency)
	}
	return m
}
