// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// IncompleteError is returned by Copy when not every node was written: the
// bridge then holds a partial copy, and the error says how far it got. Running
// Copy again finishes the job (what is already there is left alone).
type IncompleteError struct {
	Summary *Summary
	Cause   error // the error that stopped the copy, or the first failed node's
	Stopped bool  // the copy stopped early (Cause is not about one node)
	Done    int   // writes made
	Planned int   // writes planned
}

func (e *IncompleteError) Error() string {
	s := e.Summary
	var b strings.Builder
	if e.Stopped {
		fmt.Fprintf(&b, "copy stopped after %d of %d writes: %v", e.Done, e.Planned, e.Cause)
	} else {
		paths := make([]string, 0, len(s.Failures))
		for _, f := range s.Failures {
			paths = append(paths, f.Path)
		}
		fmt.Fprintf(&b, "%d of %d nodes could not be written (%s); first error: %v",
			len(s.Failures), s.Nodes(), joinPaths(paths), e.Cause)
	}
	fmt.Fprintf(&b, "; the bridge holds a partial copy (%d created, %d updated, %d already there) — "+
		"fix the cause and run migrate again, it leaves what is already copied alone", s.Created, s.Updated, s.Unchanged)
	return b.String()
}

func (e *IncompleteError) Unwrap() error { return e.Cause }

// Copy copies the v2 server's tree below Options.V2ServerPrefix into the bridge (see
// the package comment). The summary is returned even with an error, to say
// how far the copy got.
func Copy(ctx context.Context, o Options) (*Summary, error) {
	m, err := newMigrator(o)
	if err != nil {
		return nil, err
	}
	defer m.src.close()
	return m.copy(ctx)
}

type jobOp int

const (
	opNone     jobOp = iota // the bridge already holds it
	opKeep                  // the same data, another expiration, not this migration's: left alone
	opImplicit              // a non-empty directory: writing its children creates it
	opConflict
	opCreate
	opTTL     // same value, carry the TTL over
	opReplace // another value: a guarded compare-and-swap
	opKind    // a file where a directory should be, or the reverse
	opDelete  // a node the v2 server does not have
)

type job struct {
	path string
	src  *translate.Node // nil for opDelete
	dst  *translate.Node // the bridge's node when planned
	op   jobOp
	// children: the v2 server directory has nodes below it.
	children bool
	// nodes is how many bridge nodes an opDelete removes.
	nodes int
}

// decide picks what to do with the v2 server node n given the bridge's node d.
func (m *migrator) decide(n, d *translate.Node, hasChildren bool) (jobOp, *Conflict) {
	kind, detail := diff(n, d, m.o.TTLTolerance)
	switch kind {
	case "":
		return opNone, nil
	case KindMissing:
		if n.Dir && hasChildren && n.Expiration == nil {
			return opImplicit, nil
		}
		return opCreate, nil
	case KindExpiry:
		// The same data expiring at another time: a refresh on the v2 server
		// (carried over to this migration's own copy), or a renewal made
		// through the bridge (left alone: the value is the same).
		if m.o.Overwrite || m.owned.owns(d) {
			return opTTL, nil
		}
		return opKeep, nil
	}
	if m.o.Overwrite || m.owned.owns(d) {
		if kind == KindTTL {
			return opTTL, nil
		}
		if kind == KindType {
			return opKind, nil
		}
		return opReplace, nil
	}
	verb := "left unchanged; --overwrite replaces it"
	if m.o.DryRun {
		verb = "would be left unchanged"
	}
	return opConflict, &Conflict{Path: n.Key, Kind: kind, Detail: detail + " (" + verb + ")"}
}

// tally counts the outcome of one node.
type tally struct {
	mu  sync.Mutex
	sum *Summary
}

func (t *tally) add(op jobOp, nodes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch op {
	case opNone, opKeep:
		t.sum.Unchanged++
	case opImplicit, opCreate:
		t.sum.Created++
	case opTTL, opReplace, opKind:
		t.sum.Updated++
	case opDelete:
		t.sum.Deleted += nodes
	}
}

func (t *tally) conflict(c Conflict) {
	t.mu.Lock()
	t.sum.Conflicts = append(t.sum.Conflicts, c)
	t.mu.Unlock()
}

func (t *tally) fail(p string, err error) {
	t.mu.Lock()
	t.sum.Failures = append(t.sum.Failures, Failure{Path: p, Err: err})
	t.mu.Unlock()
}

func (t *tally) expired() {
	t.mu.Lock()
	t.sum.Expired++
	t.mu.Unlock()
}

