// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// flannelPrefix is flannel's v2 subtree, what a node's bridge serves on a
// cluster Kubernetes shares.
const flannelPrefix = "/coreos.com/network"

// loadRegistry writes n keys of value under /registry/pods, as a
// Kubernetes API server keeps its objects, 100 to a transaction.
func loadRegistry(t *testing.T, v3 *clientv3.Client, n int, value string) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	for i := 0; i < n; i += 100 {
		var ops []clientv3.Op
		for j := i; j < min(i+100, n); j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/pods/default/pod-%05d", j), value))
		}
		if _, err := v3.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// churn writes n times under /registry/events, from 8 writers, as a busy
// API server does.
func churn(t *testing.T, v3 *clientv3.Client, n int, value string) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if _, err := v3.Put(ctx, fmt.Sprintf("/registry/events/default/ev-%03d", i%300), value); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// v2Answer is a v2 keys answer, decoded whole.
type v2Answer struct {
	Action    string          `json:"action"`
	Node      *translate.Node `json:"node"`
	PrevNode  *translate.Node `json:"prevNode"`
	ErrorCode int             `json:"errorCode"`
	Message   string          `json:"message"`
	Cause     string          `json:"cause"`
	Index     uint64          `json:"index"`
	Extra     map[string]any  `json:"-"`
	raw       string
}

func answerOf(t *testing.T, r resp) v2Answer {
	t.Helper()
	var a v2Answer
	if err := json.Unmarshal([]byte(r.body), &a); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	a.raw = r.body
	return a
}

func respIndex(t *testing.T, r resp) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(r.header.Get("X-Etcd-Index"), 10, 64)
	if err != nil {
		t.Fatalf("X-Etcd-Index %q: %v", r.header.Get("X-Etcd-Index"), err)
	}
	return n
}

