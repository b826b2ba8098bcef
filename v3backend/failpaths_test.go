// SPDX-License-Identifier: Apache-2.0

package v3backend

// Failure paths of the request path that the integration tests cannot time:
// a member of our own (the embedded etcd), with a gRPC interceptor on the
// bridge's connection standing in for what happens at the wrong moment — a
// concurrent writer, the heartbeat declaring the member lost.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v3backend/hub"
)

func freeURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return "http://" + ln.Addr().String()
}

// startMember starts an embedded etcd member and returns its client URL.
func startMember(t *testing.T, extra func(*embed.Config)) string {
	t.Helper()
	ep, _ := startEtcd(t, extra)
	return ep
}

// startEtcd starts an embedded etcd member and returns its client URL and
// what stops it (once; it is stopped when the test ends).
func startEtcd(t *testing.T, extra func(*embed.Config)) (string, func()) {
	t.Helper()
	e, stop := startEmbed(t, extra)
	cfg := e.Config()
	return cfg.ListenClientUrls[0].String(), stop
}

// startEmbed starts an embedded etcd member and returns it and what stops it
// (once; it is stopped when the test ends).
func startEmbed(t *testing.T, extra func(*embed.Config)) (*embed.Etcd, func()) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs an etcd member")
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ { // a free port can be taken before etcd binds it
		e, err := StartEmbedded(EmbeddedConfig{Name: "m", Dir: t.TempDir(), ClientURL: freeURL(t), PeerURL: freeURL(t),
			LogLevel: "fatal", Extra: extra})
		if err == nil {
			stop := sync.OnceFunc(e.Close)
			t.Cleanup(stop)
			return e, stop
		}
		lastErr = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatal(lastErr)
	return nil, nil
}

// interceptor calls before(method, req) ahead of each unary call on the
// bridge's connection while armed, and after(method, req, err) once it
// returned, which may replace its error.
type interceptor struct {
	armed  atomic.Bool
	before func(ctx context.Context, method string, req any)
	after  func(method string, req any, err error) error
}

func (i *interceptor) option() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if i.armed.Load() && i.before != nil {
			i.before(ctx, method, req)
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if i.armed.Load() && i.after != nil {
			err = i.after(method, req, err)
		}
		return err
	})
}

func newBackend(t *testing.T, ep string, ic *interceptor) *Backend {
	t.Helper()
	return newBackendWith(t, ep, func(c *Config) {
		if ic != nil {
			c.DialOptions = []grpc.DialOption{ic.option()}
		}
	})
}

