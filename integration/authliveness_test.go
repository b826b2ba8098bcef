// SPDX-License-Identifier: Apache-2.0

package integration

// One liveness for the whole bridge: the auth data and the registration
// follow etcd v3 on the bridge's checked session, so a member's fault
// costs v2 requests no more than the bridge's own detection of it. A bridge
// binary over three members gets a write every 250 ms while each member in
// turn is frozen, black-holed, cut off from its peers or killed, with v2
// auth off and then on. Every request must succeed within
// authLivenessBound, except those answered by authLivenessBound after
// the bridge declared its member lost (error 300 while it reconnects). A
// fault of a member the bridge does not use costs nothing.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// authLivenessBound: no v2 request fails or waits longer than this beyond
// the bridge's own detection of its member's loss. loadSlack: what a write
// answered may take beyond it on a loaded machine (a wait on auth data, the
// fault this test is for, takes 2 s).
const (
	authLivenessBound = time.Second
	loadSlack         = 500 * time.Millisecond
)

// authTrialsEnv runs TestLivenessAuthMovesWithTheSession's long version:
// that many faults of the bridge's own member of each kind.
const authTrialsEnv = "V2BRIDGE_TEST_AUTH_TRIALS"

// faultFor: how long each fault lasts, past the 5 s after which a client
// of its own gave up on a silent watch.
const faultFor = 7 * time.Second

func authTrials(t *testing.T) int {
	t.Helper()
	s := os.Getenv(authTrialsEnv)
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a number of trials", authTrialsEnv, s)
	}
	return n
}

// timedRequest is one write of the load: when it was sent and answered,
// and how.
type timedRequest struct {
	start, end time.Time
	status     int // 0: no answer
	body       string
}

// requestLoad sends a write to the bridge every 250 ms, each on its own,
// and keeps every answer.
type requestLoad struct {
	url  string
	user atomic.Pointer[string] // "root:password" once auth is on

	mu   sync.Mutex // guards reqs
	reqs []timedRequest

	stop chan struct{}
	wg   sync.WaitGroup // the sender and each request
}

func startRequestLoad(t *testing.T, base string) *requestLoad {
	l := &requestLoad{url: base, stop: make(chan struct{})}
	hc := &http.Client{Timeout: 15 * time.Second}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				l.send(hc, n)
			}()
		}
	}()
	t.Cleanup(l.halt)
	return l
}

func (l *requestLoad) send(hc *http.Client, n int) {
	r := timedRequest{start: time.Now()}
	req, _ := http.NewRequest("PUT", l.url+"/v2/keys/authlive/k", strings.NewReader(url.Values{"value": {fmt.Sprint(n)}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if up := l.user.Load(); up != nil {
		u, p, _ := strings.Cut(*up, ":")
		req.SetBasicAuth(u, p)
	}
	resp, err := hc.Do(req)
	if err == nil {
		r.body = readAll(resp)
		r.status = resp.StatusCode
	} else {
		r.body = err.Error()
	}
	r.end = time.Now()
	l.mu.Lock()
	l.reqs = append(l.reqs, r)
	l.mu.Unlock()
}

func readAll(resp *http.Response) string {
	defer func() { _ = resp.Body.Close() }()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}

func (l *requestLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// requests is every request answered so far.
func (l *requestLoad) requests() []timedRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]timedRequest(nil), l.reqs...)
}

// lossWatch polls the bridge's loss counter, and keeps when each loss was
// first seen (within the poll's 20 ms).
type lossWatch struct {
	mu     sync.Mutex // guards losses
	losses []time.Time
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once // closes stop
}

func watchLosses(t *testing.T, base string) *lossWatch {
	w := &lossWatch{stop: make(chan struct{}), done: make(chan struct{})}
	hc := &http.Client{Timeout: time.Second}
	go func() {
		defer close(w.done)
		seen := -1.0
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			v, ok := metricOf(hc, base, "v2bridge_backend_losses_total")
			if !ok {
				continue
			}
			w.mu.Lock()
			for ; seen >= 0 && seen < v; seen++ {
				w.losses = append(w.losses, time.Now())
			}
			w.mu.Unlock()
			seen = v
		}
	}()
	t.Cleanup(w.halt)
	return w
}

// halt stops the poll and waits for it.
func (w *lossWatch) halt() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *lossWatch) times() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time(nil), w.losses...)
}

// metricOf is a metric's value on the bridge at base, if it answered.
func metricOf(hc *http.Client, base, name string) (float64, bool) {
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(readAll(resp), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f, true
			}
		}
	}
	return 0, false
}

