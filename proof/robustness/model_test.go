// SPDX-License-Identifier: Apache-2.0

package robustness

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The model is the v2 store, one partition per key: a file key sees only
// file operations, a directory key only directory ones (its own creation
// and deletion, in-order POSTs into it and listings of it), so the state of
// a partition is the state of one path.
//
// Indexes. The v2 index is global and the bridge numbers it from v3
// revisions with gaps, so the model never predicts an index. It checks, per
// key, that every write takes an index above every write before it in the
// linearization (commit order is revision order), that a write's answer
// carries the created and modified indexes the v2 rules give it (a set
// replaces the node, an update, compare-and-swap or refresh keeps
// createdIndex; later reads show the create of the v3 key, as the bridge
// documents), that prevNode is the node the model holds, that a read
// shows the model's indexes, and that a compare-and-swap by prevIndex
// succeeds exactly when prevIndex is the modifiedIndex the model holds.
// The index in an error's body and X-Etcd-Index are not checked here (the
// plain GET check uses X-Etcd-Index).
//
// An operation without an answer (a timeout, a cut connection, a 5xx) may
// or may not have happened: porcupine gets it with an infinite return time
// and the model steps it both ways; when it happened its indexes are
// unknown (0) until a later answer shows them.

// opKind is a v2 operation the clients issue.
type opKind int

const (
	opGet      opKind = iota // quorum GET of a file
	opPlainGet               // plain GET of a file (not in the linearizability check)
	opSet                    // PUT value
	opSetTTL                 // PUT value&ttl
	opCreate                 // PUT value&prevExist=false
	opCASValue               // PUT value&prevValue
	opCASIndex               // PUT value&prevIndex
	opCAD                    // DELETE prevValue
	opDelete                 // DELETE
	opRefresh                // PUT refresh=true&ttl&prevExist=true
	opMkdir                  // PUT dir=true&prevExist=false
	opRmdir                  // DELETE dir=true&recursive=true
	opPost                   // POST value (in-order create)
	opGetDir                 // quorum GET recursive&sorted of a directory
	numOpKinds
)

var opNames = [numOpKinds]string{"quorum GET", "plain GET", "PUT", "PUT ttl", "PUT create", "CAS prevValue",
	"CAS prevIndex", "CAD prevValue", "DELETE", "refresh ttl", "mkdir", "rmdir recursive", "POST in-order",
	"quorum GET dir"}

// wantAction is the action of each operation's answer.
var wantAction = [numOpKinds]string{"get", "get", "set", "set", "create", "compareAndSwap", "compareAndSwap",
	"compareAndDelete", "delete", "update", "create", "delete", "create", "get"}

// dirOp: an operation on a directory key (the kinds from opMkdir on).
func (k opKind) dirOp() bool { return k >= opMkdir }

func (k opKind) write() bool { return k != opGet && k != opPlainGet && k != opGetDir }

// input is an operation as sent.
type input struct {
	Kind      opKind
	Key       string // the file, or the directory (a POST's too)
	Value     string // unique per write
	PrevValue string
	PrevIndex uint64
}

// node is a v2 node as the model compares it.
type node struct {
	Key        string
	Value      string
	HasValue   bool
	Dir        bool
	TTL        bool // has an expiration
	Mod, Creat uint64
	Nodes      []node
}

// output is an operation's answer; Unknown: none came.
type output struct {
	Unknown bool
	Code    int // 0: success, else the v2 errorCode
	Action  string
	Node    *node
	Prev    *node
}

// item is an in-order child of a directory; Name "" and Idx 0 when the
// POST that made it has no answer yet.
type item struct {
	Name, Value string
	Idx         uint64
}

// state is one partition's: a file's fields or a directory's. Indexes 0
// are unknown. Last is a lower bound of the index of the last write
// applied. States are values: a step copies before it changes.
type state struct {
	Exists     bool
	Value      string
	TTL        bool
	Mod, Creat uint64
	Last       uint64
	Items      []item // a directory's children, in commit order
	LastName   string // a directory's last in-order name
}

// match reports whether a known index k is got's; an unknown k (0) matches
// any got above floor.
func match(k, got, floor uint64) bool {
	if k == 0 {
		return got > floor
	}
	return sameRev(k, got)
}

// sameRev reports whether two indexes belong to one v3 revision. A key's
// index may show as its event's own or as its revision's (the bridge's
// documented index numbering: a read the bridge's copy cannot answer, or
// one made before the copy saw the key change); one revision holds at most
// one write to a key, so per key this tells the same write.
func sameRev(a, b uint64) bool {
	const block = 1_000_000
	return (a+block-1)/block == (b+block-1)/block
}

