// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
)

// TestWatchHistoryReplaySkimsAndFollowsAWalker: on a bridge started over a
// long v3 history, a stale watch on a key written once, late, is caught up
// by a replay that skims the history before it (etcd sends only what may
// concern the key), and a client walking a hot key one-shot from far back
// gets every event, in order, from one replay that it paces.
func TestWatchHistoryReplaySkimsAndFollowsAWalker(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	v3 := e.cluster.Client(t)
	ctx := ctxT(t, 2*time.Minute)
	const n = 3000
	first, err := v3.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	start := first.Header.Revision + 1
	// n revisions, 16 writers: every other one to /walk.
	var mu sync.Mutex
	var walk []int64
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				key := fmt.Sprintf("/noise/k%d", i%50)
				if i%2 == 0 {
					key = "/walk"
				}
				r, err := v3.Put(ctx, key, fmt.Sprint(i))
				if err != nil {
					t.Error(err)
					return
				}
				if key == "/walk" {
					mu.Lock()
					walk = append(walk, r.Header.Revision)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	quiet := do(t, "PUT", e.url, "/v2/keys/quiet/x", form("value", "late")).json(t)["node"].(map[string]any)
	if _, err := v3.Put(ctx, "/noise/after", "1"); err != nil { // one more revision after it
		t.Fatal(err)
	}

	fresh := v2bridgetest.StartBridge(t, e.cluster.Endpoints(), v2bridgetest.Options{Backend: func(c *v3backend.Config) {
		c.RingSize = 100 // a small window, so the walker paces the replay
		c.ReplaySkimAfter = 200
	}})

	// The stale watch on the quiet key: 200 revisions read in full, then a
	// skim up to /quiet/x.
	r := do(t, "GET", fresh.URL, "/v2/keys/quiet/x", form("wait", "true", "waitIndex", fmt.Sprint(translate.FirstIndex(start))))
	ev := r.json(t)
	if r.status != 200 || ev["node"].(map[string]any)["modifiedIndex"] != quiet["modifiedIndex"] {
		t.Fatalf("stale watch on /quiet/x: %d %s, want its set at %v", r.status, r.body, quiet["modifiedIndex"])
	}
	if skims := metricValue(t, fresh.Registry, "v2bridge_watch_history_feeds_total", "mode", "skim"); skims < 1 {
		t.Errorf("%v skims for a watch on a key written once at the end of the history", skims)
	}
	if read := metricValue(t, fresh.Registry, "v2bridge_watch_history_replay_revisions_total"); read > n/2 {
		t.Errorf("%v revisions decoded to find /quiet/x after %d of others, want it to skim them", read, n)
	}

	// The walk: every /walk event in order, one replay.
	replays := metricValue(t, fresh.Registry, "v2bridge_watch_history_replays_total")
	feeds := metricValue(t, fresh.Registry, "v2bridge_watch_history_feeds_total")
	slices.Sort(walk)
	const steps = 400
	at := translate.FirstIndex(start)
	for i := range steps {
		r := do(t, "GET", fresh.URL, "/v2/keys/walk", form("wait", "true", "waitIndex", fmt.Sprint(at)))
		if r.status != 200 {
			t.Fatalf("walk step %d at %d: %d %s", i, at, r.status, r.body)
		}
		mi := uint64(r.json(t)["node"].(map[string]any)["modifiedIndex"].(float64))
		if want := translate.Index(walk[i]); mi != want {
			t.Fatalf("walk step %d: event at %d, want %d (lost or repeated events)", i, mi, want)
		}
		at = mi + 1
	}
	t.Logf("walk of %d events: %v history feeds; %v revisions decoded and %v skimmed in all", steps,
		metricValue(t, fresh.Registry, "v2bridge_watch_history_feeds_total")-feeds,
		metricValue(t, fresh.Registry, "v2bridge_watch_history_replay_revisions_total"),
		metricValue(t, fresh.Registry, "v2bridge_watch_history_skimmed_revisions_total"))
	if got := metricValue(t, fresh.Registry, "v2bridge_watch_history_replays_total") - replays; got != 1 {
		t.Errorf("%v replays for one walk, want 1", got)
	}
	// A window of 100 events, re-read as the walker goes through it: a
	// feed every few dozen steps.
	if got := metricValue(t, fresh.Registry, "v2bridge_watch_history_feeds_total") - feeds; got < 2 || got > steps/10 {
		t.Errorf("%v history feeds for a walk of %d events with a window of 100, want between 2 and %d", got, steps, steps/10)
	}
}