// bridgeMember is the member the bridge process last connected to, from
// its log.
func bridgeMember(t *testing.T, c *v2bridgetest.Cluster, p *v2bridgetest.BridgeProcess) int {
	t.Helper()
	ep := ""
	for _, line := range strings.Split(p.Log(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "etcd v3 backend connected" {
			ep, _ = m["endpoint"].(string)
		}
	}
	i := c.Index(ep)
	if i < 0 {
		t.Fatalf("no member the bridge connected to in its log:\n%s", p.Log())
	}
	return i
}

// TestLivenessAuthMovesWithTheSession: v2 requests through a bridge binary
// fail or wait only within authLivenessBound of the bridge's own detection
// of its member's loss, whichever member is faulted and however, with v2
// auth off and on.
func TestLivenessAuthMovesWithTheSession(t *testing.T) {
	t.Parallel() // with the other tests that mostly wait: its faults, and the settling after each
	c := v2bridgetest.StartProcessCluster(t, 3)
	bin := buildBridge(t)
	u := v2bridgetest.FreeURL(t)
	p, err := v2bridgetest.StartBridgeProcess(bin, u, "--endpoints", strings.Join(c.ProxiedEndpoints(), ","))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(syscall.SIGTERM) })

	bridges := func() int { return bridgeMember(t, c, p) }
	member := func(i int) func() int { return func() int { return i } }
	faults := []livenessFault{
		// Auth off: each member silent in turn, so whichever carried a
		// follower's stream of its own is faulted once.
		{"freeze", member(0), c.Freeze, c.Thaw, false},
		{"blackhole", member(1), c.Blackhole, c.Heal, false},
		{"freeze", member(2), c.Freeze, c.Thaw, false},
		// Auth on: the bridge's own member.
		{"freeze", bridges, c.Freeze, c.Thaw, true},
		{"isolate", bridges, c.Isolate, c.Heal, true},
		{"kill", bridges, c.Kill, func(int) {}, true},
	}
	if n := authTrials(t); n > 0 {
		// The long run: n faults of the bridge's own member of each kind,
		// half with auth off, half on; one kill at the end.
		faults = nil
		for _, on := range []bool{false, true} {
			for range (n + 1) / 2 {
				faults = append(faults, livenessFault{"freeze", bridges, c.Freeze, c.Thaw, on},
					livenessFault{"blackhole", bridges, c.Blackhole, c.Heal, on},
					livenessFault{"isolate", bridges, c.Isolate, c.Heal, on})
			}
		}
		faults = append(faults, livenessFault{"kill", bridges, c.Kill, func(int) {}, true})
	}
	faultsCostOnlyDetection(t, c, p, u, faults)
}

// livenessFault is one fault of a member, with v2 auth off or on.
type livenessFault struct {
	what   string
	member func() int // the member to fault
	apply  func(i int)
	heal   func(i int)
	auth   bool
}

