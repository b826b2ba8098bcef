// SPDX-License-Identifier: Apache-2.0

package robustness

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// verdict is what the checks found.
type verdict struct {
	partitions, checkedOps int // porcupine histories (keys) and operations in them
	undecided              int // partitions porcupine could not decide in time
	resolved               int // unanswered writes whose event showed they happened
	stillUnknown           int // unanswered writes left "may or may not have happened"
	events                 int // watch events checked
	gaps                   int // 401s: a watcher's history restarted
	plainGets              int // plain GETs checked
	plainExplained         int // plain GETs only an unanswered write explains
	anomalies              []string
}

func (v *verdict) anomaly(format string, args ...any) {
	v.anomalies = append(v.anomalies, fmt.Sprintf(format, args...))
}

// resolve gives an unanswered write whose unique value some watcher saw
// the answer that event shows, returning by the time the first watcher got
// it. Deletes carry no value of their own: they stay unknown.
func resolve(ops []record, ws [][]watchEvent, v *verdict) {
	first := map[string]watchEvent{}
	for _, evs := range ws {
		for _, e := range evs {
			n := e.Out.Node
			if n == nil || !n.HasValue || e.Out.Action == "delete" || e.Out.Action == "compareAndDelete" {
				continue
			}
			if f, ok := first[n.Value]; !ok || e.At < f.At {
				first[n.Value] = e
			}
		}
	}
	for i := range ops {
		r := &ops[i]
		if r.Class != unknown || !r.In.Kind.write() {
			continue
		}
		e, ok := first[r.In.Value]
		if r.In.Value == "" || !ok {
			v.stillUnknown++
			continue
		}
		if e.At < r.Call {
			v.anomaly("client %d's %s of %s = %q was seen by a watcher %v before it was sent", r.Client,
				opNames[r.In.Kind], r.In.Key, r.In.Value, time.Duration(r.Call-e.At))
		}
		r.Out, r.Ret = e.Out, max(e.At, r.Call)
		r.Class, r.Resolved = okay, true
		v.resolved++
	}
}

