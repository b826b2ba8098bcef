// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"path"
	"sort"
	"strings"
	"time"
)

// tnode is a directory tree assembled from a range of data keys and markers.
type tnode struct {
	path     string
	file     *KV
	marker   *KV
	children map[string]*tnode
}

func (t *tnode) child(name string) *tnode {
	if t.children == nil {
		t.children = map[string]*tnode{}
	}
	c, ok := t.children[name]
	if !ok {
		c = &tnode{path: path.Join(t.path, name)}
		t.children[name] = c
	}
	return c
}

// insert places kv at rel (a path relative to t without leading slash).
func (t *tnode) insert(rel string, kv *KV, isMarker bool) {
	cur := t
	for _, name := range strings.Split(rel, "/") {
		cur = cur.child(name)
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
	names := make([]string, 0, len(t.children))
	for name := range t.children {
		if !strings.HasPrefix(name, "_") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		n.Nodes = append(n.Nodes, t.children[name].render(recursive, false, ls, now))
	}
	return n
}

// validRel reports whether rel names a v2 path: v3 clients may write keys
// like "/a//b" or "/a/" that no v2 path maps to; they are not shown.
func validRel(rel string) bool {
	return rel != "" && path.Clean("/"+rel) == "/"+rel
}

// BuildGet is v2's Get of p from the data keys and markers below it (as read
// in one revision): nil when p does not exist. Listings are sorted, which v2
// allows for an unsorted request too.
func (l Layout) BuildGet(p string, file, marker *KV, data, markers []*KV, recursive bool, ls Leases, now time.Time) *Node {
	if p == "/" {
		file, marker = nil, nil
	}
	root := &tnode{path: p, file: file, marker: marker}
	dpfx, mpfx := l.DataChildPrefix(p), l.MarkerChildPrefix(p)
	for _, kv := range data {
		if rel := strings.TrimPrefix(kv.Key, dpfx); validRel(rel) {
			root.insert(rel, kv, false)
		}
	}
	for _, kv := range markers {
		if rel := strings.TrimPrefix(kv.Key, mpfx); validRel(rel) {
			root.insert(rel, kv, true)
		}
	}
	if p != "/" && file == nil && marker == nil && len(root.children) == 0 {
		return nil
	}
	return root.render(recursive, true, ls, now)
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
