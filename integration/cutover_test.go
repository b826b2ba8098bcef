// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v2"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/proof/v2ref"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// dualEnv is a v2 server, an etcd v3 cluster and bridge binaries
// in dual mode in front of both, with `migrate --follow` between them.
type dualEnv struct {
	ref      *v2ref.Server
	cl       *v2bridgetest.Cluster
	v3       *clientv3.Client
	follower *proc
}

const network = "/coreos.com/network"

func newDualEnv(t *testing.T) *dualEnv {
	t.Helper()
	bound(t)
	e := &dualEnv{ref: v2ref.StartT(t, v2ref.Options{}), cl: v2bridgetest.StartCluster(t, 1)}
	e.v3 = e.cl.Client(t)
	if r := do(t, "PUT", e.ref.URL, "/v2/keys"+network+"/config", form("value", `{"Network":"10.5.0.0/16"}`)); r.status != 201 {
		t.Fatalf("seeding the v2 server: %d %s", r.status, r.body)
	}
	return e
}

func (e *dualEnv) endpoints() string { return strings.Join(e.cl.Endpoints(), ",") }

// startBridge starts a bridge binary in dual mode at url (a fresh one when
// empty) and waits until it serves.
func (e *dualEnv) startBridge(t *testing.T, url string) *proc {
	t.Helper()
	return startHealthyBridge(t, func() (string, []string, []string) {
		u := url
		if u == "" {
			u = v2bridgetest.FreeURL(t)
		}
		return u, []string{"V2BRIDGE_LOG_LEVEL=info", "V2BRIDGE_LOG_FORMAT=console"},
			[]string{"--v2-server", e.ref.URL, "--endpoints", e.endpoints(), "--listen-client-urls", u,
				"--mode-lease-ttl", "3s", "--heartbeat-interval", "200ms", "--heartbeat-timeout", "300ms",
				"--request-timeout", "2s"}
	})
}

// startFollower runs `migrate --follow` and waits until it records its
// progress in etcd v3.
func (e *dualEnv) startFollower(t *testing.T, prefix string) {
	t.Helper()
	e.follower = startBridgeProcess(t, nil, "migrate", "--v2-server", e.ref.URL, "--v2-server-prefix", prefix,
		"--endpoints", e.endpoints(), "--follow", "--progress", "none", "--ttl-resync", "0")
	waitFor(t, 30*time.Second, "the follower's progress record", func() bool {
		r, err := e.v3.Get(ctxT(t, 5*time.Second), "_v2bridge/migrate/follow")
		return err == nil && len(r.Kvs) > 0
	})
}

// command runs `v2bridge migrate cutover|rollback` with extra arguments.
func (e *dualEnv) command(t *testing.T, cmd string, extra ...string) cmdResult {
	t.Helper()
	return runBinary(t, nil, append([]string{"migrate", cmd, "--v2-server", e.ref.URL, "--v2-server-prefix", network,
		"--endpoints", e.endpoints(), "--index-margin", "100", "--ack-timeout", "20s"}, extra...)...)
}

func statsMode(t *testing.T, url string) string {
	t.Helper()
	r := do(t, "GET", url, "/v2/stats/self", nil)
	if r.status != 200 {
		return fmt.Sprintf("status %d", r.status)
	}
	m := r.json(t)
	if _, ok := m["name"]; !ok {
		t.Fatalf("/v2/stats/self lost its v2 shape: %s", r.body)
	}
	s, _ := m["v2bridgeMode"].(string)
	return s
}

// fleet is flannel-like clients sharing a pool of subnets: each holds one
// lease (created with prevExist=false and a TTL, renewed by compare-and-swap
// on its modifiedIndex), now and then gives it up for another, and watches
// every lease recursively, resuming at modifiedIndex+1 and re-listing on
// 401. It checks, at every change, that no subnet is held by two clients.
// Leases last leaseTTL: flannel's last a day; a minute outlasts the writes
// refused while a cutover fences, however loaded the machine.
type fleet struct {
	mu         sync.Mutex // guards holders, violations, lost, released
	holders    map[string]string
	violations []string
	lost       []string
	released   int // leases given up (traded or lost)
}

const leaseTTL = time.Minute

func (f *fleet) hold(subnet, who string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.holders[subnet]; ok && h != who {
		f.violations = append(f.violations, fmt.Sprintf("%s taken by %s while %s holds it", subnet, who, h))
	}
	f.holders[subnet] = who
}

