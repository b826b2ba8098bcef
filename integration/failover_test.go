// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v2"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// The failover test's bounds: a client must carry on through another
// bridge within carryOnBound of the kill, and a killed bridge leave the
// others' /v2/members within the registration's TTL (failoverTTL, given to
// the bridges) plus the time etcd takes to expire a lease.
const (
	carryOnBound = 5 * time.Second
	failoverTTL  = 3 * time.Second
	leaveSlack   = 5 * time.Second
)

// foAck is a write the client got an answer for: seq's key was created
// (dup: the create was answered "already exists" after a retry, so the
// attempt before it, cut off by the kill, had created it).
type foAck struct {
	seq int
	dup bool
	at  time.Time
}

// foEvent is one event the client's watch delivered.
type foEvent struct {
	action, key, value string
	index              uint64
	at                 time.Time
}

// foLog is what a client reported, with when the test heard it.
type foLog struct {
	mu     sync.Mutex // guards acks, events and errs
	acks   []foAck
	events []foEvent
	errs   []string
}

func (l *foLog) ack(seq int, dup bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acks = append(l.acks, foAck{seq: seq, dup: dup, at: time.Now()})
}

func (l *foLog) event(action, key, value string, index uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, foEvent{action: action, key: key, value: value, index: index, at: time.Now()})
}

func (l *foLog) fail(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < 20 {
		l.errs = append(l.errs, s)
	}
}

func (l *foLog) counts() (acks, events int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks), len(l.events)
}

// foKey is the key of write seq, foValue its value: unique to the client.
func foKey(seq int) string                  { return fmt.Sprintf("/w/k%06d", seq) }
func foValue(client string, seq int) string { return fmt.Sprintf("%s-%d", client, seq) }

// foClient runs a real v2 client's writer and watcher against the bridges,
// each until its context ends (w.writes, w.watches). The writer creates
// foKey(0), foKey(1), ... in turn with prevExist=false and the watcher
// watches /w recursively from after+1. Creates make a retried request
// harmless: one cut off by the kill and retried elsewhere cannot write
// twice, it gets "already exists".
type foClient struct {
	name string
	run  func(t *testing.T, w *foRun, urls []string, after uint64)
}

// foRun is one client's run: its two contexts, the goroutines of each
// (which the test waits for) and what it reported.
type foRun struct {
	log              *foLog
	writes, watches  context.Context
	writers, watcher sync.WaitGroup
}

// TestFailoverBetweenBridges runs three bridges over a 3-member etcd
// cluster and, for each real v2 client, kills -9 the bridge the client is
// using while it writes and watches: the client must carry on through
// another bridge within carryOnBound, with no acknowledged write lost, none
// written twice and no event missed by its watch; the killed bridge must
// leave the others' /v2/members within its registration's TTL.
func TestFailoverBetweenBridges(t *testing.T) {
	etcdctl := etcdctlV2(t)
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import etcd").Run(); err != nil {
		missingClient(t, "python3-etcd not installed (Debian package python3-etcd; .ci/run installs it)")
	}
	cl := v2bridgetest.StartCluster(t, 3)
	endpoints := strings.Join(cl.Endpoints(), ",")
	for _, c := range []foClient{
		{"client-v2", runClientV2},
		{"python-etcd", func(t *testing.T, w *foRun, urls []string, after uint64) { runPythonEtcd(t, w, py, urls, after) }},
		{"etcdctl", func(t *testing.T, w *foRun, urls []string, after uint64) { runEtcdctl(t, w, etcdctl, urls, after) }},
	} {
		t.Run(c.name, func(t *testing.T) { failover(t, c, endpoints) })
	}
}

