// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"cmp"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// V3Event is one v3 watch event, with its previous key-value when known.
type V3Event struct {
	Delete bool
	KV     KV
	Prev   *KV
}

// DecodeRevision turns the v3 events of one revision (as seen by a watch over
// Layout.WatchRange) into v2 events. A bridge write carries a journal record
// and yields exactly the event the writer answered with; a refresh yields
// none. A revision without one (a v3 client's write, a lease expiry) is
// decoded by rule: a deleted marker that carried a lease is the expiry of
// its directory; a deleted data key is expire if it carried a lease, else
// delete; a put is create without a previous value, else set. Sweeps lists
// directories whose TTL ran out and whose contents must still be removed.
//
// A journal record is believed only when it matches the data and marker
// changes of its own revision (see journalMatches): one that does not — a v3
// client writing the journal key by hand, a forged "delete" or a sweep
// record hiding a real write — is ignored (the revision is decoded by rule)
// and reported as forged.
//
// A transaction that carried several journaled bridge writes (group commit)
// leaves one record per write at JournalSlotKey, each after that write's own
// changes: the revision is decoded write by write, each part ending at its
// record and checked against it alone.
//
// Bridges put each write's record at RecordKey, its place in the
// transaction in it; those of the release before, at JournalKey or its
// slots. A revision is decoded from the former when it has any.
func (l Layout) DecodeRevision(rev int64, evs []V3Event, ls Leases, now time.Time) (out []*Event, sweeps []string, forged bool) {
	var records int
	place := 0
	for i := range evs {
		if l.isRecordKey(evs[i].KV.Key) && !evs[i].Delete {
			records++
			var j Journal
			if decodeJournal(evs[i].KV.Value, &j) == nil {
				place = max(place, j.Place)
			}
		}
	}
	if place > 0 || records > 1 {
		return l.decodeBatch(rev, evs, ls, now, l.isRecordKey, func(_ string, j *Journal) int { return j.Place })
	}
	jk := l.JournalKey()
	isRecord := func(key string) bool { return key == jk }
	if records == 1 {
		isRecord = l.isRecordKey
	} else {
		for i := range evs {
			if l.isJournalSlot(evs[i].KV.Key) {
				return l.decodeBatch(rev, evs, ls, now, l.isJournalSlot, func(key string, _ *Journal) int { return slotPlace(key) })
			}
		}
	}
	for i := range evs {
		if !isRecord(evs[i].KV.Key) || evs[i].Delete {
			continue
		}
		j, use, f := l.readRecord(evs[i].KV.Value, evs)
		if !use {
			forged = forged || f
			continue
		}
		if j.Refresh || j.Sweep {
			return nil, nil, false
		}
		return []*Event{l.fromJournal(rev, j, evs)}, nil, false
	}
	out, sweeps = l.decodeByRule(rev, evs, ls, now)
	NumberEvents(rev, out)
	return out, sweeps, forged
}

// readRecord reads a journal record, value, put with the changes evs. use
// reports whether the record describes them and the revision is decoded
// from it; when it does not, forged reports whether it was no true record
// of a bridge (unreadable, or not matching evs) rather than one of a bridge
// with another data prefix sharing the meta prefix. j is the record read,
// nil when unreadable.
func (l Layout) readRecord(value []byte, evs []V3Event) (j *Journal, use, forged bool) {
	j = &Journal{}
	switch err := decodeJournal(value, j); {
	case err != nil || j.Node == nil:
		return nil, false, true
	case j.DataPrefix != l.DataPrefix || !l.Serves(j.Node.Key):
		// Another data prefix's write, or one outside the served
		// subtrees: what of it is served is decoded by rule.
		return j, false, false
	case !l.journalMatches(j, evs):
		return j, false, true
	}
	return j, true, false
}

