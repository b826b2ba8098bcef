// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/client/v2"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/migrate/engine"
	"github.com/v2bridge/v2bridge/proof/v2ref"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
)

// ---------------------------------------------------------------------------
// (a) One keyspace: flannel's lease layout written by both kinds of client.

// TestMixedFlannelLeases runs flannel's subnet-lease protocol from both
// sides at once: a v3-native writer (a value at the key, a v3 lease for its
// TTL, as flannel's etcd v3 registry does) and a v2 client through the bridge
// (create with prevExist=false and a TTL, renewal by CAS on prevIndex with a
// TTL, as flannel's etcd v2 registry does). Each side lists and watches the
// other's leases, expiry included.
func TestMixedFlannelLeases(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	v3 := e.cluster.Client(t)
	k := v2client(t, e.url)
	ctx := ctxT(t, 90*time.Second)
	const (
		network = "/coreos.com/network"
		subnets = network + "/subnets"
		v3Lease = subnets + "/10.5.1.0-24"
		v2Lease = subnets + "/10.5.2.0-24"
		v3Attrs = `{"PublicIP":"192.0.2.1","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:00:01"}}`
		v2Attrs = `{"PublicIP":"192.0.2.2","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:00:02"}}`
	)

	// The network config, written v3-native, read by a v2 flannel (quorum GET).
	cfg := `{"Network":"10.5.0.0/16","SubnetLen":24,"Backend":{"Type":"vxlan"}}`
	if _, err := v3.Put(ctx, network+"/config", cfg); err != nil {
		t.Fatal(err)
	}
	g, err := k.Get(ctx, network+"/config", &client.GetOptions{Quorum: true})
	if err != nil || g.Node.Value != cfg {
		t.Fatalf("v2 read of the v3 config: %+v %v", g, err)
	}

	// Both sides watch the subnets before anyone writes there.
	w2 := k.Watcher(subnets, &client.WatcherOptions{Recursive: true, AfterIndex: g.Index})
	v2events := make(chan *client.Response, 16)
	go func() {
		for {
			r, err := w2.Next(ctx)
			if err != nil {
				close(v2events)
				return
			}
			v2events <- r
		}
	}()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	v3events := v3.Watch(clientv3.WithRequireLeader(wctx), subnets+"/", clientv3.WithPrefix(), clientv3.WithPrevKV())

	// A v3-native node takes a lease: a key with a v3 lease.
	l3, err := v3.Grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v3.Put(ctx, v3Lease, v3Attrs, clientv3.WithLease(l3.ID)); err != nil {
		t.Fatal(err)
	}
	// A v2 node takes one through the bridge, then renews it the way flannel
	// does: compare-and-swap on the modifiedIndex it holds, with a fresh TTL.
	created, err := k.Set(ctx, v2Lease, v2Attrs, &client.SetOptions{PrevExist: client.PrevNoExist, TTL: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if created.Action != "create" || created.Node.Expiration == nil || created.Node.TTL < 3 || created.Node.TTL > 4 {
		t.Fatalf("v2 lease create: %s %+v", created.Action, created.Node)
	}
	if _, err := k.Set(ctx, v2Lease, v2Attrs, &client.SetOptions{PrevExist: client.PrevNoExist, TTL: 4 * time.Second}); !isV2Code(err, 105) {
		t.Fatalf("a second create of a taken lease: want 105, got %v", err)
	}
	renewed, err := k.Set(ctx, v2Lease, v2Attrs, &client.SetOptions{PrevIndex: created.Node.ModifiedIndex, TTL: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Action != "compareAndSwap" || renewed.Node.CreatedIndex != created.Node.CreatedIndex || renewed.Node.Expiration == nil {
		t.Fatalf("v2 lease renewal: %s %+v", renewed.Action, renewed.Node)
	}
	if _, err := k.Set(ctx, v2Lease, v2Attrs, &client.SetOptions{PrevIndex: created.Node.ModifiedIndex, TTL: 4 * time.Second}); !isV2Code(err, 101) {
		t.Fatalf("a renewal with a stale prevIndex: want 101, got %v", err)
	}

	// The v2 side lists both leases; the v3 one shows its lease as a TTL.
	list, err := k.Get(ctx, subnets, &client.GetOptions{Recursive: true, Sort: true, Quorum: true})
	if err != nil {
		t.Fatal(err)
	}
	if keysOf(list.Node.Nodes) != v3Lease+" "+v2Lease {
		t.Fatalf("v2 listing: %s", keysOf(list.Node.Nodes))
	}
	if n := list.Node.Nodes[0]; n.Value != v3Attrs || n.Expiration == nil || n.TTL < 1 || n.TTL > 3 {
		t.Fatalf("v3 lease seen by v2: %+v", n)
	}
	if n := list.Node.Nodes[1]; n.Value != v2Attrs || n.Expiration == nil || n.TTL < 1 || n.TTL > 4 {
		t.Fatalf("v2 lease seen by v2: %+v", n)
	}
	// The v3 side lists both: plain values at the native keys, both leased.
	r, err := v3.Get(ctx, subnets+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 2 || string(r.Kvs[0].Key) != v3Lease || string(r.Kvs[1].Key) != v2Lease ||
		string(r.Kvs[1].Value) != v2Attrs || r.Kvs[1].Lease == 0 {
		t.Fatalf("v3 listing: %+v", r.Kvs)
	}
	ttl, err := v3.TimeToLive(ctx, clientv3.LeaseID(r.Kvs[1].Lease))
	if err != nil || ttl.TTL < 1 || ttl.TTL > 4 {
		t.Fatalf("the v2 lease as a v3 lease: %+v %v", ttl, err)
	}

	// Neither side renews any more: both leases run out. Each side sees
	// the other's writes and expiries.
	want2 := []string{"create " + v3Lease, "create " + v2Lease, "compareAndSwap " + v2Lease}
	var got2 []string
	expired2 := map[string]bool{}
	for len(expired2) < 2 {
		select {
		case r, ok := <-v2events:
			if !ok {
				t.Fatalf("v2 watch ended; events so far %v", got2)
			}
			got2 = append(got2, r.Action+" "+r.Node.Key)
			if r.Action == "expire" {
				expired2[r.Node.Key] = true
				if r.PrevNode == nil || (r.PrevNode.Value != v3Attrs && r.PrevNode.Value != v2Attrs) {
					t.Errorf("expire without the lease's previous value: %+v", r.PrevNode)
				}
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("v2 watch: no expiry of both leases; events %v", got2)
		}
	}
	if !slices.Equal(got2[:3], want2) || !expired2[v3Lease] || !expired2[v2Lease] {
		t.Fatalf("v2 watch events %v, want %v then the expiry of both", got2, want2)
	}

	var got3 []string
	deleted3 := map[string]bool{}
	for len(deleted3) < 2 {
		select {
		case wr, ok := <-v3events:
			if !ok || wr.Err() != nil {
				t.Fatalf("v3 watch ended: %v; events so far %v", wr.Err(), got3)
			}
			for _, ev := range wr.Events {
				key := string(ev.Kv.Key)
				got3 = append(got3, ev.Type.String()+" "+key)
				switch ev.Type {
				case mvccpb.PUT:
					if ev.Kv.Lease == 0 {
						t.Errorf("v3 watch: %s put without a lease", key)
					}
				case mvccpb.DELETE:
					if ev.PrevKv == nil || ev.PrevKv.Lease == 0 {
						t.Errorf("v3 watch: delete of %s is not a lease expiry: %+v", key, ev.PrevKv)
					}
					deleted3[key] = true
				}
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("v3 watch: no expiry of both leases; events %v", got3)
		}
	}
	want3 := []string{"PUT " + v3Lease, "PUT " + v2Lease, "PUT " + v2Lease}
	if !slices.Equal(got3[:3], want3) {
		t.Fatalf("v3 watch events %v, want %v then the deletion of both", got3, want3)
	}
	list, err = k.Get(ctx, subnets, &client.GetOptions{Recursive: true, Quorum: true})
	if err != nil || len(list.Node.Nodes) != 0 {
		t.Fatalf("after expiry the subnets directory should be empty: %+v %v", list, err)
	}
}

func isV2Code(err error, code int) bool {
	var ce client.Error
	return errors.As(err, &ce) && ce.Code == code
}

// ---------------------------------------------------------------------------
// (b) bridge migrate / verify against a real etcd v2 server.

type v2put struct {
	path string
	form url.Values
}

// v2write sends one PUT or DELETE to a v2 server and checks it succeeded.
func v2write(hc *http.Client, base, method, p string, f url.Values) error {
	var body io.Reader
	u := base + "/v2/keys" + (&url.URL{Path: p}).EscapedPath()
	if method == "DELETE" {
		u += "?" + f.Encode()
	} else {
		body = strings.NewReader(f.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 && resp.StatusCode != 201 {
		return fmt.Errorf("%s %s: %d %s", method, p, resp.StatusCode, b)
	}
	return nil
}

// putAll writes puts to a v2 server with a bounded pool of workers.
func putAll(t *testing.T, base string, puts []v2put, workers int) {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer hc.CloseIdleConnections()
	ch := make(chan v2put)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range ch {
				if err := v2write(hc, base, "PUT", p.path, p.form); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, p := range puts {
		ch <- p
	}
	close(ch)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

func v2do(t *testing.T, base, method, p string, kv ...string) {
	t.Helper()
	if err := v2write(httpClient, base, method, p, form(kv...)); err != nil {
		t.Fatal(err)
	}
}

// Expected shape of the v2 server tree built by buildSourceTree.
const (
	srcKeys      = 100*100 + 1 + 50 + 2 + 3 + 4 // registry, deep leaf, leases, ttldir children, special, hidden files
	srcDirs      = 1 + 100 + 1 + 10 + 7 + 1 + 1 + 1 + 1
	srcEmptyDirs = 10
	srcTTLNodes  = 50 + 1
	srcHidden    = 5
)

var namedHidden = []string{"/_hidden_top", "/registry/d01/_lock"}

// buildSourceTree writes a tree of 10,183 nodes to a v2 server: 100
// directories of 100 files, empty directories, a deep path, TTL files, a TTL
// directory with children, awkward names, and hidden nodes (named ones, ones
// recent enough to be found in the event history, and one neither).
func buildSourceTree(t *testing.T, base string) {
	t.Helper()
	start := time.Now()
	var puts []v2put
	for d := 0; d < 100; d++ {
		for k := 0; k < 100; k++ {
			v := fmt.Sprintf("value-%02d-%03d", d, k)
			if k == 0 {
				v = strings.Repeat(v, 64) // some larger values
			}
			puts = append(puts, v2put{fmt.Sprintf("/registry/d%02d/k%03d", d, k), form("value", v)})
		}
	}
	for e := 0; e < 10; e++ {
		puts = append(puts, v2put{fmt.Sprintf("/empty/e%d", e), form("dir", "true")})
	}
	for l := 0; l < 50; l++ {
		puts = append(puts, v2put{fmt.Sprintf("/leases/l%03d", l), form("value", fmt.Sprintf(`{"lease":%d}`, l), "ttl", "600")})
	}
	puts = append(puts,
		v2put{"/deep/a/b/c/d/e/f/leaf", form("value", "deep")},
		v2put{"/special/with space", form("value", "sp ace")},
		v2put{"/special/pct%41", form("value", "100%")},
		v2put{"/special/é", form("value", "ünïcode")},
		v2put{"/_hidden_top/a", form("value", "hidden-a")},
		v2put{"/registry/d01/_lock", form("value", "named-hidden")},
	)
	// Written first, so that it is neither named nor in the recent history.
	v2do(t, base, "PUT", "/registry/d09/_unknown", "value", "neither named nor recent")
	putAll(t, base, puts, 32)
	// A TTL directory must exist before its children.
	v2do(t, base, "PUT", "/ttldir", "dir", "true", "ttl", "600")
	putAll(t, base, []v2put{{"/ttldir/x", form("value", "x")}, {"/ttldir/y", form("value", "y")}}, 2)
	// Recent hidden writes: within the v2 history (1000 events).
	v2do(t, base, "PUT", "/registry/d02/_recent", "value", "found-in-history")
	v2do(t, base, "PUT", "/_hidden_top/_nested", "value", "hidden-in-hidden")
	t.Logf("built a v2 server's tree of %d nodes in %v", srcKeys+srcDirs+1, time.Since(start).Round(time.Millisecond))
}

// newTargetBackend connects a backend of its own to the cluster, as the
// migrate command does (a process separate from the bridges).
func newTargetBackend(t *testing.T, endpoints []string) *v3backend.Backend {
	t.Helper()
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	be, err := v3backend.New(ctx, v3backend.Config{Endpoints: endpoints, Layout: layout, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	return be
}

// logLines collects Options.Log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

func (l *logLines) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func revision(t *testing.T, v3 *clientv3.Client) int64 {
	t.Helper()
	r, err := v3.Get(ctxT(t, 10*time.Second), "revision-probe")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

func mustVerify(t *testing.T, ctx context.Context, o engine.Options) *engine.Report {
	t.Helper()
	rep, err := engine.Verify(ctx, o)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return rep
}

func diffPaths(rep *engine.Report) []string {
	var out []string
	for _, d := range rep.Differences {
		out = append(out, d.Kind+" "+d.Path)
	}
	return out
}

// waitVerified polls Verify until the bridge agrees with the v2 server.
func waitVerified(t *testing.T, ctx context.Context, o engine.Options, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		rep := mustVerify(t, ctx, o)
		if len(rep.Differences) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge still differs from the v2 server after %v: %v", d, rep.Differences)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func getBridge(t *testing.T, base, p string) resp {
	t.Helper()
	return do(t, "GET", base, "/v2/keys"+(&url.URL{Path: p}).EscapedPath(), nil)
}

// TestMigrateV2Reference migrates a 10,000+ node tree from a real etcd v2
// server (etcd 3.5 with the v2 API): copy, verify, idempotent re-copy,
// conflicts, dry run, overwrite, prune, follow with live changes, and the
// re-sync after the v2 server's history runs out. In parallel with the
// other long tests that have a v2 server, cluster and bridges of their own;
// its copy loads this process, whose bridge's heartbeat is patient.
func TestMigrateV2Reference(t *testing.T) {
	t.Parallel()
	ref := v2ref.StartT(t, v2ref.Options{})
	cl := v2bridgetest.StartCluster(t, 1)
	br := v2bridgetest.StartBridge(t, cl.Endpoints(), patientHeartbeat)
	be := newTargetBackend(t, cl.Endpoints())
	v3 := cl.Client(t)
	ctx := ctxT(t, 3*time.Minute)
	buildSourceTree(t, ref.URL)

	logs := &logLines{}
	var progress []engine.Progress
	conc := 0
	if c := os.Getenv("MIGRATE_CONC"); c != "" {
		if _, err := fmt.Sscan(c, &conc); err != nil {
			t.Fatalf("MIGRATE_CONC=%q: %v", c, err)
		}
	}
	o := engine.Options{V2Server: []string{ref.URL}, Target: be, Hidden: namedHidden, Log: logs.add, Concurrency: conc,
		Progress: func(p engine.Progress) { progress = append(progress, p) }}

	// 1. The copy.
	sum, err := engine.Copy(ctx, o)
	if err != nil {
		t.Fatalf("copy: %v\nlog:\n%s", err, logs)
	}
	t.Logf("migrated %d nodes (%d keys, %d directories, %s) in %v: %.0f nodes/s overall, %.0f nodes/s while writing",
		sum.Nodes(), sum.Keys, sum.Dirs, engine.Bytes(sum.Bytes), sum.Duration.Round(time.Millisecond), sum.Rate(),
		float64(sum.Nodes())/sum.WriteTime.Seconds())
	if sum.Keys != srcKeys || sum.Dirs != srcDirs || sum.EmptyDirs != srcEmptyDirs || sum.TTLKeys != srcTTLNodes ||
		sum.Hidden != srcHidden {
		t.Errorf("v2 server counts: keys %d dirs %d empty %d ttl %d hidden %d; want %d %d %d %d %d",
			sum.Keys, sum.Dirs, sum.EmptyDirs, sum.TTLKeys, sum.Hidden, srcKeys, srcDirs, srcEmptyDirs, srcTTLNodes, srcHidden)
	}
	if sum.Created != sum.Nodes() || sum.Updated+sum.Unchanged+sum.Extra+len(sum.Conflicts)+len(sum.Failures) != 0 || !sum.Complete {
		t.Errorf("first copy: %+v", sum)
	}
	if !slices.Equal(sum.HiddenNamed, namedHidden) || !slices.Contains(sum.HiddenFound, "/registry/d02/_recent") ||
		!slices.Contains(sum.HiddenFound, "/_hidden_top/_nested") || slices.Contains(sum.HiddenFound, "/registry/d09/_unknown") {
		t.Errorf("hidden nodes: named %v found %v", sum.HiddenNamed, sum.HiddenFound)
	}
	var sawCopying bool
	for _, p := range progress {
		if p.Phase == "copying" && p.Total >= sum.Nodes() && p.Done <= p.Total {
			sawCopying = true
		}
	}
	if !sawCopying || progress[len(progress)-1].Phase != "done" {
		t.Errorf("progress reports: %d, last %+v", len(progress), progress[len(progress)-1])
	}
	// v2 clients of the bridge see the tree, TTLs included...
	if r := getBridge(t, br.URL, "/registry/d42/k007"); r.status != 200 || !strings.Contains(r.body, `"value":"value-42-007"`) {
		t.Errorf("bridge GET: %d %s", r.status, r.body)
	}
	for _, p := range []string{"/special/with space", "/special/pct%41", "/special/é", "/registry/d01/_lock", "/_hidden_top/_nested"} {
		if r := getBridge(t, br.URL, p); r.status != 200 {
			t.Errorf("bridge GET %s: %d %s", p, r.status, r.body)
		}
	}
	m := getBridge(t, br.URL, "/leases/l007").json(t)["node"].(map[string]any)
	if ttl, _ := m["ttl"].(float64); ttl < 540 || ttl > 600 {
		t.Errorf("TTL key on the bridge: %v", m)
	}
	if r := getBridge(t, br.URL, "/empty/e3"); !strings.Contains(r.body, `"dir":true`) {
		t.Errorf("empty dir on the bridge: %s", r.body)
	}
	if r := getBridge(t, br.URL, "/registry/d09/_unknown"); r.status != 404 {
		t.Errorf("a hidden key neither named nor in the history cannot be found: %d %s", r.status, r.body)
	}
	// ...and so do v3 clients: native keys, TTLs as v3 leases.
	kv, err := v3.Get(ctx, "/leases/l007")
	if err != nil || len(kv.Kvs) != 1 || string(kv.Kvs[0].Value) != `{"lease":7}` || kv.Kvs[0].Lease == 0 {
		t.Fatalf("v3 view of a migrated TTL key: %+v %v", kv, err)
	}
	if ttl, err := v3.TimeToLive(ctx, clientv3.LeaseID(kv.Kvs[0].Lease)); err != nil || ttl.TTL < 540 || ttl.TTL > 600 {
		t.Errorf("v3 lease of a migrated TTL key: %+v %v", ttl, err)
	}

	// 2. Verify agrees, node by node.
	if rep := mustVerify(t, ctx, o); len(rep.Differences) != 0 || rep.V2ServerNodes != sum.Nodes() || rep.BridgeNodes != sum.Nodes() {
		t.Fatalf("verify after copy: %d/%d nodes, differences %v", rep.V2ServerNodes, rep.BridgeNodes, rep.Differences)
	}

	// 3. Copying again changes nothing: not one v3 revision.
	rev := revision(t, v3)
	again, err := engine.Copy(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if again.Unchanged != again.Nodes() || again.Created+again.Updated+again.Deleted+len(again.Conflicts) != 0 {
		t.Errorf("second copy: %+v", again)
	}
	if r := revision(t, v3); r != rev {
		t.Errorf("second copy wrote: revision %d -> %d", rev, r)
	}
	t.Logf("idempotent re-copy of %d nodes in %v", again.Nodes(), again.Duration.Round(time.Millisecond))

	// 4. Conflicts: a value changed on the bridge, a file where the v2 server
	// has a directory, and a node the v2 server does not have.
	do(t, "PUT", br.URL, "/v2/keys/registry/d03/k003", form("value", "written-on-the-bridge"))
	do(t, "DELETE", br.URL, "/v2/keys/empty/e0", form("dir", "true"))
	do(t, "PUT", br.URL, "/v2/keys/empty/e0", form("value", "now-a-file"))
	do(t, "PUT", br.URL, "/v2/keys/registry/d04/extra", form("value", "bridge-only"))
	rev = revision(t, v3)
	cs, err := engine.Copy(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var conflicts []string
	for _, c := range cs.Conflicts {
		conflicts = append(conflicts, c.Kind+" "+c.Path)
	}
	if !slices.Equal(conflicts, []string{"type /empty/e0", "value /registry/d03/k003"}) || cs.Extra != 1 || cs.Deleted != 0 {
		t.Fatalf("conflicts %v extra %d deleted %d", conflicts, cs.Extra, cs.Deleted)
	}
	if r := revision(t, v3); r != rev {
		t.Errorf("a copy with only conflicts wrote: revision %d -> %d", rev, r)
	}
	if r := getBridge(t, br.URL, "/registry/d03/k003"); !strings.Contains(r.body, "written-on-the-bridge") {
		t.Errorf("a conflicting node was overwritten: %s", r.body)
	}
	if got := diffPaths(mustVerify(t, ctx, o)); !slices.Equal(got, []string{"type /empty/e0", "extra /registry/d04/extra", "value /registry/d03/k003"}) &&
		!slices.Equal(got, []string{"type /empty/e0", "value /registry/d03/k003", "extra /registry/d04/extra"}) {
		t.Errorf("verify with conflicts: %v", got)
	}
	// A dry run with --overwrite --prune says what it would do, and does nothing.
	dry := o
	dry.DryRun, dry.Overwrite, dry.Prune = true, true, true
	ds, err := engine.Copy(ctx, dry)
	if err != nil || ds.Updated != 2 || ds.Deleted != 1 || len(ds.Conflicts) != 0 || !ds.DryRun {
		t.Fatalf("dry run: %+v %v", ds, err)
	}
	if r := revision(t, v3); r != rev {
		t.Errorf("dry run wrote: revision %d -> %d", rev, r)
	}
	over := o
	over.Overwrite, over.Prune = true, true
	os2, err := engine.Copy(ctx, over)
	if err != nil || os2.Updated != 2 || os2.Deleted != 1 || len(os2.Conflicts) != 0 {
		t.Fatalf("overwrite and prune: %+v %v", os2, err)
	}
	if rep := mustVerify(t, ctx, o); len(rep.Differences) != 0 {
		t.Fatalf("verify after overwrite: %v", rep.Differences)
	}

	// 5. Follow: changes made on the v2 server while following reach the bridge.
	fo := o
	fo.TTLResync = time.Second
	fo.Progress = nil
	fctx, fcancel := context.WithCancel(ctx)
	type followResult struct {
		st  *engine.FollowStats
		err error
	}
	fdone := make(chan followResult, 1)
	go func() {
		st, err := engine.Follow(fctx, fo, os2)
		fdone <- followResult{st, err}
	}()
	l001 := getBridge(t, ref.URL, "/leases/l001").json(t)["node"].(map[string]any)["modifiedIndex"].(float64)
	v2do(t, ref.URL, "PUT", "/registry/d05/new", "value", "created-while-following")
	v2do(t, ref.URL, "PUT", "/registry/d05/k005", "value", "updated-while-following")
	v2do(t, ref.URL, "DELETE", "/registry/d06/k006")
	v2do(t, ref.URL, "DELETE", "/registry/d07", "recursive", "true")
	v2do(t, ref.URL, "PUT", "/newdir", "dir", "true")
	v2do(t, ref.URL, "PUT", "/leases/new", "value", "n", "ttl", "600")
	v2do(t, ref.URL, "PUT", "/leases/l001", "value", `{"lease":1}`, "prevIndex", fmt.Sprint(int64(l001)), "ttl", "700")
	v2do(t, ref.URL, "PUT", "/leases/l002", "refresh", "true", "ttl", "900", "prevExist", "true")
	v2do(t, ref.URL, "PUT", "/_hidden_top/a", "value", "hidden-updated")
	v2do(t, ref.URL, "PUT", "/registry/d01/_lock", "value", "named-hidden-updated")
	v2do(t, ref.URL, "DELETE", "/empty/e1", "dir", "true")
	poll := o
	poll.NoHiddenDiscovery, poll.Hidden, poll.Progress = true, append(slices.Clone(namedHidden), sum.HiddenFound...), nil
	poll.CompareExpiration = true // the refresh of l002 must be carried over too
	waitVerified(t, ctx, poll, 30*time.Second)
	fcancel()
	fr := <-fdone
	if fr.err != nil {
		t.Fatalf("follow: %v", fr.err)
	}
	st := fr.st
	t.Logf("follow: %+v", *st)
	if st.Events != 11-1 || st.Applied != 10 || len(st.Conflicts) != 0 || len(st.Failures) != 0 || st.TTLRefreshed < 1 {
		t.Errorf("follow stats: %+v (want 10 events: the refresh is not sent to watchers)", *st)
	}
	if r := getBridge(t, br.URL, "/registry/d07"); r.status != 404 {
		t.Errorf("directory deleted on the v2 server: %d %s", r.status, r.body)
	}
	if r := getBridge(t, br.URL, "/_hidden_top/a"); !strings.Contains(r.body, "hidden-updated") {
		t.Errorf("hidden node followed: %s", r.body)
	}
	for p, lo := range map[string]float64{"/leases/l001": 690, "/leases/l002": 890} {
		m := getBridge(t, br.URL, p).json(t)["node"].(map[string]any)
		if ttl, _ := m["ttl"].(float64); ttl < lo {
			t.Errorf("%s: TTL %v on the bridge, want about %v", p, m["ttl"], lo+10)
		}
	}

	// 6. A follower that falls more than 1000 events behind gets 401 from
	// the v2 server: it re-syncs with a full copy, says so, and goes on.
	snap, err := engine.Copy(ctx, poll)
	if err != nil || snap.Unchanged != snap.Nodes() {
		t.Fatalf("copy before the re-sync test: %+v %v", snap, err)
	}
	var churn []v2put
	for i := 0; i < 1100; i++ {
		churn = append(churn, v2put{fmt.Sprintf("/churn/k%02d", i%40), form("value", fmt.Sprint(i))})
	}
	putAll(t, ref.URL, churn, 16)
	v2do(t, ref.URL, "DELETE", "/registry/d08/k008")
	logs2 := &logLines{}
	ro := poll
	ro.Log = logs2.add
	rctx, rcancel := context.WithCancel(ctx)
	rdone := make(chan followResult, 1)
	go func() {
		st, err := engine.Follow(rctx, ro, snap)
		rdone <- followResult{st, err}
	}()
	waitFor(t, 60*time.Second, "the re-sync", func() bool { return logs2.has("re-synced from the v2 server") })
	v2do(t, ref.URL, "PUT", "/registry/d08/after-resync", "value", "x")
	waitVerified(t, ctx, poll, 30*time.Second)
	rcancel()
	rr := <-rdone
	if rr.err != nil || rr.st.Resyncs != 1 || !logs2.has("re-syncing") {
		t.Fatalf("re-sync: %+v %v\nlog:\n%s", rr.st, rr.err, logs2)
	}
	// The copy this process made of the key deleted while it was behind was
	// deleted by the re-sync (it was this migration's own copy).
	if r := getBridge(t, br.URL, "/registry/d08/k008"); r.status != 404 {
		t.Errorf("key deleted during the history gap: %d %s", r.status, r.body)
	}
	t.Logf("re-sync log:\n%s", logs2)
}

// TestMigrateFollowFlannelCutover: while flannel nodes move from the v2
// server to their bridges one by one, the follower keeps applying what
// the nodes still on the v2 server do, and leaves alone what the moved
// nodes do through the bridge: the v2 server's expiry of a lease that a
// moved node renews through the bridge (same value) must not delete it.
func TestMigrateFollowFlannelCutover(t *testing.T) {
	ref := v2ref.StartT(t, v2ref.Options{})
	cl := v2bridgetest.StartCluster(t, 1)
	br := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{})
	be := newTargetBackend(t, cl.Endpoints())
	ctx := ctxT(t, time.Minute)
	const subnets = "/coreos.com/network/subnets"
	old := v2client(t, ref.URL)
	onBridge := v2client(t, br.URL)
	v2do(t, ref.URL, "PUT", "/coreos.com/network/config", "value", `{"Network":"10.5.0.0/16"}`)
	a, err := old.Set(ctx, subnets+"/10.5.1.0-24", "node-a", &client.SetOptions{PrevExist: client.PrevNoExist, TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b, err := old.Set(ctx, subnets+"/10.5.2.0-24", "node-b", &client.SetOptions{PrevExist: client.PrevNoExist, TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_ = a
	logs := &logLines{}
	// The follower reads the whole tree from the v2 server for each TTL
	// re-sync (the only recursive read that is not a watch): counting those
	// tells when re-syncs have run.
	src := startCountingProxy(t, ref.URL, func(r *http.Request) bool {
		q := r.URL.Query()
		return r.Method == "GET" && q.Get("recursive") == "true" && q.Get("wait") != "true"
	})
	o := engine.Options{V2Server: []string{src.URL}, V2ServerPrefix: "/coreos.com", Target: be, TTLResync: 500 * time.Millisecond, Log: logs.add}
	sum, err := engine.Copy(ctx, o)
	if err != nil || sum.Created != 6 {
		t.Fatalf("copy: %+v %v", sum, err)
	}
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	done := make(chan *engine.FollowStats, 1)
	go func() {
		st, err := engine.Follow(fctx, o, sum)
		if err != nil {
			t.Errorf("follow: %v", err)
		}
		done <- st
	}()
	// Node A moves to its bridge and renews its lease there (flannel renews
	// by compare-and-swap on the modifiedIndex it holds, same value).
	ga, err := onBridge.Get(ctx, subnets+"/10.5.1.0-24", &client.GetOptions{Quorum: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := onBridge.Set(ctx, subnets+"/10.5.1.0-24", "node-a", &client.SetOptions{PrevIndex: ga.Node.ModifiedIndex, TTL: 60 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// Node B, still on the v2 server, renews there: the follower carries it over.
	if _, err := old.Set(ctx, subnets+"/10.5.2.0-24", "node-b", &client.SetOptions{PrevIndex: b.Node.ModifiedIndex, TTL: 90 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// A's lease runs out on the v2 server, where nobody renews it any more.
	waitFor(t, 20*time.Second, "the v2 server to expire A's lease and the follower to see it", func() bool {
		return logs.has("conflict at " + subnets + "/10.5.1.0-24")
	})
	waitFor(t, 10*time.Second, "B's renewal on the bridge", func() bool {
		g, err := onBridge.Get(ctx, subnets+"/10.5.2.0-24", nil)
		return err == nil && g.Node.TTL > 60
	})
	// Two whole TTL re-syncs (three reads: re-syncs run one at a time) must
	// not shorten A's lease.
	reads := src.n.Load()
	waitFor(t, 10*time.Second, "two TTL re-syncs", func() bool { return src.n.Load() >= reads+3 })
	g, err := onBridge.Get(ctx, subnets+"/10.5.1.0-24", nil)
	if err != nil || g.Node.Value != "node-a" || g.Node.TTL < 50 {
		t.Fatalf("A's lease renewed through the bridge: %+v %v\nlog:\n%s", g, err, logs)
	}
	fcancel()
	st := <-done
	if st == nil || len(st.Conflicts) != 1 || st.Applied != 1 {
		t.Errorf("follow stats: %+v", st)
	}
	// Verify compares TTL presence by default: A's node is gone from the
	// v2 server and lives on the bridge.
	rep := mustVerify(t, ctx, o)
	if got := diffPaths(rep); !slices.Equal(got, []string{"extra " + subnets + "/10.5.1.0-24"}) {
		t.Errorf("verify: %v", rep.Differences)
	}
}

// countingProxy forwards HTTP requests to a server and counts those that
// match.
type countingProxy struct {
	URL string
	n   atomic.Int64
}

func startCountingProxy(t *testing.T, target string, match func(*http.Request) bool) *countingProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1                    // watches: pass every byte on at once
	rp.ErrorLog = log.New(io.Discard, "", 0) // a follower stopping cancels its watch
	p := &countingProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if match(r) {
			p.n.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// TestMigrateErrors: bad sources and a tree the target cannot take give
// clear errors, and a partial copy says how far it got.
func TestMigrateErrors(t *testing.T) {
	ref := v2ref.StartT(t, v2ref.Options{})
	cl := v2bridgetest.StartCluster(t, 1)
	be := newTargetBackend(t, cl.Endpoints())
	ctx := ctxT(t, 2*time.Minute)

	// Nothing listens there.
	_, err := engine.Copy(ctx, engine.Options{V2Server: []string{v2bridgetest.FreeURL(t)}, Target: be})
	if !errors.Is(err, engine.ErrUnreachable) || !strings.Contains(err.Error(), "cannot reach the v2 server") {
		t.Errorf("unreachable v2 server: %v", err)
	}
	// An etcd without the v2 API (3.6 answers /v2/keys with 404).
	_, err = engine.Copy(ctx, engine.Options{V2Server: []string{cl.Endpoints()[0]}, Target: be})
	if !errors.Is(err, engine.ErrNoV2API) || !strings.Contains(err.Error(), "404") {
		t.Errorf("no v2 API: %v", err)
	}
	if _, err := engine.Verify(ctx, engine.Options{V2Server: []string{cl.Endpoints()[0]}, Target: be}); !errors.Is(err, engine.ErrNoV2API) {
		t.Errorf("verify, no v2 API: %v", err)
	}
	// A prefix the v2 server does not have.
	if _, err := engine.Copy(ctx, engine.Options{V2Server: []string{ref.URL}, V2ServerPrefix: "/nope", Target: be}); err == nil ||
		!strings.Contains(err.Error(), "has no key /nope") {
		t.Errorf("missing prefix: %v", err)
	}

	// A value above the target's request limit (1.5 MiB by default); v2 has
	// no limit. The rest is copied, the failure is named, the copy is marked
	// incomplete, and running it again copies nothing new.
	big := strings.Repeat("x", 1600<<10)
	v2do(t, ref.URL, "PUT", "/big/blob", "value", big)
	v2do(t, ref.URL, "PUT", "/big/small", "value", "s")
	v2do(t, ref.URL, "PUT", "/big/sub/x", "value", "x")
	o := engine.Options{V2Server: []string{ref.URL}, V2ServerPrefix: "/big", Target: be, NoHiddenDiscovery: true}
	sum, err := engine.Copy(ctx, o)
	var ie *engine.IncompleteError
	if !errors.As(err, &ie) || ie.Stopped || sum == nil || sum.Complete || len(sum.Failures) != 1 ||
		sum.Failures[0].Path != "/big/blob" || !strings.Contains(err.Error(), "request size limit") ||
		!strings.Contains(err.Error(), "partial copy") {
		t.Fatalf("too large: %v %+v", err, sum)
	}
	if sum.Created != 4 || sum.LargestKey != "/big/blob" {
		t.Errorf("too large: created %d (want /big, /big/small, /big/sub, /big/sub/x), largest %s", sum.Created, sum.LargestKey)
	}
	t.Logf("too large: %v", err)
	if rep := mustVerify(t, ctx, o); !slices.Equal(diffPaths(rep), []string{"missing /big/blob"}) {
		t.Errorf("verify after a partial copy: %v", rep.Differences)
	}

	// The backend goes away before the copy writes: nothing is written, and
	// the error says so.
	cl.Members[0].Stop()
	waitFor(t, 20*time.Second, "the backend to be declared lost", func() bool {
		return be.Health(ctx) != nil && errors.Is(be.Health(ctx), v3backend.ErrUnavailable)
	})
	o.V2ServerPrefix = "/big/sub"
	if _, err := engine.Copy(ctx, o); err == nil || !strings.Contains(err.Error(), "nothing was written") {
		t.Errorf("backend lost: %v", err)
	}
}

// ---------------------------------------------------------------------------
// The commands.

type cmdResult struct {
	stdout, stderr string
	code           int
}

func runBridgeCmd(t *testing.T, args ...string) cmdResult {
	t.Helper()
	return runBinary(t, nil, args...)
}

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMigrateCommand drives `v2bridge migrate` and `v2bridge verify`: output,
// exit codes, --follow until interrupted, and error messages.
func TestMigrateCommand(t *testing.T) {
	buildBridge(t)
	ref := v2ref.StartT(t, v2ref.Options{})
	cl := v2bridgetest.StartCluster(t, 1)
	br := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{})
	ep := cl.Endpoints()[0]
	var puts []v2put
	for i := 0; i < 200; i++ {
		puts = append(puts, v2put{fmt.Sprintf("/app/d%d/k%03d", i%5, i), form("value", fmt.Sprint(i))})
	}
	puts = append(puts, v2put{"/app/ttl", form("value", "t", "ttl", "300")}, v2put{"/app/_secret", form("value", "s")},
		v2put{"/app/empty", form("dir", "true")})
	putAll(t, ref.URL, puts, 16)
	common := []string{"--v2-server", ref.URL, "--v2-server-prefix", "/app", "--endpoints", ep, "--progress", "lines"}

	r := runBridgeCmd(t, append([]string{"migrate", "--hidden", "/app/_secret"}, common...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "202 keys, 7 directories (1 empty), 1 TTL nodes, 1 hidden nodes") ||
		!strings.Contains(r.stdout, "written      209 created, 0 updated, 0 already there") || !strings.Contains(r.stderr, "done: 209 nodes") {
		t.Fatalf("migrate: %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("v2bridge migrate output:\n%s%s", r.stdout, r.stderr)
	if r := runBridgeCmd(t, append([]string{"verify", "--hidden", "/app/_secret"}, common...)...); r.code != 0 ||
		!strings.Contains(r.stdout, "differences  0") {
		t.Fatalf("verify: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A difference makes verify and migrate exit non-zero.
	do(t, "PUT", br.URL, "/v2/keys/app/d1/k001", form("value", "changed"))
	if r := runBridgeCmd(t, append([]string{"verify"}, common...)...); r.code == 0 ||
		!strings.Contains(r.stdout, `/app/d1/k001: value: v2 server holds "1", bridge holds "changed"`) ||
		!strings.Contains(r.stderr, "verify: 1 difference(s)") {
		t.Fatalf("verify with a difference: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runBridgeCmd(t, append([]string{"verify", "--output", "json"}, common...)...)
	var js struct {
		OK          bool
		Differences []struct{ Path, Kind string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || r.code == 0 || js.OK ||
		len(js.Differences) != 1 || js.Differences[0].Path != "/app/d1/k001" || js.Differences[0].Kind != "value" {
		t.Fatalf("verify --output json with a difference: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if r := runBridgeCmd(t, append([]string{"migrate"}, common...)...); r.code == 0 ||
		!strings.Contains(r.stdout, "conflicts    1") || !strings.Contains(r.stderr, "1 conflicting node(s) left unchanged") {
		t.Fatalf("migrate with a conflict: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runBridgeCmd(t, append([]string{"migrate", "--dry-run", "--overwrite"}, common...)...); r.code != 0 ||
		!strings.Contains(r.stdout, "dry run: nothing was written") || !strings.Contains(r.stdout, "would write  0 created, 1 updated") {
		t.Fatalf("dry run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// --follow --overwrite: fixes the conflict, follows a change, stops cleanly on SIGINT.
	cmd := exec.Command(buildBridge(t), append([]string{"migrate", "--follow", "--overwrite"}, common...)...)
	cmd.Env = childEnv()
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	waitFor(t, 30*time.Second, "the follow to start", func() bool { return strings.Contains(errb.String(), "following ") })
	v2do(t, ref.URL, "PUT", "/app/d2/live", "value", "followed")
	waitFor(t, 20*time.Second, "the change to reach the bridge", func() bool {
		return strings.Contains(getBridge(t, br.URL, "/app/d2/live").body, "followed")
	})
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		exited <- err
		if err != nil || !strings.Contains(out.String(), "followed     1 events") {
			t.Fatalf("migrate --follow: %v\n%s%s", err, out.String(), errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("migrate --follow did not stop on SIGINT\n%s%s", out.String(), errb.String())
	}

	// Bad input.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "--v2-server", v2bridgetest.FreeURL(t), "--endpoints", ep}, "cannot reach the v2 server"},
		{[]string{"migrate", "--v2-server", ep, "--endpoints", ep}, "does not serve the etcd v2 keys API"},
		{[]string{"verify", "--v2-server", ep, "--endpoints", ep}, "does not serve the etcd v2 keys API"},
		{[]string{"migrate", "--v2-server", ref.URL}, "--endpoints is required"},
		{[]string{"migrate", "--endpoints", ep}, "--v2-server is required"},
		{[]string{"migrate", "--v2-server", ref.URL, "--endpoints", ep, "--follow", "--dry-run"}, "cannot be combined"},
	} {
		r := runBridgeCmd(t, c.args...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want non-zero and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
