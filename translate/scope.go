// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strings"
)

// A bridge may serve only some v2 subtrees (--serve-prefix): flannel's
// /coreos.com/network on a cluster Kubernetes shares, say. Its Layout then
// names them (WithServed), and everything it reads, watches, mirrors and
// decodes is cut to them and their bookkeeping, so what it costs grows with
// what it serves rather than with the cluster.

// KeyRange is a v3 key range [Start, End).
type KeyRange struct{ Start, End string }

// ParseServed parses --serve-prefix: a comma-separated list of v2
// directories, each absolute and clean ("/a/b", not "a/b", "/a/" or
// "/a/../b"), none inside another. It returns them sorted; "/" alone means
// the whole tree.
func ParseServed(list string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		switch {
		case p == "":
			return nil, fmt.Errorf("an empty prefix in %q", list)
		case p[0] != '/':
			return nil, fmt.Errorf("prefix %q is relative: want an absolute v2 path such as /coreos.com/network", p)
		case path.Clean(p) != p:
			return nil, fmt.Errorf("prefix %q is not clean: want %q", p, path.Clean(p))
		}
		if _, verr := CleanPath(p); verr != nil {
			return nil, fmt.Errorf("prefix %q: %s", p, verr.Cause)
		}
		out = append(out, p)
	}
	// Ordered path element by path element ("/" before any byte a key may
	// hold), a prefix comes right before what is inside it.
	type entry struct {
		order string
		at    int // in the list
	}
	es := make([]entry, len(out))
	for i, p := range out {
		es[i] = entry{strings.ReplaceAll(p, "/", "\x00"), i}
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Or(strings.Compare(a.order, b.order), a.at-b.at) })
	for i := 1; i < len(es); i++ {
		a, b := min(es[i-1].at, es[i].at), max(es[i-1].at, es[i].at)
		if Within(out[es[i-1].at], out[es[i].at]) {
			return nil, fmt.Errorf("prefixes %q and %q overlap", out[a], out[b])
		}
	}
	slices.Sort(out)
	return out, nil
}

// Within reports whether the v2 path p is dir or below it.
func Within(dir, p string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

// WithServed is l serving only the v2 subtrees served (as ParseServed
// returns them); nil or ["/"] is the whole tree.
func (l Layout) WithServed(served []string) Layout {
	if len(served) == 0 || slices.Contains(served, "/") {
		l.Served = nil
	} else {
		l.Served = slices.Clone(served)
	}
	return l
}

// Scoped reports whether l serves only some subtrees.
func (l Layout) Scoped() bool { return l.Served != nil }

// Serves reports whether the v2 path p is in a served subtree.
func (l Layout) Serves(p string) bool {
	if l.Served == nil {
		return true
	}
	for _, s := range l.Served {
		if Within(s, p) {
			return true
		}
	}
	return false
}

// servesOrAbove reports whether p is served or a directory above a served
// subtree (whose data key and marker a write below it reads).
func (l Layout) servesOrAbove(p string) bool {
	if l.Serves(p) {
		return true
	}
	if p == "/" { // no write reads the root's keys
		return false
	}
	for _, s := range l.Served {
		if strings.HasPrefix(s, childPath(p)) {
			return true
		}
	}
	return false
}

// subtree is the ranges of key k and of every key below k + "/": not k's
// siblings (k + "-x", k + ".x"), which another served prefix may be.
func subtree(k string) []KeyRange { return []KeyRange{exact(k), {k + "/", k + "0"}} }

// exact is the range of the single key k.
func exact(k string) KeyRange { return KeyRange{k, k + "\x00"} }

// WatchRanges are the v3 ranges a bridge watches and mirrors: WatchRange
// when it serves the whole tree. Serving some subtrees, for each one its
// data keys, markers, sequence keys, TTL directory records and journal
// records, and the data key and marker of every directory above it (a
// write below reads and guards them): no other tenant's key is among them.
func (l Layout) WatchRanges() []KeyRange {
	if !l.Scoped() {
		s, e := l.WatchRange()
		return []KeyRange{{s, e}}
	}
	var rs []KeyRange
	for _, p := range l.Served {
		rs = slices.Concat(rs, subtree(l.DataKey(p)), subtree(l.MarkerKey(p)), subtree(l.SeqKey(p)),
			subtree(l.TTLDirKey(p)), subtree(l.RecordKey(p)))
		for _, a := range Ancestors(p) {
			rs = append(rs, exact(l.DataKey(a)), exact(l.MarkerKey(a)))
		}
	}
	return disjoint(rs)
}

// disjoint sorts rs and merges the ranges that overlap or touch: a key
// in two watched ranges would reach the watchers twice.
func disjoint(rs []KeyRange) []KeyRange {
	slices.SortFunc(rs, func(a, b KeyRange) int { return strings.Compare(a.Start, b.Start) })
	var out []KeyRange
	for _, r := range rs {
		if n := len(out); n > 0 && r.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}

// TTLDirRanges are the ranges of the TTL directory records of the served
// subtrees.
func (l Layout) TTLDirRanges() []KeyRange {
	if !l.Scoped() {
		p := l.TTLDirPrefix()
		return []KeyRange{{p, PrefixEnd(p)}}
	}
	var rs []KeyRange
	for _, p := range l.Served {
		rs = append(rs, subtree(l.TTLDirKey(p))...)
	}
	return disjoint(rs)
}

// MirrorHolds reports whether the mirror of l answers read r in full: a
// point read of a key it mirrors, or a range inside a served subtree.
func (l Layout) MirrorHolds(r Read) bool {
	if !l.Scoped() {
		return true
	}
	if r.End == "" {
		return l.Mirrored(r.Key)
	}
	// Snapshot and GET ranges are the data or marker keys below a path.
	if p, ok := l.PathOfData(r.Key); ok {
		return l.Serves(strings.TrimSuffix(p, "/"))
	}
	if p, ok := l.PathOfMarker(r.Key); ok {
		return l.Serves(strings.TrimSuffix(p, "/"))
	}
	if p, ok := l.PathOfTTLDir(r.Key); ok { // TTLDirReads
		return l.Serves(strings.TrimSuffix(p, "/"))
	}
	return false
}