func failover(t *testing.T, c foClient, endpoints string) {
	// Each client's bridges serve a key space of their own: they list
	// one another and not the other clients' bridges (same cluster, same
	// meta prefix, another --data-prefix).
	dataPrefix := "/failover-" + c.name
	bridges := make([]*proc, 3)
	urls := make([]string, 3)
	for i := range bridges {
		bridges[i] = startHealthyBridge(t, func() (string, []string, []string) {
			u := v2bridgetest.FreeURL(t)
			return u, nil, []string{"--listen-client-urls", u, "--endpoints", endpoints, "--name", fmt.Sprintf("%s-%d", c.name, i),
				"--data-prefix", dataPrefix, "--mode-lease-ttl", failoverTTL.String(), "--log-level", "warn"}
		})
		urls[i] = bridges[i].url
	}
	for _, u := range urls {
		waitMembers(t, u, urls)
	}
	leader := checkLeader(t, urls)
	t.Logf("bridges %v, leader %s", urls, leader)

	start := do(t, "PUT", urls[0], "/v2/keys/start", form("value", "0"))
	after, err := strconv.ParseUint(start.header.Get("X-Etcd-Index"), 10, 64)
	if start.status != 201 || err != nil {
		t.Fatalf("start key: %d %s", start.status, start.body)
	}

	log := &foLog{}
	run := &foRun{log: log}
	var stopWrites, stopWatches context.CancelFunc
	run.writes, stopWrites = context.WithCancel(context.Background())
	run.watches, stopWatches = context.WithCancel(context.Background())
	defer func() { stopWrites(); stopWatches(); run.writers.Wait(); run.watcher.Wait() }()
	c.run(t, run, urls, after)

	waitFor(t, 30*time.Second, c.name+" writing and watching", func() bool {
		a, e := log.counts()
		return a >= 10 && e >= 10
	})
	// The bridge in use is the one holding the client's watch.
	var used int
	waitFor(t, 10*time.Second, "the bridge holding "+c.name+"'s watch", func() bool {
		n := 0
		for i, u := range urls {
			if watchers(t, u) > 0 {
				used, n = i, n+1
			}
		}
		return n == 1
	})
	log.mu.Lock()
	acked := len(log.acks)
	log.mu.Unlock()
	killed := bridges[used]
	kill := time.Now()
	if err := killed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = <-killed.done
	killed.done <- err // for the cleanup
	var alive []string
	for i, u := range urls {
		if i != used {
			alive = append(alive, u)
		}
	}

	// The killed bridge leaves the others' member lists within the TTL.
	var left time.Duration
	waitFor(t, failoverTTL+leaveSlack+5*time.Second, "the killed bridge to leave /v2/members", func() bool {
		for _, u := range alive {
			if len(memberURLs(t, u)) != 2 {
				return false
			}
		}
		left = time.Since(kill)
		return true
	})
	if left > failoverTTL+leaveSlack {
		t.Errorf("the killed bridge left /v2/members after %v, want within its TTL %v (+%v)", left, failoverTTL, leaveSlack)
	}
	waitFor(t, 30*time.Second, c.name+" writing after the kill", func() bool {
		a, _ := log.counts()
		return a >= acked+15
	})
	stopWriter := time.Now()
	stopWrites()
	run.writers.Wait()

	// What is in etcd, read through a surviving bridge (quorum: every
	// write that applied, acknowledged or not).
	list := do(t, "GET", alive[0], "/v2/keys/w", form("recursive", "true", "sorted", "true", "quorum", "true"))
	var tree struct {
		Node struct {
			Nodes []struct {
				Key   string `json:"key"`
				Value string `json:"value"`
			} `json:"nodes"`
		} `json:"node"`
	}
	if err := json.Unmarshal([]byte(list.body), &tree); err != nil {
		t.Fatalf("listing: %v: %s", err, list.body)
	}
	stored := map[string]string{}
	for _, n := range tree.Node.Nodes {
		stored[n.Key] = n.Value
	}
	// The watch must catch up with every write.
	waitFor(t, 30*time.Second, c.name+"'s watch to see every write", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.events) >= len(stored)
	})
	stopWatches()
	run.watcher.Wait()

	log.mu.Lock()
	defer log.mu.Unlock()
	// No acknowledged write is lost.
	for _, a := range log.acks {
		if v, ok := stored[foKey(a.seq)]; !ok || v != foValue(c.name, a.seq) {
			t.Errorf("acknowledged write %d (dup %v): stored %q (present %v)", a.seq, a.dup, v, ok)
		}
	}
	// The watch saw every write once, in order, each a create with its
	// own value: none missed, none written twice.
	seen := map[string]int{}
	var prev uint64
	for _, ev := range log.events {
		seen[ev.key]++
		if ev.index <= prev {
			t.Errorf("watch: %s at %d after %d: out of order", ev.key, ev.index, prev)
		}
		prev = ev.index
		if ev.action != "create" || stored[ev.key] != ev.value {
			t.Errorf("watch: %s %s %q, stored %q", ev.action, ev.key, ev.value, stored[ev.key])
		}
	}
	for k := range stored {
		if seen[k] != 1 {
			t.Errorf("watch saw %s %d times, want once", k, seen[k])
		}
	}
	if len(seen) != len(stored) {
		t.Errorf("watch saw %d keys, %d are stored", len(seen), len(stored))
	}
	dups := 0
	for _, a := range log.acks {
		if a.dup {
			dups++
		}
	}
	// Carrying on: from the kill to the first write acknowledged after it
	// being delivered by the watch.
	var firstAck *foAck
	for i := range log.acks {
		if log.acks[i].at.After(kill) {
			firstAck = &log.acks[i]
			break
		}
	}
	if firstAck == nil {
		t.Fatal("no write acknowledged after the kill")
	}
	var seenAt time.Time
	for _, ev := range log.events {
		if ev.key == foKey(firstAck.seq) {
			seenAt = ev.at
		}
	}
	carry := firstAck.at.Sub(kill)
	if seenAt.After(firstAck.at) {
		carry = seenAt.Sub(kill)
	}
	if seenAt.IsZero() {
		t.Fatalf("the watch never delivered write %d", firstAck.seq)
	}
	t.Logf("%s: killed %s; carried on after %v (write acknowledged after %v, seen by the watch after %v); "+
		"the killed bridge left /v2/members after %v; %d writes acknowledged (%d answered 'already exists' on a retry), "+
		"%d events, %d client errors in %v: %q",
		c.name, urls[used], carry.Round(time.Millisecond), firstAck.at.Sub(kill).Round(time.Millisecond),
		seenAt.Sub(kill).Round(time.Millisecond), left.Round(time.Millisecond), len(log.acks), dups, len(log.events),
		len(log.errs), stopWriter.Sub(kill).Round(time.Millisecond), log.errs)
	if carry > carryOnBound {
		t.Errorf("%s carried on after %v, want within %v", c.name, carry, carryOnBound)
	}
}

