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

	"github.com/v2bridge/v2bridge/migrate/v2diff"
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
	defaultOps  = 10000
	longOps     = 200000
	opsPerSeq   = 60
	randWorkers = 3
	// expiringWorkers run the sequences with short TTLs, which mostly
	// wait for an expiry.
	expiringWorkers = 16
	maxSeqFails     = 3
	seqTimeout      = 2 * time.Minute // bounds one sequence's watches
	maxWatches      = 4
	watchChance     = 0.05
)

// Short TTLs. A share of the sequences gives some writes a TTL that expires
// within the sequence (never below v3's minimum lease TTL, where the bridge
// documents a difference: ttl-minimum). When an expiry is due, v2's sweep
// and v3's lease revocation run on their own clocks, so no request is sent
// between expiryLead before the expiration and expiryLag after it: both
// servers have then expired the key, in the same place among the
// sequence's writes. One short TTL is pending at a time, so two expiries
// never race each other.
const (
	expiringShare     = 0.15
	shortTTLChance    = 0.5
	expiryWaitChance  = 0.4 // per operation: wait for the pending expiry now
	expiryWatchChance = 0.6 // watch the key a short TTL was just set on
	maxExpiries       = 2   // per sequence: each costs a few seconds of waiting
	expiryLead        = time.Second
	expiryLag         = 3 * time.Second
)

// randomBudget is the number of random operations the run must do.
func randomBudget() int {
	switch {
	case *flagOps > 0:
		return *flagOps
	case longMode():
		return longOps
	}
	return defaultOps
}

// randomPlan lists the seeds of the sequences to run, the expiring ones
// apart, and the operations they make up: -sequences of them, or as many
// as the budget needs.
func randomPlan(base int64) (expiring, rest []int64, ops int) {
	budget := randomBudget()
	for i := int64(0); *flagSeqs > 0 && len(expiring)+len(rest) < *flagSeqs || *flagSeqs == 0 && ops < budget; i++ {
		rs := newRandSeq(nil, base+i)
		ops += rs.n
		if rs.expiring {
			expiring = append(expiring, rs.seed)
		} else {
			rest = append(rest, rs.seed)
		}
	}
	return expiring, rest, ops
}

// randomRun is the tally of a run's sequences.
type randomRun struct {
	t                                   *testing.T
	e                                   *env
	done, ops, failed                   atomic.Int64
	expiries, dirExpiries, expireEvents atomic.Int64
	late                                [2]atomic.Int64 // the longest expireLate of any sequence, per server
}

func (e *env) runRandom(t *testing.T) {
	base := baseSeed()
	expiring, rest, want := randomPlan(base)
	t.Logf("random sequences: base seed %d, %d sequences (%d with short TTLs), %d operations (reproduce one with "+
		"-seed=<its seed> -sequences=1)", base, len(expiring)+len(rest), len(expiring), want)

	start := time.Now()
	r := &randomRun{t: t, e: e}
	var wg sync.WaitGroup
	// The expiring sequences mostly wait: they get a pool of their own, so
	// their waits overlap the other sequences' work.
	for _, p := range []struct {
		seeds   []int64
		workers int
	}{{expiring, expiringWorkers}, {rest, randWorkers}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.pool(p.seeds, p.workers)
		}()
	}
	wg.Wait()
	t.Logf("random: %d sequences, %d operations compared on both servers in %v; %d short TTLs waited out (%d "+
		"directories expired), %d expire events compared", r.done.Load(), r.ops.Load(),
		time.Since(start).Round(time.Millisecond), r.expiries.Load(), r.dirExpiries.Load(), r.expireEvents.Load())
	t.Logf("random: expire events to waiting watches arrived at most %v (ref) and %v (bridge) after the expiration",
		time.Duration(r.late[v2diff.Ref].Load()).Round(time.Millisecond),
		time.Duration(r.late[v2diff.Bridge].Load()).Round(time.Millisecond))
	if r.ops.Load() < int64(want) {
		t.Errorf("random: %d operations run of the %d asked (%d of %d sequences)", r.ops.Load(), want,
			r.done.Load(), len(expiring)+len(rest))
	}
}

// pool runs the sequences of seeds on workers goroutines, until done or
// too many failed.
func (r *randomRun) pool(seeds []int64, workers int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(seeds)) && r.failed.Load() < maxSeqFails; i = next.Add(1) - 1 {
				rs := newRandSeq(r.e, seeds[i])
				r.record(rs, rs.run())
			}
		}()
	}
	wg.Wait()
}