// decodeBatch decodes a revision of several journaled writes, each with its
// record in a slot of the journal. Each write's changes are those its
// record accounts for (slotOf); a write is decoded from its record when the
// record matches them (journalMatches), by rule otherwise (forged). Changes
// no record accounts for are decoded by rule after them. A sweep or a
// refresh record in a slot yields nothing; sweeps are never batched, so one
// there is forged. The parts are found by key, not by the order of the
// events, which a bridge watching several ranges does not see.
//
// isSlot tells the records' keys; place, a record's place.
func (l Layout) decodeBatch(rev int64, evs []V3Event, ls Leases, now time.Time,
	isSlot func(key string) bool, place func(key string, j *Journal) int) (out []*Event, sweeps []string, forged bool) {
	byRule := func(part []V3Event) {
		o, sw := l.decodeByRule(rev, part, ls, now)
		out, sweeps = append(out, o...), append(sweeps, sw...)
	}
	type slot struct {
		rec   V3Event
		j     *Journal
		place int
		part  []V3Event
	}
	var slots []*slot
	for _, e := range evs {
		if !isSlot(e.KV.Key) || e.Delete {
			continue
		}
		j := &Journal{}
		if decodeJournal(e.KV.Value, j) != nil || j.Node == nil {
			j = nil
		}
		s := &slot{rec: e, j: j}
		if j != nil {
			s.place = place(e.KV.Key, j)
		}
		slots = append(slots, s)
	}
	slices.SortStableFunc(slots, func(a, b *slot) int { return cmp.Compare(a.place, b.place) })
	var rest []V3Event
	for _, e := range evs {
		if isSlot(e.KV.Key) {
			continue
		}
		i := slices.IndexFunc(slots, func(s *slot) bool { return s.j != nil && l.slotOf(s.j, e) })
		if i < 0 {
			rest = append(rest, e)
			continue
		}
		slots[i].part = append(slots[i].part, e)
	}
	for _, s := range slots {
		part := append(s.part, s.rec)
		switch j, use, f := l.readRecord(s.rec.KV.Value, part); {
		case j != nil && j.Sweep: // sweeps are never batched
			forged = true
			byRule(part)
		case !use:
			forged = forged || f
			byRule(part)
		case !j.Refresh: // a refresh makes no event
			out = append(out, l.fromJournal(rev, j, part))
		}
	}
	if len(rest) > 0 {
		byRule(rest)
	}
	NumberEvents(rev, out)
	return out, sweeps, forged
}

// slotOf reports whether e is a change the write j records makes: a data
// key or marker at or below its node. (A batch's writes change disjoint
// keys. The markers a write creates above its node are left to the changes
// decoded by rule, which make no event of them.)
func (l Layout) slotOf(j *Journal, e V3Event) bool {
	q, ok := l.PathOfData(e.KV.Key)
	if !ok {
		if q, ok = l.PathOfMarker(e.KV.Key); !ok {
			return false
		}
	}
	return Within(j.Node.Key, q)
}

// slotPlace is the place of a journal slot key in its transaction.
func slotPlace(key string) int {
	n, _ := strconv.Atoi(key[strings.LastIndexByte(key, '/')+1:])
	return n
}

// IsSweep reports whether the changes of a revision are a sweep of a
// directory whose TTL ran out (SweepTxn) and nothing else: its journal
// record, believed, says so. A sweep is no client's write: the expire event
// of the directory, at the lease's revision, told what it removes.
func (l Layout) IsSweep(evs []V3Event) bool {
	jk := l.JournalKey()
	for i := range evs {
		if (evs[i].KV.Key != jk && !l.isRecordKey(evs[i].KV.Key)) || evs[i].Delete {
			continue
		}
		var j Journal
		if decodeJournal(evs[i].KV.Value, &j) != nil || j.Node == nil || j.DataPrefix != l.DataPrefix {
			continue
		}
		return j.Sweep && l.journalMatches(&j, evs)
	}
	return false
}