// checkLinearizable checks each key's history with porcupine; an illegal
// one is written out as porcupine's HTML visualization.
func checkLinearizable(ops []record, timeout time.Duration, v *verdict) {
	byKey := map[string][]porcupine.Operation{}
	for _, r := range ops {
		switch {
		case r.In.Kind == opPlainGet, r.Class == refused:
			continue
		case !r.In.Kind.write() && r.Class == unknown: // a read without an answer did nothing
			continue
		}
		op := porcupine.Operation{ClientId: r.Client, Input: r.In, Call: r.Call, Output: r.Out, Return: r.Ret}
		if r.Class == unknown {
			op.Return = math.MaxInt64
		}
		byKey[r.In.Key] = append(byKey[r.In.Key], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	model := v2Model.ToModel()
	for _, k := range keys {
		h := byKey[k]
		v.partitions++
		v.checkedOps += len(h)
		res, info := porcupine.CheckOperationsVerbose(model, h, timeout)
		switch res {
		case porcupine.Illegal:
			path := filepath.Join(os.TempDir(), fmt.Sprintf("v2bridge-robustness-%d%s.html", time.Now().UnixNano(),
				strings.ReplaceAll(k, "/", "_")))
			if err := porcupine.VisualizePath(model, info, path); err != nil {
				path = "(not written: " + err.Error() + ")"
			}
			v.anomaly("key %s: %d operations not linearizable; visualization %s", k, len(h), path)
		case porcupine.Unknown:
			v.undecided++
			v.anomaly("key %s: %d operations, porcupine could not decide within %v", k, len(h), timeout)
		}
	}
}

// checkWatches checks every watcher's events: in index order from the
// waitIndex asked, each equal to the answer of the write with its index
// (or to a write without an answer on its key), no expiry and no refresh
// among them, and, within each stretch between 401s, every write anyone
// saw or was answered in that stretch.
func checkWatches(ops []record, ws [][]watchEvent, segs [][]segment, v *verdict) {
	byIndex := map[uint64]record{}
	refreshes := map[uint64]bool{}
	for _, r := range ops {
		if r.Class != okay || !r.In.Kind.write() || r.Out.Node == nil { // no node: the model flags it
			continue
		}
		if r.In.Kind == opRefresh {
			refreshes[r.Out.Node.Mod] = true
			continue
		}
		byIndex[r.Out.Node.Mod] = r
	}
	all := map[uint64]bool{}
	for i := range byIndex {
		all[i] = true
	}
	for _, evs := range ws {
		for _, e := range evs {
			all[e.index()] = true
		}
	}
	known := make([]uint64, 0, len(all))
	for i := range all {
		known = append(known, i)
	}
	slices.Sort(known)

	for w, evs := range ws {
		got := map[uint64]bool{}
		var last uint64
		for _, e := range evs {
			v.events++
			i := e.index()
			if i < e.WaitIndex || i <= last {
				v.anomaly("watcher %d: event %d after %d, asked from %d", w, i, last, e.WaitIndex)
			}
			last, got[i] = i, true
			checkEvent(ops, byIndex, refreshes, w, e, v)
		}
		for si, s := range segs[w] {
			if si > 0 {
				v.gaps++
			}
			lo, _ := slices.BinarySearch(known, s.From)
			for _, i := range known[lo:] {
				if i > s.To {
					break
				}
				if !got[i] {
					v.anomaly("watcher %d: missed the event at %d (between %d and %d, no 401)", w, i, s.From, s.To)
				}
			}
		}
	}
}

func checkEvent(ops []record, byIndex map[uint64]record, refreshes map[uint64]bool, w int, e watchEvent,
	v *verdict) {
	i, n := e.index(), e.Out.Node
	switch {
	case e.Out.Action == "expire":
		v.anomaly("watcher %d: expire of %s at %d (no TTL runs out within a run)", w, n.Key, i)
		return
	case refreshes[i]:
		v.anomaly("watcher %d: the refresh at %d woke a watcher", w, i)
		return
	}
	if r, ok := byIndex[i]; ok {
		if e.Out.Action != r.Out.Action || !sameNode(n, r.Out.Node) || !sameNode(e.Out.Prev, r.Out.Prev) {
			v.anomaly("watcher %d: event at %d is %s, the write's answer %s", w, i, describeOutput(e.Out),
				describeOutput(r.Out))
		}
		return
	}
	for _, r := range ops { // a delete or mkdir (no value of its own) whose answer was lost
		if r.Class != unknown || r.In.Key != n.Key || wantAction[r.In.Kind] != e.Out.Action {
			continue
		}
		if (r.In.Kind == opDelete || r.In.Kind == opRmdir || r.In.Kind == opMkdir) ||
			(r.In.Kind == opCAD && e.Out.Prev != nil && e.Out.Prev.Value == r.In.PrevValue) {
			return
		}
	}
	v.anomaly("watcher %d: event at %d matches no operation: %s", w, i, describeOutput(e.Out))
}

// sameNode compares two nodes (of events: no children) field by field, an
// index with any index of the same revision (an event decoded from v3 history may show a key's
// revision's index, as the bridge documents).
func sameNode(a, b *node) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Key == b.Key && a.Value == b.Value && a.HasValue == b.HasValue && a.Dir == b.Dir && a.TTL == b.TTL &&
		sameRev(a.Mod, b.Mod) && sameRev(a.Creat, b.Creat) && a.Nodes == nil && b.Nodes == nil
}

// keyWrite is a write to a file key, from an answer or an event.
type keyWrite struct {
	idx     uint64
	deleted bool
	value   string
}

// checkPlainGets checks what a plain GET promises: it shows the key as of
// its X-Etcd-Index (the latest write at or below that index, unless a
// write without an answer explains a newer one), and that index covers
// every write to the key the same bridge process acknowledged before the
// GET was sent (a client reads its own writes, and those of every client of
// its bridge).
func checkPlainGets(ops []record, ws [][]watchEvent, v *verdict) {
	writes := map[string][]keyWrite{}
	unanswered := map[string]bool{}
	add := func(key string, w keyWrite) {
		writes[key] = append(writes[key], w)
	}
	for _, r := range ops {
		if !r.In.Kind.write() || r.In.Kind.dirOp() {
			continue
		}
		switch r.Class {
		case unknown:
			unanswered[r.In.Key] = true
		case okay:
			if r.Out.Node == nil { // the model flags it
				continue
			}
			add(r.In.Key, keyWrite{idx: r.Out.Node.Mod, deleted: !r.Out.Node.HasValue, value: r.Out.Node.Value})
		}
	}
	for _, evs := range ws {
		for _, e := range evs {
			n := e.Out.Node
			if !n.Dir {
				add(n.Key, keyWrite{idx: n.Mod, deleted: !n.HasValue, value: n.Value})
			}
		}
	}
	for k, ws := range writes {
		sort.Slice(ws, func(i, j int) bool { return ws[i].idx < ws[j].idx })
		writes[k] = slices.CompactFunc(ws, func(a, b keyWrite) bool { return a.idx == b.idx })
	}
	// acked: each bridge generation's answered writes, by key.
	type genKey struct {
		bridge int
		gen    int64
		key    string
	}
	acked := map[genKey][]record{}
	for _, r := range ops {
		if r.Class == okay && !r.Resolved && r.In.Kind.write() && r.Out.Node != nil && r.GenCall == r.GenRet &&
			r.GenCall%2 == 0 { // acknowledged by that bridge process
			gk := genKey{r.Bridge, r.GenCall, r.In.Key}
			acked[gk] = append(acked[gk], r)
		}
	}
	for _, r := range ops {
		answered := r.Class == okay || (r.Class == failed && r.Out.Code == 100)
		if r.In.Kind != opPlainGet || !answered {
			continue
		}
		v.plainGets++
		R := r.EtcdIndex
		if r.GenCall == r.GenRet && r.GenCall%2 == 0 {
			for _, w := range acked[genKey{r.Bridge, r.GenCall, r.In.Key}] {
				if w.Ret < r.Call && w.Out.Node.Mod > R {
					v.anomaly("client %d: plain GET %s via bridge %d read index %d, before the write at %d that bridge "+
						"acknowledged %v earlier", r.Client, r.In.Key, r.Bridge, R, w.Out.Node.Mod,
						time.Duration(r.Call-w.Ret))
				}
			}
		}
		ws := writes[r.In.Key]
		j := sort.Search(len(ws), func(j int) bool { return ws[j].idx > R })
		var exp *keyWrite
		if j > 0 {
			exp = &ws[j-1]
		}
		var ok bool
		switch n := r.Out.Node; {
		case r.Class == okay && n == nil:
		case r.Class == okay:
			ok = n.Mod <= R && exp != nil && !exp.deleted && sameRev(exp.idx, n.Mod) && exp.value == n.Value
			if !ok && n.Mod <= R && unanswered[r.In.Key] && (exp == nil || n.Mod > exp.idx) {
				ok = true
				v.plainExplained++
			}
		default:
			ok = exp == nil || exp.deleted
			if !ok && unanswered[r.In.Key] {
				ok = true
				v.plainExplained++
			}
		}
		if !ok {
			v.anomaly("client %d: plain GET %s via bridge %d at index %d answered %s; the key's last write at or below "+
				"that index is %+v", r.Client, r.In.Key, r.Bridge, R, describeOutput(r.Out), exp)
		}
	}
}
