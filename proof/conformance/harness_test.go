// SPDX-License-Identifier: Apache-2.0

package conformance

import (
	"context"
	"flag"
	"fmt"
	"log"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/migrate/v2diff"
	"github.com/v2bridge/v2bridge/proof/v2ref"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
)

var (
	flagSeed = flag.Int64("seed", 0, "base seed of the random sequences (default: $CONFORMANCE_SEED, else time-based)")
	flagLong = flag.Bool("long", false, "run many more random sequences (also: CONFORMANCE_LONG=1)")
	flagOps  = flag.Int("ops", 0, "random operations to run (default 10000; 200000 with -long)")
	flagSeqs = flag.Int("sequences", 0, "random sequences to run (overrides -ops)")

	flagShowExcused = flag.Bool("show-excused", false, "log every difference an allow-list entry excuses")
)

// bridgeRingSize is the bridge's ring of recent events in the suite: v2's
// window, so both answer 401 for the same waitIndexes.
const bridgeRingSize = 1000

// env is one reference server and one bridge, shared by every case.
type env struct {
	pair Pair
	v3   *clientv3.Client // the bridge's backend, for failure reports

	mu        sync.Mutex
	exchanges int
	tolerated map[string]int
}

func newEnv(t *testing.T) *env {
	t.Helper()
	var ref *v2ref.Server
	var refErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the reference builds/starts while the cluster starts
		defer wg.Done()
		ctx, cancel := ctxFor(t, v2ref.StartTimeout+10*time.Minute) // a cold build of etcd 3.5 included
		defer cancel()
		ref, refErr = v2ref.Start(ctx, v2ref.Options{})
	}()
	t.Cleanup(func() {
		wg.Wait()
		if ref != nil {
			if err := ref.Stop(); err != nil {
				t.Errorf("stopping the reference: %v", err)
			}
		}
	})
	cl := v2bridgetest.StartCluster(t, 1)
	// A small event ring, so that watches from a past waitIndex are served
	// from v3 history as often as from the ring. A patient heartbeat: the
	// suite compares answers, and under the race detector on a loaded
	// machine a starved heartbeat can declare the member lost, which ends
	// watches and reloads the mirror (the liveness suites test that).
	br := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{Auth: true,
		Backend: func(c *v3backend.Config) {
			c.RingSize = bridgeRingSize
			c.HeartbeatTimeout, c.HeartbeatFailures = 5*time.Second, 5
		}})
	wg.Wait()
	if refErr != nil {
		t.Fatal(refErr)
	}
	// Watches need the bridge's shared v3 watch; wait (bounded) until it is up.
	for deadline := time.Now().Add(30 * time.Second); !br.Backend.Hub().Live(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the bridge's watch hub did not come up within 30s")
		}
	}
	e := &env{pair: Pair{NewServer(v2diff.Ref, ref.URL), NewServer(v2diff.Bridge, br.URL)}, v3: cl.Client(t),
		tolerated: map[string]int{}}
	t.Cleanup(func() {
		for _, s := range e.pair {
			s.Client.CloseIdleConnections()
		}
	})
	return e
}

func (e *env) account(s *v2diff.Session, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.exchanges += n
	for id, c := range s.Tolerated {
		e.tolerated[id] += c
	}
}

func (e *env) summary() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make([]string, 0, len(e.tolerated))
	for id := range e.tolerated {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("%s×%d", id, e.tolerated[id]))
	}
	return fmt.Sprintf("%d exchanges compared; differences excused by documented divergences: %s",
		e.exchanges, strings.Join(parts, ", "))
}

// ctxFor bounds one step.
func ctxFor(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	ctx := context.Background()
	if dl, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		c2, cancel2 := context.WithTimeout(ctx, d)
		return c2, func() { cancel2(); cancel() }
	}
	return context.WithTimeout(ctx, d)
}

const requestTimeout = 20 * time.Second