func (f *fleet) release(subnet, who string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holders[subnet] == who {
		delete(f.holders, subnet)
		f.released++
	}
}

// unrelease takes back the count of a lease given up and kept after all.
func (f *fleet) unrelease() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released--
}

func (f *fleet) loss(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lost = append(f.lost, s)
}

type flannel struct {
	name    string
	k       client.KeysAPI
	f       *fleet
	churn   bool
	mu      sync.Mutex // guards view, subnet
	view    map[string]string
	subnet  string
	mod     uint64
	renewed int
	refused int
}

const subnets = network + "/subnets"

func (c *flannel) acquire(ctx context.Context) {
	for ctx.Err() == nil {
		list, err := c.k.Get(ctx, subnets, &client.GetOptions{Recursive: true, Quorum: true})
		taken := map[string]bool{}
		if err == nil {
			for _, n := range list.Node.Nodes {
				taken[n.Key] = true
			}
		} else if !isV2Code(err, 100) {
			c.refused++
			ctxsleep.Sleep(ctx, 100*time.Millisecond)
			continue
		}
		for i := 1; i <= 40 && ctx.Err() == nil; i++ {
			key := fmt.Sprintf("%s/10.5.%d.0-24", subnets, i)
			if taken[key] {
				continue
			}
			r, err := c.k.Set(ctx, key, c.name, &client.SetOptions{PrevExist: client.PrevNoExist, TTL: leaseTTL})
			if err == nil {
				c.mu.Lock()
				c.subnet, c.mod = key, r.Node.ModifiedIndex
				c.mu.Unlock()
				c.f.hold(key, c.name)
				return
			}
			if !isV2Code(err, 105) {
				c.refused++
				ctxsleep.Sleep(ctx, 100*time.Millisecond)
				break
			}
		}
	}
}

// renew renews the lease by compare-and-swap; a compare that fails (the
// index space changed at the cutover) re-reads the lease and goes on if it
// is still this client's, as flannel does.
func (c *flannel) renew(ctx context.Context) {
	r, err := c.k.Set(ctx, c.subnet, c.name, &client.SetOptions{PrevIndex: c.mod, TTL: leaseTTL})
	switch {
	case err == nil:
		c.mod = r.Node.ModifiedIndex
		c.renewed++
	case isV2Code(err, 101) || isV2Code(err, 100):
		g, gerr := c.k.Get(ctx, c.subnet, &client.GetOptions{Quorum: true})
		switch {
		case gerr == nil && g.Node.Value == c.name:
			c.mod = g.Node.ModifiedIndex
		case gerr == nil || isV2Code(gerr, 100):
			c.f.loss(fmt.Sprintf("%s lost %s (renewal: %v)", c.name, c.subnet, err))
			c.f.release(c.subnet, c.name)
			c.acquire(ctx)
		default:
			c.refused++
		}
	default:
		c.refused++ // fenced, or the bridge restarting: retry
	}
}

// keepOrReplace follows a trade whose delete failed or went unanswered:
// the lease is held again if it is still this client's, else replaced.
func (c *flannel) keepOrReplace(ctx context.Context) {
	for ctx.Err() == nil {
		g, err := c.k.Get(ctx, c.subnet, &client.GetOptions{Quorum: true})
		switch {
		case err == nil && g.Node.Value == c.name:
			c.mod = g.Node.ModifiedIndex
			c.f.hold(c.subnet, c.name)
			c.f.unrelease()
			return
		case err == nil || isV2Code(err, 100):
			c.acquire(ctx)
			return
		}
		c.refused++
		ctxsleep.Sleep(ctx, 100*time.Millisecond)
	}
}

func (c *flannel) run(ctx context.Context) {
	c.acquire(ctx)
	next := time.Now().Add(time.Duration(1000+rand.IntN(1000)) * time.Millisecond)
	for ctxsleep.Sleep(ctx, 200*time.Millisecond) {
		if c.churn && time.Now().After(next) {
			next = time.Now().Add(time.Duration(1000+rand.IntN(1000)) * time.Millisecond)
			// A trade is whole even when the client is stopped in the
			// middle of it: a lease given up is replaced.
			tctx, done := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
			// Given up before the delete is sent: once it applies, another
			// client may take the subnet before this one hears back.
			c.f.release(c.subnet, c.name)
			if _, err := c.k.Delete(tctx, c.subnet, &client.DeleteOptions{PrevIndex: c.mod}); err == nil {
				c.acquire(tctx)
				done()
				continue
			}
			c.keepOrReplace(tctx)
			done()
		}
		c.renew(ctx)
	}
}