// journalMatches reports whether the changes of a revision are what a
// bridge write of j makes: the node's own key put (a set, create, update,
// compare-and-swap or refresh — a refresh keeps the value, and changes
// nothing else in the subtree) or removed (a delete), and nothing changed
// outside the node's subtree but markers of its ancestors (created with
// it); a sweep removes only what is below its directory.
func (l Layout) journalMatches(j *Journal, evs []V3Event) bool {
	p := j.Node.Key
	if p == "" || p[0] != '/' || (p != "/" && !validRel(p[1:])) {
		return false
	}
	own := l.DataKey(p)
	if j.Node.Dir {
		own = l.MarkerKey(p)
	}
	below := func(q string) bool { return q == p || strings.HasPrefix(q, childPath(p)) }
	var putOwn, removed bool
	for _, e := range evs {
		q, isData := l.PathOfData(e.KV.Key)
		qm, isMarker := l.PathOfMarker(e.KV.Key)
		switch {
		case isData:
		case isMarker:
			q = qm
		default:
			continue // journal, sequence and lease records
		}
		if !below(q) {
			if isMarker && !e.Delete && strings.HasPrefix(p, childPath(q)) {
				continue // an ancestor's marker, written with its first child
			}
			return false
		}
		if j.Sweep && (!e.Delete || q == p) {
			return false
		}
		if j.Refresh && e.KV.Key != own && (!e.Delete || q != p) {
			// A refresh changes only its node (a directory's may replace
			// the file at its path): a record that says so hides nothing.
			return false
		}
		if e.Delete {
			removed = true
			continue
		}
		if e.KV.Key == own {
			putOwn = true
			if j.Refresh && !j.Node.Dir && e.Prev != nil && string(e.Prev.Value) != string(e.KV.Value) {
				return false // a refresh keeps the value
			}
		}
	}
	switch {
	case j.Sweep:
		return j.Action == ActionExpire && j.Node.Dir
	case j.Action == ActionDelete || j.Action == ActionCompareAndDelete:
		return removed && !putOwn
	case j.Action == ActionSet || j.Action == ActionCreate || j.Action == ActionUpdate || j.Action == ActionCompareAndSwap:
		return putOwn
	}
	return false
}

// decodeByRule decodes a revision without a (believable) journal record.
func (l Layout) decodeByRule(rev int64, evs []V3Event, ls Leases, now time.Time) (out []*Event, sweeps []string) {
	// No journal record of ours: a v3 client's write or a lease expiry.
	var expiredDirs []string
	for _, e := range evs {
		if p, ok := l.PathOfMarker(e.KV.Key); ok && e.Delete && e.Prev != nil && e.Prev.Lease != 0 && validRel(p[1:]) && l.Serves(p) {
			expiredDirs = append(expiredDirs, p)
			prev := DirNode(p, e.Prev, ls, now)
			prev.TTL = 0 // taken at the moment of expiry, as v2 did
			out = append(out, &Event{Action: ActionExpire, PrevNode: prev,
				Node: &Node{Key: p, Dir: true, ModifiedIndex: Index(rev), CreatedIndex: prev.CreatedIndex}})
		}
	}
	for _, e := range evs {
		p, ok := l.PathOfData(e.KV.Key)
		if !ok || !validRel(p[1:]) || underAny(p, expiredDirs) || !l.Serves(p) {
			continue
		}
		ev := &Event{}
		if e.Prev != nil {
			ev.PrevNode = FileNode(p, e.Prev, ls, now)
		}
		if e.Delete {
			ev.Action = ActionDelete
			if e.Prev != nil && e.Prev.Lease != 0 {
				ev.Action = ActionExpire
				// v2 took prevNode at the moment of expiry: no time left,
				// so no ttl (decoding later, from history, must not count
				// it from now).
				ev.PrevNode.TTL = 0
			}
			ev.Node = &Node{Key: p, ModifiedIndex: Index(rev)}
			if e.Prev != nil {
				ev.Node.CreatedIndex = e.Prev.Created()
			}
		} else {
			ev.Action = ActionSet
			if e.Prev == nil {
				ev.Action = ActionCreate
			}
			ev.Node = FileNode(p, &e.KV, ls, now)
			// v2's set replaces the node: its event shows a new
			// createdIndex (later reads show the key's CreateRevision, as
			// after a bridge's set).
			ev.Node.CreatedIndex = ev.Node.ModifiedIndex
		}
		out = append(out, ev)
	}
	return out, expiredDirs
}

func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

func (l Layout) fromJournal(rev int64, j *Journal, evs []V3Event) *Event {
	node := *j.Node
	node.ModifiedIndex = Index(rev)
	if node.CreatedIndex == 0 {
		node.CreatedIndex = Index(rev)
	}
	ev := &Event{Action: j.Action, Node: &node}
	if j.PrevNode != nil {
		prev := *j.PrevNode
		ev.PrevNode = &prev
	}
	if node.Dir && (j.Action == ActionDelete || j.Action == ActionCompareAndDelete) {
		ev.Removed = l.removedPaths(node.Key, evs)
	}
	for _, e := range evs {
		if node.Value != nil && !e.Delete && e.KV.Key == l.DataKey(node.Key) {
			node.Value = strPtr(string(e.KV.Value))
		}
		if ev.PrevNode != nil && ev.PrevNode.Value != nil && e.Prev != nil && e.KV.Key == l.DataKey(ev.PrevNode.Key) {
			ev.PrevNode.Value = strPtr(string(e.Prev.Value))
		}
	}
	return ev
}

