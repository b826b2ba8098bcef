// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"encoding/json"
	"path"
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
// none. Writes by v3 clients are reported by DESIGN §2's rules. Sweeps lists
// directories whose TTL ran out and whose contents must still be removed.
func (l Layout) DecodeRevision(rev int64, evs []V3Event, ls Leases, now time.Time) (out []*Event, sweeps []string) {
	jk := l.JournalKey()
	for i := range evs {
		if evs[i].KV.Key == jk && !evs[i].Delete {
			var j Journal
			if json.Unmarshal(evs[i].KV.Value, &j) == nil && j.DataPrefix == l.DataPrefix && j.Node != nil {
				if j.Refresh || j.Sweep {
					return nil, nil
				}
				return []*Event{l.fromJournal(rev, &j, evs)}, nil
			}
		}
	}
	// No journal record of ours: a v3 client's write or a lease expiry.
	var expiredDirs []string
	for _, e := range evs {
		if p, ok := l.PathOfMarker(e.KV.Key); ok && e.Delete && e.Prev != nil && e.Prev.Lease != 0 && validRel(p[1:]) {
			expiredDirs = append(expiredDirs, p)
			prev := DirNode(p, e.Prev, ls, now)
			out = append(out, &Event{Action: ActionExpire, PrevNode: prev,
				Node: &Node{Key: p, Dir: true, ModifiedIndex: uint64(rev), CreatedIndex: prev.CreatedIndex}})
		}
	}
	for _, e := range evs {
		p, ok := l.PathOfData(e.KV.Key)
		if !ok || !validRel(p[1:]) || underAny(p, expiredDirs) {
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
			}
			ev.Node = &Node{Key: p, ModifiedIndex: uint64(rev)}
			if e.Prev != nil {
				ev.Node.CreatedIndex = uint64(e.Prev.CreateRevision)
			}
		} else {
			ev.Action = ActionSet
			if e.Prev == nil {
				ev.Action = ActionCreate
			}
			ev.Node = FileNode(p, &e.KV, ls, now)
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
	node.ModifiedIndex = uint64(rev)
	if node.CreatedIndex == 0 {
		node.CreatedIndex = uint64(rev)
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
