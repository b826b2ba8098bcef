// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseServed(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{"/", []string{"/"}, ""},
		{"/coreos.com/network", []string{"/coreos.com/network"}, ""},
		{"/service/pg,/coreos.com/network", []string{"/coreos.com/network", "/service/pg"}, ""},
		{"", nil, `an empty prefix in ""`},
		{"/a,,/b", nil, `an empty prefix in "/a,,/b"`},
		{"coreos.com/network", nil, `prefix "coreos.com/network" is relative: want an absolute v2 path such as /coreos.com/network`},
		{"/coreos.com/network/", nil, `prefix "/coreos.com/network/" is not clean: want "/coreos.com/network"`},
		{"/a/../b", nil, `prefix "/a/../b" is not clean: want "/b"`},
		{"/a//b", nil, `prefix "/a//b" is not clean: want "/a/b"`},
		{"/a,/a/b", nil, `prefixes "/a" and "/a/b" overlap`},
		{"/a/b,/a", nil, `prefixes "/a/b" and "/a" overlap`},
		{"/a,/", nil, `prefixes "/a" and "/" overlap`},
		{"/a,/a", nil, `prefixes "/a" and "/a" overlap`},
		{"/a\x01", nil, `prefix "/a\x01": key contains a control character`},
		{"/a/b,/a-b,/a.b/c,/a", nil, `prefixes "/a/b" and "/a" overlap`},
		{"/a-b,/a,/c,/a-b/x/y", nil, `prefixes "/a-b" and "/a-b/x/y" overlap`},
		{"/a-b,/a,/a/b-c,/a.b", nil, `prefixes "/a" and "/a/b-c" overlap`},
		{"/b,/a-b,/a.b,/a", []string{"/a", "/a-b", "/a.b", "/b"}, ""},
	} {
		got, err := ParseServed(c.in)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != c.err || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseServed(%q) = %q, %q; want %q, %q", c.in, got, msg, c.want, c.err)
		}
	}
}

// BenchmarkParseServed50000 parses a list of 50,000 prefixes, checking
// every pair for overlap.
func BenchmarkParseServed50000(b *testing.B) {
	var ps []string
	for i := range 50000 {
		ps = append(ps, fmt.Sprintf("/tenant-%d/coreos.com/network", i))
	}
	list := strings.Join(ps, ",")
	for b.Loop() {
		if _, err := ParseServed(list); err != nil {
			b.Fatal(err)
		}
	}
}

var flannelLayout = Layout{DataPrefix: "", MetaPrefix: "_m/"}.WithServed([]string{"/coreos.com/network"})

