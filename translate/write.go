// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxLeaseTTL is etcd's largest lease TTL in seconds.
const MaxLeaseTTL = 9000000000

// Read is one read of a write's snapshot: a single key, or (End != "") the
// first key of a range, which tells whether the range is empty.
type Read struct {
	Key, End string
}

// Ancestor is what a snapshot knows of one directory above the target.
type Ancestor struct {
	Path         string
	File, Marker *KV
}

// Snapshot is everything a v2 write or a miss needs to know about a path, read
// in one v3 transaction at revision Rev.
type Snapshot struct {
	Path                   string
	Rev                    int64
	File, Marker           *KV
	DataChild, MarkerChild *KV // first key below the path, if any
	Ancestors              []Ancestor
	Seq                    *KV // POST only
}

// SnapshotReads lists the reads of a snapshot of p, in the order NewSnapshot
// expects their results.
func (l Layout) SnapshotReads(p string, withSeq bool) []Read {
	k := l.keysOf(p)
	n := 4 + 2*countAncestors(p)
	if withSeq {
		n++
	}
	rs := make([]Read, 0, n)
	rs = append(rs, Read{Key: k.data()}, Read{Key: k.marker()},
		Read{Key: k.dataChild, End: childEnd(k.dataChild)}, Read{Key: k.markerChild, End: childEnd(k.markerChild)})
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			a := p[:i]
			rs = append(rs, Read{Key: k.dataAt(a)}, Read{Key: k.markerAt(a)})
		}
	}
	if withSeq {
		rs = append(rs, Read{Key: l.SeqKey(p)})
	}
	return rs
}

// NewSnapshot assembles the results of SnapshotReads (nil for absent).
func (l Layout) NewSnapshot(p string, rev int64, withSeq bool, kvs []*KV) *Snapshot {
	s := &Snapshot{Path: p, Rev: rev, File: kvs[0], Marker: kvs[1], DataChild: kvs[2], MarkerChild: kvs[3]}
	if n := countAncestors(p); n > 0 {
		s.Ancestors = make([]Ancestor, 0, n)
	}
	i := 4
	for j := 1; j < len(p); j++ {
		if p[j] == '/' {
			s.Ancestors = append(s.Ancestors, Ancestor{Path: p[:j], File: kvs[i], Marker: kvs[i+1]})
			i += 2
		}
	}
	if withSeq {
		s.Seq = kvs[i]
	}
	if p == "/" { // the root is a directory whatever v3 keys say
		s.File, s.Marker = nil, nil
	}
	return s
}

func (s *Snapshot) isRoot() bool     { return s.Path == "/" }
func (s *Snapshot) fileExists() bool { return s.File != nil }
func (s *Snapshot) dirExists() bool {
	return s.File == nil && (s.isRoot() || s.Marker != nil || s.DataChild != nil || s.MarkerChild != nil)
}
func (s *Snapshot) exists() bool      { return s.fileExists() || s.dirExists() }
func (s *Snapshot) hasChildren() bool { return s.DataChild != nil || s.MarkerChild != nil }

// ancestorFile is v2's 104: a file stands where a directory must be.
func (s *Snapshot) ancestorFile() *Error {
	for _, a := range s.Ancestors {
		if a.File != nil {
			return NewError(EcodeNotDir, a.Path, Index(s.Rev))
		}
	}
	return nil
}

// MissError is v2's internalGet failure for a missing path: 104 when the walk
// meets a file, else 100 naming the first missing component.
func (s *Snapshot) MissError() *Error {
	if err := s.ancestorFile(); err != nil {
		return err
	}
	// An ancestor exists if it has a marker or anything deeper exists.
	exists := make([]bool, len(s.Ancestors))
	deeper := false
	for i := len(s.Ancestors) - 1; i >= 0; i-- {
		deeper = deeper || s.Ancestors[i].Marker != nil
		exists[i] = deeper
	}
	for i, a := range s.Ancestors {
		if !exists[i] {
			return NewError(EcodeKeyNotFound, a.Path, Index(s.Rev))
		}
	}
	return NewError(EcodeKeyNotFound, s.Path, Index(s.Rev))
}

