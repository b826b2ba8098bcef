// SPDX-License-Identifier: Apache-2.0

// Package engine copies a running etcd v2 server's key tree into the
// bridge's etcd v3 layout, keeps it in step with a v2 watch, and compares the
// two.
//
// Every write goes through the bridge's own write path
// (v3backend.Backend.Write with translate requests), so migrated data is
// exactly what the bridge would have written for a v2 client: native v3
// keys, directory markers, TTLs as v3 leases, and a journal record per write.
//
//   - Copy reads the v2 server's tree in one recursive GET, reads the bridge's view
//     of the same paths, and writes only what differs. It is idempotent and
//     restartable: a node the bridge already holds is left alone, and a node
//     the bridge holds differently is a conflict, reported and left alone
//     unless Options.Overwrite is set.
//   - Follow applies the v2 server's changes after a Copy, from a v2 watch that
//     starts at the copy's X-Etcd-Index+1, until its context ends.
//   - Verify compares the v2 server's tree with the bridge's, node by node.
//
// v2 never lists hidden nodes (a path element starting with '_'). They are
// copied when named in Options.Hidden or found in the v2 server's recent event
// history (Options.NoHiddenDiscovery turns the search off).
package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v3backend"
)

// Options configure Copy, Follow and Verify.
type Options struct {
	// V2Server are the v2 server's client URLs, tried in turn, e.g.
	// http://old-etcd:2379.
	V2Server []string
	// V2ServerPrefix is the v2 directory (or file) to migrate; default "/".
	// Nodes keep their v2 paths on the bridge.
	V2ServerPrefix string
	V2ServerTLS    *tls.Config
	// V2ServerUser is "name:password" for a v2 server with auth enabled.
	V2ServerUser string
	// V2ServerTimeout bounds each non-watch request to the v2 server (default 2m:
	// the snapshot of a big tree is one large answer).
	V2ServerTimeout time.Duration

	// Target is the bridge's backend; everything is written through it.
	Target *v3backend.Backend
	// Auth receives the v2 server's users, roles and enabled flag (CopyAuth,
	// FollowAuth, VerifyAuth); HashCost is bcrypt's cost for the password
	// of V2ServerUser (0: bcrypt's default, as v2).
	Auth     AuthTarget
	HashCost int

	// Hidden names hidden nodes (files or directories) to copy; v2 listings
	// never show them.
	Hidden []string
	// NoHiddenDiscovery skips the search of the v2 server's event history for
	// hidden nodes.
	NoHiddenDiscovery bool

	// DryRun decides everything and writes nothing.
	DryRun bool
	// Overwrite replaces conflicting nodes with the v2 server's.
	Overwrite bool
	// Prune deletes nodes the bridge holds below V2ServerPrefix that the v2 server
	// does not have. Without it they are only counted (and Verify lists them).
	Prune bool
	// Concurrency is the number of writes in flight (default 16).
	Concurrency int
	// TTLTolerance is how far apart the v2 server's and the bridge's expiration
	// of a TTL node may be before they count as different (default 5s).
	// Copy and Follow carry a different expiration over only to nodes this
	// migration wrote; Verify reports one only with CompareExpiration.
	TTLTolerance time.Duration
	// CompareExpiration makes Verify report TTL nodes whose expirations are
	// further apart than TTLTolerance (by default it compares TTL presence:
	// once clients renew their TTLs through the bridge, expirations differ).
	CompareExpiration bool
	// TTLResync is how often Follow re-reads the v2 server to carry over TTLs
	// renewed with refresh=true, which v2 does not report to watchers
	// (default 30s; negative turns it off).
	TTLResync time.Duration

	// Progress, if set, is called with the state of the work, at most about
	// ten times a second and at every change of phase.
	Progress func(Progress)
	// Log, if set, receives one line per notable event: hidden nodes found,
	// conflicts while following, re-syncs, retries.
	Log func(string)
	// Applied, if set, is called by Follow with the v2 server index up to
	// which every event it received has been handled (applied, found
	// already there, or reported), after each event and each re-sync.
	Applied func(index uint64)
}

