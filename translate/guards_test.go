// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"reflect"
	"testing"
	"time"
)

// TestSnapshotReadsNameEveryKeyOfThePath: the reads share their strings
// (an ancestor's keys are prefixes of the path's) yet are the keys each
// Layout function names, with or without a data prefix.
func TestSnapshotReadsNameEveryKeyOfThePath(t *testing.T) {
	for _, dp := range []string{"", "/x", "/x/y"} {
		l, err := NewLayout(dp, "_v2bridge/")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"/", "/a", "/a/b", "/a/b/c/d", "/ab/c"} {
			want := []Read{{Key: l.DataKey(p)}, {Key: l.MarkerKey(p)},
				{Key: l.DataChildPrefix(p), End: PrefixEnd(l.DataChildPrefix(p))},
				{Key: l.MarkerChildPrefix(p), End: PrefixEnd(l.MarkerChildPrefix(p))}}
			for _, a := range Ancestors(p) {
				want = append(want, Read{Key: l.DataKey(a)}, Read{Key: l.MarkerKey(a)})
			}
			if got := l.SnapshotReads(p, false); !reflect.DeepEqual(got, want) {
				t.Errorf("dp %q, %s: reads\n%v\nwant\n%v", dp, p, got, want)
			}
			want = append(want, Read{Key: l.SeqKey(p)})
			if got := l.SnapshotReads(p, true); !reflect.DeepEqual(got, want) {
				t.Errorf("dp %q, %s with seq: reads\n%v\nwant\n%v", dp, p, got, want)
			}
		}
	}
}

// TestGuardsCoverWhatTheDecisionReads: a write's compares hold the keys its
// decision depends on. A file at the path shadows its marker and whatever
// is below it, so those are left out of the guards; planning with them
// changed (a v3 client writing below the file) gives the same plan.
func TestGuardsCoverWhatTheDecisionReads(t *testing.T) {
	mod := func(k string, rev int64) Cmp { return Cmp{Key: k, Target: CmpMod, Result: "=", Value: rev} }
	empty := func(pfx string) Cmp {
		return Cmp{Key: pfx, End: PrefixEnd(pfx), Target: CmpCreate, Result: "=", Value: 0}
	}
	l := planLayout
	ancestors := []Cmp{mod(l.DataKey("/a"), 0), mod(l.MarkerKey("/a"), 3), mod(l.DataKey("/a/b"), 0), mod(l.MarkerKey("/a/b"), 4)}
	dirs := []*KV{markerKV("/a", 3, 0), markerKV("/a/b", 4, 0)}
	file := fileKV("/a/b/c", "v", 7, 0)
	shadowed := []*KV{markerKV("/a/b/c", 9, 0), fileKV("/a/b/c/d", "x", 10, 0), markerKV("/a/b/c/e", 11, 0)}
	cases := []struct {
		name   string
		req    Request
		state  []*KV
		guards []Cmp
		// same: planning with these keys added must give the same plan
		same []*KV
	}{
		{
			name:   "a set over a file guards the file and the ancestors",
			req:    Request{Method: "PUT", Path: "/a/b/c", Value: "w"},
			state:  append([]*KV{file}, dirs...),
			guards: append([]Cmp{mod(l.DataKey("/a/b/c"), 7)}, ancestors...),
			same:   shadowed,
		},
		{
			name:   "a compare-and-swap of a file with a TTL guards the file and the ancestors",
			req:    Request{Method: "PUT", Path: "/a/b/c", Value: "w", PrevIndex: Index(7), TTL: ptrU64(60)},
			state:  append([]*KV{file}, dirs...),
			guards: append([]Cmp{mod(l.DataKey("/a/b/c"), 7)}, ancestors...),
			same:   shadowed,
		},
		{
			name:   "a delete of a file guards the file and the ancestors",
			req:    Request{Method: "DELETE", Path: "/a/b/c"},
			state:  append([]*KV{file}, dirs...),
			guards: append([]Cmp{mod(l.DataKey("/a/b/c"), 7)}, ancestors...),
			same:   shadowed,
		},
		{
			name:  "a create guards that nothing is at or below the path",
			req:   Request{Method: "PUT", Path: "/a/b/c", Value: "w", PrevExist: boolPtr(false), TTL: ptrU64(60)},
			state: dirs,
			guards: append([]Cmp{mod(l.DataKey("/a/b/c"), 0), mod(l.MarkerKey("/a/b/c"), 0),
				empty(l.DataChildPrefix("/a/b/c")), empty(l.MarkerChildPrefix("/a/b/c"))}, ancestors...),
		},
		{
			name:  "an update of a directory guards its marker and its first children",
			req:   Request{Method: "PUT", Path: "/a/b/c", Dir: true, PrevExist: boolPtr(true), TTL: ptrU64(60)},
			state: append([]*KV{markerKV("/a/b/c", 9, 0), fileKV("/a/b/c/d", "x", 10, 0)}, dirs...),
			guards: append([]Cmp{mod(l.DataKey("/a/b/c"), 0), mod(l.MarkerKey("/a/b/c"), 9),
				mod(l.DataKey("/a/b/c/d"), 10), empty(l.MarkerChildPrefix("/a/b/c"))}, ancestors...),
		},
		{
			name:  "a POST guards the directory and its sequence",
			req:   Request{Method: "POST", Path: "/a/b", Value: "w"},
			state: dirs,
			guards: []Cmp{mod(l.DataKey("/a/b"), 0), mod(l.MarkerKey("/a/b"), 4),
				empty(l.DataChildPrefix("/a/b")), empty(l.MarkerChildPrefix("/a/b")),
				mod(l.DataKey("/a"), 0), mod(l.MarkerKey("/a"), 3), mod(l.SeqKey("/a/b"), 0)},
		},
		{
			name:   "a POST into the root guards its children and its sequence",
			req:    Request{Method: "POST", Path: "/", Value: "w"},
			guards: []Cmp{empty(l.DataChildPrefix("/")), empty(l.MarkerChildPrefix("/")), mod(l.SeqKey("/"), 0)},
		},
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			p, verr := planLayout.PlanWrite(&req, snapshotOf(req.Path, c.state), nil, now)
			if verr != nil {
				t.Fatalf("unexpected error %v", verr)
			}
			if !reflect.DeepEqual(p.Cmps, c.guards) {
				t.Fatalf("guards\n%v\nwant\n%v", p.Cmps, c.guards)
			}
			if c.same == nil {
				return
			}
			q, verr := planLayout.PlanWrite(&req, snapshotOf(req.Path, append(append([]*KV{}, c.state...), c.same...)), nil, now)
			if verr != nil {
				t.Fatalf("with the shadowed keys: unexpected error %v", verr)
			}
			if !reflect.DeepEqual(q.Ops, p.Ops) || !reflect.DeepEqual(q.Result(30), p.Result(30)) || !reflect.DeepEqual(q.Cmps, p.Cmps) {
				t.Fatalf("with the shadowed keys the plan differs:\n%+v\n%+v", q, p)
			}
		})
	}
}