// memberURLs is the client URLs of bridge u's /v2/members.
func memberURLs(t *testing.T, u string) []string {
	t.Helper()
	r := do(t, "GET", u, "/v2/members", nil)
	var m struct {
		Members []struct {
			ClientURLs []string `json:"clientURLs"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(r.body), &m); err != nil || r.status != 200 {
		t.Fatalf("%s/v2/members: %d %s", u, r.status, r.body)
	}
	var out []string
	for _, mb := range m.Members {
		out = append(out, mb.ClientURLs...)
	}
	sort.Strings(out)
	return out
}

// waitMembers waits until bridge u lists exactly urls, in /v2/members and
// in /v2/machines.
func waitMembers(t *testing.T, u string, urls []string) {
	t.Helper()
	want := append([]string(nil), urls...)
	sort.Strings(want)
	waitFor(t, 20*time.Second, u+" to list every bridge", func() bool {
		got := memberURLs(t, u)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			return false
		}
		machines := strings.Split(do(t, "GET", u, "/v2/machines", nil).body, ", ")
		sort.Strings(machines)
		return strings.Join(machines, " ") == strings.Join(want, " ")
	})
}

// checkLeader checks that every bridge names the same leader, a listed
// member, in /v2/stats/leader and /v2/stats/self; it returns its ID.
func checkLeader(t *testing.T, urls []string) string {
	t.Helper()
	var leader string
	for _, u := range urls {
		var ms struct {
			Members []struct{ ID string } `json:"members"`
		}
		if err := json.Unmarshal([]byte(do(t, "GET", u, "/v2/members", nil).body), &ms); err != nil {
			t.Fatal(err)
		}
		ids := []string{}
		for _, m := range ms.Members {
			ids = append(ids, m.ID)
		}
		var sl struct{ Leader string }
		var ss struct {
			LeaderInfo struct{ Leader string } `json:"leaderInfo"`
		}
		if err := json.Unmarshal([]byte(do(t, "GET", u, "/v2/stats/leader", nil).body), &sl); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(do(t, "GET", u, "/v2/stats/self", nil).body), &ss); err != nil {
			t.Fatal(err)
		}
		if leader == "" {
			leader = sl.Leader
		}
		if sl.Leader != leader || ss.LeaderInfo.Leader != leader || len(ids) != 3 || ids[0] != leader {
			t.Fatalf("%s: stats/leader %q, stats/self's leader %q, members %v: want every bridge to name %s, "+
				"the lowest ID listed", u, sl.Leader, ss.LeaderInfo.Leader, ids, leader)
		}
	}
	return leader
}

// watchers is bridge u's v2 watches in flight (/v2/stats/store).
func watchers(t *testing.T, u string) uint64 {
	t.Helper()
	var st struct{ Watchers uint64 }
	r := do(t, "GET", u, "/v2/stats/store", nil)
	if err := json.Unmarshal([]byte(r.body), &st); err != nil {
		t.Fatalf("%s/v2/stats/store: %v: %s", u, err, r.body)
	}
	return st.Watchers
}

// runClientV2 is go.etcd.io/etcd/client/v2 given the first bridge, keeping
// its endpoints in step with /v2/members (AutoSync), as flannel and other Go
// clients do.
func runClientV2(t *testing.T, w *foRun, urls []string, after uint64) {
	log := w.log
	c, err := client.New(client.Config{Endpoints: urls[:1], Transport: client.DefaultTransport,
		HeaderTimeoutPerRequest: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(w.watches, 10*time.Second)
	defer cancel()
	if err := c.Sync(sctx); err != nil {
		t.Fatal(err)
	}
	if eps := c.Endpoints(); len(eps) != 3 {
		t.Fatalf("client/v2 endpoints after a sync: %v, want the three bridges", eps)
	}
	k := client.NewKeysAPI(c)
	w.watcher.Add(2)
	w.writers.Add(1)
	go func() {
		defer w.watcher.Done()
		_ = c.AutoSync(w.watches, 500*time.Millisecond) // ends with the watch
	}()
	go func() {
		defer w.writers.Done()
		ctx := w.writes
		for seq := 0; ctx.Err() == nil; {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := k.Set(wctx, foKey(seq), foValue("client-v2", seq), &client.SetOptions{PrevExist: client.PrevNoExist})
			cancel()
			var ce client.Error
			switch {
			case err == nil:
				log.ack(seq, false)
				seq++
			case errors.As(err, &ce) && ce.Code == client.ErrorCodeNodeExist:
				log.ack(seq, true)
				seq++
			case ctx.Err() == nil:
				log.fail(err.Error())
				time.Sleep(50 * time.Millisecond) // before retrying the same create
				continue
			}
			time.Sleep(20 * time.Millisecond) // pace
		}
	}()
	go func() {
		defer w.watcher.Done()
		wa := k.Watcher("/w", &client.WatcherOptions{AfterIndex: after, Recursive: true})
		for {
			r, err := wa.Next(w.watches)
			if err != nil {
				if w.watches.Err() == nil {
					log.fail("watch: " + err.Error())
				}
				return
			}
			log.event(r.Action, r.Node.Key, r.Node.Value, r.Node.ModifiedIndex)
		}
	}()
}

// runPythonEtcd is python-etcd given the first bridge with
// allow_reconnect=True: it takes the others from /v2/machines and moves to
// one of them when its bridge fails. It also reads client.leader, which
// needs /v2/stats/self to name a member /v2/members lists.
func runPythonEtcd(t *testing.T, w *foRun, py string, urls []string, after uint64) {
	log := w.log
	port := urls[0][strings.LastIndex(urls[0], ":")+1:]
	head := `
import etcd, sys, time
c = etcd.Client(host="127.0.0.1", port=` + port + `, protocol="http", allow_reconnect=True, read_timeout=10)
`
	writer := head + `
print("leader", c.leader["id"], flush=True)
seq = 0
while True:
    try:
        c.write("/w/k%06d" % seq, "python-etcd-%d" % seq, prevExist=False)
        print("ack", seq, flush=True)
        seq += 1
    except etcd.EtcdAlreadyExist:
        print("dup", seq, flush=True)
        seq += 1
    except Exception as e:
        print("err", repr(e).replace("\n", " "), flush=True)
        time.sleep(0.05)
        continue
    time.sleep(0.02)
`
	watcher := head + `
for r in c.eternal_watch("/w", index=` + strconv.FormatUint(after+1, 10) + `, recursive=True):
    print("ev", r.action, r.key, r.value, r.modifiedIndex, flush=True)
`
	leaders := make(chan string, 1)
	runLines(t, w.writes, &w.writers, exec.CommandContext(w.writes, py, "-c", writer), log, func(f []string) {
		switch {
		case len(f) == 2 && f[0] == "leader":
			leaders <- f[1]
		case len(f) == 2 && (f[0] == "ack" || f[0] == "dup"):
			seq, _ := strconv.Atoi(f[1])
			log.ack(seq, f[0] == "dup")
		default:
			log.fail(strings.Join(f, " "))
		}
	})
	runLines(t, w.watches, &w.watcher, exec.CommandContext(w.watches, py, "-c", watcher), log, pyEvent(log))
	select {
	case id := <-leaders:
		if id != checkLeader(t, urls) {
			t.Errorf("python-etcd's client.leader is %s", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("python-etcd did not read client.leader within 30 s")
	}
}

func pyEvent(log *foLog) func([]string) {
	return func(f []string) {
		if len(f) == 5 && f[0] == "ev" {
			idx, _ := strconv.ParseUint(f[4], 10, 64)
			log.event(f[1], f[2], f[3], idx)
			return
		}
		log.fail(strings.Join(f, " "))
	}
}

// runEtcdctl is etcdctl v2 given the three bridges: a watch --forever, and
// an mk per write (each its own process, as scripts run it).
func runEtcdctl(t *testing.T, w *foRun, etcdctl string, urls []string, after uint64) {
	log := w.log
	eps := strings.Join(urls, ",")
	env := append(os.Environ(), "ETCDCTL_API=2")
	watch := exec.CommandContext(w.watches, etcdctl, "--endpoints", eps, "-o", "json", "watch", "--forever", "--recursive",
		"--after-index", strconv.FormatUint(after, 10), "/w")
	watch.Env = env
	runLines(t, w.watches, &w.watcher, watch, log, func(f []string) {
		var r struct {
			Action string `json:"action"`
			Node   struct {
				Key           string `json:"key"`
				Value         string `json:"value"`
				ModifiedIndex uint64 `json:"modifiedIndex"`
			} `json:"node"`
		}
		line := strings.Join(f, " ")
		if strings.HasPrefix(line, "[") {
			return // "[action] key" before each event's JSON
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Action == "" {
			log.fail(line)
			return
		}
		log.event(r.Action, r.Node.Key, r.Node.Value, r.Node.ModifiedIndex)
	})
	w.writers.Add(1)
	go func() {
		defer w.writers.Done()
		ctx := w.writes
		for seq := 0; ctx.Err() == nil; {
			cmd := exec.CommandContext(ctx, etcdctl, "--endpoints", eps, "mk", foKey(seq), foValue("etcdctl", seq))
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			switch {
			case err == nil:
				log.ack(seq, false)
				seq++
			case strings.Contains(string(out), "105: Key already exists"):
				log.ack(seq, true)
				seq++
			case ctx.Err() == nil:
				log.fail(strings.TrimSpace(string(out)))
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
}

// runLines starts cmd, handing each line of its stdout, split in fields,
// to f until it exits (ctx ends it); its stderr is kept for the failure
// log. A command that exits before ctx ends is a failure of the client.
func runLines(t *testing.T, ctx context.Context, wg *sync.WaitGroup, cmd *exec.Cmd, log *foLog, f func([]string)) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f(strings.Fields(sc.Text()))
		}
		_, _ = io.Copy(io.Discard, stdout)
		err := cmd.Wait()
		if ctx.Err() == nil {
			log.fail(fmt.Sprintf("%s exited: %v: %s", cmd.Args[0], err, stderr.String()))
		}
	}()
}

// TestMembersInEveryMode: bridges in dual mode and in v3 mode over one
// cluster list one another; one with --advertise-only-self lists itself
// alone and nobody lists it; a passthrough bridge (no etcd v3) is alone and
// its stats name itself, so python-etcd's client.leader works there too.
func TestMembersInEveryMode(t *testing.T) {
	e := newDualEnv(t)
	var urls []string
	for i := 0; i < 2; i++ {
		urls = append(urls, e.startBridge(t, "").url)
	}
	v3only := func(extra ...string) string {
		return startHealthyBridge(t, func() (string, []string, []string) {
			u := v2bridgetest.FreeURL(t)
			return u, nil, append([]string{"--endpoints", e.endpoints(), "--listen-client-urls", u,
				"--mode-lease-ttl", "3s", "--log-level", "warn"}, extra...)
		}).url
	}
	urls = append(urls, v3only())
	alone := v3only("--advertise-only-self")
	for _, u := range urls {
		waitMembers(t, u, urls)
	}
	leader := checkLeader(t, urls)
	if got := memberURLs(t, alone); len(got) != 1 || got[0] != alone {
		t.Fatalf("--advertise-only-self lists %v, want itself alone", got)
	}
	pyLeader(t, urls[0], leader)

	pass := startHealthyBridge(t, func() (string, []string, []string) {
		u := v2bridgetest.FreeURL(t)
		return u, nil, []string{"--v2-server", e.ref.URL, "--listen-client-urls", u, "--log-level", "warn"}
	}).url
	if got := memberURLs(t, pass); len(got) != 1 || got[0] != pass {
		t.Fatalf("passthrough bridge lists %v, want itself alone", got)
	}
	pyLeader(t, pass, checkLeaderAlone(t, pass))
}

// checkLeaderAlone checks that bridge u, listing itself alone, names itself
// leader; it returns its ID.
func checkLeaderAlone(t *testing.T, u string) string {
	t.Helper()
	var ss struct {
		ID         string                  `json:"id"`
		State      string                  `json:"state"`
		LeaderInfo struct{ Leader string } `json:"leaderInfo"`
	}
	var sl struct{ Leader string }
	if err := json.Unmarshal([]byte(do(t, "GET", u, "/v2/stats/self", nil).body), &ss); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(do(t, "GET", u, "/v2/stats/leader", nil).body), &sl); err != nil {
		t.Fatal(err)
	}
	if ss.ID == "" || ss.State != "StateLeader" || ss.LeaderInfo.Leader != ss.ID || sl.Leader != ss.ID {
		t.Fatalf("%s: stats/self %+v, stats/leader %+v: want the bridge leading itself", u, ss, sl)
	}
	return ss.ID
}

// pyLeader checks that python-etcd's client.leader, asked of bridge u, is
// the member with ID leader.
func pyLeader(t *testing.T, u, leader string) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import etcd").Run(); err != nil {
		missingClient(t, "python3-etcd not installed (Debian package python3-etcd; .ci/run installs it)")
	}
	port := u[strings.LastIndex(u, ":")+1:]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", `
import etcd
c = etcd.Client(host="127.0.0.1", port=`+port+`, protocol="http")
print(c.leader["id"])
`).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != leader {
		t.Fatalf("python-etcd client.leader via %s: %v: %s, want %s", u, err, out, leader)
	}
}