func (o *Options) setDefaults() error {
	if o.Target == nil {
		return errors.New("migrate: no target backend")
	}
	if o.V2ServerPrefix == "" {
		o.V2ServerPrefix = "/"
	}
	p, verr := translate.CleanPath(o.V2ServerPrefix)
	if verr != nil {
		return fmt.Errorf("bad --v2-server-prefix %q: %s", o.V2ServerPrefix, verr.Cause)
	}
	o.V2ServerPrefix = p
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.TTLTolerance == 0 {
		o.TTLTolerance = 5 * time.Second
	}
	if o.TTLResync == 0 {
		o.TTLResync = 30 * time.Second
	}
	return nil
}

// Difference kinds (Difference.Kind, Conflict.Kind).
const (
	KindMissing = "missing" // on the v2 server, not on the bridge
	KindExtra   = "extra"   // on the bridge, not on the v2 server
	KindType    = "type"    // a file on one side, a directory on the other
	KindValue   = "value"   // different values
	KindTTL     = "ttl"     // a TTL on one side only
	KindExpiry  = "expiry"  // both have a TTL, expiring further apart than TTLTolerance
)

// Conflict is a node the bridge holds differently from the v2 server, left
// alone because Overwrite is off.
type Conflict struct {
	Path   string
	Kind   string
	Detail string
	// Below counts v2 server nodes under Path that were not copied because
	// of this conflict (a file on the bridge where the v2 server has a directory).
	Below int
}

func (c Conflict) String() string {
	s := c.Path + ": " + c.Detail
	if c.Below > 0 {
		s += fmt.Sprintf(" (%d v2 server nodes below it not copied)", c.Below)
	}
	return s
}

// Failure is a node that could not be written.
type Failure struct {
	Path string
	Err  error
}

func (f Failure) String() string { return f.Path + ": " + f.Err.Error() }

// Summary is the outcome of a Copy.
type Summary struct {
	V2Server string // v2 server URL
	Prefix   string
	// Index is the v2 server's X-Etcd-Index at the snapshot; Follow starts at Index+1.
	Index uint64

	// The v2 server tree.
	Keys         int   // files
	Dirs         int   // directories (V2ServerPrefix itself included, the root not)
	EmptyDirs    int   // directories without children
	TTLKeys      int   // files and directories with a TTL
	Hidden       int   // hidden nodes copied (named or discovered) and their contents
	Bytes        int64 // value bytes of all files
	LargestValue int
	LargestKey   string
	// HiddenNamed and HiddenFound are the hidden nodes the v2 server has, named
	// in Options.Hidden or found in its event history.
	HiddenNamed, HiddenFound []string

	// What happened to it (with DryRun: what would happen).
	Created   int // nodes written that the bridge did not have
	Updated   int // nodes rewritten: a TTL carried over, a conflict overwritten, a stale copy updated
	Unchanged int // nodes the bridge already held
	Expired   int // TTL nodes that expired on the v2 server before they could be copied
	Extra     int // nodes the bridge holds below the prefix that the v2 server lacks
	Deleted   int // of those, deleted (Prune, or stale copies made by this process)
	Conflicts []Conflict
	Failures  []Failure

	DryRun    bool
	Complete  bool // every node was handled and none failed
	Duration  time.Duration
	WriteTime time.Duration // the part of Duration spent writing

	roots []root
	owned *ownership
}

// Nodes is the number of v2 server nodes (files and directories).
func (s *Summary) Nodes() int { return s.Keys + s.Dirs }

// Rate is v2 server nodes handled per second of the whole copy.
func (s *Summary) Rate() float64 {
	if s.Duration <= 0 {
		return 0
	}
	return float64(s.Nodes()) / s.Duration.Seconds()
}

// root is a watch root: the prefix, or a hidden node (which a recursive watch
// on its parent would not report), with the v2 server index it was read at.
type root struct {
	path  string
	index uint64
}

