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
			prev := DirNode(p, e.Prev, nil, now)
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
		return true
	}
	return false
}