// TestScopedBridgeOnASharedCluster: a bridge serving flannel's subtree of a
// cluster that also holds a churning Kubernetes registry mirrors and
// receives only that subtree, keeps flannel's watches waiting across
// thousands of other tenants' writes (etcd v2 counted only its own), shows
// flannel the served part of a transaction over both, never reaches the
// registry, and answers a re-watch after a compaction as documented.
func TestScopedBridgeOnASharedCluster(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	v3 := cl.Client(t)
	ctx := ctxT(t, 3*time.Minute)
	big := strings.Repeat("k", 2048)
	loadRegistry(t, v3, 2000, big)
	const secret = "/registry/secrets/kube-system/admin-token"
	protobuf := "k8s\x00\x0a\x8f\xff-protobuf" // not UTF-8, as Kubernetes stores its objects
	if _, err := v3.Put(ctx, secret, protobuf); err != nil {
		t.Fatal(err)
	}

	o := patientHeartbeat
	o.Served = []string{flannelPrefix}
	br := v2bridgetest.StartBridge(t, cl.Endpoints(), o)
	u := br.URL

	r := do(t, "PUT", u, "/v2/keys/coreos.com/network/config", form("value", `{"Network":"10.5.0.0/16"}`))
	cfgIdx := respIndex(t, r)
	if want := fmt.Sprintf(`{"action":"set","node":{"key":"/coreos.com/network/config","value":"{\"Network\":\"10.5.0.0/16\"}","modifiedIndex":%d,"createdIndex":%d}}`+"\n", cfgIdx, cfgIdx); r.status != 201 || r.body != want {
		t.Fatalf("PUT config: %d %s\nwant 201 %s", r.status, r.body, want)
	}

	// The mirror holds the config and the markers of /coreos.com and
	// /coreos.com/network: not a byte of the registry's 4 MB. It applies
	// the write when the shared watch brings it, after the answer.
	waitFor(t, 10*time.Second, "the mirror to apply the write", func() bool {
		return scrapeMetric(t, u, "v2bridge_mirror_keys") != 0
	})
	if n := scrapeMetric(t, u, "v2bridge_mirror_keys"); n != 3 {
		t.Errorf("v2bridge_mirror_keys = %v, want 3", n)
	}
	if n := scrapeMetric(t, u, "v2bridge_mirror_bytes"); n > 200 {
		t.Errorf("v2bridge_mirror_bytes = %v, want the config's and two markers' (< 200)", n)
	}

	// A flannel watch from after its config, then 3,000 registry writes:
	// three times the v2 history window.
	received := scrapeMetric(t, u, "v2bridge_v3_events_received_total")
	watched := make(chan resp, 1)
	watchFrom := func(idx uint64) {
		go func() {
			watched <- do(t, "GET", u, "/v2/keys/coreos.com/network/subnets",
				form("wait", "true", "recursive", "true", "waitIndex", strconv.FormatUint(idx, 10)))
		}()
	}
	watchFrom(cfgIdx + 1)
	churn(t, v3, 3000, big)
	select {
	case r := <-watched:
		t.Fatalf("the subnet watch ended on other tenants' writes: %d %s", r.status, r.body)
	case <-time.After(200 * time.Millisecond):
	}
	if n := scrapeMetric(t, u, "v2bridge_v3_events_received_total") - received; n != 0 {
		t.Errorf("the shared watch received %v changes during the registry's churn, want 0", n)
	}

	// A subnet lease: the waiting watch gets it, as the write answered it.
	r = do(t, "PUT", u, "/v2/keys/coreos.com/network/subnets/10.5.1.0-24",
		form("value", `{"PublicIP":"192.0.2.1"}`, "ttl", "600", "prevExist", "false"))
	lease := answerOf(t, r)
	if r.status != 201 || lease.Action != "create" || lease.Node.Key != "/coreos.com/network/subnets/10.5.1.0-24" ||
		lease.Node.Value == nil || *lease.Node.Value != `{"PublicIP":"192.0.2.1"}` || lease.Node.TTL == 0 || lease.Node.Expiration == nil ||
		lease.Node.ModifiedIndex != respIndex(t, r) || lease.Node.CreatedIndex != lease.Node.ModifiedIndex {
		t.Fatalf("subnet lease: %d %s", r.status, r.body)
	}
	sameEvent := func(what string, r resp, want v2Answer) {
		t.Helper()
		got := answerOf(t, r)
		if r.status != 200 || got.Action != want.Action || got.Node.Key != want.Node.Key || *got.Node.Value != *want.Node.Value ||
			got.Node.ModifiedIndex != want.Node.ModifiedIndex || got.Node.CreatedIndex != want.Node.CreatedIndex ||
			!got.Node.Expiration.Equal(*want.Node.Expiration) || got.PrevNode != nil {
			t.Errorf("%s: %d %s\nwant the write's answer %s", what, r.status, r.body, want.raw)
		}
	}
	select {
	case r := <-watched:
		sameEvent("the waiting watch", r, lease)
	case <-time.After(30 * time.Second):
		t.Fatal("the subnet watch never saw the lease")
	}
	// flannel's re-watch from before the churn: the same event, no 401.
	watchFrom(cfgIdx + 1)
	sameEvent("a re-watch from before the churn", <-watched, lease)

	// A v3 transaction over both tenants shows flannel the served part,
	// numbered as the revision's only event.
	watchFrom(lease.Node.ModifiedIndex + 1)
	txn, err := v3.Txn(ctx).Then(clientv3.OpPut("/registry/pods/default/pod-x", big),
		clientv3.OpPut("/coreos.com/network/subnets/10.5.2.0-24", "from-v3")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	idx := translate.Index(txn.Header.Revision)
	if r, want := <-watched, fmt.Sprintf(`{"action":"create","node":{"key":"/coreos.com/network/subnets/10.5.2.0-24","value":"from-v3","modifiedIndex":%d,"createdIndex":%d}}`+"\n", idx, idx); r.status != 200 || r.body != want {
		t.Errorf("the mixed transaction: %d %s\nwant 200 %s", r.status, r.body, want)
	}

	// One inside the subtree changing two keys (and one outside) shows
	// both, each with an index of its own, in order.
	stream := make(chan v2Answer, 4)
	sctx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	go readStream(sctx, u+"/v2/keys/coreos.com/network/subnets?wait=true&recursive=true&stream=true&waitIndex="+
		strconv.FormatUint(idx+1, 10), stream)
	txn, err = v3.Txn(ctx).Then(clientv3.OpPut("/coreos.com/network/subnets/10.5.3.0-24", "c"),
		clientv3.OpPut("/registry/pods/default/pod-y", big), clientv3.OpDelete("/coreos.com/network/subnets/10.5.2.0-24")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	last := translate.Index(txn.Header.Revision)
	for i, want := range []string{
		fmt.Sprintf(`{"action":"create","node":{"key":"/coreos.com/network/subnets/10.5.3.0-24","value":"c","modifiedIndex":%d,"createdIndex":%d}}`, last-1, last-1),
		fmt.Sprintf(`{"action":"delete","node":{"key":"/coreos.com/network/subnets/10.5.2.0-24","modifiedIndex":%d,"createdIndex":%d},"prevNode":{"key":"/coreos.com/network/subnets/10.5.2.0-24","value":"from-v3","modifiedIndex":%d,"createdIndex":%d}}`, last, idx, idx, idx),
	} {
		select {
		case ev := <-stream:
			if ev.raw != want {
				t.Errorf("event %d of the transaction inside the subtree: %s\nwant %s", i, ev.raw, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("event %d of the transaction inside the subtree never came", i)
		}
	}
	stopStream()

	// Another tenant's keys are out of reach, read, written or watched.
	for _, c := range []struct{ method, path string }{
		{"GET", secret}, {"PUT", secret}, {"DELETE", secret}, {"GET", "/registry?recursive=true"}, {"GET", "/?wait=true"},
		{"GET", "/coreos.com"},
	} {
		r := do(t, c.method, u, "/v2/keys"+c.path, url.Values{"value": {"stolen"}})
		key := strings.SplitN(c.path, "?", 2)[0]
		want := `{"errorCode":100,"message":"Key not found","cause":"` + key + ` is outside the served prefix /coreos.com/network (--serve-prefix)","index":0}` + "\n"
		if r.status != 404 || r.body != want {
			t.Errorf("%s %s: %d %s\nwant 404 %s", c.method, c.path, r.status, r.body, want)
		}
	}
	if got, err := v3.Get(ctx, secret); err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != protobuf {
		t.Errorf("the secret after the attempts: %v %v", got, err)
	}

	// Kubernetes compacts every 5 minutes. A re-watch from before the
	// compaction is still answered from the bridge's window of flannel's
	// own events.
	cur, err := v3.Get(ctx, "/coreos.com/network/config")
	if err != nil {
		t.Fatal(err)
	}
	compactRev := cur.Header.Revision
	if _, err := v3.Compact(ctx, compactRev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	watchFrom(cfgIdx + 1)
	sameEvent("a re-watch from before the compaction", <-watched, lease)

	// A bridge started after it (a restarted node) has no window yet: the
	// same re-watch reaches into compacted history and gets 401, naming the
	// oldest index kept; flannel then re-lists and watches on from there.
	br2 := v2bridgetest.StartBridge(t, cl.Endpoints(), o)
	r = do(t, "GET", br2.URL, "/v2/keys/coreos.com/network/subnets",
		form("wait", "true", "recursive", "true", "waitIndex", strconv.FormatUint(cfgIdx+1, 10)))
	want := fmt.Sprintf(`{"errorCode":401,"message":"The event in requested index is outdated and cleared","cause":"the requested history has been cleared [%d/%d]","index":%d}`+"\n",
		translate.FirstIndex(compactRev), cfgIdx+1, respIndex(t, r))
	if r.status != 400 || r.body != want {
		t.Errorf("a re-watch on a new bridge from before the compaction: %d %s\nwant 400 %s", r.status, r.body, want)
	}
	list := do(t, "GET", br2.URL, "/v2/keys/coreos.com/network/subnets", form("recursive", "true"))
	if list.status != 200 || !strings.Contains(list.body, "10.5.1.0-24") || !strings.Contains(list.body, "10.5.3.0-24") || strings.Contains(list.body, "10.5.2.0-24") {
		t.Fatalf("re-list: %d %s", list.status, list.body)
	}
	go func() {
		watched <- do(t, "GET", br2.URL, "/v2/keys/coreos.com/network/subnets",
			form("wait", "true", "recursive", "true", "waitIndex", strconv.FormatUint(respIndex(t, list)+1, 10)))
	}()
	churn(t, v3, 1200, big)
	r = do(t, "DELETE", br2.URL, "/v2/keys/coreos.com/network/subnets/10.5.3.0-24", nil)
	if r.status != 200 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if w := <-watched; w.status != 200 || w.body != r.body {
		t.Errorf("the watch after the re-list: %d %s\nwant the delete's answer %s", w.status, w.body, r.body)
	}
}

// TestScopedBridgeBatchedWritesMatchTheirEvents: writes committed together
// (group commit) through a bridge serving a subtree, which sees their
// changes range by range rather than in the transaction's order, reach a
// watcher exactly as each write answered.
func TestScopedBridgeBatchedWritesMatchTheirEvents(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	o := patientHeartbeat
	o.Served = []string{flannelPrefix}
	br := v2bridgetest.StartBridge(t, cl.Endpoints(), o)
	u := br.URL
	start := respIndex(t, do(t, "PUT", u, "/v2/keys/coreos.com/network/config", form("value", "{}")))

	ctx, cancel := context.WithCancel(ctxT(t, 2*time.Minute))
	defer cancel()
	events := make(chan v2Answer, 1000)
	go readStream(ctx, u+"/v2/keys/coreos.com/network/subnets?wait=true&recursive=true&stream=true&waitIndex="+
		strconv.FormatUint(start+1, 10), events)

	answers := map[string]v2Answer{}
	var mu sync.Mutex
	for round := 0; round < 5 && scrapeMetric(t, u, "v2bridge_write_batches_total") == 0; round++ {
		var wg sync.WaitGroup
		for i := range 48 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("/coreos.com/network/subnets/r%d/10.%d.%d.0-24", round, round, i)
				r := do(t, "PUT", u, "/v2/keys"+key, form("value", "lease", "ttl", "600", "prevExist", "false"))
				mu.Lock()
				answers[key] = answerOf(t, r)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	if scrapeMetric(t, u, "v2bridge_write_batches_total") == 0 {
		t.Fatal("no write was committed with another in 5 rounds of 48 concurrent writes: nothing tested")
	}
	for range answers {
		select {
		case ev := <-events:
			a, ok := answers[ev.Node.Key]
			if !ok {
				t.Fatalf("an event for a key nobody wrote: %s", ev.raw)
			}
			if ev.Action != a.Action || ev.Node.ModifiedIndex != a.Node.ModifiedIndex || ev.Node.CreatedIndex != a.Node.CreatedIndex ||
				*ev.Node.Value != *a.Node.Value || !ev.Node.Expiration.Equal(*a.Node.Expiration) {
				t.Errorf("event %s\nanswer %s", ev.raw, a.raw)
			}
			delete(answers, ev.Node.Key)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d writes never reached the watcher", len(answers))
		}
	}
}

// readStream reads a stream=true watch's events until ctx ends.
func readStream(ctx context.Context, u string, out chan<- v2Answer) {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer func() { _ = r.Body.Close() }()
	dec := json.NewDecoder(r.Body)
	for {
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return
		}
		var a v2Answer
		if json.Unmarshal(raw, &a) != nil {
			return
		}
		a.raw = string(raw)
		out <- a
	}
}

// TestRealClientsThroughAScopedBridgeBesideAChurningRegistry runs flannel's
// watch loop (client/v2, re-watching from modifiedIndex + 1, re-listing on
// 401) and python-etcd's eternal_watch through a bridge serving flannel's
// subtree. Each time, they start again from the last change they saw after
// more than the v2 history window of registry writes (a restarted flanneld,
// a watch ended by a failover): neither gets a 401 or misses a change.
func TestRealClientsThroughAScopedBridgeBesideAChurningRegistry(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import etcd").Run(); err != nil {
		missingClient(t, "python3-etcd not installed (Debian package python3-etcd; .ci/run installs it)")
	}
	cl := v2bridgetest.StartCluster(t, 1)
	v3 := cl.Client(t)
	o := patientHeartbeat
	o.Served = []string{flannelPrefix}
	br := v2bridgetest.StartBridge(t, cl.Endpoints(), o)
	ctx := ctxT(t, 3*time.Minute)
	last := respIndex(t, do(t, "PUT", br.URL, "/v2/keys/coreos.com/network/config", form("value", "{}")))
	port := br.URL[strings.LastIndex(br.URL, ":")+1:]

	const subnets = flannelPrefix + "/subnets"
	for i := range 6 {
		churn(t, v3, 1200, "event")
		w, err := v2bridgetest.StartV2Watcher([]string{br.URL}, subnets, last)
		if err != nil {
			t.Fatal(err)
		}
		from := last
		pctx, stop := context.WithCancel(ctx)
		pyOut := make(chan string, 8)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			script := fmt.Sprintf(`
import etcd
c = etcd.Client(host="127.0.0.1", port=%s, protocol="http")
for r in c.eternal_watch("%s", index=%d, recursive=True):
    print(r.action, r.key, r.modifiedIndex, flush=True)
`, port, subnets, from+1)
			_ = lines(pctx, exec.CommandContext(pctx, py, "-c", script), func(l string) { pyOut <- l })
			close(pyOut)
		}()

		key := fmt.Sprintf("%s/10.5.%d.0-24", subnets, i)
		r := do(t, "PUT", br.URL, "/v2/keys"+key, form("value", "lease", "ttl", "600", "prevExist", "false"))
		if r.status != 201 {
			t.Fatalf("PUT %s: %d %s", key, r.status, r.body)
		}
		last = respIndex(t, r)
		want := fmt.Sprintf("create %s %d", key, last)
		if !w.WaitFor(ctx, func(evs []v2bridgetest.WatchedEvent) bool { return len(evs) > 0 }) {
			t.Fatalf("round %d: flannel's loop saw nothing; errors %+v", i, w.Errors())
		}
		w.Stop()
		if evs, errs := w.Events(), w.Errors(); len(evs) != 1 || fmt.Sprintf("%s %s %d", evs[0].Action, evs[0].Key, evs[0].Index) != want || len(errs) != 0 {
			t.Errorf("round %d: flannel's loop saw %+v, errors %+v; want %s", i, evs, errs, want)
		}
		select {
		case l, ok := <-pyOut:
			if !ok {
				t.Fatalf("round %d: python-etcd's eternal_watch ended (a 401 raises)", i)
			}
			if l != want {
				t.Errorf("round %d: python-etcd saw %q, want %q", i, l, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: python-etcd saw nothing", i)
		}
		stop()
		wg.Wait()
	}
}

// TestScopedAndWholeTreeBridgesShareTheData: the key layout is the same
// whichever subtrees a bridge serves, so a bridge started with a narrow
// --serve-prefix over data that bridges serving / wrote (a rolling
// upgrade of a deployed fleet) serves it as it is, and the two kinds
// answer and watch each other's writes alike.
func TestScopedAndWholeTreeBridgesShareTheData(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	whole := v2bridgetest.StartBridge(t, cl.Endpoints(), patientHeartbeat)
	for _, w := range []struct{ method, path string }{
		{"PUT", "/coreos.com/network/config?value=cfg"},
		{"PUT", "/coreos.com/network/subnets/10.5.1.0-24?value=a&ttl=600"},
		{"PUT", "/coreos.com/network/leases?dir=true&ttl=600"},
		{"POST", "/coreos.com/network/queue?value=first"},
		{"PUT", "/apps/other?value=x"},
	} {
		if r := do(t, w.method, whole.URL, "/v2/keys"+w.path, nil); r.status >= 300 {
			t.Fatalf("%s %s: %d %s", w.method, w.path, r.status, r.body)
		}
	}
	o := patientHeartbeat
	o.Served = []string{flannelPrefix}
	scoped := v2bridgetest.StartBridge(t, cl.Endpoints(), o)

	// The same tree, the same indexes (the TTLs may have ticked).
	ttl := regexp.MustCompile(`"ttl":\d+`)
	get := func(u string) resp {
		return do(t, "GET", u, "/v2/keys/coreos.com/network", form("recursive", "true", "sorted", "true", "quorum", "true"))
	}
	a, b := get(whole.URL), get(scoped.URL)
	if a.status != 200 || ttl.ReplaceAllString(a.body, "") != ttl.ReplaceAllString(b.body, "") {
		t.Errorf("served / : %d %s\nserved %s: %d %s", a.status, a.body, flannelPrefix, b.status, b.body)
	}

	// Each kind watches the other's writes.
	for _, c := range []struct{ writer, watcher string }{{whole.URL, scoped.URL}, {scoped.URL, whole.URL}} {
		idx := respIndex(t, get(c.watcher))
		ch := make(chan resp, 1)
		go func() {
			ch <- do(t, "GET", c.watcher, "/v2/keys/coreos.com/network",
				form("wait", "true", "recursive", "true", "waitIndex", strconv.FormatUint(idx+1, 10)))
		}()
		w := do(t, "PUT", c.writer, "/v2/keys/coreos.com/network/subnets/10.5.1.0-24",
			form("value", "b", "prevExist", "true", "ttl", "600"))
		r := <-ch
		if w.status != 200 || r.status != 200 || ttl.ReplaceAllString(r.body, "") != ttl.ReplaceAllString(w.body, "") {
			t.Errorf("written through %s: %d %s\nwatched through %s: %d %s", c.writer, w.status, w.body, c.watcher, r.status, r.body)
		}
	}
}
