// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/v2bridge/v2bridge/bridge/core"
	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/migrate/engine"
	"github.com/v2bridge/v2bridge/migrate/shadow"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// shadowEnv is a passthrough bridge in front of a real etcd v2 server whose
// shadow comparison asks a v3-mode bridge's store over an embedded etcd,
// into which migrate copies the v2 server and follows it.
type shadowEnv struct {
	*passEnv
	cl   *v2bridgetest.Cluster
	sh   *shadow.Shadow
	logs *observer.ObservedLogs
}

func newShadowEnv(t *testing.T, endpoints func(*v2bridgetest.Cluster) []string,
	adjust func(*shadow.Config, *v2bridgetest.Cluster)) *shadowEnv {
	t.Helper()
	bound(t)
	cl := v2bridgetest.StartCluster(t, 1)
	br := v2bridgetest.StartBridge(t, endpoints(cl), v2bridgetest.Options{})
	obsCore, logs := observer.New(zapcore.DebugLevel)
	cfg := shadow.Config{Store: core.Store{B: br.Backend}, SampleRate: 1, Logger: zap.New(obsCore), Name: "shadow-it"}
	if adjust != nil {
		adjust(&cfg, cl)
	}
	sh, err := shadow.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Close)
	ucfg := fastLiveness
	ucfg.Observer = sh
	return &shadowEnv{passEnv: newPassEnv(t, ucfg), cl: cl, sh: sh, logs: logs}
}

