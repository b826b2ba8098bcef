// SPDX-License-Identifier: Apache-2.0

package robustness

import (
	"strings"
	"testing"
	"time"
)

// The checks must catch what they are for: each case is a small history
// with (or without) the anomaly named.

func file(key, value string, mod, created uint64) *node {
	return &node{Key: key, Value: value, HasValue: true, Mod: mod, Creat: created}
}

func okRec(call, ret int64, in input, action string, n, prev *node) record {
	return record{In: in, Call: call, Ret: ret, Class: okay, Out: output{Action: action, Node: n, Prev: prev}}
}

func errRec(call, ret int64, in input, code int) record {
	return record{In: in, Call: call, Ret: ret, Class: failed, Out: output{Code: code}}
}

func lostRec(call int64, in input) record {
	return record{In: in, Call: call, Ret: call + 1, Class: unknown, Out: output{Unknown: true}}
}

const k = "/k"

// M is one revision's block of indexes: the bridge's indexes are revisions
// × 1,000,000.
const M = 1_000_000

var (
	set1 = okRec(1, 2, input{Kind: opSet, Key: k, Value: "a"}, "set", file(k, "a", 10*M, 10*M), nil)
	set2 = okRec(3, 4, input{Kind: opSet, Key: k, Value: "b"}, "set", file(k, "b", 20*M, 20*M), file(k, "a", 10*M, 10*M))
)

func linearizable(t *testing.T, ops ...record) bool {
	t.Helper()
	var v verdict
	checkLinearizable(ops, 10*time.Second, &v)
	return len(v.anomalies) == 0
}

func TestModel(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []record
		want bool
	}{
		{"read the last write", []record{set1, set2,
			okRec(5, 6, input{Kind: opGet, Key: k}, "get", file(k, "b", 20*M, 10*M), nil)}, true},
		{"stale quorum read", []record{set1, set2,
			okRec(5, 6, input{Kind: opGet, Key: k}, "get", file(k, "a", 10*M, 10*M), nil)}, false},
		{"a read concurrent with the write may see either", []record{set1,
			okRec(3, 6, input{Kind: opSet, Key: k, Value: "b"}, "set", file(k, "b", 20*M, 20*M), file(k, "a", 10*M, 10*M)),
			okRec(4, 5, input{Kind: opGet, Key: k}, "get", file(k, "a", 10*M, 10*M), nil)}, true},
		{"index going backwards", []record{set1,
			okRec(3, 4, input{Kind: opSet, Key: k, Value: "b"}, "set", file(k, "b", 5*M, 5*M), file(k, "a", 10*M, 10*M))}, false},
		{"a wrong prevNode", []record{set1,
			okRec(3, 4, input{Kind: opSet, Key: k, Value: "b"}, "set", file(k, "b", 20*M, 20*M), file(k, "x", 10*M, 10*M))}, false},
		{"CAS by prevIndex against the index held", []record{set1,
			okRec(3, 4, input{Kind: opCASIndex, Key: k, Value: "b", PrevIndex: 10 * M}, "compareAndSwap",
				file(k, "b", 20*M, 10*M), file(k, "a", 10*M, 10*M))}, true},
		{"CAS by prevIndex against another index", []record{set1, set2,
			okRec(5, 6, input{Kind: opCASIndex, Key: k, Value: "c", PrevIndex: 10 * M}, "compareAndSwap",
				file(k, "c", 30*M, 10*M), file(k, "b", 20*M, 10*M))}, false},
		{"CAS refused though it matched", []record{set1,
			errRec(3, 4, input{Kind: opCASValue, Key: k, Value: "b", PrevValue: "a"}, 101)}, false},
		{"a lost write seen later", []record{set1, lostRec(3, input{Kind: opSet, Key: k, Value: "b"}),
			okRec(5, 6, input{Kind: opGet, Key: k}, "get", file(k, "b", 20*M, 10*M), nil)}, true},
		{"a lost write that did not happen", []record{set1, lostRec(3, input{Kind: opSet, Key: k, Value: "b"}),
			okRec(5, 6, input{Kind: opGet, Key: k}, "get", file(k, "a", 10*M, 10*M), nil)}, true},
		{"a value nobody wrote", []record{set1, lostRec(3, input{Kind: opSet, Key: k, Value: "b"}),
			okRec(5, 6, input{Kind: opGet, Key: k}, "get", file(k, "z", 20*M, 10*M), nil)}, false},
		{"a deleted key read back", []record{set1,
			okRec(3, 4, input{Kind: opDelete, Key: k}, "delete", &node{Key: k, Mod: 20 * M, Creat: 10 * M}, file(k, "a", 10*M, 10*M)),
			okRec(5, 6, input{Kind: opGet, Key: k}, "get", file(k, "a", 10*M, 10*M), nil)}, false},
		{"in-order names in commit order", []record{
			okRec(1, 2, input{Kind: opPost, Key: "/d", Value: "x"}, "create", file("/d/00000000000000000010", "x", 10*M, 10*M), nil),
			okRec(3, 4, input{Kind: opPost, Key: "/d", Value: "y"}, "create", file("/d/00000000000000000020", "y", 20*M, 20*M), nil),
			okRec(5, 6, input{Kind: opGetDir, Key: "/d"}, "get", &node{Key: "/d", Dir: true, Creat: 10 * M, Mod: 10 * M,
				Nodes: []node{*file("/d/00000000000000000010", "x", 10*M, 10*M), *file("/d/00000000000000000020", "y", 20*M, 20*M)}}, nil),
		}, true},
		{"an in-order name below an earlier one", []record{
			okRec(1, 2, input{Kind: opPost, Key: "/d", Value: "x"}, "create", file("/d/00000000000000000010", "x", 10*M, 10*M), nil),
			okRec(3, 4, input{Kind: opPost, Key: "/d", Value: "y"}, "create", file("/d/00000000000000000009", "y", 20*M, 20*M), nil),
		}, false},
		{"a listing that lost a child", []record{
			okRec(1, 2, input{Kind: opPost, Key: "/d", Value: "x"}, "create", file("/d/00000000000000000010", "x", 10*M, 10*M), nil),
			okRec(3, 4, input{Kind: opGetDir, Key: "/d"}, "get", &node{Key: "/d", Dir: true, Creat: 10 * M, Mod: 10 * M}, nil),
		}, false},
	} {
		if got := linearizable(t, c.ops...); got != c.want {
			t.Errorf("%s: linearizable %v, want %v", c.name, got, c.want)
		}
	}
}