func newBackendWith(t *testing.T, ep string, tune func(*Config)) *Backend {
	t.Helper()
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Endpoints: []string{ep}, Layout: layout, Logger: zap.NewNop()}
	tune(&cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for !b.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("the backend is not ready")
		}
		time.Sleep(10 * time.Millisecond) // poll
	}
	return b
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func request(t *testing.T, method, p string, form url.Values) *translate.Request {
	t.Helper()
	r, err := translate.ParseRequest(method, p, form)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// heldSource is a hub source whose shared feed never gets established.
type heldSource struct{}

func (heldSource) Feed(ctx context.Context, _ int64) (hub.Feed, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (heldSource) History(context.Context, int64, []string) (hub.Feed, error) {
	return nil, errors.New("none")
}
func (heldSource) Kept(context.Context, int64) (bool, error) { return false, errors.New("none") }

// TestWatchWhileTheSharedWatchIsNotEstablished: the member answers but the
// hub has no shared watch (being re-established): a watch request waits
// LiveWait for it and is then refused as unavailable (v2's 300), and one
// whose client goes away meanwhile returns at once.
func TestWatchWhileTheSharedWatchIsNotEstablished(t *testing.T) {
	b := newBackend(t, startMember(t, nil), nil)
	b.hub.Close()
	b.hub = hub.New(hub.Config{Source: heldSource{}, LiveWait: 300 * time.Millisecond})
	if b.Ready() {
		t.Fatal("ready without a shared watch")
	}
	req := request(t, "GET", "/w", url.Values{"wait": {"true"}})
	start := time.Now()
	if _, _, err := b.Watch(context.Background(), req); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("watch without a shared watch: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("refused after %v, want after LiveWait (300ms)", d)
	}

	b.hub.Close()
	b.hub = hub.New(hub.Config{Source: heldSource{}, LiveWait: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	// Refused either way (v2's 300): as unavailable when the hub gives up
	// waiting, or with the client's own cancellation when the read of the
	// start index is what was waiting.
	if _, _, err := b.Watch(ctx, req); !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled watch: %v, want ErrUnavailable or context.Canceled", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a canceled watch returned after %v", d)
	}
}

// TestWriteGivesUpAfterConflictingWrites: a concurrent writer changes the
// node between every decision and its transaction (a v3 client rewriting
// the key with its own value, just before each guarded Txn): the write is
// re-decided 64 times, then gives up with an error, not a wrong answer.
func TestWriteGivesUpAfterConflictingWrites(t *testing.T) {
	ep := startMember(t, nil)
	other, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close() }()
	var bumps atomic.Int64
	ic := &interceptor{}
	ic.before = func(ctx context.Context, method string, req any) {
		txn, ok := req.(*etcdserverpb.TxnRequest)
		if method != "/etcdserverpb.KV/Txn" || !ok || len(txn.Compare) == 0 {
			return
		}
		for _, c := range txn.Compare {
			if len(c.RangeEnd) != 0 {
				continue
			}
			g, err := other.Get(ctx, string(c.Key))
			if err != nil || len(g.Kvs) == 0 {
				continue
			}
			kv := g.Kvs[0]
			if _, err := other.Put(ctx, string(kv.Key), string(kv.Value), clientv3.WithLease(clientv3.LeaseID(kv.Lease))); err == nil {
				bumps.Add(1)
			}
		}
	}
	b := newBackend(t, ep, ic)
	ctx := context.Background()
	if _, _, err := b.Write(ctx, request(t, "PUT", "/g", url.Values{"value": {"1"}})); err != nil {
		t.Fatal(err)
	}
	ic.armed.Store(true)
	start := time.Now()
	_, _, err = b.Write(ctx, request(t, "PUT", "/g", url.Values{"value": {"2"}}))
	ic.armed.Store(false)
	if err == nil || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("write against a writer that always wins: %v, want it to give up", err)
	}
	t.Logf("gave up after %v and %d conflicting writes", time.Since(start).Round(time.Millisecond), bumps.Load())
	if n := counterValue(t, b.metrics.writeRetries); n != maxWriteAttempts {
		t.Errorf("%v write conflicts counted, want %d", n, maxWriteAttempts)
	}
	// Without the adversary the same write goes through.
	if ev, _, err := b.Write(ctx, request(t, "PUT", "/g", url.Values{"value": {"3"}})); err != nil || ev.Node.Value == nil ||
		*ev.Node.Value != "3" {
		t.Fatalf("write: %v %v", ev, err)
	}
}