func (s *Snapshot) node(ls Leases, now time.Time) *Node {
	if s.fileExists() {
		return FileNode(s.Path, s.File, ls, now)
	}
	return DirNode(s.Path, s.Marker, ls, now)
}

// CmpTarget names the v3 field a guard compares.
type CmpTarget int

const (
	// CmpMod compares a key's mod revision.
	CmpMod CmpTarget = iota
	// CmpCreate compares a key's create revision.
	CmpCreate
)

// Cmp is a v3 transaction compare: Target(Key[..End]) Result Value.
type Cmp struct {
	Key, End string
	Target   CmpTarget
	Result   string
	Value    int64
}

// OpType is a v3 transaction operation.
type OpType int

const (
	// OpPut writes a key.
	OpPut OpType = iota
	// OpDelete deletes a key or a range.
	OpDelete
)

// Op is one v3 operation of a write; End != "" deletes a range.
type Op struct {
	Type      OpType
	Key, End  string
	Value     []byte
	WithLease bool
	Lease     int64 // a put's own lease (the journal lease), else none or the plan's (WithLease)
}

// Plan is a v2 write as one v3 transaction: if every Cmp still holds (nothing
// the decision depended on changed since the snapshot), apply Ops.
type Plan struct {
	Cmps []Cmp
	Ops  []Op
	// TTL > 0 asks for a lease of that many seconds, attached to the ops
	// marked WithLease; Bind records it.
	TTL     int64
	Refresh bool
	event   Event
	layout  Layout
	lease   int64
	// prevLeased: the node at the path carried a lease (a watcher
	// decoding by rule could not tell its TTL later, and would take its
	// delete for an expiry).
	prevLeased bool
	// byRule: Bind left the journal record out (decodesByRule).
	byRule bool
	// journal is the record Bind put; journalLease, the lease it goes on.
	journal      Journal
	journalLease int64
	// inOrder: a POST's create, named after the index it expects.
	inOrder bool
}

// Guards are the compares that hold while nothing the decision on s
// depends on has changed. A file at the path shadows whatever else is at or
// below it (a marker, keys below it written by v3 clients): while the file
// and the ancestors are unchanged, every v2 decision on s is the same
// whatever those do, so they are not guarded then.
func (l Layout) Guards(s *Snapshot) []Cmp {
	k := l.keysOf(s.Path)
	// One more for a POST's sequence key (planCreate).
	cs := make([]Cmp, 0, 5+2*len(s.Ancestors))
	single := func(key string, kv *KV) {
		var rev int64
		if kv != nil {
			rev = kv.ModRevision
		}
		cs = append(cs, Cmp{Key: key, Target: CmpMod, Result: "=", Value: rev})
	}
	prefix := func(pfx string, kv *KV) {
		if kv == nil {
			cs = append(cs, Cmp{Key: pfx, End: childEnd(pfx), Target: CmpCreate, Result: "=", Value: 0})
		} else {
			cs = append(cs, Cmp{Key: kv.Key, Target: CmpMod, Result: "=", Value: kv.ModRevision})
		}
	}
	if !s.isRoot() {
		single(k.data(), s.File)
	}
	if s.File == nil {
		if !s.isRoot() {
			single(k.marker(), s.Marker)
		}
		prefix(k.dataChild, s.DataChild)
		prefix(k.markerChild, s.MarkerChild)
	}
	for _, a := range s.Ancestors {
		if !strings.HasPrefix(s.Path, a.Path) { // not built by NewSnapshot
			single(l.DataKey(a.Path), a.File)
			single(l.MarkerKey(a.Path), a.Marker)
			continue
		}
		single(k.dataAt(a.Path), a.File)
		single(k.markerAt(a.Path), a.Marker)
	}
	return cs
}