// record tallies a finished sequence.
func (r *randomRun) record(rs *randSeq, err error) {
	r.ops.Add(int64(rs.ops))
	r.expiries.Add(int64(rs.expiries))
	r.dirExpiries.Add(int64(rs.dirExpiries))
	r.expireEvents.Add(int64(rs.expireEvents))
	for side := range r.late {
		storeMax(&r.late[side], int64(rs.expireLate[side]))
	}
	r.done.Add(1)
	r.e.account(rs.s, rs.exchanges)
	if err != nil {
		r.failed.Add(1)
		r.t.Errorf("random sequence with seed %d failed after %d operations (rerun: go test ./proof/conformance "+
			"-run TestConformance/random -seed=%d -sequences=1 -v)\n%v", rs.seed, rs.ops, rs.seed, err)
	}
}

// storeMax raises a to v if v is larger.
func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// mnode is the reference's state of one path, as the sequence learnt it.
type mnode struct {
	dir     bool
	value   string
	mod     int       // ordinal of its modifiedIndex
	expires time.Time // the reference's expiration; zero if permanent
}

type randSeq struct {
	e         *env
	seed      int64
	rng       *rand.Rand
	dir       string // the sequence's top-level directory
	s         *v2diff.Session
	model     map[string]*mnode
	log       []string
	ops       int
	exchanges int
	ctx       context.Context // bounds the sequence's watches
	watches   []*pendingWatch
	lastXI    [2]uint64 // the last X-Etcd-Index each server sent

	n        int  // random operations to run (watch starts included)
	expiring bool // gives some writes a short TTL
	// expiry is the pending short TTL's quiet window (nil if none), and
	// expiryKey its key until a watch is considered for it.
	expiry       *window
	expiryKey    string
	expiries     int // short TTLs waited out
	dirExpiries  int // directories the model saw expire
	expireEvents int // expire events compared
	// expireLate is, per server, the longest time from an expiration to
	// the arrival of its expire event.
	expireLate [2]time.Duration
}

// expirationOf is a node's expiration (zero if none).
func expirationOf(n map[string]any) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, str(n["expiration"]))
	return t
}

// window is a span of time in which no request is sent.
type window struct{ from, to time.Time }

