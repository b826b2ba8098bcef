// SPDX-License-Identifier: Apache-2.0

package shadow

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
)

// Record is what one bridge publishes of its shadow comparison.
type Record struct {
	Name          string    `json:"name"`
	Host          string    `json:"host,omitempty"`
	AdvertiseURLs []string  `json:"advertiseURLs,omitempty"`
	Prefix        string    `json:"prefix"`
	SampleRate    float64   `json:"sampleRate"`
	Started       time.Time `json:"started"`
	Updated       time.Time `json:"updated"`
	Counts        Counts    `json:"counts"`
	// PerSecond are the counters' rates between the last two records.
	PerSecond *Rates `json:"perSecond,omitempty"`
	// When it was written: the writes awaiting the follower, those of them
	// above the follower's applied index (lagging), and that index.
	PendingWrites int64  `json:"pendingWrites"`
	LaggingWrites int64  `json:"laggingWrites"`
	FollowerIndex uint64 `json:"followerIndex,omitempty"`
	// Recent are the last divergences and lagging comparisons, oldest
	// first.
	Recent []Divergence `json:"recent,omitempty"`
	// Key is the v3 key the record was read from.
	Key string `json:"-"`
}

// record is the shadow's record now.
func (s *Shadow) record() *Record {
	return &Record{Name: s.cfg.Name, Host: s.host, AdvertiseURLs: s.cfg.AdvertiseURLs, Prefix: s.cfg.Prefix,
		SampleRate: s.cfg.SampleRate, Started: s.started.UTC(), Updated: time.Now().UTC(),
		Counts: s.counts.snapshot(), Recent: s.counts.recentDivergences(),
		PendingWrites: s.pendingNow.Load(), LaggingWrites: s.behindNow.Load(), FollowerIndex: s.appliedNow.Load()}
}

// Rates are counters per second.
type Rates struct {
	Compared float64 `json:"compared"`
	Writes   float64 `json:"comparedWrites"`
	Diverged float64 `json:"divergences"`
	Lagging  float64 `json:"lagging"`
	Dropped  float64 `json:"dropped"`
	Seconds  float64 `json:"seconds"` // the interval they are measured over
}

func perSecond(a, b *Counts, d time.Duration) *Rates {
	sec := d.Seconds()
	if sec <= 0 {
		return &Rates{}
	}
	f := func(x, y uint64) float64 { return float64(y-x) / sec }
	return &Rates{Compared: f(a.Compared(), b.Compared()), Writes: f(a.Writes, b.Writes),
		Diverged: f(a.Diverged(), b.Diverged()), Lagging: f(a.Lagging, b.Lagging),
		Dropped: f(a.DroppedTotal(), b.DroppedTotal()), Seconds: sec}
}

func (r *Rates) zero() bool {
	return r == nil || r.Compared == 0 && r.Diverged == 0 && r.Lagging == 0 && r.Dropped == 0
}

// Recorder keeps a bridge's record where `v2bridge verify` finds it.
type Recorder interface {
	// Publish writes the record.
	Publish(ctx context.Context, r *Record) error
	// Refresh keeps the last record published alive without rewriting it.
	Refresh(ctx context.Context) error
}

// V3Recorder keeps a bridge's record in etcd v3, under the meta prefix
// (translate.Layout.ShadowPrefix), on a lease: the record of a bridge that
// stopped goes away a TTL after its last refresh.
type V3Recorder struct {
	cli *clientv3.Client
	key string
	ttl int64

	mu    sync.Mutex // guards lease
	lease clientv3.LeaseID
}

// DefaultRecordTTL is how long a record outlives its bridge's last refresh.
const DefaultRecordTTL = 5 * time.Minute

// NewV3Recorder returns a recorder for one bridge process: its key is the
// bridge's name and a random suffix, so bridges sharing a name, and a
// restarted bridge, keep records of their own.
func NewV3Recorder(cli *clientv3.Client, l translate.Layout, name string, ttl time.Duration) *V3Recorder {
	if ttl <= 0 {
		ttl = DefaultRecordTTL
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	safe := strings.Map(func(r rune) rune {
		if r == '/' || r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, name)
	return &V3Recorder{cli: cli, key: l.ShadowPrefix() + safe + "." + hex.EncodeToString(id[:]),
		ttl: int64(max(ttl/time.Second, 2))}
}

// Key is the v3 key of the record.
func (v *V3Recorder) Key() string { return v.key }

// Publish writes r as the bridge's record, on the recorder's lease (granted
// anew if it expired).
func (v *V3Recorder) Publish(ctx context.Context, r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding the shadow record: %w", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if v.lease == 0 {
			g, err := v.cli.Grant(ctx, v.ttl)
			if err != nil {
				return fmt.Errorf("granting the shadow record's lease: %w", err)
			}
			v.lease = g.ID
		}
		_, err := v.cli.Put(ctx, v.key, string(b), clientv3.WithLease(v.lease))
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			v.lease = 0 // expired while the cluster was unreachable
			continue
		}
		if err != nil {
			return fmt.Errorf("writing the shadow record %s: %w", v.key, err)
		}
		return nil
	}
}

