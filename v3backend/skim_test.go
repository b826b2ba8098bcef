// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v3backend/hub"
)

// The range a skim watches holds every key whose change may decode into an
// event for a watcher on one of its keys, leaves out the data keys sorting
// before them, lease records, sequences and TTL records, and lies within
// the bridge's watch range.
func TestSkimRangeHoldsWhatMayConcernTheKeys(t *testing.T) {
	for _, dp := range []string{"", "/x"} {
		l, err := translate.NewLayout(dp, "_v2bridge/")
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := skimRange(l, []string{"/m/n", "/p"})
		in := func(k string) bool { return k >= lo && k < hi }
		// Within WatchRange: the read permission the bridge's etcd user
		// needs (docs/operations.md) covers skims too.
		if wlo, whi := l.WatchRange(); lo < wlo || hi > whi {
			t.Errorf("data prefix %q: skim range [%q, %q) is not within the watch range [%q, %q)", dp, lo, hi, wlo, whi)
		}
		for _, k := range []string{l.DataKey("/m/n"), l.DataKey("/m/n/o/p"), l.DataKey("/p"), l.DataKey("/p/q"),
			l.MarkerKey("/m"), l.MarkerKey("/m/n/o"), l.MarkerKey("/a"), l.MarkerKey("/z"), l.JournalKey(),
			l.JournalSlotKey(3)} {
			if !in(k) {
				t.Errorf("data prefix %q: %q is outside the skim range [%q, %q)", dp, k, lo, hi)
			}
		}
		for _, k := range []string{l.DataKey("/a"), l.DataKey("/m/a"), l.LeaseKey(0x1234), l.SeqKey("/m/n"),
			l.TTLDirKey("/m")} {
			if in(k) {
				t.Errorf("data prefix %q: %q is inside the skim range [%q, %q)", dp, k, lo, hi)
			}
		}
	}
}

// A skim of real v3 history flags every revision whose full decoding has an
// event for a watcher on its key, whatever wrote it: a bridge's write below
// the key, a directory delete reaching it from above (recorded by its
// marker, or, for a directory without one, only by the journal), a plain
// prefix of it deleted (v2's history rule), a v3 client's put.
func TestSkimFlagsEveryRevisionAFullReadDecodesForItsKeys(t *testing.T) {
	ep := startMember(t, nil)
	b := newBackend(t, ep, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := b.client()
	if err != nil {
		t.Fatal(err)
	}
	write := func(method, p string, form url.Values) {
		t.Helper()
		if _, _, err := b.Write(ctx, request(t, method, p, form)); err != nil {
			t.Fatalf("%s %s: %v", method, p, err)
		}
	}
	v3put := func(k string) {
		t.Helper()
		if _, err := s.cli.Put(ctx, b.layout.DataKey(k), "v"); err != nil {
			t.Fatal(err)
		}
	}
	noise := func(n int) {
		for i := range n {
			write("PUT", fmt.Sprintf("/z/n%d", i%5), url.Values{"value": {"x"}})
			v3put(fmt.Sprintf("/y/n%d", i%5))
		}
	}
	first, err := s.cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	start := first.Header.Revision + 1
	noise(5)
	write("PUT", "/d/a", url.Values{"value": {"1"}}) // marker /d with it
	noise(5)
	v3put("/m/a") // /m has no marker
	noise(5)
	write("DELETE", "/m", url.Values{"dir": {"true"}, "recursive": {"true"}}) // only the journal names /m
	noise(5)
	write("PUT", "/e/f", url.Values{"dir": {"true"}})
	noise(5)
	v3put("/d/b")
	noise(5)
	write("DELETE", "/d", url.Values{"dir": {"true"}, "recursive": {"true"}})
	noise(5)
	last, err := s.cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	end := last.Header.Revision

	// The revisions a full read decodes into an event for each key, by
	// v2's history rule (recursive: the widest).
	src := hubSource{b}
	full := readHistory(ctx, t, src, start, end, nil)
	keys := []string{"/d/a", "/d/zz", "/db", "/m/zz", "/mm", "/e", "/q"}
	for _, key := range keys {
		var want []int64
		for _, rb := range full {
			for _, ev := range rb.Events {
				if translate.MatchesHistory(key, true, ev) {
					want = append(want, rb.Rev)
					break
				}
			}
		}
		if (len(want) == 0) != (key == "/q") {
			t.Fatalf("watch on %s: a full read decodes events for it at %v", key, want)
		}
		got := skimAll(ctx, t, src, start, end, []string{key})
		for _, r := range want {
			if !slices.Contains(got, r) {
				t.Errorf("watch on %s: revision %d decodes into an event for it, the skim flagged only %v", key, r, got)
			}
		}
		// The noise, outside every key's reach, is never flagged.
		if len(got) > len(want)+2 {
			t.Errorf("watch on %s: the skim flagged %v, want about %v", key, got, want)
		}
		if key == "/q" && len(got) != 0 {
			t.Errorf("watch on /q: the skim flagged %v, want nothing", got)
		}
	}
}

// readHistory reads revisions start..end with a history feed (skimming for
// keys if not nil) and returns its batches.
func readHistory(ctx context.Context, t *testing.T, src hubSource, start, end int64, keys []string) []hub.Batch {
	t.Helper()
	f, err := src.History(ctx, start, keys)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []hub.Batch
	for {
		b, err := f.Next(ctx)
		if err != nil {
			t.Fatalf("history from %d: %v", start, err)
		}
		if b.Created {
			continue
		}
		out = append(out, b)
		if b.Rev >= end || b.Unread {
			return out
		}
	}
}

// skimAll skims revisions start..end for keys, re-opening past each
// revision it flags, as a replay reading that revision in full would.
func skimAll(ctx context.Context, t *testing.T, src hubSource, start, end int64, keys []string) []int64 {
	t.Helper()
	var flagged []int64
	for from := start; from <= end; {
		bs := readHistory(ctx, t, src, from, end, keys)
		lb := bs[len(bs)-1]
		if !lb.Unread {
			return flagged
		}
		flagged = append(flagged, lb.Rev)
		from = lb.Rev + 1
	}
	return flagged
}
