// SPDX-License-Identifier: Apache-2.0

package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Random operation sequences: seeded, reproducible, applied to both servers
// and compared answer by answer, then the whole tree. Each sequence works in
// its own top-level directory over a tiny key space, so directory/file
// conflicts, existing keys and failed compares are frequent.

// relKeys is the key space of a sequence, relative to its directory.
var relKeys = []string{"a", "b", "a/x", "a/y", "b/x", "a/x/z", "_h", "a/_h"}

// relKey picks a key of the sequence; now and then the sequence's
// directory itself.
func (rs *randSeq) relKey() string {
	if rs.chance(0.03) {
		return ""
	}
	return rs.pick(relKeys)
}

// postDirs are where POST creates in-order keys ("" is the sequence's dir).
var postDirs = []string{"", "a", "b", "_h"}

var valuePool = []string{"v1", "v2", "v3"}

const (
	defaultOps   = 10000
	longOps      = 200000
	opsPerSeq    = 60
	randWorkers  = 3
	maxSeqFails  = 3
	randDeadline = 150 * time.Second // the default run stops starting sequences after this
	seqTimeout   = 2 * time.Minute   // bounds one sequence's watches
	maxWatches   = 4
	watchChance  = 0.05
)

func (e *env) runRandom(t *testing.T) {
	total := defaultOps
	if longMode() {
		total = longOps
	}
	if *flagOps > 0 {
		total = *flagOps
	}
	seqs := (total + opsPerSeq - 1) / opsPerSeq
	if *flagSeqs > 0 {
		seqs = *flagSeqs
	}
	base := baseSeed()
	t.Logf("random sequences: base seed %d, %d sequences of ~%d operations (reproduce one with -seed=<its seed> -sequences=1)",
		base, seqs, opsPerSeq)

	start := time.Now()
	var next, done, ops, failed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < randWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(seqs) || failed.Load() >= maxSeqFails {
					return
				}
				if !longMode() && *flagSeqs == 0 && *flagOps == 0 && time.Since(start) > randDeadline {
					return
				}
				seed := base + i
				rs := newRandSeq(e, seed)
				err := rs.run()
				ops.Add(int64(rs.ops))
				done.Add(1)
				e.account(rs.s, rs.exchanges)
				if err != nil {
					failed.Add(1)
					t.Errorf("random sequence with seed %d failed after %d operations (rerun: go test ./conformance "+
						"-run TestConformance/random -seed=%d -sequences=1 -v)\n%v", seed, rs.ops, seed, err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("random: %d sequences, %d operations compared on both servers in %v", done.Load(), ops.Load(),
		time.Since(start).Round(time.Millisecond))
	if done.Load() < int64(seqs) && failed.Load() == 0 {
		t.Logf("random: stopped after %v with %d of %d sequences run", randDeadline, done.Load(), seqs)
	}
}

// mnode is the reference's state of one path, as the sequence learnt it.
type mnode struct {
	dir   bool
	value string
	mod   int // ordinal of its modifiedIndex
}

type randSeq struct {
	e         *env
	seed      int64
	rng       *rand.Rand
	dir       string // the sequence's top-level directory
	s         *Session
	model     map[string]*mnode
	log       []string
	ops       int
	exchanges int
	ctx       context.Context // bounds the sequence's watches
	watches   []*pendingWatch
	lastXI    [2]uint64 // the last X-Etcd-Index each server sent
}

func newRandSeq(e *env, seed int64) *randSeq {
	return &randSeq{e: e, seed: seed, rng: rand.New(rand.NewPCG(uint64(seed), 0x2b1d9e)),
		// Fixed width: no sequence's directory is a prefix of another's.
		dir: fmt.Sprintf("/r%016x", uint64(seed)), s: NewSession(), model: map[string]*mnode{}}
}

// rop is one generated operation; prevIndex is per side (an ordinal of a
// known write, resolved through each side's IndexMap).
type rop struct {
	method  string
	path    string // absolute v2 path
	params  [][2]string
	prevIdx int  // ordinal; 0 = none
	bogus   bool // prevIndex far after every write
	kind    string
}

func (o *rop) has(name string) bool {
	for _, kv := range o.params {
		if kv[0] == name {
			return true
		}
	}
	return false
}

func (rs *randSeq) pick(xs []string) string { return xs[rs.rng.IntN(len(xs))] }
func (rs *randSeq) chance(p float64) bool   { return rs.rng.Float64() < p }

func (rs *randSeq) abs(rel string) string {
	if rel == "" {
		return rs.dir
	}
	return rs.dir + "/" + rel
}

func (rs *randSeq) ttl() string { return rs.pick([]string{"600", "1200", "3600"}) }

// prevIndex picks a compare index: the key's current modifiedIndex, an
// older write's, or one after every write.
func (rs *randSeq) prevIndex(o *rop, path string) {
	n := rs.s.Idx[Ref].Len()
	m := rs.model[path]
	switch {
	case m != nil && m.mod > 0 && rs.chance(0.6):
		o.prevIdx = m.mod
	case n > 0 && rs.chance(0.8):
		o.prevIdx = 1 + rs.rng.IntN(n)
	default:
		o.bogus = true
	}
}

func (rs *randSeq) prevValue(path string) string {
	if m := rs.model[path]; m != nil && !m.dir && rs.chance(0.6) {
		if m.value == "" {
			return "v1"
		}
		return m.value
	}
	return rs.pick(valuePool)
}

func (rs *randSeq) gen() *rop {
	rel := rs.relKey()
	p := rs.abs(rel)
	o := &rop{path: p}
	add := func(k, v string) { o.params = append(o.params, [2]string{k, v}) }
	isDir := rs.model[p] != nil && rs.model[p].dir
	w := rs.rng.IntN(100)
	switch {
	case w < 14:
		o.kind, o.method = "get", "GET"
		if rs.chance(0.3) {
			o.path = rs.dir
		}
		if rs.chance(0.5) {
			add("recursive", "true")
		}
		if rs.chance(0.5) {
			add("sorted", "true")
		}
		if rs.chance(0.15) {
			add("quorum", "true")
		}
	case w < 16:
		o.kind, o.method = "head", "HEAD"
	case w < 32:
		o.kind, o.method = "set", "PUT"
		if rs.chance(0.12) {
			add("dir", "true")
		} else if rs.chance(0.9) {
			add("value", rs.pick(valuePool))
		}
		if rs.chance(0.25) {
			add("ttl", rs.ttl())
		}
	case w < 40:
		o.kind, o.method = "create", "PUT"
		add("prevExist", "false")
		if rs.chance(0.2) {
			add("dir", "true")
		} else {
			add("value", rs.pick(valuePool))
		}
		if rs.chance(0.2) {
			add("ttl", rs.ttl())
		}
	case w < 48:
		o.kind, o.method = "update", "PUT"
		add("prevExist", "true")
		// An update of a directory with an empty value hits the reference's
		// 3.5 bug (divergence dir-ttl-update) and would fork the states.
		add("value", rs.pick(valuePool))
		if rs.chance(0.25) {
			add("ttl", rs.ttl())
		}
	case w < 60:
		o.kind, o.method = "cas", "PUT"
		add("value", rs.pick(valuePool))
		switch rs.rng.IntN(3) {
		case 0:
			add("prevValue", rs.prevValue(p))
		case 1:
			rs.prevIndex(o, p)
		default:
			add("prevValue", rs.prevValue(p))
			rs.prevIndex(o, p)
		}
		if rs.chance(0.2) {
			add("prevExist", "true")
		}
		if rs.chance(0.2) {
			add("ttl", rs.ttl())
		}
	case w < 66:
		o.kind, o.method = "cad", "DELETE"
		if rs.chance(0.5) {
			add("prevValue", rs.prevValue(p))
		}
		if rs.chance(0.5) || len(o.params) == 0 {
			rs.prevIndex(o, p)
		}
	case w < 78:
		o.kind, o.method = "delete", "DELETE"
		switch rs.rng.IntN(3) {
		case 1:
			add("dir", "true")
		case 2:
			add("recursive", "true")
		}
	case w < 84:
		o.kind, o.method = "mkdir", "PUT"
		add("dir", "true")
		if rs.chance(0.5) {
			add("prevExist", "false")
		}
		if rs.chance(0.2) {
			add("ttl", rs.ttl())
		}
	case w < 90:
		o.kind, o.method = "post", "POST"
		o.path = rs.abs(rs.pick(postDirs))
		if rs.chance(0.15) {
			add("dir", "true")
		} else {
			add("value", rs.pick(valuePool))
		}
		if rs.chance(0.25) {
			add("ttl", rs.ttl())
		}
	default:
		o.kind, o.method = "refresh", "PUT"
		add("refresh", "true")
		add("ttl", rs.ttl())
		switch rs.rng.IntN(3) {
		case 1:
			if !isDir { // see update
				add("prevExist", "true")
			}
		case 2:
			add("prevValue", rs.prevValue(p))
		}
	}
	if o.method == "DELETE" && rs.chance(0.05) {
		add("ttl", rs.ttl()) // parsed, then ignored by v2
	}
	if (o.method == "PUT" || o.method == "POST") && !o.has("dir") {
		// (Not with dir=true: the model must learn every directory, see update.)
		if rs.chance(0.08) {
			add("noValueOnSuccess", "true")
		}
	}
	return o
}

func (rs *randSeq) request(o *rop, side Side) *Request {
	v := url.Values{}
	for _, kv := range o.params {
		v.Add(kv[0], kv[1])
	}
	if o.prevIdx > 0 {
		v.Set("prevIndex", strconv.FormatUint(rs.s.Idx[side].At(o.prevIdx), 10))
	} else if o.bogus {
		v.Set("prevIndex", strconv.FormatUint(rs.s.Idx[side].At(rs.s.Idx[side].Len())+1000, 10))
	}
	return &Request{Method: o.method, Path: (&url.URL{Path: "/v2/keys" + o.path}).EscapedPath(), Form: v}
}

// run runs the sequence and returns the first undocumented difference.
func (rs *randSeq) run() error {
	ctx, cancel := context.WithTimeout(context.Background(), seqTimeout)
	defer cancel()
	rs.ctx = ctx
	defer func() {
		for _, pw := range rs.watches {
			pw.ws[Ref].Close()
			pw.ws[Bridge].Close()
		}
	}()
	n := opsPerSeq/2 + rs.rng.IntN(opsPerSeq+1)
	i := 0
	for ; i < n; i++ {
		if len(rs.watches) < maxWatches && rs.chance(watchChance) {
			if err := rs.startWatch(i); err != nil {
				return err
			}
			continue
		}
		if err := rs.do(rs.gen(), i); err != nil {
			return err
		}
	}
	// The whole tree, hidden parts included, then clean up (compared too).
	sorted := [][2]string{{"recursive", "true"}, {"sorted", "true"}}
	clear := &rop{kind: "final", method: "DELETE", path: rs.dir, params: [][2]string{{"recursive", "true"}}}
	final := []*rop{
		{kind: "final", method: "GET", path: rs.dir, params: sorted},
		{kind: "final", method: "GET", path: rs.abs("_h"), params: sorted},
		{kind: "final", method: "GET", path: rs.abs("a/_h"), params: sorted},
		clear,
	}
	// Every watch still waiting gets an event of its own: its key is
	// written into an empty tree.
	for _, pw := range rs.watches {
		final = append(final, &rop{kind: "sentinel", method: "PUT", path: pw.key, params: [][2]string{{"value", "end"}}},
			clear)
	}
	for _, o := range final {
		if err := rs.do(o, i); err != nil {
			return err
		}
		i++
	}
	for _, pw := range rs.watches {
		if err := rs.awaitWatch(pw); err != nil {
			return err
		}
	}
	return nil
}

// pendingWatch is a watch a sequence started on both servers.
type pendingWatch struct {
	i    int
	key  string
	reqs [2]*Request
	ws   [2]*Watch
}

// startWatch starts a watch on both servers (from now, from an earlier
// write of the sequence, or from the next index) and compares its headers.
func (rs *randSeq) startWatch(i int) error {
	rel := rs.pick(append([]string{""}, relKeys...))
	key := rs.abs(rel)
	q := url.Values{"wait": {"true"}}
	if rs.chance(0.5) {
		q.Set("recursive", "true")
	}
	var wait [2]string
	n := rs.s.Idx[Ref].Len()
	switch k := rs.rng.IntN(10); {
	case k >= 5 && k < 8 && n > 0:
		ord := n - rs.rng.IntN(min(n, 20))
		for side := range wait {
			wait[side] = strconv.FormatUint(rs.s.Idx[side].At(ord), 10)
		}
	case k >= 8 && rs.lastXI[Ref] > 0:
		for side := range wait {
			wait[side] = strconv.FormatUint(rs.lastXI[side]+1, 10)
		}
	}
	pw := &pendingWatch{i: i, key: key}
	for side := range pw.reqs {
		sq := url.Values{}
		for k, v := range q {
			sq[k] = v
		}
		if wait[side] != "" {
			sq.Set("waitIndex", wait[side])
		}
		pw.reqs[side] = &Request{Method: "GET", Path: (&url.URL{Path: "/v2/keys" + key}).EscapedPath(), Query: sq}
	}
	errs := make(chan error, 2)
	for side := range pw.ws {
		go func(side int) {
			w, err := rs.e.pair[side].StartWatch(rs.ctx, pw.reqs[side])
			pw.ws[side] = w
			errs <- err
		}(side)
	}
	var failed error
	for range 2 {
		if err := <-errs; err != nil {
			failed = err
		}
	}
	if failed != nil {
		for _, w := range pw.ws {
			if w != nil {
				w.Close()
			}
		}
		return fmt.Errorf("%v\n%s", failed, rs.history())
	}
	rs.ops++
	rs.exchanges++
	heads := [2]*Response{{Status: pw.ws[0].Resp.Status, Header: pw.ws[0].Resp.Header},
		{Status: pw.ws[1].Resp.Status, Header: pw.ws[1].Resp.Header}}
	x := NewExchange(pw.reqs, heads)
	x.Watch = true
	fails, _ := judge(rs.s, x, false)
	rs.log = append(rs.log, fmt.Sprintf("%3d %-8s %s -> %d (watch)", i, "watch", pw.reqs[Ref], heads[Ref].Status))
	if len(fails) > 0 {
		return rs.failure(i, x, fails)
	}
	if heads[Ref].Status != 200 {
		return fmt.Errorf("watch answered %d by both servers\n%s", heads[Ref].Status, rs.history())
	}
	rs.watches = append(rs.watches, pw)
	return nil
}

// awaitWatch compares the event a watch got (every watch gets one: the
// sentinel writes see to that).
func (rs *randSeq) awaitWatch(pw *pendingWatch) error {
	ctx, cancel := context.WithTimeout(rs.ctx, awaitTimeout)
	defer cancel()
	var lines [2][]byte
	var errs [2]error
	var wg sync.WaitGroup
	for side := range pw.ws {
		wg.Add(1)
		go func(side int) {
			defer wg.Done()
			lines[side], errs[side] = pw.ws[side].Next(ctx)
		}(side)
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || lines[0] == nil || lines[1] == nil {
		return fmt.Errorf("watch of operation %d (%s): ref %q (%v), bridge %q (%v)\n%s", pw.i, pw.reqs[Ref],
			lines[0], errs[0], lines[1], errs[1], rs.history())
	}
	rs.exchanges++
	x := NewExchange(pw.reqs, [2]*Response{{Status: 200, Header: http.Header{}, Body: lines[0]},
		{Status: 200, Header: http.Header{}, Body: lines[1]}})
	x.Watch, x.Event = true, true
	rs.s.Register(x)
	rs.log = append(rs.log, fmt.Sprintf("    event of the watch of operation %d -> %s", pw.i, strings.TrimSpace(string(lines[0]))))
	if fails, _ := judge(rs.s, x, false); len(fails) > 0 {
		return rs.failure(pw.i, x, fails)
	}
	return nil
}

func (rs *randSeq) failure(i int, x *Exchange, fails []Diff) error {
	return fmt.Errorf("undocumented divergence at operation %d\n%s\nsequence so far (reference answers):\n%s\n"+
		"bridge's v3 keys now:\n%s", i, report(x, fails), rs.history(), rs.e.dumpV3(rs.dir))
}

func (rs *randSeq) do(o *rop, i int) error {
	reqs := [2]*Request{rs.request(o, Ref), rs.request(o, Bridge)}
	ctx, cancel := requestCtx(requestTimeout)
	defer cancel()
	resps, err := rs.e.pair.DoBoth(ctx, reqs)
	if err != nil {
		return fmt.Errorf("%v\n%s", err, rs.history())
	}
	rs.ops++
	rs.exchanges++
	x := NewExchange(reqs, resps)
	rs.s.Register(x)
	fails, _ := judge(rs.s, x, x.Req[Ref].BoolParam("sorted"))
	rs.log = append(rs.log, fmt.Sprintf("%3d %-8s %s -> %d %s", i, o.kind, reqs[Ref], resps[Ref].Status,
		strings.TrimSpace(string(resps[Ref].Body))))
	for side := range resps {
		if u, err := strconv.ParseUint(resps[side].Header.Get("X-Etcd-Index"), 10, 64); err == nil && u > 0 {
			rs.lastXI[side] = u
		}
	}
	if len(fails) > 0 {
		return rs.failure(i, x, fails)
	}
	rs.learn(x)
	return nil
}

func (rs *randSeq) history() string {
	const keep = 40
	l := rs.log
	if len(l) > keep {
		l = l[len(l)-keep:]
	}
	out := strings.Join(l, "\n")
	if len(out) > 20000 {
		out = out[len(out)-20000:]
	}
	return out
}

// learn updates the model from the reference's answer to a write.
func (rs *randSeq) learn(x *Exchange) {
	if x.ErrorCode(Ref) != 0 || x.Resp[Ref].Status >= 300 {
		return
	}
	if x.Action(Ref) == "get" || x.Action(Ref) == "" {
		return
	}
	n := x.Node(Ref, "node")
	if n == nil { // noValueOnSuccess: learn the directories at least
		key := keyOfPath(x.Req[Ref].Path)
		if x.Req[Ref].Method == "POST" {
			key += "/?"
		}
		for _, a := range ancestorsOf(key) {
			if rs.model[a] == nil || !rs.model[a].dir {
				rs.model[a] = &mnode{dir: true}
			}
		}
		return
	}
	key := str(n["key"])
	mi, _ := numField(n, "modifiedIndex")
	ord, _ := rs.s.Idx[Ref].Floor(mi)
	switch x.Action(Ref) {
	case "delete", "compareAndDelete", "expire":
		for k := range rs.model {
			if k == key || strings.HasPrefix(k, key+"/") {
				delete(rs.model, k)
			}
		}
	default:
		if x.Action(Ref) == "set" && n["dir"] == true {
			delete(rs.model, key) // a set dir=true replaces a file
		}
		m := &mnode{dir: n["dir"] == true, mod: ord}
		if v, ok := n["value"].(string); ok {
			m.value = v
		} else if old := rs.model[key]; old != nil && !m.dir && x.Node(Ref, "node")["value"] == nil {
			m.value = old.value // noValueOnSuccess hides it; not needed exactly
		}
		rs.model[key] = m
		for _, a := range ancestorsOf(key) {
			if rs.model[a] == nil {
				rs.model[a] = &mnode{dir: true, mod: ord}
			}
		}
	}
}

func ancestorsOf(p string) []string {
	var out []string
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}
