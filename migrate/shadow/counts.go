// SPDX-License-Identifier: Apache-2.0

package shadow

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Kinds of divergence (divergences_total's kind label): what differs
// between the v2 server's answer and the v3 side's.
const (
	KindMissing   = "missing"    // the v2 server has the key, v3 does not
	KindExtra     = "extra"      // v3 has a key the v2 server does not
	KindValue     = "value"      // different values
	KindDir       = "dir"        // a directory on one side, a file on the other
	KindChildren  = "children"   // a listing with other keys
	KindTTL       = "ttl"        // a TTL on one side only, or further apart than the tolerance
	KindErrorCode = "error-code" // different v2 errors, or an error on one side only
	KindOther     = "other"      // anything else (a header, the status of a success)
)

// Kinds lists every kind, in the order they are reported.
var Kinds = []string{KindMissing, KindExtra, KindValue, KindDir, KindChildren, KindTTL, KindErrorCode, KindOther}

// Counts are the counters of a comparison since its bridge started.
type Counts struct {
	Sampled uint64 `json:"sampled"`
	Reads   uint64 `json:"comparedReads"`
	Writes  uint64 `json:"comparedWrites"`
	// Retried counts comparisons that agreed only after re-checking: the
	// follower had not yet applied the v2 server's latest writes.
	Retried uint64 `json:"retried"`
	// Lagging counts writes the follower had not applied (its applied
	// index below the write's) when they had waited MaxAge, and reads
	// that never agreed while the v2 server kept changing: the follower is
	// behind, the copy is not shown wrong.
	Lagging     uint64            `json:"lagging"`
	Divergences map[string]uint64 `json:"divergences"` // by kind
	Dropped     map[string]uint64 `json:"dropped"`     // by reason
}

// Compared is the number of finished comparisons.
func (c *Counts) Compared() uint64 { return c.Reads + c.Writes }

// Diverged is the number of divergences of every kind.
func (c *Counts) Diverged() uint64 { return sum(c.Divergences) }

// DroppedTotal is the number of requests not compared, for any reason.
func (c *Counts) DroppedTotal() uint64 { return sum(c.Dropped) }

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// Add adds o's counters to c's.
func (c *Counts) Add(o Counts) {
	c.Sampled += o.Sampled
	c.Reads += o.Reads
	c.Writes += o.Writes
	c.Retried += o.Retried
	c.Lagging += o.Lagging
	for _, m := range []struct {
		dst *map[string]uint64
		src map[string]uint64
	}{
		{&c.Divergences, o.Divergences}, {&c.Dropped, o.Dropped}} {
		if *m.dst == nil {
			*m.dst = map[string]uint64{}
		}
		for k, v := range m.src {
			(*m.dst)[k] += v
		}
	}
}

func (c *Counts) equal(o *Counts) bool {
	return c.Sampled == o.Sampled && c.Reads == o.Reads && c.Writes == o.Writes && c.Retried == o.Retried &&
		c.Lagging == o.Lagging && maps.Equal(c.Divergences, o.Divergences) && maps.Equal(c.Dropped, o.Dropped)
}

// Divergence is one recent divergence, as the record keeps it.
type Divergence struct {
	Key    string    `json:"key"`
	Kind   string    `json:"kind"` // a Kind, or "lagging"
	Method string    `json:"method"`
	Where  string    `json:"where"` // the first difference: "body.node.value", "status", ...
	At     time.Time `json:"at"`
}

// recentMax is how many recent divergences a record carries.
const recentMax = 10

// counters are the live counts: atomics for what every request may touch,
// a mutex for the rare rest.
type counters struct {
	sampled, reads, writes, retried, lagging atomic.Uint64
	dropped                                  [nReasons]atomic.Uint64

	mu          sync.Mutex // guards divergences and recent
	divergences map[string]uint64
	recent      []Divergence // oldest first, at most recentMax
}

func (c *counters) diverged(d Divergence) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.Kind != lagging {
		if c.divergences == nil {
			c.divergences = map[string]uint64{}
		}
		c.divergences[d.Kind]++
	}
	c.recent = append(c.recent, d)
	if len(c.recent) > recentMax {
		c.recent = append(c.recent[:0], c.recent[len(c.recent)-recentMax:]...)
	}
}

