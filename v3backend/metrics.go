// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	backendUp       prometheus.Gauge
	losses          prometheus.Counter
	heartbeat       prometheus.Histogram
	heartbeatMisses prometheus.Counter
	recoverSeconds  prometheus.Histogram
	detectSeconds   prometheus.Histogram
	writeRetries    prometheus.Counter
	v3Watches       prometheus.Gauge
	mirrorReads     prometheus.Counter
	leaseGrants     prometheus.Counter
	forgedJournals  prometheus.Counter
	backendReads    prometheus.Counter
	writeBatches    prometheus.Counter
	batchedWrites   prometheus.Counter
	v3Events        prometheus.Counter

	// excused: timed-out heartbeats not counted as misses, since the
	// bridge itself ran late meanwhile.
	excused prometheus.Counter
	// applying: timed-out heartbeats not counted as misses, since the
	// member had a leader and was applying what it had committed.
	applying prometheus.Counter
	// deferred: losses not declared, since no other member had a quorum.
	deferred prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		backendUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "v2bridge_backend_up",
			Help: "1 while an etcd v3 backend member is connected and answering heartbeats."}),
		losses: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_backend_losses_total",
			Help: "Times the backend connection was declared lost."}),
		heartbeat: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "v2bridge_backend_heartbeat_seconds",
			Help: "Latency of successful backend heartbeats.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		heartbeatMisses: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_backend_heartbeat_misses_total",
			Help: "Backend heartbeats that failed or timed out."}),
		excused: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_backend_heartbeat_misses_excused_total",
			Help: "Backend heartbeats that timed out while the bridge itself ran late (starved of CPU), not counted as misses."}),
		applying: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_backend_heartbeat_applying_total",
			Help: "Backend heartbeats that timed out while the member, which had a leader, was still applying entries it had committed (a defrag, a slow disk), not counted as misses."}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_backend_losses_deferred_total",
			Help: "Times the member had no quorum for enough heartbeats to be lost, but no other member had one either (the cluster was electing a leader): the bridge stayed."}),
		recoverSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "v2bridge_backend_recover_seconds",
			Help: "Time from a declared loss until a backend member answered again.", Buckets: prometheus.ExponentialBuckets(0.1, 2, 12)}),
		detectSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "v2bridge_backend_detect_seconds",
			Help: "Time from the last good heartbeat to the declared loss.", Buckets: prometheus.LinearBuckets(0.5, 0.5, 16)}),
		writeRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_write_conflicts_total",
			Help: "v2 writes re-decided because a concurrent write changed what they read."}),
		forgedJournals: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_journal_records_ignored_total",
			Help: "Journal records ignored because they do not match the changes of their revision (forged or corrupt)."}),
		leaseGrants: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_lease_grants_total",
			Help: "Leases granted for v2 TTL writes (shared by the writes asking the same TTL within a second) and for journal records."}),
		mirrorReads: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_mirror_reads_total",
			Help: "v2 reads answered from the bridge's copy of its key space."}),
		backendReads: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_backend_reads_total",
			Help: "v2 reads answered by the backend because the copy could not say (lagging or not loaded)."}),
		writeBatches: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_write_batches_total",
			Help: "v3 transactions that carried several concurrent v2 writes, each guarded on its own."}),
		batchedWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_batched_writes_total",
			Help: "v2 write attempts sent in a transaction with others (v2bridge_write_batches_total counts the transactions)."}),
		v3Watches: prometheus.NewGauge(prometheus.GaugeOpts{Name: "v2bridge_v3_watches",
			Help: "etcd v3 watches open on behalf of v2 watchers."}),
		v3Events: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_v3_events_received_total",
			Help: "etcd v3 changes the shared watch received: the served subtrees' and their bookkeeping (with --serve-prefix /, the whole key space's)."}),
	}
	if reg != nil {
		reg.MustRegister(m.backendUp, m.losses, m.heartbeat, m.heartbeatMisses, m.excused, m.applying, m.deferred, m.recoverSeconds, m.detectSeconds,
			m.writeRetries, m.v3Watches, m.mirrorReads, m.backendReads, m.forgedJournals, m.leaseGrants,
			m.writeBatches, m.batchedWrites, m.v3Events)
	}
	return m
}

// registerMirror exports the mirror's size.
func registerMirror(reg prometheus.Registerer, m *mirror) {
	if reg == nil {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "v2bridge_mirror_keys",
			Help: "Keys in the bridge's in-memory copy of what it serves (data keys, markers, sequence keys, lease records)."},
			func() float64 { n, _ := m.size(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "v2bridge_mirror_bytes",
			Help: "Bytes of the keys and values in the bridge's in-memory copy of what it serves."},
			func() float64 { _, n := m.size(); return float64(n) }))
}