func TestServedLayoutWatchesOnlyItsSubtree(t *testing.T) {
	l := flannelLayout
	want := []KeyRange{
		{"/coreos.com", "/coreos.com\x00"},
		{"/coreos.com/network", "/coreos.com/network\x00"},
		{"/coreos.com/network/", "/coreos.com/network0"},
		{"_m/J/coreos.com/network", "_m/J/coreos.com/network\x00"},
		{"_m/J/coreos.com/network/", "_m/J/coreos.com/network0"},
		{"_m/d/coreos.com", "_m/d/coreos.com\x00"},
		{"_m/d/coreos.com/network", "_m/d/coreos.com/network\x00"},
		{"_m/d/coreos.com/network/", "_m/d/coreos.com/network0"},
		{"_m/s/coreos.com/network", "_m/s/coreos.com/network\x00"},
		{"_m/s/coreos.com/network/", "_m/s/coreos.com/network0"},
		{"_m/t/coreos.com/network", "_m/t/coreos.com/network\x00"},
		{"_m/t/coreos.com/network/", "_m/t/coreos.com/network0"},
	}
	if got := l.WatchRanges(); !reflect.DeepEqual(got, want) {
		t.Errorf("WatchRanges = %q\nwant %q", got, want)
	}
	if got, want := l.TTLDirRanges(), []KeyRange{{"_m/t/coreos.com/network", "_m/t/coreos.com/network\x00"},
		{"_m/t/coreos.com/network/", "_m/t/coreos.com/network0"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("TTLDirRanges = %q, want %q", got, want)
	}
	whole := Layout{DataPrefix: "", MetaPrefix: "_m/"}.WithServed([]string{"/"})
	if whole.Scoped() || len(whole.WatchRanges()) != 1 {
		t.Errorf("serving / is scoped (%v) or watches %q", whole.Scoped(), whole.WatchRanges())
	}
	for key, want := range map[string]bool{
		"/coreos.com/network/config":           true,
		"/coreos.com/network/subnets/10.5.1.0": true,
		"/coreos.com":                          true, // a file above: a write below reads it
		"/coreos.com/network-backup/x":         false,
		"/coreos.com/other":                    false,
		"/registry/secrets/kube-system/token":  false,
		"_m/d/coreos.com/network/subnets":      true,
		"_m/d/coreos.com":                      true,
		"_m/d/":                                false,
		"_m/d/registry":                        false,
		"_m/s/coreos.com/network/subnets":      true,
		"_m/s/coreos.com":                      false,
		"_m/l/1a":                              false, // other tenants' leases: read, not watched
		"_m/J/coreos.com/network/config":       false, // journal records: watched, not mirrored
		"_m/t/coreos.com/network/d":            true,
		"_m/t/coreos.com":                      false,
		"_m/j":                                 false,
	} {
		if got := l.Mirrored(key); got != want {
			t.Errorf("Mirrored(%q) = %v, want %v", key, got, want)
		}
	}
	for r, want := range map[Read]bool{
		{Key: "/coreos.com/network/config"}:                        true,
		{Key: "/coreos.com"}:                                       true,
		{Key: "/registry/x"}:                                       false,
		{Key: "/coreos.com/network/", End: "/coreos.com/network0"}: true,
		{Key: "_m/d/coreos.com/network/subnets/", End: "_m/d/coreos.com/network/subnets0"}: true,
		{Key: "/coreos.com/", End: "/coreos.com0"}:                                         false,
		{Key: "/", End: "0"}: false,
		{Key: "_m/t/coreos.com/network/d/", End: "_m/t/coreos.com/network/d0"}: true,
		{Key: "_m/t/coreos.com/", End: "_m/t/coreos.com0"}:                     false,
	} {
		if got := l.MirrorHolds(r); got != want {
			t.Errorf("MirrorHolds(%q) = %v, want %v", r, got, want)
		}
	}
}

// TestServedPrefixesSharingANameWatchEachKeyOnce: whatever the served
// prefixes, one whose name starts with another's included, no key is in two
// watched ranges (it would reach the watchers twice), and each key of a
// served subtree is watched.
func TestServedPrefixesSharingANameWatchEachKeyOnce(t *testing.T) {
	for _, served := range [][]string{
		{"/coreos.com/network", "/coreos.com/network-v6"},
		{"/a", "/a-b", "/a.b/c", "/a0", "/a-b-c/d"},
		{"/x/y", "/x/y-", "/x-/y"},
	} {
		l := Layout{DataPrefix: "/dp", MetaPrefix: "_m/"}.WithServed(served)
		for _, rs := range [][]KeyRange{l.WatchRanges(), l.TTLDirRanges()} {
			for i := 1; i < len(rs); i++ {
				if rs[i].Start < rs[i-1].End {
					t.Errorf("serving %q: ranges %q and %q overlap", served, rs[i-1], rs[i])
				}
			}
		}
		for _, p := range served {
			for _, k := range []string{l.DataKey(p), l.DataKey(p + "/f"), l.MarkerKey(p + "/d"), l.SeqKey(p), l.TTLDirKey(p + "/d")} {
				n := 0
				for _, r := range l.WatchRanges() {
					if r.Start <= k && k < r.End {
						n++
					}
				}
				if n != 1 {
					t.Errorf("serving %q: %q is in %d ranges, want 1", served, k, n)
				}
			}
		}
	}
}

// TestServedLayoutDecodesOnlyItsSubtree: a v3 transaction over served and
// unserved keys shows the served part, numbered as the revision's only
// events; another subtree's journaled write is no event and no forgery.
func TestServedLayoutDecodesOnlyItsSubtree(t *testing.T) {
	l := flannelLayout
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	evs := []V3Event{
		{KV: *fileKV("/registry/pods/a", "pb\xff", 30, 0)},
		{KV: *fileKV("/coreos.com/network/subnets/10.5.1.0-24", "lease", 30, 0)},
		{KV: *fileKV("/coreos.com/network-backup", "x", 30, 0)},
		{Delete: true, KV: KV{Key: "/registry/pods/b", ModRevision: 30}, Prev: fileKV("/registry/pods/b", "old", 12, 0)},
	}
	out, sweeps, forged := l.DecodeRevision(30, evs, nil, now)
	want := `[{"action":"create","node":{"key":"/coreos.com/network/subnets/10.5.1.0-24","value":"lease","modifiedIndex":30000000,"createdIndex":30000000}}]`
	if got := mustJSON(t, out); got != want || forged || len(sweeps) != 0 {
		t.Errorf("decoded %s (forged %v, sweeps %v)\nwant    %s", got, forged, sweeps, want)
	}

	// Another bridge's write under /apps: neither its journal records nor
	// its lease record is in a range watched.
	other := Layout{DataPrefix: "", MetaPrefix: "_m/"}
	req := Request{Method: "PUT", Path: "/apps/a", Value: "1", TTL: uint64Ptr(30)}
	p, verr := other.PlanWrite(&req, snapshotOf(req.Path, nil), nil, now)
	if verr != nil {
		t.Fatal(verr)
	}
	p.Bind(11, now.Add(30*time.Second), now, false)
	records := 0
	for _, o := range p.Ops {
		if other.IsJournalKey(o.Key) {
			records++
		}
		for _, r := range l.WatchRanges() {
			if o.Key >= r.Start && o.Key < r.End {
				t.Errorf("another subtree's write puts %q, in the watched range %q", o.Key, r)
			}
		}
	}
	if records != 2 {
		t.Errorf("the write put %d journal records, want 2 (its own and the old journal's)", records)
	}
}

// TestServedLayoutAnswersItsReadsFromTheMirror: every read a write or a GET
// in a served subtree makes is one the mirror holds (else each would go to
// the member).
func TestServedLayoutAnswersItsReadsFromTheMirror(t *testing.T) {
	l := flannelLayout
	for _, p := range []string{"/coreos.com/network", "/coreos.com/network/config", "/coreos.com/network/subnets/10.5.1.0-24"} {
		for _, withSeq := range []bool{false, true} {
			for _, r := range l.SnapshotReads(p, withSeq) {
				if !l.MirrorHolds(r) {
					t.Errorf("a write to %s (seq %v) reads %q, which the mirror does not hold", p, withSeq, r)
				}
			}
		}
		for _, r := range l.GetReads(p) {
			if !l.MirrorHolds(r) {
				t.Errorf("a GET of %s reads %q, which the mirror does not hold", p, r)
			}
		}
	}
}

// TestBinaryValuesAreNotReplaced: a file holding bytes v2's JSON cannot
// carry (a v3 client's protobuf) is not replaced by a v2 write, which could
// only write back a changed copy of what it read; it can still be
// refreshed and deleted.
func TestBinaryValuesAreNotReplaced(t *testing.T) {
	l := Layout{DataPrefix: "", MetaPrefix: "_m/"}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	state := []*KV{fileKV("/registry/secret", "k8s\x00\x8f\xff", 7, 0), fileKV("/text", "ok", 8, 0)}
	refused := `{"errorCode":102,"message":"Not a file","cause":"/registry/secret holds a value a v3 client wrote that is not valid UTF-8 (binary data), which v2 cannot show faithfully: the bridge does not replace it (a delete does)","index":9000000}`
	for _, c := range []struct {
		name string
		req  Request
		want string // the error's JSON, "" for a plan
	}{
		{"set", Request{Method: "PUT", Path: "/registry/secret", Value: "k8s\x00\ufffd\ufffd"}, refused},
		{"compare-and-swap on the index", Request{Method: "PUT", Path: "/registry/secret", Value: "x", PrevIndex: 7000000}, refused},
		{"update", Request{Method: "PUT", Path: "/registry/secret", Value: "x", PrevExist: boolPtr(true)}, refused},
		{"a failed compare still fails as a compare", Request{Method: "PUT", Path: "/registry/secret", Value: "x", PrevValue: "k8s"},
			`{"errorCode":101,"message":"Compare failed","cause":"[k8s != k8s\u0000\ufffd\ufffd]","index":9000000}`},
		{"create over it: exists", Request{Method: "PUT", Path: "/registry/secret", Value: "x", PrevExist: boolPtr(false)},
			`{"errorCode":105,"message":"Key already exists","cause":"/registry/secret","index":9000000}`},
		{"refresh", Request{Method: "PUT", Path: "/registry/secret", Refresh: true, TTL: uint64Ptr(30), PrevExist: boolPtr(true)}, ""},
		{"delete", Request{Method: "DELETE", Path: "/registry/secret"}, ""},
		{"set of a text value", Request{Method: "PUT", Path: "/text", Value: "\xff"}, ""},
	} {
		req := c.req
		s := snapshotOf(req.Path, state)
		s.Rev = 9
		_, verr := l.PlanWrite(&req, s, nil, now)
		got := ""
		if verr != nil {
			got = string(bytes.TrimSpace(verr.JSON()))
		}
		if got != c.want {
			t.Errorf("%s: %s\nwant %s", c.name, got, c.want)
		}
	}
}
