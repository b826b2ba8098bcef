package upstream

import "github.com/prometheus/client_golang/prometheus"

// metrics are the passthrough's own series.
type metrics struct {
	up        prometheus.Gauge
	losses    prometheus.Counter
	misses    prometheus.Counter
	heartbeat prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "v2bridge_upstream_up",
			Help: "1 while the v2 upstream in use answers the heartbeat (passthrough mode)."}),
		losses: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_upstream_losses_total",
			Help: "Times the v2 upstream in use was declared lost."}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_upstream_heartbeat_misses_total",
			Help: "Heartbeats to a v2 upstream that failed or timed out."}),
		heartbeat: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "v2bridge_upstream_heartbeat_seconds",
			Help: "Latency of the heartbeat to the v2 upstream.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
	}
	if reg != nil {
		reg.MustRegister(m.up, m.losses, m.misses, m.heartbeat)
	}
	return m
}