// PlanWrite decides a v2 write (PUT, POST or DELETE) against a snapshot the
// way v2's store does, returning the v2 error or the v3 transaction.
func (l Layout) PlanWrite(r *Request, s *Snapshot, ls Leases, now time.Time) (*Plan, *Error) {
	p, err := l.planWrite(r, s, ls, now)
	if err == nil {
		l.recordOwnFiles(p, s)
	}
	return p, err
}

// recordOwnFiles puts (deletes) the OwnFileKey of the file s.Path when p
// puts (deletes) it and no marker vouches for its directory: the root, one
// this bridge does not serve, or one marked AboveMarker.
func (l Layout) recordOwnFiles(p *Plan, s *Snapshot) {
	dir := Parent(s.Path)
	vouched := dir != "/" && l.Serves(dir)
	if n := len(s.Ancestors); vouched && n > 0 && s.Ancestors[n-1].Path == dir {
		m := s.Ancestors[n-1].Marker
		vouched = m == nil || m.Lease != 0 || string(m.Value) != AboveMarker
	}
	if s.Path == "/" || vouched {
		return
	}
	for _, op := range p.Ops {
		if op.Key != l.DataKey(s.Path) || op.End != "" {
			continue
		}
		switch op.Type {
		case OpPut:
			p.Ops = append(p.Ops, Op{Type: OpPut, Key: l.OwnFileKey(s.Path), WithLease: op.WithLease})
		case OpDelete:
			p.Ops = append(p.Ops, Op{Type: OpDelete, Key: l.OwnFileKey(s.Path)})
		}
	}
}

func (l Layout) planWrite(r *Request, s *Snapshot, ls Leases, now time.Time) (*Plan, *Error) {
	idx := Index(s.Rev)
	ttl := r.TTL
	if r.Method == "DELETE" {
		ttl = nil // v2 parses a DELETE's ttl but has no use for it
	}
	if ttl != nil && *ttl > MaxLeaseTTL {
		return nil, NewError(EcodeTTLNaN, fmt.Sprintf("ttl exceeds the maximum of %d", int64(MaxLeaseTTL)), 0)
	}
	p := &Plan{layout: l, Refresh: r.Refresh,
		prevLeased: (s.File != nil && s.File.Lease != 0) || (s.Marker != nil && s.Marker.Lease != 0)}
	p.Cmps = l.Guards(s)
	if ttl != nil {
		p.TTL = int64(*ttl)
		if p.TTL < 1 {
			p.TTL = 1 // v2's ttl=0 expires at once; v3 rounds to its minimum lease
		}
	}
	switch r.Method {
	case "POST":
		return p, l.planCreate(p, r, s, now, true)
	case "DELETE":
		if r.HasCompare() {
			return p, l.planCompareAndDelete(p, r, s, ls, now)
		}
		return p, l.planDelete(p, r, s, ls, now)
	case "PUT":
	default:
		return nil, NewError(EcodeRaftInternal, "unsupported method "+r.Method, idx)
	}
	var err *Error
	switch {
	case r.PrevExist != nil && *r.PrevExist && !r.HasCompare():
		err = l.planUpdate(p, r, s, ls, now)
	case r.PrevExist != nil && *r.PrevExist, r.PrevExist == nil && r.HasCompare():
		err = l.planCompareAndSwap(p, r, s, ls, now)
	case r.PrevExist != nil:
		err = l.planCreate(p, r, s, now, false)
	default:
		err = l.planSet(p, r, s, ls, now)
	}
	if err == nil && !r.Refresh && s.File != nil && !utf8.Valid(s.File.Value) {
		// v2's JSON cannot carry these bytes (a v3 client's binary value,
		// such as Kubernetes' protobuf; v2 clients cannot write them): a v2
		// client read a changed copy, and writing back what it read would
		// change the value unseen.
		return p, NewError(EcodeNotFile, r.Path+" holds a value a v3 client wrote that is not valid UTF-8 (binary data), "+
			"which v2 cannot show faithfully: the bridge does not replace it (a delete does)", idx)
	}
	return p, err
}