// copy reads the v2 server and the bridge, plans what differs, and makes the
// writes (with DryRun, only counts them).
func (m *migrator) copy(ctx context.Context) (*Summary, error) {
	start := time.Now()
	sum := &Summary{V2Server: m.src.String(), Prefix: m.o.V2ServerPrefix, DryRun: m.o.DryRun, owned: m.owned}
	st, tt, err := m.readTrees(ctx, sum)
	if err != nil {
		return nil, err
	}
	tl := &tally{sum: sum}
	paths := st.sorted()
	pl := m.plan(st, tt, paths, tl)
	if m.o.DryRun {
		pl.countDryRun(tl)
		sum.Complete = true
		sum.Duration = time.Since(start)
		m.progress(Progress{Phase: "done", Done: len(paths), Total: len(paths), Elapsed: sum.Duration}, true)
		return sum, nil
	}
	return m.write(ctx, pl, tl, start, len(paths))
}

// readTrees reads the v2 server's tree and the bridge's nodes below the same
// roots, and records what the v2 server holds in sum.
func (m *migrator) readTrees(ctx context.Context, sum *Summary) (st, tt *tree, err error) {
	m.progress(Progress{Phase: "reading the v2 server"}, true)
	if st, err = m.readV2Server(ctx); err != nil {
		return nil, nil, err
	}
	sum.Index, sum.roots, sum.HiddenNamed, sum.HiddenFound = st.index, st.roots, st.named, st.found
	sum.countV2Server(st, sum.Prefix)
	if len(st.found) > 0 {
		m.logf("found %d hidden node(s) in the v2 server's recent event history: %s", len(st.found), joinPaths(st.found))
	}
	m.progress(Progress{Phase: "reading bridge", Total: len(st.nodes)}, true)
	if tt, err = m.readTarget(ctx, st.roots); err != nil {
		return nil, nil, fmt.Errorf("%w (nothing was written)", err)
	}
	return st, tt, nil
}

// copyPlan is the copy's writes: the structural jobs run one by one, in
// order, before the parallel ones.
type copyPlan struct {
	structural, parallel []*job
	deletes              int // the deletions, at the end of parallel
}

func (pl *copyPlan) planned() int { return len(pl.structural) + len(pl.parallel) }

// add queues j. Whatever changes the shape of the tree, or gives a directory
// the lease its children expire with, goes first, in order.
func (pl *copyPlan) add(j *job) {
	if j.op == opKind || (j.src.Dir && j.src.Expiration != nil) {
		pl.structural = append(pl.structural, j)
	} else {
		pl.parallel = append(pl.parallel, j)
	}
}

// plan decides what to do with every v2 server node (paths, sorted) and with
// the bridge's extra nodes; what needs no write is counted at once. Parents
// come before children, so a conflicting directory can hold back what is
// below it.
func (m *migrator) plan(st, tt *tree, paths []string, tl *tally) *copyPlan {
	sum := tl.sum
	pl := &copyPlan{}
	blocked := map[string]int{} // conflicting path -> index in Conflicts
	for _, p := range paths {
		n := st.nodes[p]
		if i, ok := blockedBy(blocked, p); ok {
			sum.Conflicts[i].Below++
			continue
		}
		d := tt.nodes[p]
		op, c := m.decide(n, d, st.children[p] > 0)
		switch op {
		case opNone:
			tl.add(opNone, 1)
			if !d.Dir || d.ModifiedIndex != 0 {
				m.owned.set(p, d.ModifiedIndex)
			}
		case opKeep:
			tl.add(opKeep, 1)
		case opImplicit:
			tl.add(opImplicit, 1)
			m.owned.set(p, anyRev)
		case opConflict:
			sum.Conflicts = append(sum.Conflicts, *c)
			if n.Dir && d != nil && !d.Dir {
				blocked[p] = len(sum.Conflicts) - 1
			}
		default:
			pl.add(&job{path: p, src: n, dst: d, op: op, children: st.children[p] > 0})
		}
	}
	deletes := m.planExtra(st, tt, sum)
	pl.parallel = append(interleave(pl.parallel), deletes...)
	pl.deletes = len(deletes)
	return pl
}

// countDryRun counts what the planned writes would do, without making them.
func (pl *copyPlan) countDryRun(tl *tally) {
	for _, jobs := range [][]*job{pl.structural, pl.parallel} {
		for _, j := range jobs {
			if j.op == opCreate {
				if _, _, ok := ttlSeconds(j.src, time.Now()); !ok {
					tl.expired()
					continue
				}
			}
			tl.add(j.op, j.nodes)
		}
	}
}

