// SPDX-License-Identifier: Apache-2.0

package integration

// Failure paths: what the bridge does when a reader, etcd or the bridge's
// own queues give out, each driven for real against etcd members.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
)

// TestWatchSlowStreamReaderIsCutOff: a stream=true watcher that stops
// reading while events keep coming is cut off (its response ends, counted
// in v2bridge_watch_slow_cutoffs_total), as the README says, and the other
// watchers of the same keys are not held up or ended.
func TestWatchSlowStreamReaderIsCutOff(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{Backend: func(c *v3backend.Config) { c.WatcherBuffer = 4 }})
	reg := e.bridge.Registry

	// The slow reader: a small socket receive buffer, and it reads nothing
	// until the end, so the bridge's writes to it soon block.
	slowClient := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			}); err != nil {
				return err
			}
			return serr
		}}).DialContext}}
	ctx := ctxT(t, 60*time.Second)
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/v2/keys/slow?wait=true&stream=true&recursive=true", nil)
	slow, err := slowClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slow.Body.Close() }()

	// A fast stream reader and a one-shot watcher on the same keys.
	fast := streamWatch(t, e.url, "/slow", "recursive", "true")
	var fastGot atomic.Int64
	fastEnded := make(chan struct{})
	go func() {
		defer close(fastEnded)
		for range fast {
			fastGot.Add(1)
		}
	}()
	oneShot := startWatch(t, e.url, "/slow/last", "recursive", "true")

	value := strings.Repeat("x", 32<<10)
	written := 0
	deadline := time.Now().Add(30 * time.Second)
	for metricValue(t, reg, "v2bridge_watch_slow_cutoffs_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no slow reader cut off after %d writes of %d bytes", written, len(value))
		}
		if r := do(t, "PUT", e.url, fmt.Sprintf("/v2/keys/slow/k%d", written), form("value", value)); r.status != 201 {
			t.Fatalf("write: %d %s", r.status, r.body)
		}
		written++
	}
	t.Logf("the slow reader was cut off after %d writes of %d bytes", written, len(value))

	// Its response ends: what was queued, then the end of the body.
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, slow.Body)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the cut-off stream ended with %v, want a complete response", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cut-off stream's response did not end")
	}

	// The others got every event and go on.
	if r := do(t, "PUT", e.url, "/v2/keys/slow/last", form("value", "1")); r.status != 201 {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	expectEvent(t, oneShot, "set", "/slow/last")
	waitFor(t, 20*time.Second, "the fast reader to get every event", func() bool { return fastGot.Load() == int64(written+1) })
	select {
	case <-fastEnded:
		t.Fatal("the fast reader's stream ended")
	default:
	}
	if n := metricValue(t, reg, "v2bridge_watch_slow_cutoffs_total"); n != 1 {
		t.Errorf("%v slow cutoffs, want 1", n)
	}
}

