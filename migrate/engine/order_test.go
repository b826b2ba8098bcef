// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/v2bridge/v2bridge/proof/v2ref"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
)

// slowMark in a value, or in a key a transaction deletes, makes that
// transaction wait slowFor before it reaches etcd: its event's slot frees
// after later events'.
const (
	slowMark = "slow-"
	slowFor  = time.Second
)

// slowWrites delays the transactions that put a value or delete a key with
// slowMark in it.
func slowWrites() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if txn, ok := req.(*pb.TxnRequest); ok && slowOps(txn.Success) {
			select {
			case <-time.After(slowFor):
			case <-ctx.Done():
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

func slowOps(ops []*pb.RequestOp) bool {
	for _, op := range ops {
		switch {
		case op.GetRequestPut() != nil && bytes.Contains(op.GetRequestPut().Value, []byte(slowMark)),
			op.GetRequestDeleteRange() != nil && bytes.Contains(op.GetRequestDeleteRange().Key, []byte(slowMark)),
			op.GetRequestTxn() != nil && slowOps(op.GetRequestTxn().Success):
			return true
		}
	}
	return false
}

// v2do makes one v2 request of the v2 server and returns its X-Etcd-Index.
func v2do(t *testing.T, method, base, p string, form url.Values) uint64 {
	t.Helper()
	target, body := base+"/v2/keys"+p, form.Encode()
	if method == "DELETE" { // (v2 reads a DELETE's parameters from its query)
		target, body = target+"?"+body, ""
	}
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s %s", method, p, resp.Status, b)
	}
	idx, err := strconv.ParseUint(resp.Header.Get("X-Etcd-Index"), 10, 64)
	if err != nil {
		t.Fatalf("%s %s: X-Etcd-Index %q", method, p, resp.Header.Get("X-Etcd-Index"))
	}
	return idx
}

// files is every file below / of a v2 tree, path to value.
func files(n *translate.Node, out map[string]string) map[string]string {
	if n == nil {
		return out
	}
	if !n.Dir && n.Value != nil {
		out[n.Key] = *n.Value
	}
	for _, c := range n.Nodes {
		files(c, out)
	}
	return out
}

// TestFollowAppliesEachKeysEventsInOrder: migrate --follow applies events
// on unrelated keys side by side, but a burst of writes to one key, and to
// a directory and its children, in the v2 server's order, even when a later
// event on another key finishes first and frees its slot: the bridge ends
// with the v2 server's final values.
func TestFollowAppliesEachKeysEventsInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an etcd v2 server and an etcd v3 member")
	}
	src := v2ref.StartT(t, v2ref.Options{})
	cl := v2bridgetest.StartCluster(t, 1)
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	be, err := v3backend.New(ctx, v3backend.Config{Endpoints: cl.Endpoints(), Layout: layout, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{slowWrites()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = be.Close() }()

	v2do(t, "PUT", src.URL, "/k", url.Values{"value": {"k0"}})
	v2do(t, "PUT", src.URL, "/o", url.Values{"value": {"o0"}})
	v2do(t, "PUT", src.URL, "/d/x", url.Values{"value": {"x0"}})
	v2do(t, "PUT", src.URL, "/"+slowMark+"d/x", url.Values{"value": {"x0"}})
	var logMu sync.Mutex
	var logs []string
	var appliedMu sync.Mutex
	var applied uint64
	o := Options{V2Server: []string{src.URL}, Target: be, TTLResync: -1, NoHiddenDiscovery: true,
		Log:     func(l string) { logMu.Lock(); logs = append(logs, l); logMu.Unlock() },
		Applied: func(i uint64) { appliedMu.Lock(); applied = max(applied, i); appliedMu.Unlock() }}
	snap, err := Copy(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithCancel(ctx)
	type followed struct {
		fs  *FollowStats
		err error
	}
	done := make(chan followed, 1)
	go func() {
		fs, err := Follow(fctx, o, snap)
		done <- followed{fs, err}
	}()
	defer func() {
		fcancel()
		<-done
	}()

	// Each slow write holds its key while a later write of another key
	// goes through; the writes of its key, above or below it wait. The
	// slow delete of a directory holds the writes below it likewise.
	burst := []struct {
		method, path string
		form         url.Values
	}{
		{"PUT", "/k", url.Values{"value": {slowMark + "k1"}}},
		{"PUT", "/o", url.Values{"value": {"o1"}}},
		{"PUT", "/k", url.Values{"value": {"k2"}}},
		{"PUT", "/k", url.Values{"value": {"k3"}}},
		{"PUT", "/d/x", url.Values{"value": {slowMark + "x1"}}},
		{"PUT", "/o", url.Values{"value": {"o2"}}},
		{"DELETE", "/d", url.Values{"recursive": {"true"}}},
		{"PUT", "/d/y", url.Values{"value": {"y1"}}},
		{"PUT", "/o", url.Values{"value": {"o3"}}},
		{"DELETE", "/" + slowMark + "d", url.Values{"recursive": {"true"}}},
		{"PUT", "/o", url.Values{"value": {"o4"}}},
		{"PUT", "/" + slowMark + "d/y", url.Values{"value": {"y1"}}},
	}
	var last uint64
	for _, w := range burst {
		last = v2do(t, w.method, src.URL, w.path, w.form)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		appliedMu.Lock()
		a := applied
		appliedMu.Unlock()
		if a >= last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower applied up to index %d within a minute, want %d", a, last)
		}
		time.Sleep(10 * time.Millisecond) // poll
	}
	fcancel()
	f := <-done
	done <- f // for the deferred wait
	if f.err != nil {
		t.Fatalf("follow: %v", f.err)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if fs := f.fs; fs.Events != len(burst) || fs.Applied != len(burst) || fs.Unchanged != 0 || len(fs.Conflicts) != 0 ||
		len(fs.Failures) != 0 || fs.Resyncs != 0 || fs.Index != last {
		t.Fatalf("follow stats %+v, want %d events applied up to index %d\nlog:\n%s", fs, len(burst), last,
			strings.Join(logs, "\n"))
	}

	want := map[string]string{"/k": "k3", "/o": "o4", "/d/y": "y1", "/" + slowMark + "d/y": "y1"}
	srcTree := v2ServerTree(t, src.URL)
	if got := files(srcTree, map[string]string{}); !reflect.DeepEqual(got, want) {
		t.Fatalf("the v2 server holds %v, want %v", got, want)
	}
	root, err := (&target{be: be}).get(ctx, "/", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := files(root, map[string]string{}); !reflect.DeepEqual(got, want) {
		t.Fatalf("the bridge holds %v, want the v2 server's %v\nlog:\n%s", got, want, strings.Join(logs, "\n"))
	}
}

// v2ServerTree is the v2 server's whole tree.
func v2ServerTree(t *testing.T, base string) *translate.Node {
	t.Helper()
	resp, err := http.Get(base + "/v2/keys/?recursive=true")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var ev translate.Event
	if err := json.NewDecoder(resp.Body).Decode(&ev); err != nil {
		t.Fatal(fmt.Errorf("the v2 server's tree: %w", err))
	}
	return ev.Node
}