func (c *counters) snapshot() Counts {
	out := Counts{Sampled: c.sampled.Load(), Reads: c.reads.Load(), Writes: c.writes.Load(),
		Retried: c.retried.Load(), Lagging: c.lagging.Load(), Divergences: map[string]uint64{}, Dropped: map[string]uint64{}}
	for i := range c.dropped {
		if n := c.dropped[i].Load(); n > 0 {
			out.Dropped[dropReasons[i]] = n
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	maps.Copy(out.Divergences, c.divergences)
	return out
}

func (c *counters) recentDivergences() []Divergence {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Divergence(nil), c.recent...)
}

// metrics are the v2bridge_shadow_* series.
type metrics struct {
	sampled       prometheus.Counter
	compared      *prometheus.CounterVec
	retried       prometheus.Counter
	lagging       prometheus.Counter
	divergences   *prometheus.CounterVec
	dropped       *prometheus.CounterVec
	queue         prometheus.Gauge
	rate          prometheus.Gauge
	pending       prometheus.Gauge
	behind        prometheus.Gauge
	followerIndex prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		sampled: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_shadow_sampled_total",
			Help: "Forwarded requests queued for the shadow comparison with etcd v3 (passthrough mode)."}),
		compared: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "v2bridge_shadow_compared_total",
			Help: "Shadow comparisons finished, by op (read: the same GET asked of v3; write: the write matched with the follower's change or the v3 node once the follower applied it)."},
			[]string{"op"}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_shadow_retried_total",
			Help: "Shadow comparisons that agreed only after re-checking (the follower caught up)."}),
		lagging: prometheus.NewCounter(prometheus.CounterOpts{Name: "v2bridge_shadow_lagging_total",
			Help: "Writes the follower had not applied (its applied index below theirs) after the pending bound's age, and reads whose v3 side still showed an older state after the catch-up time: the follower is behind."}),
		divergences: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "v2bridge_shadow_divergences_total",
			Help: "Shadow comparisons where etcd v3 answered differently from the v2 server, by kind."}, []string{"kind"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "v2bridge_shadow_dropped_total",
			Help: "Sampled requests not compared, by reason (busy: shed by the adaptive sampling; queue_full; v3_unavailable; upstream_unavailable; too_large; closing; not_comparable: an error answer to a write, or one without its node; pending_full: too many writes awaiting the follower; superseded: a write the follower never made, its key changed since, as after a follower's re-sync; auth_refused: the v2 server refused the credentials)."},
			[]string{"reason"}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{Name: "v2bridge_shadow_queue_length",
			Help: "Sampled requests waiting for a shadow comparison."}),
		rate: prometheus.NewGauge(prometheus.GaugeOpts{Name: "v2bridge_shadow_sample_rate",
			Help: "The share of forwarded reads sampled now (--shadow-sample-rate, halved while the read queue overflows); every write is compared."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "v2bridge_shadow_pending_writes",
			Help: "Forwarded writes awaiting the follower before they are compared."}),
		behind: prometheus.NewGauge(prometheus.GaugeOpts{Name: "v2bridge_shadow_lagging_writes",
			Help: "Forwarded writes above the follower's applied v2 server index (lagging: not applied yet)."}),
		followerIndex: prometheus.NewGauge(prometheus.GaugeOpts{Name: "v2bridge_shadow_follower_index",
			Help: "The v2 server index up to which the follower (migrate --follow) has applied every event, as its progress record says."}),
	}
	for _, op := range []string{"read", "write"} {
		m.compared.WithLabelValues(op)
	}
	for _, k := range Kinds {
		m.divergences.WithLabelValues(k)
	}
	for _, r := range dropReasons {
		m.dropped.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.sampled, m.compared, m.retried, m.lagging, m.divergences, m.dropped, m.queue, m.rate,
			m.pending, m.behind, m.followerIndex)
	}
	return m
}
