// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v2"
)

// How a watch can end, as the bridge could end one at a switch.
const (
	endEmpty = "empty 200"
	end401   = "401"
	endClose = "connection close"
	end300   = "error 300"
)

// scriptedV2 is a v2 server holding /w = v1 at index 10: the first watch
// ends as end says, the second gets the event /w = v2 at index 11, later
// ones wait. It counts the watches it was sent.
type scriptedV2 struct {
	end     string
	url     string
	watches atomic.Int32
}

func (s *scriptedV2) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Etcd-Cluster-Id", "c1d")
	h.Set("X-Etcd-Index", "10")
	switch r.URL.Path {
	case "/v2/members":
		_, _ = fmt.Fprintf(w, `{"members":[{"id":"1","name":"s","peerURLs":[],"clientURLs":[%q]}]}`+"\n", s.url)
		return
	case "/v2/machines":
		_, _ = io.WriteString(w, s.url)
		return
	case "/version":
		_, _ = io.WriteString(w, `{"etcdserver":"3.4.23","etcdcluster":"3.4.0"}`)
		return
	case "/v2/keys/w":
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"errorCode":100,"message":"Key not found","cause":"`+r.URL.Path+`","index":10}`+"\n")
		return
	}
	if r.FormValue("wait") != "true" {
		_, _ = io.WriteString(w, `{"action":"get","node":{"key":"/w","value":"v1","modifiedIndex":10,"createdIndex":10}}`+"\n")
		return
	}
	switch s.watches.Add(1) {
	case 1:
		s.endWatch(w)
	case 2:
		_, _ = io.WriteString(w, `{"action":"set","node":{"key":"/w","value":"v2","modifiedIndex":11,"createdIndex":11},`+
			`"prevNode":{"key":"/w","value":"v1","modifiedIndex":10,"createdIndex":10}}`+"\n")
	default:
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}

func (s *scriptedV2) endWatch(w http.ResponseWriter) {
	switch s.end {
	case endEmpty:
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
	case end401:
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"errorCode":401,"message":"The event in requested index is outdated and cleared",`+
			`"cause":"the requested history has been cleared [20/11]","index":19}`+"\n")
	case endClose:
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = c.Close()
		}
	case end300:
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"errorCode":300,"message":"Raft Internal Error","cause":"v2bridge: retry","index":10}`+"\n")
	}
}

// v2Probe runs one client against a scriptedV2 and says what it did.
type v2Probe struct {
	name string
	run  func(ctx context.Context, base string) string
}

func clientV2Probe(ctx context.Context, base string) string {
	c, err := client.New(client.Config{Endpoints: []string{base}})
	if err != nil {
		return err.Error()
	}
	ev, err := client.NewKeysAPI(c).Watcher("/w", &client.WatcherOptions{AfterIndex: 10}).Next(ctx)
	if err != nil {
		return "returns " + describeV2Err(err)
	}
	return "gets " + ev.Node.Value
}

func describeV2Err(err error) string {
	var ce client.Error
	if errors.As(err, &ce) {
		return fmt.Sprintf("error %d", ce.Code)
	}
	var cl *client.ClusterError
	if errors.As(err, &cl) {
		return "ClusterError"
	}
	return fmt.Sprintf("%T", err)
}

// flannelProbe is flannel's subnet watch loop: a new client/v2 Watcher from
// the last index for every event; on 401 it re-lists, on any other error it
// sleeps a second and tries again.
func flannelProbe(ctx context.Context, base string) string {
	c, err := client.New(client.Config{Endpoints: []string{base}})
	if err != nil {
		return err.Error()
	}
	k := client.NewKeysAPI(c)
	var steps []string
	since := uint64(10)
	for ctx.Err() == nil {
		ev, err := k.Watcher("/w", &client.WatcherOptions{AfterIndex: since}).Next(ctx)
		var ce client.Error
		switch {
		case err == nil:
			return strings.Join(append(steps, "gets "+ev.Node.Value), ", ")
		case errors.As(err, &ce) && ce.Code == client.ErrorCodeEventIndexCleared:
			r, gerr := k.Get(ctx, "/w", &client.GetOptions{Quorum: true})
			if gerr != nil {
				return strings.Join(append(steps, "re-list fails"), ", ")
			}
			since = r.Index
			steps = append(steps, "re-lists")
		default:
			steps = append(steps, describeV2Err(err)+", sleeps 1 s")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return strings.Join(append(steps, "no event"), ", ")
}

// etcdctlProbe runs etcdctl v2 (args after the endpoint) for a while: it
// either exits, or still runs having printed v2.
func etcdctlProbe(etcdctl string, args ...string) func(ctx context.Context, base string) string {
	return func(ctx context.Context, base string) string {
		cctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, etcdctl, append([]string{"--endpoints", base}, args...)...)
		cmd.Env = append(childEnv(), "ETCDCTL_API=2")
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		got := strings.Contains(out.String(), "v2")
		if cctx.Err() != nil && ctx.Err() == nil { // still running when stopped
			if got {
				return "gets v2, keeps watching"
			}
			return "keeps waiting, no v2"
		}
		msg := strings.TrimSpace(strings.SplitN(errb.String(), "\n", 2)[0])
		if i := strings.Index(msg, ":"); strings.HasPrefix(msg, "Error:") && i >= 0 {
			// "Error:  401: The event in requested index ..." -> "Error: 401"
			f := strings.Fields(msg[i+1:])
			if len(f) > 0 {
				msg = "Error: " + strings.TrimSuffix(f[0], ":")
			}
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Sprintf("exits %d (%s)", ee.ExitCode(), msg)
		}
		return fmt.Sprintf("ends: %v (%s)", err, msg)
	}
}

// pythonProbe calls python-etcd's call (client c, "watch", "read" or
// "eternal") once and prints the value it got or the exception it raised.
const pythonProbe = `
import etcd, sys
c = etcd.Client(host=sys.argv[1], port=int(sys.argv[2]), protocol="http")
how = sys.argv[3]
try:
    if how == "watch":
        r = c.watch("/w", index=11)
    elif how == "read":
        r = c.read("/w", wait=True, waitIndex=11)
    else:
        r = next(c.eternal_watch("/w", index=11))
    print("gets", r.value)