// watch keeps the client's view of every lease: list, then watch from the
// listing's index, resuming after each event, re-listing on 401.
func (c *flannel) watch(ctx context.Context) {
	for ctx.Err() == nil {
		list, err := c.k.Get(ctx, subnets, &client.GetOptions{Recursive: true, Quorum: true})
		if err != nil && !isV2Code(err, 100) {
			ctxsleep.Sleep(ctx, 100*time.Millisecond)
			continue
		}
		view := map[string]string{}
		idx := uint64(0)
		if err == nil {
			for _, n := range list.Node.Nodes {
				view[n.Key] = n.Value
			}
			idx = list.Index
		} else {
			idx = err.(client.Error).Index
		}
		c.mu.Lock()
		c.view = view
		c.mu.Unlock()
		w := c.k.Watcher(subnets, &client.WatcherOptions{AfterIndex: idx, Recursive: true})
		for ctx.Err() == nil {
			r, err := w.Next(ctx)
			if isV2Code(err, 401) {
				break // re-list
			}
			if err != nil {
				ctxsleep.Sleep(ctx, 100*time.Millisecond)
				continue
			}
			c.mu.Lock()
			switch r.Action {
			case "delete", "expire", "compareAndDelete":
				delete(c.view, r.Node.Key)
			default:
				c.view[r.Node.Key] = r.Node.Value
			}
			c.mu.Unlock()
		}
	}
}

func (c *flannel) viewCopy() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for k, v := range c.view {
		out[k] = v
	}
	return out
}