// Progress is the state of a Copy, Verify or Follow.
type Progress struct {
	Phase   string // "reading the v2 server", "reading bridge", "copying", "verifying", "done", "following"
	Done    int    // v2 server nodes handled
	Total   int    // v2 server nodes to handle
	Written int    // writes made
	Bytes   int64  // value bytes handled
	Elapsed time.Duration
	Rate    float64       // nodes handled per second in this phase
	ETA     time.Duration // estimated time left in this phase
	// While following:
	Events    int    // v2 server events applied or found already applied
	Index     uint64 // v2 server index of the last event
	Conflicts int
	Resyncs   int
}

// ownership remembers, per path, the bridge revision of each node this
// process wrote or found equal to the v2 server: such a node may be brought up
// to date or deleted when the v2 server changes, because nobody else touched it
// since. Anything else that differs is a conflict: in particular a node a
// client has rewritten through the bridge with the same value (a flannel
// lease renewed by a node already switched to the bridge) is not the
// migration's any more, and an expiry on the v2 server must not delete it.
type ownership struct {
	mu sync.Mutex // guards m and nodes
	m  map[string]uint64
	// nodes holds files as this process wrote them while following, so
	// the next change of one is decided without reading the bridge: an
	// entry counts only while m holds its revision.
	nodes map[string]*translate.Node
}

const anyRev = ^uint64(0) // an implicit directory this process caused to exist

func newOwnership() *ownership {
	return &ownership{m: map[string]uint64{}, nodes: map[string]*translate.Node{}}
}

func (o *ownership) set(p string, rev uint64) {
	o.mu.Lock()
	o.m[p] = rev
	delete(o.nodes, p)
	o.mu.Unlock()
}

// setFile records the file n (without children) as the bridge now holds it.
func (o *ownership) setFile(n *translate.Node) {
	o.mu.Lock()
	o.m[n.Key] = n.ModifiedIndex
	o.nodes[n.Key] = n
	o.mu.Unlock()
}

// known is the file at p as this process last wrote it, if nothing it
// recorded since says otherwise; nil when it does not know.
func (o *ownership) known(p string) *translate.Node {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.nodes[p]
	if n == nil || o.m[p] != n.ModifiedIndex {
		return nil
	}
	return n
}

func (o *ownership) dropTree(p string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.m {
		if under(k, p) {
			delete(o.m, k)
		}
	}
	for k := range o.nodes {
		if under(k, p) {
			delete(o.nodes, k)
		}
	}
}

// owns reports whether the bridge's node n is as this process left it.
func (o *ownership) owns(n *translate.Node) bool {
	if n == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	rev, ok := o.m[n.Key]
	return ok && (rev == n.ModifiedIndex || (n.Dir && rev == anyRev))
}

// migrator carries what Copy, Follow and Verify share.
type migrator struct {
	o     Options
	src   *v2Server
	tgt   *target
	owned *ownership

	pmu   sync.Mutex
	plast time.Time
}

func newMigrator(o Options) (*migrator, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	s, err := newV2Server(&o)
	if err != nil {
		return nil, err
	}
	return &migrator{o: o, src: s, tgt: &target{be: o.Target}, owned: newOwnership()}, nil
}

func (m *migrator) logf(format string, args ...any) {
	if m.o.Log != nil {
		m.o.Log(fmt.Sprintf(format, args...))
	}
}

// progress reports p, throttled to ten calls a second unless force.
func (m *migrator) progress(p Progress, force bool) {
	if m.o.Progress == nil {
		return
	}
	m.pmu.Lock()
	defer m.pmu.Unlock()
	if !force && time.Since(m.plast) < 100*time.Millisecond {
		return
	}
	m.plast = time.Now()
	m.o.Progress(p)
}

// tree is a flattened v2 tree: every node by path, without its children.
type tree struct {
	nodes    map[string]*translate.Node
	children map[string]int
	index    uint64
	roots    []root
	named    []string
	found    []string
}

func newTree() *tree {
	return &tree{nodes: map[string]*translate.Node{}, children: map[string]int{}}
}