// loseOn declares the bridge's session lost when method is called (as the
// heartbeat does when it gives up while a request is in flight), then lets
// the call go on once the request's context has ended with the session.
func loseOn(b **Backend, method string) *interceptor {
	ic := &interceptor{}
	ic.before = func(ctx context.Context, m string, req any) {
		if m != method {
			return
		}
		if s, _ := (*b).sessionChanged(); s != nil {
			(*b).lose(s, "test: lost during "+method)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
	}
	return ic
}

// TestSessionLostDuringAWriteIsUnavailableAtOnce: the member is declared
// lost while a write waits on it — in its lease grant (a TTL write), or in
// the read of the snapshot it decides on when the mirror cannot say — and
// the write fails at once as unavailable (v2's 300), not after the request
// timeout.
func TestSessionLostDuringAWriteIsUnavailableAtOnce(t *testing.T) {
	ep := startMember(t, nil)
	for _, c := range []struct {
		name, method string
		form         url.Values
		prepare      func(b *Backend)
	}{
		{"grant", "/etcdserverpb.Lease/LeaseGrant", url.Values{"value": {"1"}, "ttl": {"60"}}, func(*Backend) {}},
		{"snapshot read", "/etcdserverpb.KV/Txn", url.Values{"value": {"1"}}, func(b *Backend) { b.mirror.invalidate() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b *Backend
			ic := loseOn(&b, c.method)
			b = newBackend(t, ep, ic)
			c.prepare(b)
			ic.armed.Store(true)
			start := time.Now()
			_, _, err := b.Write(context.Background(), request(t, "PUT", "/l", c.form))
			ic.armed.Store(false)
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("write on a session lost during its %s: %v, want ErrUnavailable", c.name, err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("failed after %v, want at once", d)
			}
		})
	}
}

// TestReadsAndWritesWhenTheMirrorCannotSay: while the bridge's copy of its
// key space is not valid (the feed that kept it ended, and the next has not
// loaded it yet) reads and write decisions are taken from the backend, with
// the same answers.
func TestReadsAndWritesWhenTheMirrorCannotSay(t *testing.T) {
	b := newBackend(t, startMember(t, nil), nil)
	ctx := context.Background()
	write := func(method, p string, form url.Values) *translate.Event {
		t.Helper()
		ev, _, err := b.Write(ctx, request(t, method, p, form))
		if err != nil {
			t.Fatalf("%s %s: %v", method, p, err)
		}
		return ev
	}
	write("PUT", "/m/a", url.Values{"value": {"1"}})
	b.mirror.invalidate()
	reads := counterValue(t, b.metrics.backendReads)

	for _, quorum := range []string{"false", "true"} {
		ev, _, err := b.Get(ctx, request(t, "GET", "/m/a", url.Values{"quorum": {quorum}}))
		if err != nil || ev.Node.Value == nil || *ev.Node.Value != "1" {
			t.Fatalf("GET /m/a (quorum=%s): %+v %v", quorum, ev, err)
		}
		ev, _, err = b.Get(ctx, request(t, "GET", "/m", url.Values{"quorum": {quorum}, "recursive": {"true"}}))
		if err != nil || !ev.Node.Dir || len(ev.Node.Nodes) != 1 {
			t.Fatalf("GET /m (quorum=%s): %+v %v", quorum, ev, err)
		}
	}
	var terr *translate.Error
	if _, _, err := b.Get(ctx, request(t, "GET", "/m/none", nil)); !errors.As(err, &terr) || terr.Code != translate.EcodeKeyNotFound {
		t.Fatalf("GET of a missing key: %v, want 100", err)
	}
	if ev := write("PUT", "/m/a", url.Values{"value": {"2"}, "prevValue": {"1"}}); ev.PrevNode == nil || *ev.PrevNode.Value != "1" {
		t.Fatalf("compare-and-swap: %+v", ev)
	}
	if _, _, err := b.Write(ctx, request(t, "PUT", "/m/a", url.Values{"value": {"3"}, "prevValue": {"1"}})); !errors.As(err, &terr) ||
		terr.Code != translate.EcodeTestFailed {
		t.Fatalf("compare-and-swap on a stale value: %v, want 101", err)
	}
	in := write("POST", "/m/q", url.Values{"value": {"x"}})
	if !strings.HasPrefix(in.Node.Key, "/m/q/") {
		t.Fatalf("in-order create: %+v", in.Node)
	}
	write("PUT", "/m/t", url.Values{"value": {"x"}, "ttl": {"60"}})
	write("DELETE", "/m/a", nil)
	if got := counterValue(t, b.metrics.backendReads) - reads; got < 5 {
		t.Errorf("%v reads answered by the backend, want every read", got)
	}
	if _, valid := b.mirror.Rev(); valid {
		t.Fatal("the mirror became valid again during the test")
	}
}

// TestABackendReadShowsTheMirrorsEventIndexes: keys a v3 transaction
// wrote in one revision each have an event index of their own, and a read
// the mirror cannot answer (here: it is not valid) shows them as the mirror
// does, not as the revision's index.
func TestABackendReadShowsTheMirrorsEventIndexes(t *testing.T) {
	b := newBackend(t, startMember(t, nil), nil)
	ctx := context.Background()
	s, err := b.client()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpPut(b.layout.DataKey("/m/a"), "1"),
		clientv3.OpPut(b.layout.DataKey("/m/b"), "2")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	if !b.mirror.waitFor(ctx, rev, 10*time.Second, b.nudge) {
		t.Fatalf("the mirror did not reach revision %d", rev)
	}
	get := func() string {
		t.Helper()
		ev, _, err := b.Get(ctx, request(t, "GET", "/m", url.Values{"recursive": {"true"}, "sorted": {"true"}}))
		if err != nil {
			t.Fatal(err)
		}
		j, err := json.Marshal(ev.Node)
		if err != nil {
			t.Fatal(err)
		}
		return string(j)
	}
	idx := uint64(translate.Index(rev))
	want := fmt.Sprintf(`{"key":"/m","dir":true,"nodes":[`+
		`{"key":"/m/a","value":"1","modifiedIndex":%d,"createdIndex":%d},`+
		`{"key":"/m/b","value":"2","modifiedIndex":%d,"createdIndex":%d}]}`, idx-1, idx-1, idx, idx)
	if got := get(); got != want {
		t.Fatalf("from the mirror:\n%s\nwant\n%s", got, want)
	}
	b.mirror.invalidate()
	reads := counterValue(t, b.metrics.backendReads)
	if got := get(); got != want {
		t.Errorf("from the backend:\n%s\nwant the mirror's indexes\n%s", got, want)
	}
	if counterValue(t, b.metrics.backendReads) == reads {
		t.Error("the read was not answered by the backend")
	}
}

// TestMirrorLoadsAKeySpaceOfManyPages: the copy of a key space larger than
// one page of the initial load is complete and consistent (every page at
// the first page's revision), and reads are answered from it.
func TestMirrorLoadsAKeySpaceOfManyPages(t *testing.T) {
	ep := startMember(t, nil)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	ctx := context.Background()
	const n = 2*mirrorPage + 100
	for i := 0; i < n; i += 100 {
		ops := make([]clientv3.Op, 0, 100)
		for k := i; k < i+100; k++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/p/k%05d", k), fmt.Sprint(k)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	b := newBackend(t, ep, nil)
	rev, valid := b.mirror.Rev()
	if !valid || b.mirror.kvs.Len() < n {
		t.Fatalf("mirror at %d (valid %v) holds %d keys, want %d", rev, valid, b.mirror.kvs.Len(), n)
	}
	ev, _, err := b.Get(ctx, request(t, "GET", "/p", url.Values{"recursive": {"true"}}))
	if err != nil || len(ev.Node.Nodes) != n {
		t.Fatalf("GET /p: %d nodes, %v; want %d", len(ev.Node.Nodes), err, n)
	}
	if last := ev.Node.Nodes[n-1]; last.Key != fmt.Sprintf("/p/k%05d", n-1) || *last.Value != fmt.Sprint(n-1) {
		t.Fatalf("the last key: %+v", last)
	}
	if r := counterValue(t, b.metrics.backendReads); r != 0 {
		t.Errorf("%v reads answered by the backend, want all from the mirror", r)
	}
}

// TestLostBackendAnswersUnavailableAtOnce: once the only member is gone and
// declared lost, every call fails at once with ErrUnavailable (v2's 300).
func TestLostBackendAnswersUnavailableAtOnce(t *testing.T) {
	ep, stop := startEtcd(t, nil)
	b := newBackendWith(t, ep, func(c *Config) {
		c.HeartbeatInterval, c.HeartbeatTimeout, c.DialTimeout = 100*time.Millisecond, 100*time.Millisecond, time.Second
	})
	stop()
	deadline := time.Now().Add(10 * time.Second)
	for b.Up() {
		if time.Now().After(deadline) {
			t.Fatal("the member was not declared lost")
		}
		time.Sleep(10 * time.Millisecond) // poll
	}
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Health":  func() error { return b.Health(ctx) },
		"Version": func() error { _, err := b.Version(ctx); return err },
		"Get":     func() error { _, _, err := b.Get(ctx, request(t, "GET", "/a", nil)); return err },
		"Write": func() error {
			_, _, err := b.Write(ctx, request(t, "PUT", "/a", url.Values{"value": {"1"}}))
			return err
		},
		"Watch": func() error {
			_, _, err := b.Watch(ctx, request(t, "GET", "/a", url.Values{"wait": {"true"}}))
			return err
		},
	} {
		start := time.Now()
		if err := call(); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s while lost: %v, want ErrUnavailable", name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s while lost took %v", name, d)
		}
	}
	if b.Ready() || b.Endpoint() != "" {
		t.Errorf("ready %v, endpoint %q while lost", b.Ready(), b.Endpoint())
	}
}