func TestWatchChecks(t *testing.T) {
	ops := []record{set1, set2}
	ev := func(r record, wait uint64) watchEvent {
		return watchEvent{Out: r.Out, At: r.Ret + 1, WaitIndex: wait}
	}
	for _, c := range []struct {
		name string
		evs  []watchEvent
		segs []segment
		want string // "" for no anomaly
	}{
		{"every event", []watchEvent{ev(set1, 1*M), ev(set2, 11*M)}, []segment{{From: 1 * M, To: 20 * M}}, ""},
		{"a missed event", []watchEvent{ev(set2, 1*M)}, []segment{{From: 1 * M, To: 20 * M}}, "missed the event at 10000000"},
		{"a gap after a 401", []watchEvent{ev(set2, 15*M)}, []segment{{From: 1 * M, To: 0}, {From: 15 * M, To: 20 * M}}, ""},
		{"out of order", []watchEvent{ev(set2, 1*M), ev(set1, 21*M)}, []segment{{From: 1 * M, To: 20 * M}}, "event 10000000 after 20000000"},
		{"an event no write made", []watchEvent{ev(set1, 1*M), {Out: output{Action: "set", Node: file(k, "q", 15*M, 15*M)},
			WaitIndex: 11 * M}, ev(set2, 16*M)}, []segment{{From: 1 * M, To: 20 * M}}, "matches no operation"},
		{"an event unlike the answer", []watchEvent{ev(set1, 1*M), {Out: output{Action: "update", Node: set2.Out.Node,
			Prev: set2.Out.Prev}, WaitIndex: 11 * M}}, []segment{{From: 1 * M, To: 20 * M}}, "the write's answer"},
	} {
		var v verdict
		checkWatches(ops, [][]watchEvent{c.evs}, [][]segment{c.segs}, &v)
		got := strings.Join(v.anomalies, "; ")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: anomalies %q, want %q", c.name, got, c.want)
		}
	}
}

func TestPlainGetChecks(t *testing.T) {
	plain := func(call int64, idx uint64, n *node) record {
		r := okRec(call, call+1, input{Kind: opPlainGet, Key: k}, "get", n, nil)
		r.EtcdIndex = idx
		return r
	}
	for _, c := range []struct {
		name string
		get  record
		want string
	}{
		{"the state at its index", plain(5, 25*M, file(k, "b", 20*M, 10*M)), ""},
		{"an older index, before the bridge's own write", plain(5, 15*M, file(k, "a", 10*M, 10*M)), "acknowledged"},
		{"not the state at its index", plain(5, 25*M, file(k, "a", 10*M, 10*M)), "last write at or below"},
	} {
		var v verdict
		checkPlainGets([]record{set1, set2, c.get}, nil, &v)
		got := strings.Join(v.anomalies, "; ")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: anomalies %q, want %q", c.name, got, c.want)
		}
	}
}