// faultsCostOnlyDetection applies faults one after another (each past
// faultFor, after the cluster settled and its leader moved off the member
// faulted) while the bridge p at u gets a write every 250 ms, and checks
// that every write succeeded within authLivenessBound (plus loadSlack),
// except those answered by authLivenessBound after the bridge declared its
// member lost, and on etcd 3.4 those within the bounds once the time etcd
// itself served no write (etcdProbe, etcdExcuses) is taken off. v2 auth is
// turned on (root:rootpw) before the first fault that asks for it.
func faultsCostOnlyDetection(t *testing.T, c *v2bridgetest.Cluster, p *v2bridgetest.BridgeProcess, u string, faults []livenessFault) {
	t.Helper()
	losses := watchLosses(t, u)
	defer losses.halt()
	load := startRequestLoad(t, u)
	bridges := func() int { return bridgeMember(t, c, p) }
	probe := startEtcdProbe(t, c, (bridges()+1)%len(c.Members))
	defer probe.halt()
	authOn := false
	type window struct {
		what        string
		fault, heal time.Time
		lastFail    time.Duration // the latest end of a failed write, after the detection
		slowest     time.Duration // the longest a write answered 2xx took
	}
	var windows []window
	for _, f := range faults {
		time.Sleep(3 * time.Second) // the cluster settles after the last fault
		// On etcd 3.4 the healed member's election may come later still.
		if !c.WaitSettled(time.Second, 20*time.Second) {
			t.Fatal("the members agree on no leader and term after the last fault")
		}
		if f.auth && !authOn {
			enableV2Auth(t, u)
			up := "root:rootpw"
			load.user.Store(&up)
			authOn = true
		}
		i := f.member()
		if c.Leader() == i {
			// The leader's fault is an election, which no bridge can
			// make shorter: the bridge's own liveness is under test.
			if err := c.MoveLeader((i + 1) % len(c.Members)); err != nil {
				t.Fatalf("moving the leader off member %d: %v", i, err)
			}
		}
		time.Sleep(time.Second)
		w := window{what: fmt.Sprintf("%s member %d (bridge on %d, auth %v)", f.what, i, bridges(), f.auth),
			fault: time.Now()}
		probe.through((i + 1) % len(c.Members))
		f.apply(i)
		time.Sleep(faultFor) // past the store's own silence bound (its request timeout)
		f.heal(i)
		w.heal = time.Now()
		windows = append(windows, w)
	}
	time.Sleep(2 * time.Second)
	load.halt()
	probe.halt()

	reqs := load.requests()
	down := probe.unavailable()
	for _, s := range down {
		t.Logf("etcd served no write promptly from %v to %v after the start (a direct write to a member not faulted)",
			s.from.Sub(reqs[0].start).Round(time.Millisecond), s.to.Sub(reqs[0].start).Round(time.Millisecond))
	}
	lost := losses.times()
	for k := range windows {
		w := &windows[k]
		var detect []time.Time
		for _, l := range lost {
			if !l.Before(w.fault) && l.Before(w.heal) {
				detect = append(detect, l)
			}
		}
		for _, r := range reqs {
			if !r.end.After(w.fault) || !r.end.Before(w.heal) {
				continue
			}
			if r.status == http.StatusOK || r.status == http.StatusCreated {
				w.slowest = max(w.slowest, r.end.Sub(r.start))
			} else if len(detect) > 0 {
				w.lastFail = max(w.lastFail, r.end.Sub(detect[0]))
			}
		}
		t.Logf("%s: losses declared %v after the fault; the last failed write answered %v after the first; "+
			"the slowest write answered took %v", w.what, sinceAll(w.fault, detect), w.lastFail.Round(time.Millisecond),
			w.slowest.Round(time.Millisecond))
	}
	bad, byEtcd := 0, 0
	for _, r := range reqs {
		ok := r.status == http.StatusOK || r.status == http.StatusCreated
		if ok && r.end.Sub(r.start) <= authLivenessBound+loadSlack {
			continue
		}
		excused := false
		for _, l := range lost {
			// The bridge lost its member at l: until then a request may
			// wait (on the lost member), and for authLivenessBound after
			// it fail (the bridge reconnects).
			if !r.end.Before(l.Add(-detectMax)) && !r.end.After(l.Add(authLivenessBound)) {
				excused = true
			}
		}
		if excused {
			continue
		}
		if onEtcd34(c) && etcdExcuses(r, ok, down) {
			byEtcd++
			t.Logf("a write sent %v after the start took %v, of which etcd served no write for %v: %d %s",
				r.start.Sub(reqs[0].start).Round(time.Millisecond), r.end.Sub(r.start).Round(time.Millisecond),
				overlap(r.start, r.end, down).Round(time.Millisecond), r.status, strings.TrimSpace(r.body))
			continue
		}
		bad++
		if bad <= 10 {
			t.Errorf("a write sent %v after the start took %v: %d %s", r.start.Sub(reqs[0].start).Round(time.Millisecond),
				r.end.Sub(r.start).Round(time.Millisecond), r.status, strings.TrimSpace(r.body))
		}
	}
	t.Logf("%d writes, %d outside the bounds, %d within them once etcd's own unavailability is taken off",
		len(reqs), bad, byEtcd)
	for _, kind := range []string{"freeze", "blackhole", "isolate", "kill"} {
		for _, on := range []bool{false, true} {
			var lastFail, slowest time.Duration
			n := 0
			for _, w := range windows {
				if strings.HasPrefix(w.what, kind+" ") && strings.HasSuffix(w.what, fmt.Sprintf("auth %v)", on)) {
					n++
					lastFail, slowest = max(lastFail, w.lastFail), max(slowest, w.slowest)
				}
			}
			if n > 0 {
				t.Logf("%s, auth %v: %d faults; the last failed write answered at most %v after the detection; "+
					"the slowest write answered took %v", kind, on, n, lastFail.Round(time.Millisecond),
					slowest.Round(time.Millisecond))
			}
		}
	}
	if len(reqs) < 30*len(faults) { // 44 sent in each fault's 11 s
		t.Errorf("only %d writes answered", len(reqs))
	}
}

// etcdExcuses reports whether write r, answered (ok) or not, kept within
// the bounds but for the time etcd itself could serve no write (down), as
// in the election a healed member forces on etcd 3.4 (see onEtcd34): its
// wait, less the part of it in down, is within authLivenessBound (plus
// loadSlack), and if it failed, it failed during such a span or within
// authLivenessBound after it.
func etcdExcuses(r timedRequest, ok bool, down []span) bool {
	if r.end.Sub(r.start)-overlap(r.start, r.end, down) > authLivenessBound+loadSlack {
		return false
	}
	if ok {
		return true
	}
	for _, s := range down {
		if !r.end.Before(s.from) && !r.end.After(s.to.Add(authLivenessBound)) {
			return true
		}
	}
	return false
}

// sinceAll is each of ts after from.
func sinceAll(from time.Time, ts []time.Time) []time.Duration {
	var out []time.Duration
	for _, x := range ts {
		out = append(out, x.Sub(from).Round(10*time.Millisecond))
	}
	return out
}

// enableV2Auth creates root and turns v2 auth on through the bridge at
// base (the guest role keeps full access).
func enableV2Auth(t *testing.T, base string) {
	t.Helper()
	for _, step := range []struct{ path, body string }{
		{"/v2/auth/users/root", `{"user":"root","password":"rootpw"}`},
		{"/v2/auth/enable", ""},
	} {
		req, _ := http.NewRequest("PUT", base+step.path, strings.NewReader(step.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(resp)
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
			t.Fatalf("PUT %s: %d %s", step.path, resp.StatusCode, body)
		}
	}
}