// markAncestors marks the directories above s.Path it creates; a bridge
// serving some subtrees marks those above them AboveMarker.
func (l Layout) markAncestors(p *Plan, s *Snapshot) {
	for _, a := range s.Ancestors {
		if a.Marker == nil {
			op := Op{Type: OpPut, Key: l.MarkerKey(a.Path)}
			if !l.Serves(a.Path) {
				op.Value = []byte(AboveMarker)
			}
			p.Ops = append(p.Ops, op)
		}
	}
}

// putNode writes the new node at path: a file or a directory marker.
func (l Layout) putNode(p *Plan, path string, dir bool, value string) *Node {
	if dir {
		p.Ops = append(p.Ops, Op{Type: OpPut, Key: l.MarkerKey(path), WithLease: p.TTL > 0})
		if p.TTL > 0 {
			p.Ops = append(p.Ops, Op{Type: OpPut, Key: l.TTLDirKey(path)})
		} else {
			p.Ops = append(p.Ops, Op{Type: OpDelete, Key: l.TTLDirKey(path)})
		}
		return &Node{Key: path, Dir: true}
	}
	p.Ops = append(p.Ops, Op{Type: OpPut, Key: l.DataKey(path), Value: []byte(value), WithLease: p.TTL > 0})
	return &Node{Key: path, Value: strPtr(value)}
}

func (l Layout) planSet(p *Plan, r *Request, s *Snapshot, ls Leases, now time.Time) *Error {
	idx := Index(s.Rev)
	if err := s.ancestorFile(); err != nil {
		return err
	}
	value := r.Value
	if r.Refresh {
		if !s.exists() {
			return s.MissError()
		}
		if s.fileExists() {
			value = string(s.File.Value)
		}
	}
	if s.isRoot() {
		return NewError(EcodeRootROnly, "/", idx)
	}
	if s.dirExists() {
		return NewError(EcodeNotFile, s.Path, idx)
	}
	l.markAncestors(p, s)
	p.event = Event{Action: ActionSet}
	if s.fileExists() {
		p.event.PrevNode = s.node(ls, now)
		if r.Dir {
			p.Ops = append(p.Ops, Op{Type: OpDelete, Key: l.DataKey(s.Path)})
		}
	}
	p.event.Node = l.putNode(p, s.Path, r.Dir, value)
	return nil
}

func (l Layout) planCreate(p *Plan, r *Request, s *Snapshot, now time.Time, unique bool) *Error {
	idx := Index(s.Rev)
	target := s.Path
	if unique {
		p.inOrder = true
		// In-order names follow the revision the write will most likely get,
		// and a per-directory sequence key keeps them unique and increasing
		// across bridges even when other writes interleave.
		n := s.Rev + 1
		if s.Seq != nil {
			if last, err := strconv.ParseInt(string(s.Seq.Value), 10, 64); err == nil && last >= n {
				n = last + 1
			}
		}
		// Named, as v2 names them, by the createdIndex they will most
		// likely get.
		target = childPath(s.Path) + fmt.Sprintf("%020d", Index(n))
		var seqRev int64
		if s.Seq != nil {
			seqRev = s.Seq.ModRevision
		}
		p.Cmps = append(p.Cmps, Cmp{Key: l.SeqKey(s.Path), Target: CmpMod, Result: "=", Value: seqRev})
		p.Ops = append(p.Ops, Op{Type: OpPut, Key: l.SeqKey(s.Path), Value: []byte(strconv.FormatInt(n, 10))})
	} else if s.isRoot() {
		return NewError(EcodeRootROnly, "/", idx)
	}
	if err := s.ancestorFile(); err != nil {
		return err
	}
	if unique {
		if s.fileExists() {
			return NewError(EcodeNotDir, s.Path, idx)
		}
		l.markAncestors(p, s)
		if !s.isRoot() && s.Marker == nil {
			p.Ops = append(p.Ops, Op{Type: OpPut, Key: l.MarkerKey(s.Path)})
		}
	} else {
		if s.exists() {
			return NewError(EcodeNodeExist, s.Path, idx)
		}
		l.markAncestors(p, s)
	}
	p.event = Event{Action: ActionCreate}
	p.event.Node = l.putNode(p, target, r.Dir, r.Value)
	return nil
}

