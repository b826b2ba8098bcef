// SPDX-License-Identifier: Apache-2.0

package shadow

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2api"
)

// fakeStore is a small v2 key tree behind the v2api.Store interface: the
// v3 side of the tests and, served by v2api, the v2 server. Each fake numbers
// its writes from its own base, so the two sides never share an index.
type fakeStore struct {
	mu    sync.Mutex // guards everything below
	nodes map[string]*fnode
	index uint64
	// errs forces a v2 error code for a GET of a path.
	errs map[string]int
	// block makes every Get wait until its context ends (a blackholed v3
	// side); unavailable makes it fail at once (a lost one).
	block, unavailable bool
	gets               int
}

type fnode struct {
	value    string
	dir      bool
	exp      *time.Time
	created  uint64
	modified uint64
}

var _ v2api.Store = (*fakeStore)(nil)

func newFake(base uint64) *fakeStore {
	return &fakeStore{nodes: map[string]*fnode{"/": {dir: true}}, index: base, errs: map[string]int{}}
}

// put makes p a file (or a directory) with its parents, as a follower would.
func (f *fakeStore) put(p, value string, dir bool, ttl time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.putLocked(p, value, dir, ttl)
}

func (f *fakeStore) putLocked(p, value string, dir bool, ttl time.Duration) *fnode {
	f.index++
	for d := translate.Parent(p); d != "/"; d = translate.Parent(d) {
		if f.nodes[d] == nil {
			f.nodes[d] = &fnode{dir: true, created: f.index, modified: f.index}
		}
	}
	n := &fnode{value: value, dir: dir, created: f.index, modified: f.index}
	if ttl > 0 {
		e := time.Now().Add(ttl).UTC()
		n.exp = &e
	}
	f.nodes[p] = n
	return n
}

func (f *fakeStore) remove(p string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	for k := range f.nodes {
		if k == p || strings.HasPrefix(k, p+"/") {
			delete(f.nodes, k)
		}
	}
}

func (f *fakeStore) render(p string, n *fnode, recursive, top bool, now time.Time) *translate.Node {
	out := &translate.Node{Key: p, Dir: n.dir, CreatedIndex: n.created, ModifiedIndex: n.modified}
	if p == "/" {
		out.Key, out.CreatedIndex, out.ModifiedIndex = "", 0, 0
	}
	if !n.dir {
		v := n.value
		out.Value = &v
	}
	if n.exp != nil {
		out.SetExpiration(*n.exp, now)
	}
	if n.dir && (top || recursive) {
		var kids []string
		for k := range f.nodes {
			if k != "/" && translate.Parent(k) == p {
				kids = append(kids, k)
			}
		}
		sort.Strings(kids)
		for _, k := range kids {
			out.Nodes = append(out.Nodes, f.render(k, f.nodes[k], recursive, false, now))
		}
	}
	return out
}

func (f *fakeStore) Get(ctx context.Context, r *translate.Request) (*translate.Event, v2api.Meta, error) {
	f.mu.Lock()
	f.gets++
	block, unavailable := f.block, f.unavailable
	f.mu.Unlock()
	if block {
		<-ctx.Done()
		return nil, v2api.Meta{}, ctx.Err()
	}
	if unavailable {
		return nil, v2api.Meta{}, errors.New("backend unavailable")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.errs[r.Path]; ok {
		return nil, v2api.Meta{}, translate.NewError(c, r.Path, f.index)
	}
	n := f.nodes[r.Path]
	if n == nil {
		return nil, v2api.Meta{}, translate.NewError(translate.EcodeKeyNotFound, r.Path, f.index)
	}
	return &translate.Event{Action: translate.ActionGet, Node: f.render(r.Path, n, r.Recursive, true, time.Now()),
		EtcdIndex: f.index}, v2api.Meta{}, nil
}

// Write does what the tests need of a v2 server: set (a file or, with
// dir=true, a directory) and delete.
func (f *fakeStore) Write(ctx context.Context, r *translate.Request) (*translate.Event, v2api.Meta, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	var prev *translate.Node
	if old := f.nodes[r.Path]; old != nil {
		prev = f.render(r.Path, old, false, false, now)
	}
	switch r.Method {
	case "DELETE":
		if prev == nil {
			return nil, v2api.Meta{}, translate.NewError(translate.EcodeKeyNotFound, r.Path, f.index)
		}
		f.index++
		for k := range f.nodes {
			if k == r.Path || strings.HasPrefix(k, r.Path+"/") {
				delete(f.nodes, k)
			}
		}
		return &translate.Event{Action: translate.ActionDelete, Node: &translate.Node{Key: r.Path, Dir: prev.Dir,
			ModifiedIndex: f.index, CreatedIndex: prev.CreatedIndex}, PrevNode: prev, EtcdIndex: f.index}, v2api.Meta{}, nil
	case "PUT":
		var ttl time.Duration
		if r.TTL != nil {
			ttl = time.Duration(*r.TTL) * time.Second
		}
		n := f.putLocked(r.Path, r.Value, r.Dir, ttl)
		return &translate.Event{Action: translate.ActionSet, Node: f.render(r.Path, n, false, false, now),
			PrevNode: prev, EtcdIndex: f.index}, v2api.Meta{}, nil
	}
	return nil, v2api.Meta{}, translate.NewError(translate.EcodeRaftInternal, "not in the fake", f.index)
}

func (f *fakeStore) Watch(context.Context, *translate.Request) (v2api.Watch, v2api.Meta, error) {
	return nil, v2api.Meta{}, errors.New("no watches in the fake")
}
func (f *fakeStore) Health(context.Context) error            { return nil }
func (f *fakeStore) Version(context.Context) (string, error) { return "3.4.0", nil }
func (f *fakeStore) Meta() v2api.Meta                        { return v2api.Meta{ClusterID: 1} }
func (f *fakeStore) Ready() bool                             { return true }
func (f *fakeStore) Alive(time.Duration) bool                { return true }
func (f *fakeStore) Watchers() int                           { return 0 }