// settled waits until every sampled request is compared or dropped.
func (e *shadowEnv) settled(t *testing.T, atLeast uint64) shadow.Counts {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := e.sh.Stats()
		if c.Sampled >= atLeast && c.Compared()+c.DroppedTotal() >= c.Sampled {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %d comparisons: %+v", atLeast, c)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestShadowComparesAMigratedCopy: a real v2 server copied and followed
// into etcd v3 by migrate, a passthrough bridge in front of it comparing
// every read and write with the v3 side: a faithful copy shows no
// divergence; a key changed behind the follower's back shows one, named in
// the log and in the bridge's record in v3.
func TestShadowComparesAMigratedCopy(t *testing.T) {
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	var rec *shadow.V3Recorder
	e := newShadowEnv(t, (*v2bridgetest.Cluster).Endpoints, func(c *shadow.Config, cl *v2bridgetest.Cluster) {
		rec = shadow.NewV3Recorder(cl.Client(t), layout, c.Name, 0)
		c.Recorder, c.RecordInterval = rec, time.Second
		c.Updates = &shadow.V3Updates{Client: cl.Client(t), Layout: layout}
	})
	cli := e.cl.Client(t)

	ctx := ctxT(t, 2*time.Minute)
	src := e.ref.URL
	v2do(t, src, "PUT", "/coreos.com/network/config", "value", `{"Network":"10.5.0.0/16"}`)
	v2do(t, src, "PUT", "/coreos.com/network/subnets/10.5.1.0-24", "value", "node-a", "ttl", "600")
	v2do(t, src, "PUT", "/coreos.com/network/subnets/10.5.2.0-24", "value", "node-b", "ttl", "600")
	v2do(t, src, "PUT", "/app/empty", "dir", "true")
	v2do(t, src, "PUT", "/app/a", "value", "1")
	v2do(t, src, "PUT", "/app/deep/x/y", "value", "y")
	o := engine.Options{V2Server: []string{src}, Target: newTargetBackend(t, e.cl.Endpoints()), NoHiddenDiscovery: true}
	sum, err := engine.Copy(ctx, o)
	if err != nil || sum.Created == 0 {
		t.Fatalf("copy: %+v %v", sum, err)
	}
	// The follower records its progress, as `migrate --follow` does: the
	// shadow compares each write once the follower has applied it.
	source, err := cutover.NewV2Server([]string{src}, nil, "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rep := &cutover.FollowReporter{Client: cli, Keys: cutover.KeysFor(layout.MetaPrefix), V2Server: source}
	rep.Applied(sum.Index)
	o.Applied = rep.Applied
	fctx, fcancel := context.WithCancel(ctx)
	followed := make(chan struct{}, 2)
	go func() {
		defer func() { followed <- struct{}{} }()
		if _, err := engine.Follow(fctx, o, sum); err != nil {
			t.Errorf("follow: %v", err)
		}
	}()
	go func() {
		defer func() { followed <- struct{}{} }()
		if err := rep.Run(fctx); err != nil {
			t.Errorf("follow progress: %v", err)
		}
	}()
	defer func() {
		fcancel()
		<-followed
		<-followed
	}()

	reads := []string{
		"/v2/keys/coreos.com/network/config", "/v2/keys/coreos.com/network/subnets",
		"/v2/keys/coreos.com/network/subnets/10.5.1.0-24", "/v2/keys/?recursive=true&sorted=true",
		"/v2/keys/app?recursive=true", "/v2/keys/app/empty", "/v2/keys/app/nope", "/v2/keys/app/a?quorum=true",
	}
	for _, r := range reads {
		do(t, "GET", e.url, r, nil)
	}
	writes := []struct {
		method, target string
		f              url.Values
	}{
		{"PUT", "/v2/keys/app/a", form("value", "2")},
		{"PUT", "/v2/keys/app/b", form("value", "new", "prevExist", "false")},
		{"PUT", "/v2/keys/coreos.com/network/subnets/10.5.1.0-24", form("value", "node-a", "ttl", "900", "prevValue", "node-a")},
		{"POST", "/v2/keys/app/queue", form("value", "job")},
		{"PUT", "/v2/keys/app/dir2", form("dir", "true")},
		{"DELETE", "/v2/keys/app/deep?recursive=true", nil},
		{"PUT", "/v2/keys/app/a", form("value", "3", "prevValue", "wrong")}, // 101: not checked
	}
	for _, w := range writes {
		do(t, w.method, e.url, w.target, w.f)
	}
	c := e.settled(t, uint64(len(reads)+len(writes)))
	if c.Reads != uint64(len(reads)) || c.Writes != uint64(len(writes)-1) || c.Diverged() != 0 || c.Lagging != 0 ||
		c.DroppedTotal() != c.Dropped["not_comparable"] {
		t.Fatalf("a faithful copy: counts %+v\nlog: %v", c, e.logs.All())
	}
	t.Logf("faithful copy: %+v", c)

	// Behind the follower's back: a v3 client changes a key.
	if _, err := cli.Put(ctx, "/app/a", "corrupted"); err != nil {
		t.Fatal(err)
	}
	do(t, "GET", e.url, "/v2/keys/app/a", nil)
	do(t, "GET", e.url, "/v2/keys/app?recursive=true", nil)
	c = e.settled(t, c.Sampled+2)
	if c.Divergences[shadow.KindValue] != 2 || c.Lagging != 0 {
		t.Fatalf("a corrupted key: counts %+v\nlog: %v", c, e.logs.All())
	}
	warned := e.logs.FilterLevelExact(zapcore.WarnLevel).FilterField(zap.String("key", "/app/a")).All()
	if len(warned) != 2 {
		t.Errorf("want two warnings naming /app/a, got %v", e.logs.All())
	}
	debug := e.logs.FilterLevelExact(zapcore.DebugLevel).FilterMessageSnippet("with values").All()
	if len(debug) != 2 || !strings.Contains(debug[0].ContextMap()["differences"].([]any)[0].(string), "corrupted") {
		t.Errorf("the debug line names the values: %v", debug)
	}

	// The bridge's record in v3, as `v2bridge verify` reads it.
	waitFor(t, 20*time.Second, "the record in etcd v3", func() bool {
		recs, err := shadow.ReadRecords(ctx, cli, layout)
		return err == nil && len(recs) == 1 && recs[0].Counts.Divergences[shadow.KindValue] == 2 &&
			len(recs[0].Recent) == 2 && recs[0].Recent[1].Key == "/app/a" && recs[0].Key == rec.Key()
	})
	// A lease keeps it: it goes away once its bridge stops refreshing it.
	resp, err := cli.Get(ctx, rec.Key())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Errorf("the record %s is not on a lease: %+v %v", rec.Key(), resp, err)
	}

	// `v2bridge verify` finds the difference itself, and prints what the
	// bridges saw; its exit status is its own comparison's.
	r := runBinary(t, nil, "verify", "--v2-server", src, "--endpoints", strings.Join(e.cl.Endpoints(), ","), "--progress", "none")
	t.Logf("v2bridge verify:\n%s%s", r.stdout, r.stderr)
	for _, want := range []string{
		"differences  1 (1 value)",
		"shadow       1 bridge(s) in passthrough mode compare their answers with etcd v3:",
		"  shadow-it on ",
		"  total: 16 compared (10 reads, 6 writes), 2 divergences (2 value), 0 lagging",
		"  recent: /app/a: value at body.node.value (shadow-it GET, ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("verify's output lacks %q", want)
		}
	}
	if r.code != 1 {
		t.Errorf("verify exit status %d, want 1 (a difference)", r.code)
	}
}

// TestABlackholedV3SideLeavesPassthroughClientsAlone: with the v3 side cut
// off the network, clients of the passthrough get the v2 server's answers
// as fast as before; the shadow drops its comparisons and counts them.
func TestABlackholedV3SideLeavesPassthroughClientsAlone(t *testing.T) {
	e := newShadowEnv(t, (*v2bridgetest.Cluster).ProxiedEndpoints, func(c *shadow.Config, _ *v2bridgetest.Cluster) {
		c.Timeout = 2 * time.Second
	})
	// The same two keys on both sides, as a follower would have left them.
	cli := e.cl.Client(t)
	for k, v := range map[string]string{"/a": "1", "/w": "x"} {
		v2do(t, e.ref.URL, "PUT", k, "value", v)
		if _, err := cli.Put(ctxT(t, 10*time.Second), k, v); err != nil {
			t.Fatal(err)
		}
	}
	// Over three seconds: the shadow's calls first stall (quorum reads need
	// the member), then fail at once when the bridge's heartbeat declares
	// the member lost.
	measure := func() (time.Duration, []string) {
		var worst time.Duration
		var answers []string
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := range 60 {
			<-tick.C
			start := time.Now()
			var code int
			var body string
			if i%3 == 2 {
				code = do(t, "PUT", e.url, "/v2/keys/w", form("value", "x")).status
				body = "" // its indexes move
			} else {
				r := do(t, "GET", e.url, "/v2/keys/a?quorum=true", nil)
				code, body = r.status, r.body
			}
			worst = max(worst, time.Since(start))
			answers = append(answers, http.StatusText(code)+" "+body)
		}
		return worst, answers
	}
	before, answersBefore := measure()
	e.cl.Blackhole(0)
	defer e.cl.Heal(0)
	during, answersDuring := measure()
	if strings.Join(answersBefore, "\n") != strings.Join(answersDuring, "\n") {
		t.Errorf("answers changed with the v3 side blackholed:\n%v\n%v", answersBefore, answersDuring)
	}
	// A shadow call to the blackholed side waits up to 2 s (or until the
	// backend's heartbeat declares it lost); no client request may.
	if during > before+500*time.Millisecond {
		t.Errorf("slowest request %v with the v3 side blackholed, %v before", during, before)
	}
	waitFor(t, 30*time.Second, "comparisons dropped as v3_unavailable", func() bool {
		return e.sh.Stats().Dropped["v3_unavailable"] > 0
	})
	c := e.sh.Stats()
	if c.Diverged() != 0 {
		t.Errorf("an unavailable v3 side counted as divergence: %+v", c)
	}
	t.Logf("slowest request: %v before, %v with the v3 side blackholed; %+v", before, during, c)
}
