// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"slices"
	"strings"
	"time"
)

// tnode is a directory tree assembled from a range of data keys and markers.
type tnode struct {
	path   string // v2 path; a child's is a part of its key
	name   string // last element of path
	file   *KV
	marker *KV
	// kids are the children in the order first met (the keys' order, so
	// nearly sorted); byName finds them once there are many and a key
	// comes back to one met before.
	kids    []*tnode
	byName  map[string]*tnode
	maxName string // the greatest name among kids: a greater one is new
	slab    *slab  // where the tree's nodes come from
}

// slab hands out a tree's nodes from one allocation (a node per key, and
// the directories without a marker of their own beyond that).
type slab struct{ free []tnode }

func (s *slab) next() *tnode {
	if s == nil || len(s.free) == 0 {
		return &tnode{}
	}
	n := &s.free[0]
	s.free = s.free[1:]
	return n
}

// child is t's child called name, added with the v2 path full when new.
func (t *tnode) child(name, full string) *tnode {
	if n := len(t.kids); n > 0 {
		if last := t.kids[n-1]; last.name == name {
			return last // keys in order: the child of the key before
		}
		if name <= t.maxName { // met before, or a new name between two
			if c := t.find(name); c != nil {
				return c
			}
		}
	}
	c := t.slab.next()
	c.path, c.name, c.slab = full, name, t.slab
	t.kids = append(t.kids, c)
	t.maxName = max(t.maxName, name)
	if t.byName != nil {
		t.byName[name] = c
	}
	return c
}

// find is t's child called name, or nil.
func (t *tnode) find(name string) *tnode {
	if t.byName == nil {
		if len(t.kids) <= 8 {
			for _, c := range t.kids {
				if c.name == name {
					return c
				}
			}
			return nil
		}
		t.byName = make(map[string]*tnode, len(t.kids))
		for _, c := range t.kids {
			t.byName[c.name] = c
		}
	}
	return t.byName[name]
}

// insert places kv at rel, a path relative to t (without a leading slash)
// that full (kv's v2 path) ends with.
func (t *tnode) insert(full, rel string, kv *KV, isMarker bool) {
	cur, off := t, len(full)-len(rel)
	for {
		name, rest, more := strings.Cut(rel, "/")
		end := off + len(name)
		cur = cur.child(name, full[:end])
		if !more {
			break
		}
		rel, off = rest, end+1
	}
	if isMarker {
		cur.marker = kv
	} else {
		cur.file = kv
	}
}

func (t *tnode) render(recursive, top bool, ls Leases, now time.Time) *Node {
	if t.file != nil { // a file that also has keys below it (v3 writes) hides them
		return FileNode(t.path, t.file, ls, now)
	}
	n := DirNode(t.path, t.marker, ls, now)
	if !top && !recursive {
		return n
	}
	slices.SortFunc(t.kids, func(a, b *tnode) int { return strings.Compare(a.name, b.name) })
	if len(t.kids) > 0 {
		n.Nodes = make([]*Node, 0, len(t.kids))
	}
	for _, c := range t.kids {
		if !strings.HasPrefix(c.name, "_") {
			n.Nodes = append(n.Nodes, c.render(recursive, false, ls, now))
		}
	}
	return n
}

// validRel reports whether rel names a v2 path: v3 clients may write keys
// like "/a//b" or "/a/" that no v2 path maps to; they are not shown. It is
// path.Clean("/"+rel) == "/"+rel, without building either.
func validRel(rel string) bool {
	if rel == "" {
		return false
	}
	for {
		name, rest, more := strings.Cut(rel, "/")
		if name == "" || name == "." || name == ".." {
			return false
		}
		if !more {
			return true
		}
		rel = rest
	}
}

// BuildGet is v2's Get of p from the data keys and markers below it (as read
// in one revision): nil when p does not exist. Listings are sorted, which v2
// allows for an unsorted request too. What expired at now is left out: an
// expired directory with everything below it.
func (l Layout) BuildGet(p string, file, marker *KV, data, markers []*KV, recursive bool, ls Leases, now time.Time) *Node {
	if p == "/" {
		file, marker = nil, nil
	}
	if ls.Expired(file, false, now) {
		file = nil
	}
	if file == nil && ls.Expired(marker, true, now) {
		return nil
	}
	var expiredDirs []string // relative to p, with a trailing slash
	root := &tnode{path: p, file: file, marker: marker, slab: &slab{free: make([]tnode, len(data)+len(markers))}}
	k := l.keysOf(p)
	// Both lists in one pass, in the order of their paths (each list has
	// its keys' order, which is that of the paths below p), so a key's
	// node is nearly always the child of the key before's, or new.
	for i, j := 0, 0; i < len(data) || j < len(markers); {
		drel, dok := "", false
		if i < len(data) {
			if drel, dok = strings.CutPrefix(data[i].Key, k.dataChild); !dok {
				i++ // not below p: no v2 path
				continue
			}
		}
		mrel, mok := "", false
		if j < len(markers) {
			if mrel, mok = strings.CutPrefix(markers[j].Key, k.markerChild); !mok {
				j++
				continue
			}
		}
		// A directory's marker comes before the keys below it (its path
		// is a prefix of theirs).
		if dok && (!mok || drel <= mrel) {
			if validRel(drel) && !ls.Expired(data[i], false, now) && !hasAnyPrefix(drel, expiredDirs) {
				root.insert(data[i].Key[k.dataStart:], drel, data[i], false)
			}
			i++
		} else {
			switch {
			case !validRel(mrel) || hasAnyPrefix(mrel, expiredDirs):
			case ls.Expired(markers[j], true, now):
				expiredDirs = append(expiredDirs, mrel+"/")
			default:
				root.insert(markers[j].Key[k.markerStart:], mrel, markers[j], true)
			}
			j++
		}
	}
	if p != "/" && file == nil && marker == nil && len(root.kids) == 0 {
		return nil
	}
	return root.render(recursive, true, ls, now)
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// LeasesOf lists the distinct leases of kvs.
func LeasesOf(kvs ...[]*KV) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, list := range kvs {
		for _, kv := range list {
			if kv != nil && kv.Lease != 0 && !seen[kv.Lease] {
				seen[kv.Lease] = true
				out = append(out, kv.Lease)
			}
		}
	}
	return out
}