// prevMatches checks an answer's prevNode against the file the model holds.
func prevMatches(s state, prev *node, key string) bool {
	if !s.Exists {
		return prev == nil
	}
	return prev != nil && prev.Key == key && !prev.Dir && prev.HasValue && prev.Value == s.Value &&
		prev.TTL == s.TTL && match(s.Mod, prev.Mod, 0) && match(s.Creat, prev.Creat, 0) && prev.Nodes == nil
}

// stepKnown is the model's step for an operation with an answer.
func stepKnown(s state, in input, out output) (bool, state) {
	want := errorWanted(s, in)
	if in.Kind == opCASIndex && s.Exists && s.Mod == 0 && out.Code == 101 {
		return true, s // the model does not know the index compared against
	}
	if out.Code != want {
		return false, s
	}
	if want != 0 {
		return true, s
	}
	if out.Action != wantAction[in.Kind] || out.Node == nil {
		return false, s
	}
	if in.Kind.dirOp() {
		return stepDir(s, in, out)
	}
	return stepFile(s, in, out)
}

// errorWanted is the v2 error code the operation must get in state s (0:
// none).
func errorWanted(s state, in input) int {
	switch in.Kind {
	case opCreate, opMkdir:
		if s.Exists {
			return 105
		}
	case opCASValue, opCAD:
		if !s.Exists {
			return 100
		}
		if s.Value != in.PrevValue {
			return 101
		}
	case opCASIndex:
		if !s.Exists {
			return 100
		}
		if s.Mod != 0 && !sameRev(s.Mod, in.PrevIndex) {
			return 101
		}
	case opGet, opDelete, opRefresh, opRmdir, opGetDir:
		if !s.Exists {
			return 100
		}
	}
	return 0
}

func stepFile(s state, in input, out output) (bool, state) {
	n := out.Node
	if n.Key != in.Key || n.Dir || n.Nodes != nil {
		return false, s
	}
	if in.Kind == opGet {
		if !n.HasValue || n.Value != s.Value || n.TTL != s.TTL || out.Prev != nil ||
			!match(s.Mod, n.Mod, s.Last) || !match(s.Creat, n.Creat, 0) || n.Creat > n.Mod {
			return false, s
		}
		s.Mod, s.Creat, s.Last = n.Mod, n.Creat, max(s.Last, n.Mod)
		return true, s
	}
	if n.Mod <= s.Last || !prevMatches(s, out.Prev, in.Key) {
		return false, s
	}
	if in.Kind == opCASIndex && s.Mod == 0 && !sameRev(out.Prev.Mod, in.PrevIndex) {
		return false, s
	}
	switch in.Kind {
	case opCAD, opDelete:
		if n.HasValue || n.TTL || !match(s.Creat, n.Creat, 0) {
			return false, s
		}
		return true, state{Last: n.Mod}
	case opSet, opSetTTL, opCreate:
		// The answer shows the new createdIndex of v2's replaced node; the v3
		// key keeps its create, which later reads show (the bridge's
		// documented set-created-index).
		if !n.HasValue || n.Value != in.Value || n.Creat != n.Mod || n.TTL != (in.Kind == opSetTTL) {
			return false, s
		}
		if s.Exists {
			return true, state{Exists: true, Value: n.Value, TTL: n.TTL, Mod: n.Mod, Creat: s.Creat, Last: n.Mod}
		}
	case opCASValue, opCASIndex:
		if !n.HasValue || n.Value != in.Value || n.TTL || !match(s.Creat, n.Creat, 0) {
			return false, s
		}
	case opRefresh:
		if !n.HasValue || n.Value != s.Value || !n.TTL || !match(s.Creat, n.Creat, 0) {
			return false, s
		}
	default:
		return false, s
	}
	return true, state{Exists: true, Value: n.Value, TTL: n.TTL, Mod: n.Mod, Creat: n.Creat, Last: n.Mod}
}