// add flattens n into t.
func (t *tree) add(n *translate.Node) {
	if n == nil {
		return
	}
	if n.Key != "" && n.Key != "/" {
		c := *n
		c.Nodes = nil
		if _, dup := t.nodes[c.Key]; !dup {
			t.nodes[c.Key] = &c
			t.children[translate.Parent(c.Key)]++
		}
	}
	for _, ch := range n.Nodes {
		t.add(ch)
	}
}

// sorted lists the paths in t, parents before children.
func (t *tree) sorted() []string {
	out := make([]string, 0, len(t.nodes))
	for p := range t.nodes {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// readV2Server reads the v2 server's tree below the prefix, plus the hidden nodes
// named or found in its history.
func (m *migrator) readV2Server(ctx context.Context) (*tree, error) {
	t := newTree()
	pfx := m.o.V2ServerPrefix
	n, idx, err := m.src.get(ctx, pfx, true)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, fmt.Errorf("the v2 server %s has no key %s", m.src, pfx)
	}
	t.add(n)
	t.index = idx
	t.roots = append(t.roots, root{path: pfx, index: idx})
	var hidden []string
	seen := map[string]bool{}
	for _, h := range m.o.Hidden {
		p, verr := translate.CleanPath(h)
		if verr != nil {
			return nil, fmt.Errorf("bad hidden path %q: %s", h, verr.Cause)
		}
		if !under(p, pfx) {
			m.logf("hidden path %s is outside %s: ignored", p, pfx)
			continue
		}
		if !seen[p] {
			seen[p] = true
			hidden = append(hidden, p)
		}
	}
	named := len(hidden)
	if !m.o.NoHiddenDiscovery {
		found, err := m.src.discoverHidden(ctx, pfx, idx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			m.logf("searching the v2 server's event history for hidden keys failed: %v", err)
		}
		for _, h := range found {
			if !seen[h] {
				seen[h] = true
				hidden = append(hidden, h)
			}
		}
	}
	for i, h := range hidden {
		hn, hidx, err := m.src.get(ctx, h, true)
		if err != nil {
			return nil, fmt.Errorf("reading hidden key %s: %w", h, err)
		}
		// Watch every named hidden node, present or not; found ones only
		// while they exist.
		if hn != nil || i < named {
			t.roots = append(t.roots, root{path: h, index: hidx})
		}
		if hn == nil {
			continue
		}
		t.add(hn)
		if i < named {
			t.named = append(t.named, h)
		} else {
			t.found = append(t.found, h)
		}
	}
	return t, nil
}

// readTarget reads the bridge's view of the same roots.
func (m *migrator) readTarget(ctx context.Context, roots []root) (*tree, error) {
	t := newTree()
	for _, r := range roots {
		n, err := m.tgt.get(ctx, r.path, true)
		if err != nil {
			return nil, fmt.Errorf("reading the bridge's %s: %w", r.path, err)
		}
		t.add(n)
	}
	return t, nil
}

// isHiddenPath reports whether p passes through a hidden element below pfx.
func isHiddenPath(pfx, p string) bool {
	return hiddenBelow(pfx, p) || translate.IsHiddenName(p) && p != pfx
}

func (s *Summary) countV2Server(t *tree, pfx string) {
	for p, n := range t.nodes {
		if n.Dir {
			s.Dirs++
			if t.children[p] == 0 {
				s.EmptyDirs++
			}
		} else {
			s.Keys++
			l := len(value(n))
			s.Bytes += int64(l)
			if l > s.LargestValue || (l == s.LargestValue && p < s.LargestKey) {
				s.LargestValue, s.LargestKey = l, p
			}
		}
		if n.Expiration != nil {
			s.TTLKeys++
		}
		if isHiddenPath(pfx, p) {
			s.Hidden++
		}
	}
}

// firstErr returns a short text for an error list.
func joinPaths(ps []string) string {
	if len(ps) > 5 {
		return strings.Join(ps[:5], ", ") + fmt.Sprintf(" and %d more", len(ps)-5)
	}
	return strings.Join(ps, ", ")
}