// newRandSeq draws the sequence's length and kind first, so that a plan
// can be made from the seeds alone.
func newRandSeq(e *env, seed int64) *randSeq {
	rs := &randSeq{e: e, seed: seed, rng: rand.New(rand.NewPCG(uint64(seed), 0x2b1d9e)),
		// Fixed width: no sequence's directory is a prefix of another's.
		dir: fmt.Sprintf("/r%016x", uint64(seed)), s: v2diff.NewSession(), model: map[string]*mnode{}}
	rs.n = opsPerSeq/2 + rs.rng.IntN(opsPerSeq+1)
	rs.expiring = rs.chance(expiringShare)
	return rs
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

// ttl picks a TTL: long, or in an expiring sequence with no short TTL
// pending, now and then one that expires within the sequence.
func (rs *randSeq) ttl() string {
	short := rs.chance(shortTTLChance)
	if rs.expiring && rs.expiry == nil && rs.expiries < maxExpiries && short {
		return rs.pick([]string{strconv.Itoa(v2diff.MinLeaseTTL), strconv.Itoa(v2diff.MinLeaseTTL + 1)})
	}
	return rs.pick([]string{"600", "1200", "3600"})
}

// shortTTL is the longest TTL taken for one that expires within a sequence.
const shortTTL = v2diff.MinLeaseTTL + 1

// prevIndex picks a compare index: the key's current modifiedIndex, an
// older write's, or one after every write.
func (rs *randSeq) prevIndex(o *rop, path string) {
	n := rs.s.Idx[v2diff.Ref].Len()
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

func (rs *randSeq) request(o *rop, side v2diff.Side) *v2diff.Request {
	v := url.Values{}
	for _, kv := range o.params {
		v.Add(kv[0], kv[1])
	}
	if o.prevIdx > 0 {
		v.Set("prevIndex", strconv.FormatUint(rs.s.Idx[side].At(o.prevIdx), 10))
	} else if o.bogus {
		v.Set("prevIndex", strconv.FormatUint(rs.s.Idx[side].At(rs.s.Idx[side].Len())+1000, 10))
	}
	return &v2diff.Request{Method: o.method, Path: (&url.URL{Path: "/v2/keys" + o.path}).EscapedPath(), Form: v}
}

// run runs the sequence and returns the first undocumented difference.
func (rs *randSeq) run() error {
	ctx, cancel := context.WithTimeout(context.Background(), seqTimeout)
	defer cancel()
	rs.ctx = ctx
	defer func() {
		for _, pw := range rs.watches {
			pw.ws[v2diff.Ref].Close()
			pw.ws[v2diff.Bridge].Close()
		}
	}()
	i := 0
	for ; i < rs.n; i++ {
		rs.quiet(rs.chance(expiryWaitChance)) // drawn every time: a replay draws the same numbers
		if key := rs.watchKey(); key != "" {
			if err := rs.startWatch(i, key); err != nil {
				return err
			}
			continue
		}
		if err := rs.do(rs.gen(), i); err != nil {
			return err
		}
	}
	rs.quiet(true) // the final reads see every short TTL expired
	// The whole tree, hidden parts included, then clean up (compared too).
	sorted := [][2]string{{"recursive", "true"}, {"sorted", "true"}}
	wipe := &rop{kind: "final", method: "DELETE", path: rs.dir, params: [][2]string{{"recursive", "true"}}}
	final := []*rop{
		{kind: "final", method: "GET", path: rs.dir, params: sorted},
		{kind: "final", method: "GET", path: rs.abs("_h"), params: sorted},
		{kind: "final", method: "GET", path: rs.abs("a/_h"), params: sorted},
		wipe,
	}
	// Every watch still waiting gets an event of its own: its key is
	// written into an empty tree.
	for _, pw := range rs.watches {
		final = append(final, &rop{kind: "sentinel", method: "PUT", path: pw.key, params: [][2]string{{"value", "end"}}},
			wipe)
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

// quiet keeps requests out of the pending expiry's window: when the window
// has begun, or wait is set, it sleeps until the window is over and drops
// what expired from the model.
func (rs *randSeq) quiet(wait bool) {
	w := rs.expiry
	if w == nil || !wait && time.Now().Before(w.from) {
		return
	}
	time.Sleep(time.Until(w.to))
	rs.expiry = nil
	rs.expiries++
	rs.log = append(rs.log, "    (waited for a short TTL to expire)")
	now := time.Now()
	for k, m := range rs.model {
		if !m.expires.IsZero() && m.expires.Before(now) {
			if m.dir {
				rs.dirExpiries++
			}
			rs.forget(k)
		}
	}
}

// forget drops key and everything under it from the model.
func (rs *randSeq) forget(key string) {
	for k := range rs.model {
		if k == key || strings.HasPrefix(k, key+"/") {
			delete(rs.model, k)
		}
	}
}

// pendingWatch is a watch a sequence started on both servers.
type pendingWatch struct {
	started time.Time
	i       int
	key     string
	reqs    [2]*v2diff.Request
	ws      [2]*Watch
}

// watchKey picks the key of a watch to start now, if any: often the key
// of a short TTL just set (so that expire events are compared), now and
// then any key of the sequence.
func (rs *randSeq) watchKey() string {
	if len(rs.watches) >= maxWatches {
		return ""
	}
	if k := rs.expiryKey; k != "" {
		rs.expiryKey = ""
		if rs.chance(expiryWatchChance) {
			return k
		}
	}
	if rs.chance(watchChance) {
		return rs.abs(rs.pick(append([]string{""}, relKeys...)))
	}
	return ""
}

// startWatch starts a watch of key on both servers (from now, from an
// earlier write of the sequence, or from the next index) and compares its
// headers.
func (rs *randSeq) startWatch(i int, key string) error {
	q := url.Values{"wait": {"true"}}
	if rs.chance(0.5) {
		q.Set("recursive", "true")
	}
	var wait [2]string
	n := rs.s.Idx[v2diff.Ref].Len()
	switch k := rs.rng.IntN(10); {
	case k >= 5 && k < 8 && n > 0:
		ord := n - rs.rng.IntN(min(n, 20))
		for side := range wait {
			wait[side] = strconv.FormatUint(rs.s.Idx[side].At(ord), 10)
		}
	case k >= 8 && rs.lastXI[v2diff.Ref] > 0:
		for side := range wait {
			wait[side] = strconv.FormatUint(rs.lastXI[side]+1, 10)
		}
	}
	pw := &pendingWatch{started: time.Now(), i: i, key: key}
	for side := range pw.reqs {
		sq := url.Values{}
		for k, v := range q {
			sq[k] = v
		}
		if wait[side] != "" {
			sq.Set("waitIndex", wait[side])
		}
		pw.reqs[side] = &v2diff.Request{Method: "GET", Path: (&url.URL{Path: "/v2/keys" + key}).EscapedPath(), Query: sq}
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
	heads := [2]*v2diff.Response{{Status: pw.ws[0].Resp.Status, Header: pw.ws[0].Resp.Header},
		{Status: pw.ws[1].Resp.Status, Header: pw.ws[1].Resp.Header}}
	answered := heads[v2diff.Ref].Status != 200 || heads[v2diff.Bridge].Status != 200
	if answered {
		// An error answer (401 from a history the reference no longer
		// has): compare the whole answers.
		if err := rs.readWhole(pw, &heads); err != nil {
			return err
		}
	}
	x := v2diff.NewExchange(pw.reqs, heads)
	x.Watch = true
	rs.log = append(rs.log, fmt.Sprintf("%3d %-8s %s -> %d (watch) %s", i, "watch", pw.reqs[v2diff.Ref], heads[v2diff.Ref].Status,
		strings.TrimSpace(string(heads[v2diff.Ref].Body))))
	if err := rs.judge(i, x); err != nil {
		return err
	}
	if answered {
		pw.ws[v2diff.Ref].Close()
		pw.ws[v2diff.Bridge].Close()
		return nil
	}
	rs.watches = append(rs.watches, pw)
	return nil
}

// immediateWait is how long an answer from history may take to follow its
// headers; a watch that sends nothing by then is waiting.
const immediateWait = 2 * time.Second

// readWhole reads both bodies of a watch one server answered at once (an
// error); the other one may have answered from history, or be waiting.
func (rs *randSeq) readWhole(pw *pendingWatch, heads *[2]*v2diff.Response) error {
	for side, w := range pw.ws {
		wait := awaitTimeout
		if heads[side].Status == 200 {
			wait = immediateWait
		}
		body, err := readBody(rs.ctx, w, wait)
		if err != nil && heads[side].Status != 200 {
			return fmt.Errorf("%s: reading the answer to %s: %w\n%s", v2diff.Side(side), pw.reqs[side], err, rs.history())
		}
		heads[side].Body = body
	}
	return nil
}

// readBody reads a watch's body until it ends or wait is over.
func readBody(ctx context.Context, w *Watch, wait time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var body []byte
	for {
		l, err := w.Next(ctx)
		if err != nil || l == nil {
			return body, err
		}
		body = append(body, l...)
	}
}

// randomMay are the divergences a random sequence may show: the others
// need requests the sequences do not make.
var randomMay = map[string]bool{"set-created-index": true, "history-horizon": true}

// judge compares an exchange of the sequence; a difference no entry
// excuses, or an excuse random sequences cannot need, fails it.
func (rs *randSeq) judge(i int, x *v2diff.Exchange) error {
	fails, excused := judge(rs.s, x, x.Req[v2diff.Ref].BoolParam("sorted"))
	if len(fails) > 0 {
		return rs.failure(i, x, fails)
	}
	if bad := undeclared(excused, randomMay); len(bad) > 0 {
		return fmt.Errorf("divergence %q excused in a random sequence, which cannot need it\n%s\n%s", bad,
			report(x, nil), rs.history())
	}
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
		return fmt.Errorf("watch of operation %d (%s): ref %q (%v), bridge %q (%v)\n%s", pw.i, pw.reqs[v2diff.Ref],
			lines[0], errs[0], lines[1], errs[1], rs.history())
	}
	rs.exchanges++
	x := v2diff.NewExchange(pw.reqs, [2]*v2diff.Response{{Status: 200, Header: http.Header{}, Body: lines[0]},
		{Status: 200, Header: http.Header{}, Body: lines[1]}})
	x.Watch, x.Event = true, true
	rs.s.Register(x)
	rs.log = append(rs.log, fmt.Sprintf("    event of the watch of operation %d -> %s", pw.i, strings.TrimSpace(string(lines[0]))))
	if x.Action(v2diff.Ref) == "expire" {
		rs.expireEvents++
		for side, w := range pw.ws {
			// Only for watches that were waiting at the expiry (not
			// answered from history).
			if exp := expirationOf(x.Node(v2diff.Side(side), "prevNode")); pw.started.Before(exp) {
				rs.expireLate[side] = max(rs.expireLate[side], w.LastAt.Sub(exp))
			}
		}
	}
	return rs.judge(pw.i, x)
}

func (rs *randSeq) failure(i int, x *v2diff.Exchange, fails []v2diff.Diff) error {
	return fmt.Errorf("undocumented divergence at operation %d\n%s\nsequence so far (reference answers):\n%s\n"+
		"bridge's v3 keys now:\n%s", i, report(x, fails), rs.history(), rs.e.dumpV3(rs.dir))
}

func (rs *randSeq) do(o *rop, i int) error {
	reqs := [2]*v2diff.Request{rs.request(o, v2diff.Ref), rs.request(o, v2diff.Bridge)}
	ctx, cancel := requestCtx(requestTimeout)
	defer cancel()
	sent := time.Now()
	resps, err := rs.e.pair.DoBoth(ctx, reqs)
	if err != nil {
		return fmt.Errorf("%v\n%s", err, rs.history())
	}
	rs.ops++
	rs.exchanges++
	x := v2diff.NewExchange(reqs, resps)
	rs.s.Register(x)
	rs.log = append(rs.log, fmt.Sprintf("%3d %-8s %s -> %d %s", i, o.kind, reqs[v2diff.Ref], resps[v2diff.Ref].Status,
		strings.TrimSpace(string(resps[v2diff.Ref].Body))))
	for side := range resps {
		if u, err := strconv.ParseUint(resps[side].Header.Get("X-Etcd-Index"), 10, 64); err == nil && u > 0 {
			rs.lastXI[side] = u
		}
	}
	if err := rs.judge(i, x); err != nil {
		return err
	}
	rs.learn(x)
	rs.expect(x, sent)
	return nil
}

// expect opens the quiet window of a short TTL a write just set.
func (rs *randSeq) expect(x *v2diff.Exchange, sent time.Time) {
	ttl, ok := v2diff.UintParam(x.Req[v2diff.Ref], "ttl")
	r := x.Req[v2diff.Ref]
	if !ok || ttl > shortTTL || r.Method != "PUT" && r.Method != "POST" || x.ErrorCode(v2diff.Ref) != 0 ||
		x.Resp[v2diff.Ref].Status >= 300 {
		return
	}
	at := sent.Add(time.Duration(ttl) * time.Second)
	rs.expiry = &window{from: at.Add(-expiryLead), to: at.Add(expiryLag)}
	// An in-order key has another name on each server: watch its directory.
	rs.expiryKey = v2diff.KeyOfPath(r.Path)
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
func (rs *randSeq) learn(x *v2diff.Exchange) {
	if x.ErrorCode(v2diff.Ref) != 0 || x.Resp[v2diff.Ref].Status >= 300 {
		return
	}
	if x.Action(v2diff.Ref) == "get" || x.Action(v2diff.Ref) == "" {
		return
	}
	n := x.Node(v2diff.Ref, "node")
	if n == nil { // noValueOnSuccess: learn the directories at least
		key := v2diff.KeyOfPath(x.Req[v2diff.Ref].Path)
		if x.Req[v2diff.Ref].Method == "POST" {
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
	mi, _ := v2diff.NumField(n, "modifiedIndex")
	ord, _ := rs.s.Idx[v2diff.Ref].Floor(mi)
	switch x.Action(v2diff.Ref) {
	case "delete", "compareAndDelete", "expire":
		rs.forget(key)
	default:
		if x.Action(v2diff.Ref) == "set" && n["dir"] == true {
			delete(rs.model, key) // a set dir=true replaces a file
		}
		m := &mnode{dir: n["dir"] == true, mod: ord}
		if e, err := time.Parse(time.RFC3339Nano, str(n["expiration"])); err == nil {
			m.expires = e
		}
		if v, ok := n["value"].(string); ok {
			m.value = v
		} else if old := rs.model[key]; old != nil && !m.dir && x.Node(v2diff.Ref, "node")["value"] == nil {
			m.value = old.value // noValueOnSuccess hides it; not needed exactly
		}
		rs.model[key] = m
		for _, a := range ancestorsOf(key) {
			// A directory now, whatever the model held there (a file
			// whose TTL ran out, say, and then a key written below it).
			if rs.model[a] == nil || !rs.model[a].dir {
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