except Exception as e:
    print("raises", type(e).__name__)
`

func pyProbe(how string) func(ctx context.Context, base string) string {
	return func(ctx context.Context, base string) string {
		u, _ := url.Parse(base)
		out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", pythonProbe, u.Hostname(), u.Port(), how).Output()
		if err != nil {
			return "python failed: " + err.Error()
		}
		return strings.TrimSpace(string(out))
	}
}

// TestV2ClientsOnAWatchEnd measures what each real v2 client does when its
// watch ends each way a switch could end it: docs/migration.md's table of
// what clients see is this test's expectations.
func TestV2ClientsOnAWatchEnd(t *testing.T) {
	etcdctl := etcdctlV2(t)
	if err := exec.Command("/usr/bin/python3", "-c", "import etcd").Run(); err != nil {
		missingClient(t, "python3-etcd not installed (Debian package python3-etcd; .ci/run installs it)")
	}
	probes := []v2Probe{
		{"client/v2 Watcher.Next", clientV2Probe},
		{"flannel's loop", flannelProbe},
		{"etcdctl watch --forever", etcdctlProbe(etcdctl, "watch", "--forever", "--after-index", "10", "/w")},
		{"etcdctl exec-watch", etcdctlProbe(etcdctl, "exec-watch", "--after-index", "10", "sh", "-c", "echo $ETCD_WATCH_VALUE", "/w")},
		{"python-etcd watch", pyProbe("watch")},
		{"python-etcd read(wait=True)", pyProbe("read")},
		{"python-etcd eternal_watch", pyProbe("eternal")},
	}
	// The measured answers: only an empty 200 is survived by every client
	// built on client/v2 (it re-issues the watch itself); python-etcd raises
	// on every ending, so its loop must catch them.
	want := map[string]map[string]string{
		"client/v2 Watcher.Next": {endEmpty: "gets v2 (2 watches)", end401: "returns error 401 (1 watches)",
			endClose: "returns ClusterError (1 watches)", end300: "returns ClusterError (1 watches)"},
		"flannel's loop": {endEmpty: "gets v2 (2 watches)", end401: "re-lists, gets v2 (2 watches)",
			endClose: "ClusterError, sleeps 1 s, gets v2 (2 watches)", end300: "ClusterError, sleeps 1 s, gets v2 (2 watches)"},
		"etcdctl watch --forever": {endEmpty: "gets v2, keeps watching (3 watches)", end401: "exits 4 (Error: 401) (1 watches)",
			endClose: "exits 4 (Error: client) (1 watches)", end300: "exits 4 (Error: client) (1 watches)"},
		"etcdctl exec-watch": {endEmpty: "gets v2, keeps watching (3 watches)", end401: "exits 4 (Error: 401) (1 watches)",
			endClose: "exits 4 (Error: client) (1 watches)", end300: "exits 4 (Error: client) (1 watches)"},
	}
	for _, how := range []string{"watch", "read(wait=True)", "eternal_watch"} {
		want["python-etcd "+how] = map[string]string{endEmpty: "raises EtcdException (1 watches)",
			end401: "raises EtcdEventIndexCleared (1 watches)", endClose: "raises EtcdConnectionFailed (1 watches)",
			end300: "raises EtcdException (1 watches)"}
	}
	for _, end := range []string{endEmpty, end401, endClose, end300} {
		for _, p := range probes {
			s := &scriptedV2{end: end}
			srv := httptest.NewUnstartedServer(s)
			s.url = "http://" + srv.Listener.Addr().String() // before it serves: no request may race the write
			srv.Start()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			got := p.run(ctx, srv.URL)
			cancel()
			srv.CloseClientConnections()
			srv.Close()
			got = fmt.Sprintf("%s (%d watches)", got, s.watches.Load())
			t.Logf("%-28s on %-16s: %s", p.name, end, got)
			if w := want[p.name][end]; w != got {
				t.Errorf("%s on %s: %s; want %s", p.name, end, got, w)
			}
		}
	}
}

// pyDocHarness runs docs/migration.md's python-watch loop (prepended) on
// a client of argv's bridge and directory, printing its re-lists and events
// as pyWatchLines reads them, and "escaped" with any exception that leaves
// the loop.
const pyDocHarness = `
import sys
c = etcd.Client(host=sys.argv[1], port=int(sys.argv[2]), protocol="http")
d = sys.argv[3]
def relist():
    while True:
        try:
            r = c.read(d, recursive=True, quorum=True)
        except etcd.EtcdClusterIdChanged:
            raise
        except etcd.EtcdException:
            time.sleep(0.05)
            continue
        print("relist", flush=True)
        for n in r.leaves:
            if not n.dir:
                print("node", n.key, n.value, flush=True)
        print("listed", flush=True)
        return r.etcd_index