func (l Layout) planUpdate(p *Plan, r *Request, s *Snapshot, ls Leases, now time.Time) *Error {
	idx := Index(s.Rev)
	if s.isRoot() {
		return NewError(EcodeRootROnly, "/", idx)
	}
	if !s.exists() {
		return s.MissError()
	}
	if s.dirExists() && r.Value != "" {
		return NewError(EcodeNotFile, s.Path, idx)
	}
	value := r.Value
	if r.Refresh && s.fileExists() {
		value = string(s.File.Value)
	}
	p.event = Event{Action: ActionUpdate, PrevNode: s.node(ls, now)}
	l.markAncestors(p, s)
	p.event.Node = l.putNode(p, s.Path, s.dirExists(), value)
	p.event.Node.CreatedIndex = p.event.PrevNode.CreatedIndex
	return nil
}

// causePath is how a v2 error names the node at p: v2 trims its internal
// keys prefix "/1" from causes, and the root's internal path is "/1" itself.
func causePath(p string) string {
	if p == "/" {
		return ""
	}
	return p
}

// compareFailCause is v2's getCompareFailCause.
func compareFailCause(kv *KV, prevValue string, prevIndex uint64) (string, bool) {
	// Any index of the node's revision matches: a read the mirror could
	// not answer reports the revision's last index, a watch event of a
	// revision with several events one of the others.
	indexOK := prevIndex == 0 || Revision(prevIndex) == kv.ModRevision
	valueOK := prevValue == "" || string(kv.Value) == prevValue
	switch {
	case indexOK && valueOK:
		return "", true
	case indexOK:
		return fmt.Sprintf("[%v != %v]", prevValue, string(kv.Value)), false
	case valueOK:
		return fmt.Sprintf("[%v != %v]", prevIndex, kv.Modified()), false
	default:
		return fmt.Sprintf("[%v != %v] [%v != %v]", prevValue, string(kv.Value), prevIndex, kv.Modified()), false
	}
}

func (l Layout) planCompareAndSwap(p *Plan, r *Request, s *Snapshot, ls Leases, now time.Time) *Error {
	idx := Index(s.Rev)
	if s.isRoot() {
		return NewError(EcodeRootROnly, "/", idx)
	}
	if !s.exists() {
		return s.MissError()
	}
	if s.dirExists() {
		return NewError(EcodeNotFile, s.Path, idx)
	}
	if cause, ok := compareFailCause(s.File, r.PrevValue, r.PrevIndex); !ok {
		return NewError(EcodeTestFailed, cause, idx)
	}
	value := r.Value
	if r.Refresh {
		value = string(s.File.Value)
	}
	p.event = Event{Action: ActionCompareAndSwap, PrevNode: s.node(ls, now)}
	p.event.Node = l.putNode(p, s.Path, false, value)
	p.event.Node.CreatedIndex = s.File.Created()
	return nil
}

// deleteNode removes the node at s.Path and, for a directory, its subtree.
func (l Layout) deleteNode(p *Plan, s *Snapshot, action string, ls Leases, now time.Time) {
	prev := s.node(ls, now)
	p.event = Event{Action: action, PrevNode: prev,
		Node: &Node{Key: s.Path, Dir: prev.Dir, CreatedIndex: prev.CreatedIndex}}
	if s.fileExists() {
		p.Ops = append(p.Ops, Op{Type: OpDelete, Key: l.DataKey(s.Path)})
		return
	}
	// The in-order sequence keys of the directory and those below stay:
	// a POST decided before the delete and committed after the directory
	// was made again must fail its guard on the sequence key, which it
	// would pass if the key were gone again, and the names of a directory
	// made again keep increasing, as v2's do (a small key per directory
	// ever posted to, as a directory that expires leaves too).
	dc, mc := l.DataChildPrefix(s.Path), l.MarkerChildPrefix(s.Path)
	p.Ops = append(p.Ops,
		Op{Type: OpDelete, Key: dc, End: PrefixEnd(dc)},
		Op{Type: OpDelete, Key: l.MarkerKey(s.Path)},
		Op{Type: OpDelete, Key: mc, End: PrefixEnd(mc)},
	)
	p.Ops = append(p.Ops, l.deleteTTLDirRecords(s.Path)...)
}