// copyProgress counts the writes of a copy as they are made and reports
// them.
type copyProgress struct {
	m                    *migrator
	start                time.Time
	settled              int // v2 server nodes that needed no write
	planned              int
	done, written, bytes atomic.Int64
}

func (cp *copyProgress) jobDone(j *job, writes int) {
	cp.done.Add(1)
	cp.written.Add(int64(writes))
	if j.src != nil {
		cp.bytes.Add(int64(len(value(j.src))))
	}
}

func (cp *copyProgress) report(force bool) {
	el := time.Since(cp.start)
	d := int(cp.done.Load())
	p := Progress{Phase: "copying", Done: cp.settled + d, Total: cp.settled + cp.planned, Written: int(cp.written.Load()),
		Bytes: cp.bytes.Load(), Elapsed: el}
	if el > 0 && d > 0 {
		p.Rate = float64(d) / el.Seconds()
		p.ETA = time.Duration(float64(cp.planned-d) / p.Rate * float64(time.Second))
	}
	cp.m.progress(p, force)
}

// write makes the planned writes of a copy that started at start and read
// nodes v2 server nodes. The first error that is not about one node stops it;
// either way the summary says how far it got.
func (m *migrator) write(ctx context.Context, pl *copyPlan, tl *tally, start time.Time, nodes int) (*Summary, error) {
	sum := tl.sum
	cp := &copyProgress{m: m, start: time.Now(), settled: nodes - (pl.planned() - pl.deletes), planned: pl.planned()}
	cp.report(true)
	run := func(ctx context.Context, j *job) error { return m.runJob(ctx, j, tl, cp) }
	fatal := runInOrder(ctx, pl.structural, run)
	if fatal == nil {
		fatal = m.runParallel(ctx, pl.parallel, run)
	}
	sum.WriteTime = time.Since(cp.start)
	sum.Duration = time.Since(start)
	cp.report(true)
	written := int(cp.written.Load())
	m.progress(Progress{Phase: "done", Done: nodes, Total: nodes, Written: written,
		Bytes: cp.bytes.Load(), Elapsed: sum.Duration}, true)
	if fatal != nil {
		return sum, &IncompleteError{Summary: sum, Cause: fatal, Stopped: true, Done: written, Planned: pl.planned()}
	}
	if len(sum.Failures) > 0 {
		return sum, &IncompleteError{Summary: sum, Cause: sum.Failures[0].Err, Done: written, Planned: pl.planned()}
	}
	sum.Complete = true
	return sum, nil
}

// runJob makes one job's writes; a failure that concerns only its node is
// counted and does not stop the copy.
func (m *migrator) runJob(ctx context.Context, j *job, tl *tally, cp *copyProgress) error {
	w, err := m.exec(ctx, j, tl)
	cp.jobDone(j, w)
	if err != nil && isKeyError(err) {
		tl.fail(j.path, err)
		err = nil
	}
	cp.report(false)
	return err
}

// runInOrder runs jobs one after another; the first error stops them.
func runInOrder(ctx context.Context, jobs []*job, run func(context.Context, *job) error) error {
	for _, j := range jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := run(ctx, j); err != nil {
			return err
		}
	}
	return nil
}

// runParallel runs jobs on Concurrency workers; the first error that is not
// about one key stops them all.
func (m *migrator) runParallel(ctx context.Context, jobs []*job, run func(context.Context, *job) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	var fatal error
	ch := make(chan *job)
	var wg sync.WaitGroup
	for i := 0; i < m.o.Concurrency && i < len(jobs); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				if ctx.Err() != nil {
					continue
				}
				if err := run(ctx, j); err != nil {
					once.Do(func() { fatal = err })
					cancel()
				}
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	if fatal == nil && ctx.Err() != nil {
		// cancelled from outside
		return context.Cause(ctx)
	}
	return fatal
}

// interleave orders jobs round-robin across their parent directories, so the
// writes in flight are in different directories: writes that all create the
// same missing directory marker would collide and be re-decided one by one.
func interleave(jobs []*job) []*job {
	var parents []string
	groups := map[string][]*job{}
	for _, j := range jobs {
		p := translate.Parent(j.path)
		if _, ok := groups[p]; !ok {
			parents = append(parents, p)
		}
		groups[p] = append(groups[p], j)
	}
	out := make([]*job, 0, len(jobs))
	for i := 0; len(parents) > 0; i++ {
		active := parents[:0]
		for _, p := range parents {
			if g := groups[p]; i < len(g) {
				out = append(out, g[i])
				if i+1 < len(g) {
					active = append(active, p)
				}
			}
		}
		parents = active
	}
	return out
}