// v3Leases is the leases as etcd v3 holds them.
func (e *dualEnv) v3Leases(t *testing.T) map[string]string {
	t.Helper()
	r, err := e.v3.Get(ctxT(t, 5*time.Second), subnets+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range r.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestCutoverMovesEveryBridgeToV3 runs three bridges in dual mode, flannel-
// like clients spread over them taking, renewing and trading subnet leases,
// and `migrate --follow`; then `migrate cutover`. Every client must end up
// on etcd v3's data with its lease, and no subnet may ever be held twice.
func TestCutoverMovesEveryBridgeToV3(t *testing.T) {
	e := newDualEnv(t)
	var urls []string
	for i := 0; i < 3; i++ {
		urls = append(urls, e.startBridge(t, "").url)
	}
	e.startFollower(t, network)
	f := &fleet{holders: map[string]string{}}
	// The clients' writers stop before their watchers: a watcher stopped
	// with the last writes would keep a view without them.
	ctx, cancel := context.WithCancel(context.Background())
	watchCtx, stopWatching := context.WithCancel(context.Background())
	var writers, watchers sync.WaitGroup
	var clients []*flannel
	for i := 0; i < 6; i++ {
		c := &flannel{name: fmt.Sprintf("node-%d", i), k: v2client(t, urls[i%3]), f: f, churn: i%2 == 0}
		clients = append(clients, c)
		writers.Add(1)
		watchers.Add(1)
		go func() { defer writers.Done(); c.run(ctx) }()
		go func() { defer watchers.Done(); c.watch(watchCtx) }()
	}
	stop := func() { cancel(); writers.Wait() }
	defer func() { stop(); stopWatching(); watchers.Wait() }()
	waitFor(t, 20*time.Second, "every client holding a lease on the v2 server", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.holders) == len(clients)
	})
	// Leases traded through the v2 server, and carried over by the
	// follower: etcd v3 has a lease for every client.
	waitFor(t, 30*time.Second, "leases traded on the v2 server and copied to etcd v3", func() bool {
		f.mu.Lock()
		traded := f.released
		f.mu.Unlock()
		return traded >= 3 && len(e.v3Leases(t)) == len(clients)
	})

	// The shadow comparison: a clean copy agrees with the v2 server; a v3
	// key changed behind the follower's back is caught on the next read.
	waitFor(t, 20*time.Second, "the bridges comparing their traffic with etcd v3", func() bool {
		return shadowSum(t, urls, "v2bridge_shadow_compared_total") >= 10
	})
	if d := shadowSum(t, urls, "v2bridge_shadow_divergences_total"); d != 0 {
		t.Errorf("%v shadow divergences on a clean copy", d)
	}
	t.Logf("clean copy: %v requests compared, %v lagging, 0 divergences",
		shadowSum(t, urls, "v2bridge_shadow_compared_total"), shadowSum(t, urls, "v2bridge_shadow_lagging_total"))
	cfgKey := network + "/config"
	orig, err := e.v3.Get(ctxT(t, 5*time.Second), cfgKey)
	if err != nil || len(orig.Kvs) != 1 {
		t.Fatalf("the copied config in etcd v3: %v %v", orig, err)
	}
	if _, err := e.v3.Put(ctxT(t, 5*time.Second), cfgKey, `{"Network":"10.99.0.0/16"}`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "a shadow divergence for the corrupted key", func() bool {
		for _, u := range urls {
			do(t, "GET", u, "/v2/keys"+cfgKey, nil) // answered by the v2 server, compared with v3
		}
		return shadowSum(t, urls, "v2bridge_shadow_divergences_total") > 0
	})
	t.Logf("one v3 key corrupted: %v divergences", shadowSum(t, urls, "v2bridge_shadow_divergences_total"))
	if _, err := e.v3.Put(ctxT(t, 5*time.Second), cfgKey, string(orig.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}

	res := e.command(t, "cutover")
	t.Logf("migrate cutover (exit %d):\n%s%s", res.code, res.stdout, res.stderr)
	if res.code != 0 {
		t.Fatalf("cutover failed")
	}
	for _, want := range []string{"step 1/3: fenced: 3 bridge(s)", "step 2/3", "step 3/3: switched", "3 bridge(s) serve in v3 mode"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("the cutover's output lacks %q", want)
		}
	}
	for _, u := range urls {
		if m := statsMode(t, u); m != "v3" {
			t.Errorf("bridge %s: /v2/stats/self says mode %q after the cutover", u, m)
		}
		if r := do(t, "GET", u, "/metrics", nil); !strings.Contains(r.body, `v2bridge_mode{mode="v3"} 1`) ||
			!strings.Contains(r.body, "v2bridge_mode_since_seconds") {
			t.Errorf("bridge %s: metrics do not say v3 mode", u)
		}
	}
	select {
	case <-e.follower.done:
		e.follower.done <- nil
	case <-time.After(10 * time.Second):
		t.Errorf("the follower still runs after the cutover:\n%s", e.follower.logs)
	}
	// The v2 server is no longer written: its leases stop being renewed.
	before := do(t, "GET", e.ref.URL, "/v2/keys"+subnets, form("recursive", "true", "sorted", "true"))
	// The clients keep renewing and trading, now on etcd v3: wait until
	// every lease there was written since.
	cut, err := e.v3.Get(ctxT(t, 5*time.Second), "cutover-revision")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "every client renewing its lease on etcd v3 after the cutover", func() bool {
		r, err := e.v3.Get(ctxT(t, 5*time.Second), subnets+"/", clientv3.WithPrefix())
		if err != nil || len(r.Kvs) != len(clients) {
			return false
		}
		for _, kv := range r.Kvs {
			if kv.ModRevision <= cut.Header.Revision {
				return false
			}
		}
		return true
	})
	after := do(t, "GET", e.ref.URL, "/v2/keys"+subnets, form("recursive", "true", "sorted", "true"))
	if normalized(t, before.body) != normalized(t, after.body) && !strings.Contains(after.body, `"errorCode":100`) {
		t.Errorf("the v2 server was written after the cutover:\nbefore %s\nafter  %s", before.body, after.body)
	}
	stop()

	want := e.v3Leases(t)
	for _, c := range clients {
		waitFor(t, 15*time.Second, c.name+"'s view converging on etcd v3's leases", func() bool {
			return sameMap(c.viewCopy(), e.v3Leases(t))
		})
		if want[c.subnet] != c.name {
			t.Errorf("%s believes it holds %s; etcd v3 says %q", c.name, c.subnet, want[c.subnet])
		}
		t.Logf("%s: %s, %d renewals, %d requests refused or failed", c.name, c.subnet, c.renewed, c.refused)
	}
	owners := map[string]bool{}
	for _, v := range want {
		if owners[v] {
			t.Errorf("%s holds two leases in etcd v3: %v", v, want)
		}
		owners[v] = true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.violations) > 0 || len(f.lost) > 0 {
		t.Errorf("subnets held twice: %v; leases lost: %v", f.violations, f.lost)
	}
	if len(want) != len(clients) {
		t.Errorf("etcd v3 holds %d leases for %d clients: %v", len(want), len(clients), want)
	}

	again := e.command(t, "cutover")
	if again.code != 0 || !strings.Contains(again.stdout, "already in v3 mode") {
		t.Errorf("a second cutover: exit %d\n%s%s", again.code, again.stdout, again.stderr)
	}
	rb := e.command(t, "rollback")
	if rb.code == 0 || !strings.Contains(rb.stderr, "made through etcd v3 since the cutover") {
		t.Errorf("a rollback after writes through etcd v3 must refuse without --force: exit %d\n%s%s", rb.code, rb.stdout, rb.stderr)
	}
}