// removedPaths lists the directory dir and every path below it that the
// deletes of one revision removed (with the directories implied by them).
func (l Layout) removedPaths(dir string, evs []V3Event) map[string]bool {
	out := map[string]bool{dir: true}
	for _, e := range evs {
		if !e.Delete {
			continue
		}
		p, ok := l.PathOfData(e.KV.Key)
		if !ok {
			p, ok = l.PathOfMarker(e.KV.Key)
		}
		if !ok || !strings.HasPrefix(p, childPath(dir)) || !validRel(p[1:]) {
			continue
		}
		for q := p; q != dir && !out[q]; q = Parent(q) {
			out[q] = true
		}
	}
	return out
}

// SweptPaths is what the sweep of the expired directory dir removed, given
// the v3 keys (data and markers) it deleted: the directory itself and every
// path below it.
func (l Layout) SweptPaths(dir string, deleted []string) map[string]bool {
	evs := make([]V3Event, len(deleted))
	for i, k := range deleted {
		evs[i] = V3Event{Delete: true, KV: KV{Key: k}}
	}
	return l.removedPaths(dir, evs)
}

// SetRemoved records on the expire event of dir among evs what its expiry
// removed (nil: unknown, every path inside is told).
func SetRemoved(evs []*Event, dir string, removed map[string]bool) {
	for _, ev := range evs {
		if ev.Action == ActionExpire && ev.Node != nil && ev.Node.Dir && ev.Node.Key == dir {
			ev.Removed = removed
		}
	}
}

// isHiddenBelow is v2's isHidden: whether keyPath, seen from a watch on
// watchPath, passes through a hidden ('_') element.
func isHiddenBelow(watchPath, keyPath string) bool {
	if len(watchPath) > len(keyPath) {
		return false
	}
	return strings.Contains(path.Clean("/"+keyPath[len(watchPath):]), "/_")
}

// Matches is v2's rule for whether a watcher on key (recursive or not) is
// told of ev: its own key; with recursive, anything below it with a '/'
// boundary and no hidden element on the way; and the deletion or expiry of a
// directory that contains it.
func Matches(key string, recursive bool, ev *Event) bool {
	k := ev.Node.Key
	if k == key {
		return true
	}
	if recursive && (key == "/" || strings.HasPrefix(k, key+"/")) && !isHiddenBelow(key, k) {
		return true
	}
	if ev.Node.Dir && (ev.Action == ActionDelete || ev.Action == ActionExpire) && strings.HasPrefix(key, k+"/") {
		// v2 tells the watchers on the nodes the deletion removed; a path
		// inside that did not exist hears nothing.
		return ev.Removed == nil || ev.Removed[key]
	}
	return false
}

// WatchMatches tells a watcher created when the store index was current
// whether ev concerns it: events at or before current were in v2's history
// when the watch arrived (MatchesHistory), later ones reach it live
// (Matches).
func WatchMatches(key string, recursive bool, current uint64, ev *Event) bool {
	if ev.Index() <= current {
		return MatchesHistory(key, recursive, ev)
	}
	return Matches(key, recursive, ev)
}

// MatchesHistory is v2's rule for events already in its history, as
// EventHistory.scan applies it to a watch with a past waitIndex: its own
// key; with recursive, anything below it, hidden or not; and the deletion
// or expiry of a directory whose key is a plain string prefix of the
// watched key (no '/' boundary, so deleting /a answers a watch on /ab).
func MatchesHistory(key string, recursive bool, ev *Event) bool {
	k := ev.Node.Key
	if k == key {
		return true
	}
	if recursive && strings.HasPrefix(k, strings.TrimSuffix(key, "/")+"/") {
		return true
	}
	if (ev.Action == ActionDelete || ev.Action == ActionExpire) && ev.PrevNode != nil && ev.PrevNode.Dir &&
		strings.HasPrefix(key, ev.PrevNode.Key) {
		return true
	}
	return false
}