// blockedBy finds a conflicting ancestor of p.
func blockedBy(blocked map[string]int, p string) (int, bool) {
	if len(blocked) == 0 {
		return 0, false
	}
	for _, a := range translate.Ancestors(p) {
		if i, ok := blocked[a]; ok {
			return i, true
		}
	}
	return 0, false
}

// planExtra counts the bridge nodes the v2 server does not have and plans the
// deletion of those that may go: all of them with Prune, otherwise only the
// ones this process copied itself (a re-sync after the v2 server deleted them).
func (m *migrator) planExtra(st, tt *tree, sum *Summary) []*job {
	type group struct {
		count, files, owned int
	}
	groups := map[string]*group{}
	for p, d := range tt.nodes {
		if _, ok := st.nodes[p]; ok {
			continue
		}
		// The topmost node of this extra subtree; nothing below a v2 server
		// file counts (it is part of that file's conflict).
		top, inClash := p, false
		for _, a := range translate.Ancestors(p) {
			if sn, ok := st.nodes[a]; ok && !sn.Dir {
				inClash = true
				break
			}
		}
		if inClash {
			continue
		}
		for q := translate.Parent(p); q != "/" && len(q) >= len(m.o.V2ServerPrefix); q = translate.Parent(q) {
			if _, ok := st.nodes[q]; ok {
				break
			}
			if _, ok := tt.nodes[q]; ok {
				top = q
			}
		}
		g := groups[top]
		if g == nil {
			g = &group{}
			groups[top] = g
		}
		g.count++
		if !d.Dir {
			g.files++
			if m.owned.owns(d) {
				g.owned++
			}
		}
	}
	var jobs []*job
	for top, g := range groups {
		sum.Extra += g.count
		d := tt.nodes[top]
		mine := g.files == g.owned && (g.files > 0 || m.owned.owns(d))
		if m.o.Prune || mine {
			jobs = append(jobs, &job{path: top, dst: d, op: opDelete, nodes: g.count})
		}
	}
	return jobs
}

// exec makes the writes of one job; when the bridge changed since it was
// read, it reads the node again and decides once more. It returns the number
// of writes made.
func (m *migrator) exec(ctx context.Context, j *job, tl *tally) (int, error) {
	writes := 0
	for attempt := 0; ; attempt++ {
		ev, err := m.apply(ctx, j)
		if err == nil {
			writes++
			m.record(j, ev)
			tl.add(j.op, j.nodes)
			return writes, nil
		}
		if errors.Is(err, errExpired) {
			tl.expired()
			return writes, nil
		}
		if attempt > 0 || !isRace(err) {
			return writes, fmt.Errorf("%s: %w", verbOf(j.op), err)
		}
		d, rerr := m.tgt.get(ctx, j.path, false)
		if rerr != nil {
			return writes, rerr
		}
		if j.op == opDelete {
			if d == nil {
				tl.add(opDelete, j.nodes)
				return writes, nil
			}
			j.dst = d
			continue
		}
		op, c := m.decide(j.src, d, j.children)
		switch op {
		case opKeep:
			tl.add(op, 1)
			return writes, nil
		case opNone, opImplicit:
			tl.add(op, 1)
			if d != nil && (!d.Dir || d.ModifiedIndex != 0) {
				m.owned.set(j.path, d.ModifiedIndex)
			}
			return writes, nil
		case opConflict:
			tl.conflict(*c)
			return writes, nil
		}
		j.op, j.dst = op, d
	}
}

func verbOf(op jobOp) string {
	switch op {
	case opCreate:
		return "create"
	case opTTL:
		return "carry the TTL over"
	case opReplace:
		return "replace the value"
	case opKind:
		return "replace the node"
	case opDelete:
		return "delete"
	}
	return "write"
}

// apply makes the write(s) of one job.
func (m *migrator) apply(ctx context.Context, j *job) (*translate.Event, error) {
	switch j.op {
	case opCreate:
		return m.tgt.create(ctx, j.src, false)
	case opTTL:
		return m.tgt.fixTTL(ctx, j.src, j.dst)
	case opReplace:
		return m.tgt.replaceFile(ctx, j.src, j.dst, true)
	case opKind:
		return m.tgt.replaceKind(ctx, j.src, j.dst)
	case opDelete:
		return m.tgt.remove(ctx, j.dst)
	}
	return nil, fmt.Errorf("migrate: no write for op %d", j.op)
}

// record remembers what this process wrote.
func (m *migrator) record(j *job, ev *translate.Event) {
	if j.op == opDelete || j.op == opKind {
		m.owned.dropTree(j.path)
	}
	if j.op == opDelete || ev == nil || ev.Node == nil {
		return
	}
	m.owned.set(j.path, ev.Node.ModifiedIndex)
}