// TestFailoverWhenTheSharedWatchEndsWhileHeartbeatsPass: the member the
// bridge uses is cut off from its peers, and the heartbeat is set never to
// give up, so what notices is the shared watch: etcd cancels it (no leader).
// The bridge declares the member lost on that alone, moves to another
// member, and the watches in flight end.
func TestFailoverWhenTheSharedWatchEndsWhileHeartbeatsPass(t *testing.T) {
	c := v2bridgetest.StartCluster(t, 3)
	br := v2bridgetest.StartBridge(t, c.ProxiedEndpoints(), v2bridgetest.Options{Backend: func(c *v3backend.Config) {
		c.HeartbeatFailures = 1 << 30 // the heartbeat never declares a loss
	}})
	bad := c.Index(br.Backend.Endpoint())
	if bad < 0 {
		t.Fatalf("connected to %q", br.Backend.Endpoint())
	}
	ch := startWatch(t, br.URL, "/fo")
	t0 := time.Now()
	c.Isolate(bad)
	t.Cleanup(func() { c.Heal(bad) })
	select {
	case ev := <-ch:
		if ev.status != 200 || ev.Action != "" {
			t.Errorf("the watch in flight ended with %d %q, want an empty 200", ev.status, ev.Action)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the watch in flight did not end")
	}
	waitFor(t, 20*time.Second, "the bridge to move to another member", func() bool {
		ep := br.Backend.Endpoint()
		return ep != "" && c.Index(ep) != bad && br.Backend.Ready()
	})
	t.Logf("moved from member %d to %d after %v (heartbeat misses meanwhile: %v)", bad, c.Index(br.Backend.Endpoint()),
		time.Since(t0).Round(10*time.Millisecond), metricValue(t, br.Registry, "v2bridge_backend_heartbeat_misses_total"))
	if n := metricValue(t, br.Registry, "v2bridge_backend_losses_total"); n != 1 {
		t.Errorf("%v losses, want 1", n)
	}
	// Served from the new member.
	ch = startWatch(t, br.URL, "/fo")
	if r := do(t, "PUT", br.URL, "/v2/keys/fo", form("value", "1")); r.status != 201 {
		t.Fatalf("write after the failover: %d %s", r.status, r.body)
	}
	expectEvent(t, ch, "set", "/fo")
}

// TestReadyzRecoversAfterTheSharedWatchResumesPastACompaction: while the
// bridge's only member is unreachable, the revisions after the hub's
// position are written and compacted away; when the member is back, etcd
// refuses the resumed shared watch (compacted), and the hub starts afresh:
// /readyz fails meanwhile and recovers, and new watches are served.
func TestReadyzRecoversAfterTheSharedWatchResumesPastACompaction(t *testing.T) {
	c := v2bridgetest.StartCluster(t, 1)
	br := v2bridgetest.StartBridge(t, c.ProxiedEndpoints(), v2bridgetest.Options{})
	if r := do(t, "GET", br.URL, "/readyz", nil); r.status != 200 {
		t.Fatalf("/readyz: %d %s", r.status, r.body)
	}
	if r := do(t, "PUT", br.URL, "/v2/keys/rz/a", form("value", "1")); r.status != 201 {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	c.Blackhole(0)
	waitFor(t, 10*time.Second, "the member to be declared lost", func() bool { return !br.Backend.Up() })
	if r := do(t, "GET", br.URL, "/readyz", nil); r.status != http.StatusServiceUnavailable {
		t.Errorf("/readyz while lost: %d %s", r.status, r.body)
	}
	direct := c.MemberClient(t, 0)
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < 3; i++ {
		if _, err := direct.Put(ctx, fmt.Sprintf("other%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	c.Compact(t)
	c.Heal(0)
	waitFor(t, 20*time.Second, "/readyz to recover", func() bool {
		return do(t, "GET", br.URL, "/readyz", nil).status == 200
	})
	// etcd answers the resumed watch with Created, then with Compacted: the
	// hub is live for that moment, and a watch registered in it is ended
	// (an empty 200, which v2 clients re-issue). Once the hub has started
	// afresh, watches are served.
	attempts := 0
	waitFor(t, 20*time.Second, "a watch to be served after the compaction", func() bool {
		attempts++
		ch := startWatch(t, br.URL, "/rz/a")
		if r := do(t, "PUT", br.URL, "/v2/keys/rz/a", form("value", fmt.Sprint(attempts))); r.status != 200 {
			t.Fatalf("write: %d %s", r.status, r.body)
		}
		select {
		case ev := <-ch:
			if ev.status == 200 && ev.Action == "set" && ev.Node != nil && ev.Node.Key == "/rz/a" {
				return true
			}
			t.Logf("attempt %d: the watch ended with %d %q (readyz now %d)", attempts, ev.status, ev.Action,
				do(t, "GET", br.URL, "/readyz", nil).status)
		case <-time.After(10 * time.Second):
			t.Fatal("the watch was neither answered nor ended")
		}
		return false
	})
	t.Logf("a watch was served at attempt %d", attempts)
	if r := do(t, "GET", br.URL, "/readyz", nil); r.status != 200 {
		t.Errorf("/readyz: %d %s", r.status, r.body)
	}
}

// TestEtcdRequestLimitsAre209: what etcd refuses for its request limits is
// v2's 209 (invalid field), not a 500: a key deeper than --max-txn-ops
// allows (each directory level is a key written in the same transaction),
// and a value larger than --max-request-bytes, with and without a TTL.
func TestEtcdRequestLimitsAre209(t *testing.T) {
	c := v2bridgetest.StartClusterWithLimits(t, 1, v2bridgetest.MemberLimits{MaxTxnOps: 8, MaxRequestBytes: 64 << 10})
	br := v2bridgetest.StartBridge(t, c.Endpoints(), v2bridgetest.Options{})
	check := func(what string, r resp, want string) {
		t.Helper()
		if r.status != http.StatusBadRequest || r.json(t)["errorCode"].(float64) != 209 || !strings.Contains(r.body, want) {
			t.Errorf("%s: %d %s, want 400 with errorCode 209 (%s)", what, r.status, r.body, want)
		}
	}
	check("deep key", do(t, "PUT", br.URL, "/v2/keys/a/b/c/d/e/f/g/h/i/j/k/l", form("value", "1")), "--max-txn-ops")
	big := strings.Repeat("v", 100<<10)
	check("large value", do(t, "PUT", br.URL, "/v2/keys/big", form("value", big)), "--max-request-bytes")
	check("large value with a TTL", do(t, "PUT", br.URL, "/v2/keys/big", form("value", big, "ttl", "60")), "--max-request-bytes")
	// Within the limits all is well.
	if r := do(t, "PUT", br.URL, "/v2/keys/a/b/c", form("value", "1")); r.status != 201 {
		t.Errorf("shallow key: %d %s", r.status, r.body)
	}
}

// v2writeResp PUTs value at p with a TTL and returns the status.
func v2writeResp(base, p, value, ttl string) (int, error) {
	req, err := http.NewRequest("PUT", base+"/v2/keys"+p, strings.NewReader(form("value", value, "ttl", ttl).Encode()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = r.Body.Close() }()
	_, err = io.Copy(io.Discard, r.Body)
	return r.StatusCode, err
}

// TestForgedJournalRecordIsIgnored: a v3 client writes the bridge's journal
// key by hand, with a record of a delete that its revision does not hold: the
// bridge ignores the record (counted), decodes the revision by rule, and
// watchers get what really changed.
func TestForgedJournalRecordIsIgnored(t *testing.T) {
	e := newEnv(t, v2bridgetest.Options{})
	ch := startWatch(t, e.url, "/fj", "recursive", "true")
	cli := e.cluster.Client(t)
	l := e.bridge.Backend.Layout()
	if _, err := cli.Txn(ctxT(t, 10*time.Second)).Then(clientv3.OpPut(l.DataKey("/fj/x"), "v"),
		clientv3.OpPut(l.JournalKey(), `{"a":"delete","n":{"key":"/fj/other"}}`)).Commit(); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ch, "create", "/fj/x")
	if n := metricValue(t, e.bridge.Registry, "v2bridge_journal_records_ignored_total"); n != 1 {
		t.Errorf("%v journal records ignored, want 1", n)
	}
}
