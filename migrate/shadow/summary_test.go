// SPDX-License-Identifier: Apache-2.0

package shadow

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestWriteSummaryGivesTheRates: verify's line per bridge is followed by
// its rates over the last record interval and where the follower is.
func TestWriteSummaryGivesTheRates(t *testing.T) {
	now := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	rec := Record{Name: "b1", Prefix: "/", SampleRate: 0.5, Started: now.Add(-time.Minute), Updated: now.Add(-5 * time.Second),
		Counts:        Counts{Sampled: 5200, Reads: 200, Writes: 5000, Divergences: map[string]uint64{}, Dropped: map[string]uint64{"superseded": 3}},
		PerSecond:     &Rates{Compared: 510, Writes: 500, Diverged: 0, Lagging: 0, Dropped: 0.3, Seconds: 10},
		PendingWrites: 42, LaggingWrites: 7, FollowerIndex: 123456}
	var b bytes.Buffer
	WriteSummary(&b, []Record{rec}, now)
	for _, want := range []string{
		"  b1: 5200 compared (200 reads, 5000 writes), 0 divergences, 0 lagging, 0 caught up on re-check, 3 dropped (3 superseded); prefix /, sample rate 0.5, up 55s, reported 5s ago\n",
		"    per second over the last 10s: 510.0 compared (500.0 writes), 0.0 divergences, 0.0 lagging, 0.3 dropped; 42 writes awaiting the follower (7 above its applied index 123456)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

func TestPerSecond(t *testing.T) {
	a := Counts{Reads: 10, Writes: 100, Lagging: 1, Divergences: map[string]uint64{KindValue: 1}, Dropped: map[string]uint64{"busy": 2}}
	b := Counts{Reads: 30, Writes: 1100, Lagging: 3, Divergences: map[string]uint64{KindValue: 2, KindTTL: 1},
		Dropped: map[string]uint64{"busy": 4, "superseded": 8}}
	got := *perSecond(&a, &b, 2*time.Second)
	want := Rates{Compared: 510, Writes: 500, Diverged: 1, Lagging: 1, Dropped: 5, Seconds: 2}
	if got != want {
		t.Errorf("perSecond %+v, want %+v", got, want)
	}
	if !(&Rates{}).zero() || want.zero() {
		t.Error("zero")
	}
}