func (l Layout) planDelete(p *Plan, r *Request, s *Snapshot, ls Leases, now time.Time) *Error {
	idx := Index(s.Rev)
	if s.isRoot() {
		return NewError(EcodeRootROnly, "/", idx)
	}
	if !s.exists() {
		return s.MissError()
	}
	dir := r.Dir || r.Recursive
	if s.dirExists() {
		if !dir {
			return NewError(EcodeNotFile, s.Path, idx)
		}
		if s.hasChildren() && !r.Recursive {
			return NewError(EcodeDirNotEmpty, s.Path, idx)
		}
	}
	l.deleteNode(p, s, ActionDelete, ls, now)
	return nil
}

func (l Layout) planCompareAndDelete(p *Plan, r *Request, s *Snapshot, ls Leases, now time.Time) *Error {
	idx := Index(s.Rev)
	if !s.exists() {
		return s.MissError()
	}
	if s.dirExists() {
		// v2 names the directory by its internal path: for the root that
		// is the keys namespace itself, which trims to an empty cause.
		return NewError(EcodeNotFile, causePath(s.Path), idx)
	}
	if cause, ok := compareFailCause(s.File, r.PrevValue, r.PrevIndex); !ok {
		return NewError(EcodeTestFailed, cause, idx)
	}
	l.deleteNode(p, s, ActionCompareAndDelete, ls, now)
	return nil
}

// Journal is the record a bridge write leaves under the meta prefix in the
// same revision, so watchers learn the exact v2 action. Values are left out
// (the watch takes them from the data events); an index of 0 means "the
// revision of this record".
type Journal struct {
	Action     string `json:"a"`
	Node       *Node  `json:"n,omitempty"`
	PrevNode   *Node  `json:"p,omitempty"`
	Refresh    bool   `json:"r,omitempty"`
	Sweep      bool   `json:"s,omitempty"`
	DataPrefix string `json:"dp,omitempty"`
	Place      int    `json:"i,omitempty"` // 1 + its place in a transaction of several journaled writes
}

func stripValue(n *Node) *Node {
	if n == nil {
		return nil
	}
	c := *n
	if c.Value != nil {
		c.Value = strPtr("")
	}
	return &c
}

// Bind records the lease granted for the plan (0 when TTL == 0) and its
// expiration, and appends the journal record to the ops, and the lease
// record too unless an earlier write already made it (a shared lease's
// record is written once: it goes with the lease).
func (p *Plan) Bind(lease int64, exp time.Time, now time.Time, leaseRecorded bool) {
	p.lease = lease
	if lease != 0 {
		p.event.Node.SetExpiration(exp, now)
		expNs := []byte(strconv.FormatInt(exp.UnixNano(), 10))
		// A TTL directory's marker carries its expiration too, so the
		// expire event can show it even after the lease and its record
		// are gone.
		for i := range p.Ops {
			if _, marker := p.layout.PathOfMarker(p.Ops[i].Key); marker && p.Ops[i].WithLease {
				p.Ops[i].Value = expNs
			}
		}
		if !leaseRecorded {
			p.Ops = append(p.Ops, Op{Type: OpPut, Key: p.layout.LeaseKey(lease), Value: expNs, WithLease: true})
		}
	}
	if p.byRule = p.decodesByRule(); p.byRule {
		return
	}
	p.journal = Journal{Action: p.event.Action, Node: stripValue(p.event.Node), PrevNode: stripValue(p.event.PrevNode),
		Refresh: p.Refresh, DataPrefix: p.layout.DataPrefix}
	b := p.journal.encode()
	// The record at JournalKey is for bridges of the release before, which
	// know no other; the next release leaves it out.
	p.Ops = append(p.Ops, Op{Type: OpPut, Key: p.layout.JournalKey(), Value: b})
	if p.event.Node != nil {
		p.Ops = append(p.Ops, Op{Type: OpPut, Key: p.layout.RecordKey(p.event.Node.Key), Value: b, Lease: p.journalLease})
	}
}

