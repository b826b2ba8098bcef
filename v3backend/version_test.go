// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"

	"github.com/v2bridge/v2bridge/translate"
)

func TestReleaseProgressBug(t *testing.T) {
	for _, c := range []struct {
		v        string
		bug, old bool
	}{
		{"3.3.27", false, true}, {"3.4.22", true, true}, {"3.4.23", true, false}, {"3.4.24", true, false},
		{"3.4.25", false, false}, {"3.4.37", false, false}, {"3.5.0", true, false}, {"3.5.7", true, false},
		{"3.5.8", false, false}, {"3.5.21", false, false}, {"3.6.0", false, false}, {"3.6.16", false, false},
		{"3.6.0-rc.1", false, false}, {"4.0.0", false, false},
	} {
		v, err := parseVersion(c.v)
		if err != nil {
			t.Fatalf("%s: %v", c.v, err)
		}
		minV, _ := parseVersion(MinVersion)
		if v.hasProgressBug() != c.bug || v.less(minV) != c.old {
			t.Errorf("%s: progress bug %v, older than %s %v; want %v, %v", c.v, v.hasProgressBug(), MinVersion,
				v.less(minV), c.bug, c.old)
		}
	}
	for _, bad := range []string{"", "3.4", "3.x.1", "v3.4.23", "3.4.-1"} {
		if _, err := parseVersion(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// claimRelease makes every Status answer on the bridge's connections claim
// release v, and counts the progress requests sent on its watch streams.
func claimRelease(v string, progressRequests *atomic.Int64) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
			invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if st, ok := reply.(*etcdserverpb.StatusResponse); ok && err == nil {
				st.Version = v
			}
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
			method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return countingStream{cs, progressRequests}, nil
		}),
	}
}

type countingStream struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s countingStream) SendMsg(m any) error {
	if r, ok := m.(*etcdserverpb.WatchRequest); ok && r.GetProgressRequest() != nil {
		s.n.Add(1)
	}
	return s.ClientStream.SendMsg(m)
}