// requestCtx bounds one request of a random sequence.
func requestCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// judge compares an exchange and splits its differences into excused ones
// (counted per divergence) and failures.
func judge(s *v2diff.Session, x *v2diff.Exchange, sorted bool) (failures []v2diff.Diff, excused map[string]int) {
	return excuse(s, x, s.Compare(x, sorted))
}

// excuse splits differences into excused ones and failures.
func excuse(s *v2diff.Session, x *v2diff.Exchange, diffs []v2diff.Diff) (failures []v2diff.Diff, excused map[string]int) {
	excused = map[string]int{}
	for _, d := range diffs {
		dv := v2diff.Excuse(s, x, d)
		if dv == nil {
			failures = append(failures, d)
			continue
		}
		excused[dv.ID]++
		s.Tolerated[dv.ID]++
		if *flagShowExcused {
			log.Printf("excused by %s: %s\n%s", dv.ID, d, report(x, nil))
		}
	}
	return failures, excused
}

// undeclared lists the excused divergences that are not in allowed.
func undeclared(excused map[string]int, allowed map[string]bool) []string {
	var out []string
	for id := range excused {
		if !allowed[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func report(x *v2diff.Exchange, diffs []v2diff.Diff) string {
	var b strings.Builder
	fmt.Fprintf(&b, "request ref:    %s\n", x.Req[v2diff.Ref])
	if x.Req[v2diff.Bridge].String() != x.Req[v2diff.Ref].String() {
		fmt.Fprintf(&b, "request bridge: %s\n", x.Req[v2diff.Bridge])
	}
	fmt.Fprintf(&b, "ref:    %s\nbridge: %s\n", x.Resp[v2diff.Ref], x.Resp[v2diff.Bridge])
	for _, d := range diffs {
		fmt.Fprintf(&b, "  DIFF %s\n", d)
	}
	return b.String()
}

// clearTree removes everything a case left behind (not compared): every
// top-level node plus the hidden top-level names the cases use.
func (e *env) clearTree(t *testing.T) {
	t.Helper()
	ctx, cancel := ctxFor(t, requestTimeout)
	defer cancel()
	for _, srv := range e.pair {
		resp, err := srv.Do(ctx, &v2diff.Request{Method: "GET", Path: "/v2/keys/"})
		if err != nil {
			t.Fatal(err)
		}
		keys := append([]string(nil), hiddenTop...)
		if m, ok := v2diff.DecodeJSON(resp.Body).(map[string]any); ok {
			n, _ := m["node"].(map[string]any)
			nodes, _ := n["nodes"].([]any)
			for _, c := range nodes {
				cm, _ := c.(map[string]any)
				keys = append(keys, str(cm["key"]))
			}
		}
		for _, k := range keys {
			p := (&url.URL{Path: "/v2/keys" + k}).EscapedPath()
			resp, err := srv.Do(ctx, &v2diff.Request{Method: "DELETE", Path: p, Query: url.Values{"recursive": {"true"}}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != 200 && resp.Status != 404 {
				t.Fatalf("%s: clearing %s: %s", srv.Side, k, resp)
			}
		}
	}
}

// hiddenTop are the hidden top-level names cases may create (listings do not
// show them, so clearTree deletes them by name).
var hiddenTop = []string{"/_h", "/_hd"}

// vars holds values saved from earlier answers, per side.
type vars [2]map[string]string

func newVars() vars { return vars{{}, {}} }

func (v vars) save(name string, x *v2diff.Exchange, watchResp [2]*v2diff.Response) {
	for side := v2diff.Ref; side <= v2diff.Bridge; side++ {
		m := v[side]
		resp := x.Resp[side]
		if watchResp[side] != nil {
			resp = watchResp[side]
		}
		m[name+".xi"] = resp.Header.Get("X-Etcd-Index")
		if n := x.Node(side, "node"); n != nil {
			if u, ok := v2diff.NumField(n, "modifiedIndex"); ok {
				m[name+".mi"] = strconv.FormatUint(u, 10)
			}
			if u, ok := v2diff.NumField(n, "createdIndex"); ok {
				m[name+".ci"] = strconv.FormatUint(u, 10)
			}
			m[name+".key"] = str(n["key"])
		}
		if obj := x.Object(side); obj != nil {
			if u, ok := v2diff.NumField(obj, "index"); ok {
				m[name+".ei"] = strconv.FormatUint(u, 10)
			}
		}
	}
}

var tmplRe = regexp.MustCompile(`\{([a-zA-Z0-9_]+\.[a-z]+)([+-]\d+)?\}`)

// expand replaces {name.field} and {name.field+N} with side's saved values.
// +N is N indexes later on the reference, and on the bridge the index the
// same N one-event writes later would start at (each bridge write is a
// revision of its own: translate.IndexesPerRevision indexes).
func (v vars) expand(t *testing.T, side v2diff.Side, s string) string {
	return tmplRe.ReplaceAllStringFunc(s, func(m string) string {
		p := tmplRe.FindStringSubmatch(m)
		val, ok := v[side][p[1]]
		if !ok {
			t.Fatalf("template %s: nothing saved as %s", m, p[1])
		}
		if p[2] == "" {
			return val
		}
		n, err := strconv.ParseInt(val, 10, 64)
		d, _ := strconv.ParseInt(p[2], 10, 64)
		if err != nil {
			t.Fatalf("template %s: %q is not a number", m, val)
		}
		if side == v2diff.Bridge {
			d = bridgeIndexOffset(d)
		}
		return strconv.FormatInt(n+d, 10)
	})
}

// bridgeIndexOffset is the bridge's counterpart of a reference index offset
// d from a write's index: +1 is the first index of the next revision, +d
// the first index of the d-th revision after, -d the index of the d-th
// revision before.
func bridgeIndexOffset(d int64) int64 {
	const per = translate.IndexesPerRevision
	if d > 0 {
		return (d-1)*per + 1
	}
	return d * per
}

func pairs(kv []string) url.Values {
	if kv == nil {
		return nil
	}
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

func (v vars) expandValues(t *testing.T, side v2diff.Side, in url.Values) url.Values {
	if in == nil {
		return nil
	}
	out := url.Values{}
	for k, vs := range in {
		for _, x := range vs {
			out.Add(k, v.expand(t, side, x))
		}
	}
	return out
}

func longMode() bool {
	return *flagLong || os.Getenv("CONFORMANCE_LONG") == "1" || os.Getenv("CONFORMANCE_LONG") == "true"
}

func baseSeed() int64 {
	if *flagSeed != 0 {
		return *flagSeed
	}
	if s := os.Getenv("CONFORMANCE_SEED"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
	}
	return time.Now().UnixNano() % 1_000_000_000
}

// dumpV3 lists the bridge's v3 keys that concern the v2 directory dir (data,
// markers, sequence keys), for failure reports.
func (e *env) dumpV3(dir string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for _, pfx := range []string{dir + "/", "_v2bridge/d" + dir, "_v2bridge/s" + dir} {
		resp, err := e.v3.Get(ctx, pfx, clientv3.WithPrefix())
		if err != nil {
			return err.Error()
		}
		for _, kv := range resp.Kvs {
			fmt.Fprintf(&b, "  %q = %q (create %d, mod %d, lease %x)\n", kv.Key, kv.Value, kv.CreateRevision,
				kv.ModRevision, kv.Lease)
		}
	}
	return b.String()
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// unionKeys are the keys of a and b, sorted.
func unionKeys(a, b map[string]any) []string {
	both := maps.Clone(a)
	if both == nil {
		both = map[string]any{}
	}
	maps.Copy(both, b)
	return slices.Sorted(maps.Keys(both))
}