// encode is the record's JSON.
func (j *Journal) encode() []byte {
	b, err := j.appendJSON(make([]byte, 0, 256))
	if err != nil {
		b, _ = json.Marshal(j) // what the record always was, even then
	}
	return b
}

// NeedsRecord reports whether the plan, once bound, puts a journal record:
// its writer then gives SetJournalLease the lease the record goes on first.
func (p *Plan) NeedsRecord() bool { return !p.decodesByRule() }

// SetJournalLease names the lease Bind puts the journal record on (none
// when 0): the record matters only in its own revision, and the lease
// takes it away, so records of the paths written do not pile up.
func (p *Plan) SetJournalLease(id int64) { p.journalLease = id }

// decodesByRule reports whether a watcher decoding the plan's revision
// without a journal record (DecodeRevision's rule for v3 clients' writes)
// gets exactly the event the plan answers with, so the record can be left
// out: one put less per write for etcd, and no JSON to decode for every
// bridge. That holds for a file's set over a file (rule: a put over a
// value is set, a new node as v2's set makes), its create (a put without
// one is create) and its delete (a deleted key with a lease would be
// expire), none of them with a TTL before or after, when the
// transaction changes no other data key and no marker but creates the
// markers of missing ancestors (which the rule passes over). A refresh, an
// update, a compare-and-swap or -delete, and anything on a directory keep
// the record.
func (p *Plan) decodesByRule() bool {
	ev := &p.event
	if p.Refresh || ev.Node == nil || ev.Node.Dir || (ev.PrevNode != nil && ev.PrevNode.Dir) {
		return false
	}
	if p.TTL > 0 || p.prevLeased {
		// A TTL is known for sure only at the write: decoded later (from
		// history, by another bridge, after its lease ran out) the node
		// would show none.
		return false
	}
	switch ev.Action {
	case ActionSet:
		if ev.PrevNode == nil {
			return false // the rule would say create
		}
	case ActionCreate:
		if ev.PrevNode != nil {
			return false
		}
	case ActionDelete:
		if ev.PrevNode == nil {
			return false
		}
	default:
		return false
	}
	own := p.layout.DataKey(ev.Node.Key)
	for _, o := range p.Ops {
		if _, data := p.layout.PathOfData(o.Key); data && o.Key != own {
			return false
		}
		if _, marker := p.layout.PathOfMarker(o.Key); marker && (o.Type != OpPut || o.WithLease) {
			return false
		}
		if o.End != "" {
			return false
		}
	}
	return true
}

// Lease is the lease Bind recorded.
func (p *Plan) Lease() int64 { return p.lease }

// Action is the v2 action the plan performs.
func (p *Plan) Action() string { return p.event.Action }

// Batchable reports whether the bound plan may share its revision with
// other writes, each in a transaction nested in one: the revision then
// decodes into exactly one event per write, the writes' own, in the order
// they were applied (so each write's index is EventIndex of its place).
// Writes without a journal record decode by rule; journaled ones (Journaled)
// must go with journaled ones only, each putting its record at the slot of
// its place (OpsInSlot), after its own changes. A refresh is left out (it
// makes no event, and its answer's index would be no event's); so is an
// in-order create (named after the revision's own index, it would get a
// lower one in a batch, and its name would no longer be at most its
// createdIndex).
func (p *Plan) Batchable() bool { return !p.Refresh && !p.inOrder }