// TestMemberBelowMinimumRefused: a member whose release is older than
// MinVersion is not used; with no other, the backend does not start, and
// says which member runs which release and what the minimum is.
func TestMemberBelowMinimumRefused(t *testing.T) {
	e, _ := startEmbed(t, nil)
	ep := e.Config().ListenClientUrls[0].String()
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := New(ctx, Config{Endpoints: []string{ep}, Layout: layout, Logger: zap.NewNop(),
		DialOptions: claimRelease("3.3.27", &n)})
	if err == nil {
		_ = b.Close()
		t.Fatal("a backend started on an etcd 3.3.27 member")
	}
	for _, want := range []string{ep, "3.3.27", "3.4.23"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// TestProgressBugWorkaround: on a member of a release whose progress
// answers are early (claimed here by the embedded member), the bridge says
// so once at info and never asks for progress; a bridge serving one
// subtree watches one covering range and still sees only its subtree's
// events, and quorum reads answer the newest value.
func TestProgressBugWorkaround(t *testing.T) {
	e, _ := startEmbed(t, nil)
	ep := e.Config().ListenClientUrls[0].String()
	var progressRequests atomic.Int64
	core, logs := observer.New(zapcore.InfoLevel)
	b := newBackendWith(t, ep, func(c *Config) {
		c.DialOptions = claimRelease("3.4.23", &progressRequests)
		c.Logger = zap.New(core)
		c.Layout = c.Layout.WithServed([]string{"/served"})
	})
	ctx := context.Background()
	if got := logs.FilterMessageSnippet("fixed in etcd 3.4.25 and 3.5.8").Len(); got != 1 {
		t.Errorf("%d info lines about the progress bug, want 1", got)
	}
	w, _, err := b.Watch(ctx, request(t, "GET", "/served", url.Values{"wait": {"true"}, "recursive": {"true"},
		"stream": {"true"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cancel()
	// A write outside the served subtree (another tenant's, by a v3 client)
	// and one inside.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	if _, err := cli.Put(ctx, b.layout.DataKey("/other/x"), "1"); err != nil {
		t.Fatal(err)
	}
	ev, _, err := b.Write(ctx, request(t, "PUT", "/served/a", url.Values{"value": {"1"}}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-w.Events():
		if got.Node == nil || got.Node.Key != "/served/a" || got.Node.ModifiedIndex != ev.Node.ModifiedIndex {
			t.Fatalf("watched %+v, want the write of /served/a at %d", got.Node, ev.Node.ModifiedIndex)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch saw no event")
	}
	// Written behind the bridge's back: a quorum read must see it.
	if _, err := cli.Put(ctx, b.layout.DataKey("/served/a"), "2"); err != nil {
		t.Fatal(err)
	}
	got, _, err := b.Get(ctx, request(t, "GET", "/served/a", url.Values{"quorum": {"true"}}))
	if err != nil || got.Node == nil || *got.Node.Value != "2" {
		t.Fatalf("quorum read: %+v, %v; want 2", got, err)
	}
	// The watch's next event is that write, nothing from /other between.
	select {
	case got := <-w.Events():
		if got.Node == nil || got.Node.Key != "/served/a" || got.Node.Value == nil || *got.Node.Value != "2" {
			t.Fatalf("watched %+v, want /served/a set to 2", got.Node)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch saw no second event")
	}
	// The newest revision outside every watched key: the mirror cannot
	// reach it from events; the read goes to the member.
	if _, err := cli.Put(ctx, "~unrelated", "1"); err != nil {
		t.Fatal(err)
	}
	got, _, err = b.Get(ctx, request(t, "GET", "/served/a", url.Values{"quorum": {"true"}}))
	if err != nil || got.Node == nil || *got.Node.Value != "2" {
		t.Fatalf("quorum read past the key space: %+v, %v; want 2", got, err)
	}
	// A replay from the first index.
	old, _, err := b.Watch(ctx, request(t, "GET", "/served", url.Values{"wait": {"true"}, "recursive": {"true"},
		"waitIndex": {strconv.Itoa(1)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Cancel()
	select {
	case got := <-old.Events():
		if got.Node == nil || got.Node.Key != "/served/a" || got.Node.ModifiedIndex != ev.Node.ModifiedIndex {
			t.Fatalf("replayed %+v, want the write of /served/a at %d", got.Node, ev.Node.ModifiedIndex)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the replay saw no event")
	}
	if n := progressRequests.Load(); n != 0 {
		t.Errorf("%d progress requests sent, want none", n)
	}
}

// TestCoveringRange: the one range a feed watches on a member whose
// progress answers are early spans its ranges, and within keeps only the
// events inside them, in order.
func TestCoveringRange(t *testing.T) {
	rs := []translate.KeyRange{{Start: "b", End: "c"}, {Start: "a/x", End: "a/x\x00"}, {Start: "d", End: "e"}}
	if got, want := covering(rs), (translate.KeyRange{Start: "a/x", End: "e"}); got != want {
		t.Errorf("covering %v = %v, want %v", rs, got, want)
	}
	open := append(rs, translate.KeyRange{Start: "c", End: "\x00"})
	if got, want := covering(open), (translate.KeyRange{Start: "a/x", End: "\x00"}); got != want {
		t.Errorf("covering %v = %v, want %v", open, got, want)
	}
	var evs []*clientv3.Event
	for i, k := range []string{"a/x", "a/xy", "b", "bz", "c", "d1", "e"} {
		evs = append(evs, &clientv3.Event{Kv: &mvccpb.KeyValue{Key: []byte(k), ModRevision: int64(i + 1)}})
	}
	var got []string
	for _, e := range within(evs, rs) {
		got = append(got, string(e.Kv.Key))
	}
	if want := []string{"a/x", "b", "bz", "d1"}; !slices.Equal(got, want) {
		t.Errorf("within: %q, want %q", got, want)
	}
}