func stepDir(s state, in input, out output) (bool, state) {
	n := out.Node
	switch in.Kind {
	case opGetDir:
		if n.Key != in.Key || !n.Dir || n.HasValue || n.TTL || out.Prev != nil || !match(s.Creat, n.Creat, 0) ||
			len(n.Nodes) != len(s.Items) {
			return false, s
		}
		items := make([]item, len(s.Items))
		prevName := ""
		for i, c := range n.Nodes {
			it := s.Items[i]
			name, ok := strings.CutPrefix(c.Key, in.Key+"/")
			if !ok || !inOrderName(name) || name <= prevName || c.Dir || c.TTL || c.Nodes != nil ||
				!c.HasValue || c.Value != it.Value || c.Mod != c.Creat || (it.Name != "" && it.Name != name) ||
				!match(it.Idx, c.Mod, 0) {
				return false, s
			}
			prevName = name
			items[i] = item{Name: name, Value: it.Value, Idx: c.Mod}
			if name > s.LastName {
				s.LastName = name
			}
		}
		s.Items, s.Creat = items, n.Creat
		return true, s
	case opMkdir:
		if n.Key != in.Key || !n.Dir || n.HasValue || n.TTL || n.Mod <= s.Last || n.Creat != n.Mod ||
			out.Prev != nil {
			return false, s
		}
		return true, state{Exists: true, Mod: n.Mod, Creat: n.Creat, Last: n.Mod, LastName: s.LastName}
	case opRmdir:
		p := out.Prev
		if n.Key != in.Key || !n.Dir || n.HasValue || n.Mod <= s.Last || !match(s.Creat, n.Creat, 0) ||
			p == nil || p.Key != in.Key || !p.Dir || p.HasValue || !match(s.Creat, p.Creat, 0) {
			return false, s
		}
		return true, state{Last: n.Mod, LastName: s.LastName}
	case opPost:
		name, ok := strings.CutPrefix(n.Key, in.Key+"/")
		if !ok || !inOrderName(name) || name <= s.LastName || n.Dir || n.TTL || !n.HasValue ||
			n.Value != in.Value || n.Mod <= s.Last || n.Creat != n.Mod || out.Prev != nil {
			return false, s
		}
		ns := state{Exists: true, Creat: s.Creat, Mod: s.Mod, Last: n.Mod, LastName: name}
		ns.Items = append(append([]item(nil), s.Items...), item{Name: name, Value: in.Value, Idx: n.Mod})
		return true, ns
	}
	return false, s
}

// inOrderName: 20 decimal digits.
func inOrderName(s string) bool {
	if len(s) != 20 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// stepUnknown is every state an operation without an answer may leave:
// unchanged, or applied with unknown indexes when it could apply.
func stepUnknown(s state, in input) []any {
	out := []any{s}
	if errorWanted(s, in) != 0 {
		return out
	}
	applied := s
	applied.Mod = 0
	switch in.Kind {
	case opSet, opSetTTL, opCreate:
		applied = state{Exists: true, Value: in.Value, TTL: in.Kind == opSetTTL, Creat: s.Creat, Last: s.Last}
	case opCASValue, opCASIndex:
		applied = state{Exists: true, Value: in.Value, Creat: s.Creat, Last: s.Last}
	case opRefresh:
		applied.TTL = true
	case opCAD, opDelete:
		applied = state{Last: s.Last}
	case opMkdir:
		applied = state{Exists: true, Last: s.Last, LastName: s.LastName}
	case opRmdir:
		applied = state{Last: s.Last, LastName: s.LastName}
	case opPost:
		if !s.Exists {
			applied.Creat = 0
		}
		applied.Exists = true
		applied.Items = append(append([]item(nil), s.Items...), item{Value: in.Value})
	default:
		return out
	}
	return append(out, applied)
}

// v2Model is the porcupine model of the v2 store, partitioned by key.
var v2Model = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{state{}} },
	Step: func(st, in, out any) []any {
		s, i, o := st.(state), in.(input), out.(output)
		if o.Unknown {
			return stepUnknown(s, i)
		}
		if ok, ns := stepKnown(s, i, o); ok {
			return []any{ns}
		}
		return nil
	},
	Equal: func(a, b any) bool { return reflect.DeepEqual(a, b) },
	DescribeOperation: func(in, out any) string {
		i, o := in.(input), out.(output)
		return fmt.Sprintf("%s %s %+v -> %s", opNames[i.Kind], i.Key, i, describeOutput(o))
	},
	DescribeState: func(st any) string { return fmt.Sprintf("%+v", st.(state)) },
}

func describeOutput(o output) string {
	switch {
	case o.Unknown:
		return "no answer"
	case o.Code != 0:
		return fmt.Sprintf("error %d", o.Code)
	}
	s := o.Action
	if o.Node != nil {
		s += fmt.Sprintf(" node=%+v", *o.Node)
	}
	if o.Prev != nil {
		s += fmt.Sprintf(" prev=%+v", *o.Prev)
	}
	return s
}