// Refresh keeps the published record's lease alive for another TTL.
func (v *V3Recorder) Refresh(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.lease == 0 {
		return errors.New("no shadow record published yet")
	}
	if _, err := v.cli.KeepAliveOnce(ctx, v.lease); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			v.lease = 0
		}
		return fmt.Errorf("refreshing the shadow record's lease: %w", err)
	}
	return nil
}

// ReadRecords reads every bridge's record from etcd v3, sorted by name.
// Records that do not decode are skipped.
func ReadRecords(ctx context.Context, kv clientv3.KV, l translate.Layout) ([]Record, error) {
	resp, err := kv.Get(ctx, l.ShadowPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("reading the shadow records under %s: %w", l.ShadowPrefix(), err)
	}
	var out []Record
	for _, kv := range resp.Kvs {
		var r Record
		if json.Unmarshal(kv.Value, &r) != nil {
			continue
		}
		r.Key = string(kv.Key)
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Key < out[j].Key
	})
	return out, nil
}

// Total adds up the counters of records.
func Total(recs []Record) Counts {
	t := Counts{Divergences: map[string]uint64{}, Dropped: map[string]uint64{}}
	for _, r := range recs {
		t.Add(r.Counts)
	}
	return t
}

// WriteSummary prints records as `v2bridge verify` shows them: a line per
// bridge, the total, and the most recent divergences.
func WriteSummary(w io.Writer, recs []Record, now time.Time) {
	if len(recs) == 0 {
		_, _ = fmt.Fprintln(w, "shadow       no bridge reports a shadow comparison (bridges in passthrough mode with --endpoints and --shadow-sample-rate > 0 do)")
		return
	}
	_, _ = fmt.Fprintf(w, "shadow       %d bridge(s) in passthrough mode compare their answers with etcd v3:\n", len(recs))
	for _, r := range recs {
		who := r.Name
		if r.Host != "" {
			who += " on " + r.Host
		}
		if len(r.AdvertiseURLs) > 0 {
			who += " (" + strings.Join(r.AdvertiseURLs, ",") + ")"
		}
		_, _ = fmt.Fprintf(w, "  %s: %s; prefix %s, sample rate %g, up %s, reported %s ago\n", who, countsLine(&r.Counts),
			r.Prefix, r.SampleRate, round(r.Updated.Sub(r.Started)), round(now.Sub(r.Updated)))
		if p := r.PerSecond; p != nil && p.Seconds > 0 {
			_, _ = fmt.Fprintf(w, "    per second over the last %s: %.1f compared (%.1f writes), %.1f divergences, %.1f lagging, %.1f dropped; "+
				"%d writes awaiting the follower (%d above its applied index %d)\n", round(time.Duration(p.Seconds*float64(time.Second))),
				p.Compared, p.Writes, p.Diverged, p.Lagging, p.Dropped, r.PendingWrites, r.LaggingWrites, r.FollowerIndex)
		}
	}
	t := Total(recs)
	_, _ = fmt.Fprintf(w, "  total: %s\n", countsLine(&t))
	var recent []Divergence
	for _, r := range recs {
		for _, d := range r.Recent {
			d.Method = r.Name + " " + d.Method
			recent = append(recent, d)
		}
	}
	sort.SliceStable(recent, func(i, j int) bool { return recent[i].At.After(recent[j].At) })
	for i, d := range recent {
		if i == recentMax {
			break
		}
		_, _ = fmt.Fprintf(w, "  recent: %s: %s at %s (%s, %s ago)\n", d.Key, d.Kind, d.Where, d.Method, round(now.Sub(d.At)))
	}
}

// countsLine is one bridge's counters in a line.
func countsLine(c *Counts) string {
	s := fmt.Sprintf("%d compared (%d reads, %d writes), %d divergences", c.Compared(), c.Reads, c.Writes, c.Diverged())
	if c.Diverged() > 0 {
		s += " (" + byKey(c.Divergences, Kinds) + ")"
	}
	s += fmt.Sprintf(", %d lagging, %d caught up on re-check, %d dropped", c.Lagging, c.Retried, c.DroppedTotal())
	if c.DroppedTotal() > 0 {
		s += " (" + byKey(c.Dropped, dropReasons[:]) + ")"
	}
	return s
}

// byKey lists the non-zero counts of m, in the order of keys, then any
// other key in name order.
func byKey(m map[string]uint64, order []string) string {
	var parts []string
	for _, k := range order {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
		}
	}
	var rest []string
	for k, n := range m {
		if n > 0 && !slices.Contains(order, k) {
			rest = append(rest, fmt.Sprintf("%d %s", n, k))
		}
	}
	sort.Strings(rest)
	return strings.Join(append(parts, rest...), ", ")
}

func round(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d.Round(time.Second)
}