// TestCutoverWithFaults: the v2 server frozen during passthrough ends the
// watches in time; a bridge restarted while a cutover waits (fenced) comes
// up fenced, one restarted after it comes up in v3 mode; a waitIndex of the
// v2 server's index space gets 401; a rollback goes back, and again is a
// no-op.
func TestCutoverWithFaults(t *testing.T) {
	e := newDualEnv(t)
	a := e.startBridge(t, "")
	b := e.startBridge(t, "")

	// The v2 server frozen: a watch through a dual-mode bridge ends as in
	// passthrough mode.
	w := startWatch(t, a.url, "/frozen")
	waitFor(t, 5*time.Second, "the watch parked", func() bool {
		return strings.Contains(do(t, "GET", a.url, "/v2/stats/store", nil).body, `"watchers":1`)
	})
	if err := syscall.Kill(e.ref.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	select {
	case ev := <-w:
		if ev.status != 200 || ev.Action != "" {
			t.Errorf("a watch on a frozen v2 server must end with an empty 200: %d %q", ev.status, ev.Action)
		}
		t.Logf("the watch ended %v after the v2 server froze", time.Since(t0))
	case <-time.After(livenessBound):
		t.Errorf("a watch still parked %v after the v2 server froze", livenessBound)
	}
	if err := syscall.Kill(e.ref.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the bridge ready again", func() bool { return do(t, "GET", a.url, "/readyz", nil).status == 200 })

	e.startFollower(t, "/")
	old := do(t, "PUT", a.url, "/v2/keys/moved/k", form("value", "written-on-the-old-server"))
	if old.status != 201 {
		t.Fatalf("a write in passthrough: %d %s", old.status, old.body)
	}
	oldIndex := old.header.Get("X-Etcd-Index")

	// The follower paused: the cutover fences, then waits for it.
	if err := e.follower.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if r := do(t, "PUT", a.url, "/v2/keys/moved/late", form("value", "the follower has not seen it")); r.status != 201 {
		t.Fatalf("a write in passthrough: %d %s", r.status, r.body)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer ccancel()
	cmd := exec.CommandContext(cctx, buildBridge(t), "migrate", "cutover", "--v2-server", e.ref.URL, "--v2-server-prefix", "/",
		"--endpoints", e.endpoints(), "--index-margin", "100", "--follow-timeout", "60s")
	cmd.Env = childEnv()
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cutDone := make(chan error, 1)
	go func() { cutDone <- cmd.Wait() }()
	defer func() {
		_ = e.follower.cmd.Process.Signal(syscall.SIGCONT)
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-cutDone
		}
	}()
	waitFor(t, 20*time.Second, "the cutover fencing and waiting for the follower", func() bool {
		return strings.Contains(out.String(), "step 1/3: fenced")
	})
	if r := do(t, "PUT", a.url, "/v2/keys/moved/k", form("value", "x")); r.status != 500 || !strings.Contains(r.body, "cutover is in progress") {
		t.Errorf("a write while fenced: %d %s, want error 300 saying the cutover is in progress", r.status, r.body)
	}
	// Bridge b dies and comes back while fenced: it comes up fenced.
	_ = b.cmd.Process.Kill()
	<-b.done
	b.done <- nil
	b = e.startBridge(t, b.url)
	if m := statsMode(t, b.url); m != "fencing" {
		t.Errorf("a bridge restarted during the cutover says mode %q, want fencing", m)
	}
	if r := do(t, "PUT", b.url, "/v2/keys/moved/k", form("value", "x")); r.status != 500 {
		t.Errorf("a write through the restarted bridge while fenced: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", b.url, "/v2/keys/moved/k", nil); r.status != 200 || !strings.Contains(r.body, "written-on-the-old-server") {
		t.Errorf("a read through the restarted bridge while fenced: %d %s", r.status, r.body)
	}
	if err := e.follower.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cutDone:
		t.Logf("migrate cutover:\n%s", out)
		if err != nil {
			t.Fatalf("cutover: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the cutover did not finish:\n%s", out)
	}
	for _, u := range []string{a.url, b.url} {
		if m := statsMode(t, u); m != "v3" {
			t.Errorf("bridge %s says mode %q after the cutover", u, m)
		}
		if r := do(t, "GET", u, "/v2/keys/moved/late", nil); r.status != 200 {
			t.Errorf("the follower's last change through %s: %d %s", u, r.status, r.body)
		}
	}
	// A bridge restarted after the cutover comes up in v3 mode.
	_ = a.cmd.Process.Kill()
	<-a.done
	a.done <- nil
	a = e.startBridge(t, a.url)
	if m := statsMode(t, a.url); m != "v3" {
		t.Errorf("a bridge restarted after the cutover says mode %q, want v3", m)
	}
	// An index of the v2 server's: 401, so the client re-lists.
	r := do(t, "GET", a.url, "/v2/keys/moved", form("wait", "true", "recursive", "true", "waitIndex", oldIndex))
	if r.status != 400 || !strings.Contains(r.body, `"errorCode":401`) {
		t.Errorf("a waitIndex from the v2 server after the cutover: %d %s, want 401", r.status, r.body)
	}
	list := do(t, "GET", a.url, "/v2/keys/moved", form("quorum", "true"))
	var idx uint64
	if _, err := fmt.Sscan(list.header.Get("X-Etcd-Index"), &idx); err != nil {
		t.Fatalf("the listing's X-Etcd-Index %q: %v", list.header.Get("X-Etcd-Index"), err)
	}
	wch := startWatch(t, a.url, "/moved", "recursive", "true", "waitIndex", fmt.Sprint(idx+1))
	if r := do(t, "PUT", b.url, "/v2/keys/moved/new", form("value", "on etcd v3")); r.status != 201 {
		t.Fatalf("a write after the cutover: %d %s", r.status, r.body)
	}
	expectEvent(t, wch, "set", "/moved/new")

	// Rollback: writes were made through etcd v3, so --force.
	rb := e.command(t, "rollback", "--force")
	t.Logf("migrate rollback --force (exit %d):\n%s%s", rb.code, rb.stdout, rb.stderr)
	if rb.code != 0 || !strings.Contains(rb.stdout, "step 3/3: switched") {
		t.Fatalf("rollback failed")
	}
	for _, u := range []string{a.url, b.url} {
		if m := statsMode(t, u); m != "passthrough" {
			t.Errorf("bridge %s says mode %q after the rollback", u, m)
		}
	}
	if r := do(t, "GET", a.url, "/v2/keys/moved", form("wait", "true", "waitIndex", fmt.Sprint(idx+1))); r.status != 400 ||
		!strings.Contains(r.body, `"errorCode":401`) {
		t.Errorf("a waitIndex from etcd v3 after the rollback: %d %s, want 401", r.status, r.body)
	}
	if r := do(t, "PUT", b.url, "/v2/keys/moved/back", form("value", "v2 server again")); r.status != 201 {
		t.Errorf("a write after the rollback: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", e.ref.URL, "/v2/keys/moved/back", nil); r.status != 200 {
		t.Errorf("the write after the rollback is not on the v2 server: %d %s", r.status, r.body)
	}
	again := e.command(t, "rollback")
	if again.code != 0 || !strings.Contains(again.stdout, "already in passthrough mode") {
		t.Errorf("a second rollback: exit %d\n%s%s", again.code, again.stdout, again.stderr)
	}
	var rec map[string]any
	if g, err := e.v3.Get(ctxT(t, 5*time.Second), "_v2bridge/mode"); err != nil || len(g.Kvs) == 0 {
		t.Fatalf("the mode record: %v", err)
	} else if err := json.Unmarshal(g.Kvs[0].Value, &rec); err != nil {
		t.Fatal(err)
	}
	t.Logf("mode record: %v", rec)
	if rec["mode"] != "passthrough" || rec["rollbackIndex"] == nil {
		t.Errorf("mode record after the rollback: %v", rec)
	}
}

// shadowSum adds up a shadow comparison counter over the bridges' metrics
// (every label).
func shadowSum(t *testing.T, urls []string, name string) float64 {
	t.Helper()
	var sum float64
	for _, u := range urls {
		for _, line := range strings.Split(do(t, "GET", u, "/metrics", nil).body, "\n") {
			if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
				continue
			}
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}