// Journaled reports whether the bound plan puts a journal record.
func (p *Plan) Journaled() bool { return !p.byRule }

// OpsInSlot is the plan's operations with its journal record put at
// JournalSlotKey(i) instead of JournalKey, for the write at place i of a
// transaction of several journaled writes.
func (p *Plan) OpsInSlot(i int) []Op {
	ops := append([]Op(nil), p.Ops...)
	if p.byRule {
		return ops
	}
	j := p.journal
	j.Place = i + 1
	for k := range ops {
		switch {
		case ops[k].Key == p.layout.JournalKey():
			ops[k].Key = p.layout.JournalSlotKey(i)
		case j.Node != nil && ops[k].Key == p.layout.RecordKey(j.Node.Key):
			ops[k].Value = j.encode()
		}
	}
	return ops
}

// Result is the v2 response of the plan committed at revision rev.
func (p *Plan) Result(rev int64) *Event { return p.ResultAt(Index(rev)) }

// ResultAt is the v2 response of the plan committed as the event of index
// idx (one of several events of its revision). X-Etcd-Index is idx too, as
// v2 answers a write with the index it made: a client that resumes a watch
// after it sees the later events of the revision.
func (p *Plan) ResultAt(idx uint64) *Event {
	ev := p.event
	n := *ev.Node
	n.ModifiedIndex = idx
	if n.CreatedIndex == 0 {
		n.CreatedIndex = idx
	}
	ev.Node = &n
	ev.EtcdIndex = idx
	return &ev
}

// SweepTxn is the transaction that removes what is left below a directory
// whose TTL ran out (its marker carried the lease; its children carry none):
// guarded on the marker being gone, it deletes the subtree's data and
// markers and leaves a journal record marked as a sweep, which watchers
// ignore (the expire event already told them). Bridges racing to sweep the
// same directory are harmless: the guard lets the first one act.
//
// Its journal record goes on journalLease, as a write's (SetJournalLease).
func (l Layout) SweepTxn(dir string, journalLease int64) ([]Cmp, []Op) {
	dc, mc := l.DataChildPrefix(dir), l.MarkerChildPrefix(dir)
	j, _ := json.Marshal(Journal{Action: ActionExpire, Node: &Node{Key: dir, Dir: true}, Sweep: true,
		DataPrefix: l.DataPrefix}) // plain fields: cannot fail
	ops := []Op{
		{Type: OpDelete, Key: dc, End: PrefixEnd(dc)},
		{Type: OpDelete, Key: mc, End: PrefixEnd(mc)},
	}
	ops = append(ops, l.deleteTTLDirRecords(dir)...)
	ops = append(ops, Op{Type: OpPut, Key: l.JournalKey(), Value: j},
		Op{Type: OpPut, Key: l.RecordKey(dir), Value: j, Lease: journalLease})
	return []Cmp{{Key: l.MarkerKey(dir), Target: CmpCreate, Result: "=", Value: 0}}, ops
}

// deleteTTLDirRecords removes the TTL records of dir and of every directory
// below it.
func (l Layout) deleteTTLDirRecords(dir string) []Op {
	below := l.TTLDirKey(childPath(dir))
	if dir == "/" {
		below = l.TTLDirPrefix()
	}
	return []Op{{Type: OpDelete, Key: l.TTLDirKey(dir)}, {Type: OpDelete, Key: below, End: PrefixEnd(below)}}
}

// GetReads are the reads of a v2 GET of p, in one read-only transaction: the
// file, the directory marker, and the data and marker keys below p.
func (l Layout) GetReads(p string) []Read {
	dc, mc := l.DataChildPrefix(p), l.MarkerChildPrefix(p)
	return []Read{{Key: l.DataKey(p)}, {Key: l.MarkerKey(p)}, {Key: dc, End: PrefixEnd(dc)}, {Key: mc, End: PrefixEnd(mc)}}
}