// TestAliveIsFalseWhileWedged: a lock held for good (a wedged bridge) makes
// Alive false within its bound; freed, true again.
func TestAliveIsFalseWhileWedged(t *testing.T) {
	b := newBackend(t, startMember(t, nil), nil)
	if !b.Alive(time.Second) {
		t.Fatal("not alive")
	}
	b.mu.Lock()
	start := time.Now()
	alive := b.Alive(50 * time.Millisecond)
	b.mu.Unlock()
	if alive || time.Since(start) > time.Second {
		t.Fatalf("alive %v after %v while wedged", alive, time.Since(start))
	}
	if !b.Alive(time.Second) {
		t.Fatal("not alive once freed")
	}
}

// TestNewFailsWithoutAnAnsweringEndpoint: no endpoints, or none answering
// within the dial timeout, is an error from New, and Close twice is harmless.
func TestNewFailsWithoutAnAnsweringEndpoint(t *testing.T) {
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := New(ctx, Config{Layout: layout}); err == nil {
		t.Fatal("New without endpoints succeeded")
	}
	start := time.Now()
	if _, err := New(ctx, Config{Endpoints: []string{freeURL(t)}, Layout: layout, DialTimeout: 500 * time.Millisecond}); err == nil ||
		!strings.Contains(err.Error(), "no etcd v3 endpoint answered") {
		t.Fatalf("New with nothing listening: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("New gave up after %v", d)
	}
	b := newBackend(t, startMember(t, nil), nil)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestAWriteErrorSeesWritesMadeElsewhere: a v2 error is an answer about the
// present, as v2's leader gave it: decided on a copy of the key space that
// has not yet seen a write made by another client (here the copy's feed is
// held), it is checked against a linearizable read first, and the write
// goes through.
func TestAWriteErrorSeesWritesMadeElsewhere(t *testing.T) {
	ep := startMember(t, nil)
	b, gate := newGatedBackend(t, ep)
	other := otherClient(t, ep)
	ctx := context.Background()
	gate.Lock()
	held := true
	defer func() {
		if held {
			gate.Unlock()
		}
	}()
	if _, err := other.Put(ctx, "/elsewhere", "1"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method string
		form   url.Values
	}{
		{"PUT", url.Values{"value": {"2"}, "prevExist": {"true"}}}, // 100 on the copy
		{"PUT", url.Values{"value": {"3"}, "prevValue": {"2"}}},    // 101 on the copy
	} {
		if _, _, err := b.Write(ctx, request(t, tc.method, "/elsewhere", tc.form)); err != nil {
			t.Fatalf("%s %v on a key written elsewhere: %v", tc.method, tc.form, err)
		}
	}
	gate.Unlock()
	held = false
	// An error that the present confirms stands.
	var terr *translate.Error
	if _, _, err := b.Write(ctx, request(t, "PUT", "/elsewhere", url.Values{"value": {"4"}, "prevValue": {"2"}})); !errors.As(err, &terr) ||
		terr.Code != translate.EcodeTestFailed {
		t.Fatalf("compare-and-swap on a stale value: %v, want 101", err)
	}
}

// newGatedBackend is a backend whose shared watch receives nothing while
// the gate is held for writing: its copy stands still.
func newGatedBackend(t *testing.T, ep string) (*Backend, *sync.RWMutex) {
	gate := &sync.RWMutex{}
	b := newBackendWith(t, ep, func(c *Config) {
		c.DialOptions = []grpc.DialOption{grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc,
			cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || method != "/etcdserverpb.Watch/Watch" {
				return cs, err
			}
			return gatedStream{cs, gate}, nil
		})}
	})
	return b, gate
}

// otherClient is a v3 client of ep besides the bridge, closed with the test.
func otherClient(t *testing.T, ep string) *clientv3.Client {
	other, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	return other
}

// gatedStream receives only while its gate can be read-locked.
type gatedStream struct {
	grpc.ClientStream
	gate *sync.RWMutex
}

func (g gatedStream) RecvMsg(m any) error {
	err := g.ClientStream.RecvMsg(m)
	// The lock is a barrier: wait until the test opens the gate.
	g.gate.RLock()
	g.gate.RUnlock() //nolint:staticcheck // SA2001: an empty critical section is the point
	return err
}
