// SPDX-License-Identifier: Apache-2.0

package shadow

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeUpdates hands the updates a test sends on ch to the shadow.
type fakeUpdates struct{ ch chan Update }

func (f *fakeUpdates) Run(ctx context.Context, out chan<- Update) error {
	for {
		select {
		case u := <-f.ch:
			select {
			case out <- u:
			case <-ctx.Done():
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// writeEnv is an env whose shadow has a fake feed.
func writeEnv(t *testing.T, adjust func(*Config)) (*env, *fakeUpdates) {
	t.Helper()
	f := &fakeUpdates{ch: make(chan Update)}
	e := newEnv(t, func(c *Config) {
		c.Updates = f
		if adjust != nil {
			adjust(c)
		}
	})
	return e, f
}

// everything is an applied index past every write of a test.
const everything = 1 << 50

func (f *fakeUpdates) send(t *testing.T, u Update) {
	t.Helper()
	select {
	case f.ch <- u:
	case <-time.After(10 * time.Second):
		t.Fatal("the shadow does not take the feed's update")
	}
}

func file(key, value string, ttl bool) Change {
	return Change{Key: key, Sum: sha256.Sum256([]byte(value)), TTL: ttl}
}

// want is the counts of a test: only what it names is non-zero.
func want(c Counts) Counts {
	if c.Divergences == nil {
		c.Divergences = map[string]uint64{}
	}
	if c.Dropped == nil {
		c.Dropped = map[string]uint64{}
	}
	return c
}

// waitCounts waits until the shadow's counts are w.
func (e *env) waitCounts(t *testing.T, w Counts) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := e.sh.Stats()
		if reflect.DeepEqual(got, w) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts %+v, want %+v", got, w)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recent checks the recent divergences recorded, but for their time.
func (e *env) recent(t *testing.T, w ...Divergence) {
	t.Helper()
	got := e.sh.counts.recentDivergences()
	for i := range got {
		if got[i].At.IsZero() || time.Since(got[i].At) > time.Minute {
			t.Errorf("recent[%d] at %v", i, got[i].At)
		}
		got[i].At = time.Time{}
	}
	if len(got) != len(w) || len(w) > 0 && !reflect.DeepEqual(got, w) {
		t.Errorf("recent divergences %+v, want %+v", got, w)
	}
}

func (e *env) write(t *testing.T, method, target string, form url.Values) {
	t.Helper()
	if code, body := do(t, e.url, method, target, form); code >= 300 {
		t.Fatalf("%s %s: %d %s", method, target, code, body)
	}
}

func TestEveryWriteIsTaken(t *testing.T) {
	sh, err := New(Config{Store: newFake(1), SampleRate: 0.01, Prefix: "/coreos.com/network", Updates: &fakeUpdates{}})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	for _, m := range []string{"PUT", "POST", "DELETE"} {
		for range 100 {
			if !sh.Sample(httptest.NewRequest(m, "/v2/keys/coreos.com/network/subnets/x", nil)) {
				t.Fatalf("a %s not taken", m)
			}
		}
		if sh.Sample(httptest.NewRequest(m, "/v2/keys/coreos.com/networking", nil)) {
			t.Errorf("a %s outside the prefix taken", m)
		}
	}
}

func TestAWriteMatchesTheFollowersChange(t *testing.T) {
	for _, c := range []struct {
		name    string
		first   bool // the change comes before the write reaches the shadow
		method  string
		form    url.Values
		change  Change
		applied bool // the follower's record then passes the write
	}{
		{"a set", false, "PUT", url.Values{"value": {"2"}}, file("/w", "2", false), false},
		{"a set the follower applied before its answer came", true, "PUT", url.Values{"value": {"2"}},
			file("/w", "2", false), false},
		{"a directory", false, "PUT", url.Values{"dir": {"true"}}, Change{Key: "/d", Dir: true}, false},
		{"a delete", false, "DELETE", nil, Change{Key: "/w", Gone: true}, false},
		// A TTL is checked on the v3 node once the follower is past it.
		{"a TTL", false, "PUT", url.Values{"value": {"2"}, "ttl": {"100"}}, file("/w", "2", true), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, f := writeEnv(t, nil)
			e.both("/w", "1", false)
			target := "/v2/keys" + c.change.Key
			if c.first {
				f.send(t, Update{Changes: []Change{c.change}})
			}
			e.write(t, c.method, target, c.form)
			if !c.first {
				f.send(t, Update{Changes: []Change{c.change}})
			}
			if c.applied {
				// What the follower made of it on the v3 side.
				e.v3.put("/w", "2", false, 99*time.Second)
				f.send(t, Update{HasApplied: true, Applied: everything})
			}
			e.waitCounts(t, want(Counts{Sampled: 1, Writes: 1}))
			e.recent(t)
		})
	}
}

// TestAKeyRewrittenFastIsMatchedEveryTime: a key rewritten faster than the
// follower reports its progress is compared write by write, none lagging.
func TestAKeyRewrittenFastIsMatchedEveryTime(t *testing.T) {
	e, f := writeEnv(t, nil)
	for i := range 20 {
		v := "v" + string(rune('a'+i))
		e.write(t, "PUT", "/v2/keys/hot", url.Values{"value": {v}})
		f.send(t, Update{Changes: []Change{file("/hot", v, false)}})
	}
	e.v3.put("/hot", "something later", false, 0)
	f.send(t, Update{HasApplied: true, Applied: everything})
	e.waitCounts(t, want(Counts{Sampled: 20, Writes: 20}))
	e.recent(t)
}

// TestAWriteThatChangedNothingIsJudgedByTheV3Node: the follower writes
// nothing for a write that left the node as it was; once it is past the
// write, the v3 node decides.
func TestAWriteThatChangedNothingIsJudgedByTheV3Node(t *testing.T) {
	e, f := writeEnv(t, nil)
	e.both("/w", "1", false)
	e.write(t, "PUT", "/v2/keys/w", url.Values{"value": {"1"}})
	waitGauge(t, e, "v2bridge_shadow_pending_writes", 1)
	f.send(t, Update{HasApplied: true, Applied: everything})
	e.waitCounts(t, want(Counts{Sampled: 1, Writes: 1}))
	e.recent(t)
}

func TestDivergentWritesAreCountedByKind(t *testing.T) {
	for _, c := range []struct {
		name   string
		method string
		key    string
		form   url.Values
		v3     func(v3 *fakeStore) // what the v3 side holds once the follower is past the write
		kind   string
		where  string
	}{
		{"another value", "PUT", "/w", url.Values{"value": {"2"}}, func(v3 *fakeStore) { v3.put("/w", "third", false, 0) },
			KindValue, "node.value"},
		{"no node", "PUT", "/n", url.Values{"value": {"2"}}, func(*fakeStore) {}, KindMissing, "node"},
		{"a node left after a delete", "DELETE", "/w", nil, func(*fakeStore) {}, KindExtra, "node"},
		{"a file for a directory", "PUT", "/d", url.Values{"dir": {"true"}}, func(v3 *fakeStore) { v3.put("/d", "", false, 0) },
			KindDir, "node.dir"},
		{"no TTL", "PUT", "/w", url.Values{"value": {"2"}, "ttl": {"100"}}, func(v3 *fakeStore) { v3.put("/w", "2", false, 0) },
			KindTTL, "node.ttl"},
		{"a TTL too far off", "PUT", "/w", url.Values{"value": {"2"}, "ttl": {"100"}},
			func(v3 *fakeStore) { v3.put("/w", "2", false, 50*time.Second) }, KindTTL, "node.expiration"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, f := writeEnv(t, nil)
			e.both("/w", "1", false)
			e.write(t, c.method, "/v2/keys"+c.key, c.form)
			waitGauge(t, e, "v2bridge_shadow_lagging_writes", 1)
			c.v3(e.v3)
			f.send(t, Update{HasApplied: true, Applied: everything})
			e.waitCounts(t, want(Counts{Sampled: 1, Writes: 1, Divergences: map[string]uint64{c.kind: 1}}))
			e.recent(t, Divergence{Key: c.key, Kind: c.kind, Method: c.method, Where: c.where})
			if n := testutil.ToFloat64(e.sh.m.divergences.WithLabelValues(c.kind)); n != 1 {
				t.Errorf("divergences_total{kind=%q} %v", c.kind, n)
			}
		})
	}
}

// TestAWriteIsLaggingWhileTheFollowerIsBelowIt: the follower's applied
// index, not time, says lagging; a write it never reaches ages out as
// lagging.
func TestAWriteIsLaggingWhileTheFollowerIsBelowIt(t *testing.T) {
	e, f := writeEnv(t, func(c *Config) { c.MaxAge = time.Second })
	e.both("/w", "1", false)
	e.v3.put("/w", "third", false, 0) // would diverge, were the follower past the write
	_, body := do(t, e.url, "PUT", "/v2/keys/w", url.Values{"value": {"2"}})
	var ans struct {
		Node struct{ ModifiedIndex uint64 }
	}
	if err := json.Unmarshal([]byte(body), &ans); err != nil || ans.Node.ModifiedIndex == 0 {
		t.Fatalf("answer %s: %v", body, err)
	}
	idx := ans.Node.ModifiedIndex
	f.send(t, Update{HasApplied: true, Applied: idx - 1})
	waitGauge(t, e, "v2bridge_shadow_follower_index", float64(idx-1))
	waitGauge(t, e, "v2bridge_shadow_lagging_writes", 1)
	waitGauge(t, e, "v2bridge_shadow_pending_writes", 1)
	e.waitCounts(t, want(Counts{Sampled: 1, Lagging: 1}))
	e.recent(t, Divergence{Key: "/w", Kind: lagging, Method: "PUT", Where: "index"})
	waitGauge(t, e, "v2bridge_shadow_pending_writes", 0)
	waitGauge(t, e, "v2bridge_shadow_lagging_writes", 0)
}

// TestTooManyPendingWritesAreDropped: the writes awaiting the follower are
// bounded; more are dropped, counted.
func TestTooManyPendingWritesAreDropped(t *testing.T) {
	e, _ := writeEnv(t, func(c *Config) { c.MaxPending = 2; c.MaxAge = time.Second })
	for _, k := range []string{"a", "b", "c"} {
		e.write(t, "PUT", "/v2/keys/"+k, url.Values{"value": {"1"}})
	}
	e.waitCounts(t, want(Counts{Sampled: 3, Lagging: 2, Dropped: map[string]uint64{"pending_full": 1}}))
	e.recent(t, Divergence{Key: "/a", Kind: lagging, Method: "PUT", Where: "index"},
		Divergence{Key: "/b", Kind: lagging, Method: "PUT", Where: "index"})
}

// TestAWriteNotComparableIsDropped: an error answer, or one without its
// node, has nothing to compare.
func TestAWriteNotComparableIsDropped(t *testing.T) {
	e, _ := writeEnv(t, nil)
	do(t, e.url, "DELETE", "/v2/keys/nothing", nil)
	e.waitCounts(t, want(Counts{Sampled: 1, Dropped: map[string]uint64{"not_comparable": 1}}))
}

// TestAV3SideThatCannotBeReadDropsTheWrite: a write the follower is past
// but whose v3 node cannot be read is dropped when it ages out, never
// counted as a divergence.
func TestAV3SideThatCannotBeReadDropsTheWrite(t *testing.T) {
	e, f := writeEnv(t, func(c *Config) { c.MaxAge = time.Second; c.Timeout = 50 * time.Millisecond })
	e.both("/w", "1", false)
	e.v3.mu.Lock()
	e.v3.unavailable = true
	e.v3.mu.Unlock()
	e.write(t, "PUT", "/v2/keys/w", url.Values{"value": {"1"}})
	f.send(t, Update{HasApplied: true, Applied: everything})
	e.waitCounts(t, want(Counts{Sampled: 1, Dropped: map[string]uint64{"v3_unavailable": 1}}))
	e.recent(t)
}

func waitGauge(t *testing.T, e *env, name string, v float64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var got float64
		switch name {
		case "v2bridge_shadow_pending_writes":
			got = testutil.ToFloat64(e.sh.m.pending)
		case "v2bridge_shadow_lagging_writes":
			got = testutil.ToFloat64(e.sh.m.behind)
		case "v2bridge_shadow_follower_index":
			got = testutil.ToFloat64(e.sh.m.followerIndex)
		default:
			t.Fatalf("no gauge %s", name)
		}
		if got == v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", name, got, v)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAWriteTheFollowerSkippedIsSuperseded: a follower that re-syncs (a
// full copy after it fell out of the v2 server's history) never makes the
// writes in between; their keys hold later values: dropped, not divergent.
func TestAWriteTheFollowerSkippedIsSuperseded(t *testing.T) {
	e, f := writeEnv(t, nil)
	e.both("/w", "1", false)
	e.write(t, "PUT", "/v2/keys/w", url.Values{"value": {"2"}})
	e.write(t, "PUT", "/v2/keys/w", url.Values{"value": {"3"}})
	waitGauge(t, e, "v2bridge_shadow_pending_writes", 2)
	e.v3.put("/w", "3", false, 0)
	f.send(t, Update{Changes: []Change{file("/w", "3", false)}, HasApplied: true, Applied: everything})
	e.waitCounts(t, want(Counts{Sampled: 2, Writes: 1, Dropped: map[string]uint64{"superseded": 1}}))
	e.recent(t)
}

// TestAWrongValueTheFollowerWroteIsDivergent: a change of the key that is
// no write's node does not excuse the write: the v3 node decides.
func TestAWrongValueTheFollowerWroteIsDivergent(t *testing.T) {
	e, f := writeEnv(t, nil)
	e.both("/w", "1", false)
	e.write(t, "PUT", "/v2/keys/w", url.Values{"value": {"2"}})
	waitGauge(t, e, "v2bridge_shadow_pending_writes", 1)
	e.v3.put("/w", "garbled", false, 0)
	f.send(t, Update{Changes: []Change{file("/w", "garbled", false)}, HasApplied: true, Applied: everything})
	e.waitCounts(t, want(Counts{Sampled: 1, Writes: 1, Divergences: map[string]uint64{KindValue: 1}}))
	e.recent(t, Divergence{Key: "/w", Kind: KindValue, Method: "PUT", Where: "node.value"})
}

// TestAWriteTheFollowerMadeBeforeItsAnswerCameIsMatched: the v2 server's
// watchers, the follower among them, can have a write before its answer
// reaches the bridge, and the key may have moved on by then.
func TestAWriteTheFollowerMadeBeforeItsAnswerCameIsMatched(t *testing.T) {
	e, f := writeEnv(t, nil)
	e.both("/w", "1", false)
	f.send(t, Update{Changes: []Change{file("/w", "2", false), file("/w", "later", false)}})
	e.write(t, "PUT", "/v2/keys/w", url.Values{"value": {"2"}})
	e.v3.put("/w", "later", false, 0)
	f.send(t, Update{HasApplied: true, Applied: everything})
	e.waitCounts(t, want(Counts{Sampled: 1, Writes: 1}))
	e.recent(t)
}