def handle(r):
    print("event", r.action, r.key, r.value, flush=True)
try:
    watch_forever(c, d, relist, handle)
except BaseException as e:
    print("escaped", type(e).__name__, str(e).replace("\n", " "), flush=True)
    raise
`

// TestSwitchKeepsEveryClientWatching runs real v2 watch loops through a
// dual-mode bridge across a cutover and a rollback: curl-style one-shot
// waits and client/v2's Watcher (both re-list on 401), docs/migration.md's
// python-etcd loop and etcdctl watch --forever (restarted when it exits).
// After each switch, once the re-listing clients have re-listed, every
// change is delivered to every watcher as an event, the re-listing ones
// end on the tree the bridge holds, no exception escapes the python loop,
// and the cluster ID clients see is the v2 server's throughout.
func TestSwitchKeepsEveryClientWatching(t *testing.T) {
	etcdctl := etcdctlV2(t)
	if err := exec.Command("/usr/bin/python3", "-c", "import etcd").Run(); err != nil {
		missingClient(t, "python3-etcd not installed (Debian package python3-etcd; .ci/run installs it)")
	}
	pyLoop := docBlocks(t)["python-watch"]
	if pyLoop == "" {
		t.Fatal("docs/migration.md has no block marked doc-test: python-watch")
	}
	e := newDualEnv(t)
	const dir = network + "/switch"
	if r := do(t, "PUT", e.ref.URL, "/v2/keys"+dir, form("dir", "true")); r.status != 201 {
		t.Fatalf("creating %s on the v2 server: %d %s", dir, r.status, r.body)
	}
	br := e.startBridge(t, "")
	e.startFollower(t, network)
	oldID := do(t, "GET", e.ref.URL, "/v2/keys/", nil).header.Get("X-Etcd-Cluster-Id")
	if oldID == "" {
		t.Fatal("the v2 server sends no X-Etcd-Cluster-Id")
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	watchers := map[string]*watchState{"curl": newWatchState(), "client/v2": newWatchState(),
		"python-etcd": newWatchState(), "etcdctl": newWatchState()}
	relisting := []string{"curl", "client/v2", "python-etcd"}
	var pyOut, etcdctlErr syncBuffer
	pyExited := make(chan error, 1)
	u, _ := url.Parse(br.url)
	runs := map[string]func(){
		"curl":      func() { curlWatch(ctx, t, br.url, dir, watchers["curl"]) },
		"client/v2": func() { clientWatch(ctx, br.url, dir, watchers["client/v2"]) },
		"python-etcd": func() {
			cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", pyLoop+pyDocHarness, u.Hostname(), u.Port(), dir)
			parse := pyWatchLines(watchers["python-etcd"])
			pyExited <- lines(ctx, cmd, func(l string) {
				_, _ = pyOut.Write([]byte(l + "\n"))
				parse(l)
			})
		},
		"etcdctl": func() { _ = etcdctlWatch(ctx, etcdctl, br.url, dir, watchers["etcdctl"], &etcdctlErr) },
	}
	for _, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	defer func() {
		if t.Failed() {
			t.Logf("the python loop printed:\n%s\netcdctl's stderr:\n%s", &pyOut, &etcdctlErr)
		}
	}()

	// pyAlive fails the test once the python loop has ended: an
	// exception escaped it.
	pyAlive := func(when string) {
		t.Helper()
		select {
		case err := <-pyExited:
			t.Fatalf("%s: the python loop ended (%v):\n%s", when, err, &pyOut)
		default:
		}
	}
	put := func(key, v string) {
		t.Helper()
		waitFor(t, 30*time.Second, "a write of "+v, func() bool {
			r := do(t, "PUT", br.url, "/v2/keys"+dir+"/"+key, form("value", v))
			return r.status == 200 || r.status == 201
		})
	}
	relists := func() map[string]int {
		n := map[string]int{}
		for _, name := range relisting {
			st := watchers[name]
			st.mu.Lock()
			n[name] = st.relist
			st.mu.Unlock()
		}
		return n
	}
	// phase waits until every re-listing watcher has re-listed since
	// before (the switch's 401) and etcdctl watches again, then writes
	// five values: every watcher must see each as an event, and the
	// re-listing ones end on the bridge's tree.
	phase := func(name string, before map[string]int) {
		t.Helper()
		for _, w := range relisting {
			waitFor(t, 60*time.Second, w+" to re-list ("+name+")", func() bool {
				pyAlive(name)
				return relists()[w] > before[w]
			})
		}
		// etcdctl, restarted with no index, watches from when it starts:
		// a probe, repeated until it sees it, says it watches.
		waitFor(t, 60*time.Second, "etcdctl to watch ("+name+")", func() bool {
			put("probe", name+"-probe")
			until := time.Now().Add(2 * time.Second)
			for time.Now().Before(until) && !watchers["etcdctl"].saw(name+"-probe") {
				time.Sleep(50 * time.Millisecond) // poll the watcher's state
			}
			return watchers["etcdctl"].saw(name + "-probe")
		})
		for i := 1; i <= 5; i++ {
			put(fmt.Sprintf("k%d", i), fmt.Sprintf("%s-%d", name, i))
		}
		want, _ := listFiles(t, br.url, dir)
		for w, st := range watchers {
			for i := 1; i <= 5; i++ {
				v := fmt.Sprintf("%s-%d", name, i)
				waitFor(t, 30*time.Second, w+" to see "+v+" as an event", func() bool { return st.saw(v) })
			}
			if w != "etcdctl" {
				waitFor(t, 30*time.Second, w+" to hold the bridge's tree ("+name+")", func() bool { return st.equals(want) })
			}
		}
		if id := do(t, "GET", br.url, "/v2/keys"+dir, nil).header.Get("X-Etcd-Cluster-Id"); id != oldID {
			t.Errorf("%s: the bridge sends cluster id %q, the v2 server's is %q", name, id, oldID)
		}
		pyAlive(name)
	}

	phase("passthrough", map[string]int{"curl": 0, "client/v2": 0, "python-etcd": 0})

	before := relists()
	if r := e.command(t, "cutover"); r.code != 0 {
		t.Fatalf("cutover: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	waitFor(t, 30*time.Second, "the bridge to serve etcd v3", func() bool { return statsMode(t, br.url) == "v3" })
	phase("v3", before)

	before = relists()
	// The writes made through etcd v3 above are given up: --force.
	if r := e.command(t, "rollback", "--force"); r.code != 0 {
		t.Fatalf("rollback: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	waitFor(t, 30*time.Second, "the bridge to serve the v2 server", func() bool { return statsMode(t, br.url) == "passthrough" })
	phase("rolled-back", before)

	if strings.Contains(pyOut.String(), "escaped") {
		t.Errorf("an exception escaped the python loop:\n%s", &pyOut)
	}
}
