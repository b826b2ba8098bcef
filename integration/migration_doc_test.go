// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v2"

	"github.com/v2bridge/v2bridge/proof/v2ref"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// docBlocks are the code blocks of docs/migration.md marked
// `<!-- doc-test: name -->`, by name, verbatim.
func docBlocks(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "migration.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- doc-test: ([a-z-]+) -->\n```[a-z]*\n(.*?)```")
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		if _, dup := out[m[1]]; dup {
			t.Fatalf("docs/migration.md marks two blocks %q", m[1])
		}
		out[m[1]] = m[2]
	}
	for _, name := range []string{"config", "serve-prefix", "start", "check", "dry-run", "partial-follow", "follow", "verify", "verify-part", "cutover"} {
		if out[name] == "" {
			t.Fatalf("docs/migration.md has no block marked doc-test: %s", name)
		}
	}
	return out
}

// docRun is the doc's procedure run against this test's servers: the doc's
// names (the v2 server, the v3 members, the bridge's URLs, the config file)
// replaced by this test's, everything else as written.
type docRun struct {
	t       *testing.T
	blocks  map[string]string
	ref     *v2ref.Server
	cl      *v2bridgetest.Cluster
	binDir  string
	dir     string
	bridges []string // client URLs
	metrics []string
	served  string
}

// replacer is the doc's names for bridge i's node.
func (d *docRun) replacer(i int) *strings.Replacer {
	return strings.NewReplacer(
		"/etc/v2bridge/v2bridge.yaml", filepath.Join(d.dir, fmt.Sprintf("bridge%d.yaml", i)),
		"http://old-etcd:2379", d.ref.URL,
		"[http://m1:2379, http://m2:2379, http://m3:2379]", "["+strings.Join(d.cl.Endpoints(), ", ")+"]",
		"http://127.0.0.1:12379", d.bridges[i],
		"http://127.0.0.1:9379", d.metrics[i],
	)
}

func (d *docRun) command(ctx context.Context, i int, line string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "sh", "-c", d.replacer(i).Replace(line))
	cmd.Env = childEnv("PATH=" + d.binDir + string(os.PathListSeparator) + os.Getenv("PATH"))
	cmd.Dir = d.dir
	return cmd
}

// run runs each line of block on bridge 0's node, and returns the last
// line's output and exit status.
func (d *docRun) run(block string) cmdResult {
	d.t.Helper()
	var res cmdResult
	for _, line := range strings.Split(strings.TrimSpace(d.blocks[block]), "\n") {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := d.command(ctx, 0, line)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		cancel()
		res = cmdResult{out.String(), errb.String(), 0}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			res.code = ee.ExitCode()
		} else if err != nil {
			d.t.Fatalf("%s: %v", line, err)
		}
		d.t.Logf("$ %s\n%s%s(exit %d)", line, res.stdout, res.stderr, res.code)
	}
	return res
}

// docProc is a long-running command of the doc (a bridge, a follower).
type docProc struct {
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan error
}

// start runs the one-line block on bridge i's node until stopped.
func (d *docProc) stop(t *testing.T) {
	t.Helper()
	start := time.Now()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.done <- err
		t.Logf("%s stopped %v after SIGTERM (%v)", d.cmd.Args[len(d.cmd.Args)-1], time.Since(start).Round(time.Millisecond), err)
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		d.done <- <-d.done
		t.Errorf("%s did not stop within 30s of SIGTERM", d.cmd.Args)
	}
}

func (d *docRun) start(block string, i int) *docProc {
	d.t.Helper()
	line := strings.TrimSpace(d.blocks[block])
	p := &docProc{cmd: d.command(context.Background(), i, "exec "+line), logs: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	d.t.Cleanup(func() {
		select {
		case err := <-p.done:
			p.done <- err
		default:
			p.stop(d.t)
		}
		d.t.Logf("%s:\n%s", line, p.logs)
	})
	return p
}

// followRecord waits until the follower's record names prefix and runs.
func (d *docRun) waitFollower(prefix string) {
	d.t.Helper()
	v3 := d.cl.Client(d.t)
	waitFor(d.t, 60*time.Second, "the follower of "+prefix+" to record its progress", func() bool {
		r, err := v3.Get(ctxT(d.t, 5*time.Second), "_v2bridge/migrate/follow")
		if err != nil || len(r.Kvs) == 0 {
			return false
		}
		var fr struct {
			Prefix, Stopped string
			Index           uint64
		}
		return json.Unmarshal(r.Kvs[0].Value, &fr) == nil && fr.Prefix == prefix && fr.Stopped == "" && fr.Index > 0
	})
}

// docWriter POSTs unique values below dir through url until stopped, and
// keeps the ones acknowledged (201).
type docWriter struct {
	mu      sync.Mutex // guards acked, tried
	acked   []string
	tried   map[string]bool
	stopped chan struct{}
	done    chan struct{}
}

func startDocWriter(base, dir string) *docWriter {
	w := &docWriter{tried: map[string]bool{}, stopped: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		hc := &http.Client{Timeout: 5 * time.Second}
		for i := 0; ; i++ {
			select {
			case <-w.stopped:
				return
			default:
			}
			v := fmt.Sprintf("w-%06d", i)
			w.mu.Lock()
			w.tried[v] = true
			w.mu.Unlock()
			r, err := hc.PostForm(base+"/v2/keys"+dir, url.Values{"value": {v}})
			if err == nil {
				_, _ = io.Copy(io.Discard, r.Body)
				_ = r.Body.Close()
				if r.StatusCode == http.StatusCreated {
					w.mu.Lock()
					w.acked = append(w.acked, v)
					w.mu.Unlock()
					continue
				}
			}
			time.Sleep(20 * time.Millisecond) // fenced, or the side switching: try the next value
		}
	}()
	return w
}

func (w *docWriter) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *docWriter) stop() {
	close(w.stopped)
	<-w.done
}

// listFiles is every file below p on the server at base (recursive, quorum):
// path -> value; nil when p is not there.
func listFiles(t *testing.T, base, p string) (map[string]string, uint64) {
	t.Helper()
	r := do(t, "GET", base, "/v2/keys"+p, form("recursive", "true", "quorum", "true"))
	if r.status == 404 {
		return nil, 0
	}
	if r.status != 200 {
		t.Fatalf("GET %s%s: %d %s", base, p, r.status, r.body)
	}
	var ev struct {
		Node client.Node `json:"node"`
	}
	if err := json.Unmarshal([]byte(r.body), &ev); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(n *client.Node)
	walk = func(n *client.Node) {
		if !n.Dir {
			out[n.Key] = n.Value
		}
		for _, c := range n.Nodes {
			walk(c)
		}
	}
	walk(&ev.Node)
	idx, _ := strconv.ParseUint(r.header.Get("X-Etcd-Index"), 10, 64)
	return out, idx
}

// watchState is a watcher's view of a directory: file -> value, rebuilt
// from its events and re-lists.
type watchState struct {
	mu     sync.Mutex // guards files, seen
	files  map[string]string
	seen   map[string]bool // every value an event carried
	relist int
}

func newWatchState() *watchState {
	return &watchState{files: map[string]string{}, seen: map[string]bool{}}
}

func (s *watchState) apply(action, key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch action {
	case "delete", "expire", "compareAndDelete":
		delete(s.files, key)
	default:
		s.files[key] = value
		s.seen[value] = true
	}
}

func (s *watchState) reset(files map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files = files
	s.relist++
}

func (s *watchState) equals(want map[string]string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.files) != len(want) {
		return false
	}
	for k, v := range want {
		if s.files[k] != v {
			return false
		}
	}
	return true
}

func (s *watchState) saw(v string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[v]
}

// curlWatch watches dir as a shell loop of one-shot curl watches does: list,
// then wait from X-Etcd-Index+1, re-issue an empty answer, re-list on 401.
func curlWatch(ctx context.Context, t *testing.T, base, dir string, st *watchState) {
	relist := func() uint64 {
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v2/keys"+dir+"?recursive=true&quorum=true", nil)
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			body, _ := io.ReadAll(r.Body)
			_ = r.Body.Close()
			idx, _ := strconv.ParseUint(r.Header.Get("X-Etcd-Index"), 10, 64)
			var ev struct {
				Node client.Node `json:"node"`
			}
			if r.StatusCode != 200 || json.Unmarshal(body, &ev) != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			files := map[string]string{}
			for _, n := range ev.Node.Nodes {
				files[n.Key] = n.Value
			}
			st.reset(files)
			return idx
		}
		return 0
	}
	next := relist() + 1
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, "GET",
			fmt.Sprintf("%s/v2/keys%s?wait=true&recursive=true&waitIndex=%d", base, dir, next), nil)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		body, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		var ev struct {
			Action    string `json:"action"`
			ErrorCode int    `json:"errorCode"`
			Node      struct {
				Key           string `json:"key"`
				Value         string `json:"value"`
				ModifiedIndex uint64 `json:"modifiedIndex"`
			} `json:"node"`
		}
		switch {
		case len(bytes.TrimSpace(body)) == 0: // the watch ended: re-issue it
		case json.Unmarshal(body, &ev) != nil:
			time.Sleep(50 * time.Millisecond)
		case ev.ErrorCode == 401:
			next = relist() + 1
		case ev.ErrorCode != 0:
			time.Sleep(50 * time.Millisecond)
		default:
			st.apply(ev.Action, ev.Node.Key, ev.Node.Value)
			next = ev.Node.ModifiedIndex + 1
		}
	}
}

// clientWatch watches dir with client/v2's Watcher, re-listing on 401.
func clientWatch(ctx context.Context, base, dir string, st *watchState) {
	c, err := client.New(client.Config{Endpoints: []string{base}})
	if err != nil {
		return
	}
	k := client.NewKeysAPI(c)
	for ctx.Err() == nil {
		r, err := k.Get(ctx, dir, &client.GetOptions{Recursive: true, Quorum: true})
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		files := map[string]string{}
		for _, n := range r.Node.Nodes {
			files[n.Key] = n.Value
		}
		st.reset(files)
		w := k.Watcher(dir, &client.WatcherOptions{AfterIndex: r.Index, Recursive: true})
		for ctx.Err() == nil {
			ev, err := w.Next(ctx)
			var ce client.Error
			if errors.As(err, &ce) && ce.Code == client.ErrorCodeEventIndexCleared {
				break // re-list
			}
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			st.apply(ev.Action, ev.Node.Key, ev.Node.Value)
		}
	}
}

// pythonWatch is python-etcd's eternal_watch in a loop that re-lists when
// the history is cleared.
const pythonWatch = `
import etcd, sys, time
c = etcd.Client(host=sys.argv[1], port=int(sys.argv[2]), protocol="http")
d = sys.argv[3]
def relist():
    while True:
        try:
            r = c.read(d, recursive=True, quorum=True)
            print("relist", flush=True)
            for n in r.leaves:
                if not n.dir:
                    print("node", n.key, n.value, flush=True)
            print("listed", flush=True)
            return r.etcd_index
        except Exception:
            time.sleep(0.05)
index = relist() + 1
while True:
    try:
        for r in c.eternal_watch(d, index=index, recursive=True):
            print("event", r.action, r.key, r.value, flush=True)
            index = r.modifiedIndex + 1
    except etcd.EtcdEventIndexCleared:
        index = relist() + 1
    except Exception:
        time.sleep(0.05)
`

func pyWatch(ctx context.Context, base, dir string, st *watchState) error {
	u, _ := url.Parse(base)
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", pythonWatch, u.Hostname(), u.Port(), dir)
	return lines(ctx, cmd, pyWatchLines(st))
}

// etcdctlWatch is `etcdctl watch --forever` restarted whenever it exits (it
// exits on a 401): it cannot re-list, so it only has to see the end.
func etcdctlWatch(ctx context.Context, etcdctl, base, dir string, st *watchState, errs io.Writer) error {
	cmd := exec.CommandContext(ctx, "sh", "-c", fmt.Sprintf(
		"while :; do ETCDCTL_API=2 %s --endpoints %s -o json watch --forever --recursive %s 2>&3; sleep 0.1; done",
		etcdctl, base, dir))
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.ExtraFiles = []*os.File{pw}
	go func() { _, _ = io.Copy(errs, pr); _ = pr.Close() }()
	defer func() { _ = pw.Close() }()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return lines(ctx, cmd, func(l string) {
		var r struct {
			Action string `json:"action"`
			Node   struct {
				Key   string `json:"key"`
				Value string `json:"value"`
			} `json:"node"`
		}
		if json.Unmarshal([]byte(l), &r) == nil && r.Action != "" {
			st.apply(r.Action, r.Node.Key, r.Node.Value)
		}
	})
}

// TestMigrationDocVerbatim runs docs/migration.md's dual-mode procedure as
// written (its marked blocks; only the addresses and the config file's path
// are this test's) against a real etcd v2 server holding a flannel tree and
// other keys, with two bridges, a steady writer through one and four kinds
// of v2 watch loops through the other: once serving the whole tree (where a
// follower of flannel's prefix alone is refused first), once serving only
// flannel's tree. Afterwards no key of the v2 server the bridges serve is
// missing, every acknowledged write is there exactly once, and every
// watcher has converged on the final tree. The two runs, each on a v2
// server, a cluster and bridges of its own, and mostly waiting on them, run
// in parallel, and with the other tests that do.
func TestMigrationDocVerbatim(t *testing.T) {
	t.Parallel()
	etcdctl := etcdctlV2(t)
	if err := exec.Command("/usr/bin/python3", "-c", "import etcd").Run(); err != nil {
		missingClient(t, "python3-etcd not installed (Debian package python3-etcd; .ci/run installs it)")
	}
	for _, served := range []string{"/", "/coreos.com/network"} {
		t.Run("serving "+served, func(t *testing.T) {
			t.Parallel()
			runMigrationDoc(t, etcdctl, served)
		})
	}
}

func runMigrationDoc(t *testing.T, etcdctl, served string) {
	const apps = 500
	bin := buildBridge(t)
	d := &docRun{t: t, blocks: docBlocks(t), ref: v2ref.StartT(t, v2ref.Options{}), cl: v2bridgetest.StartCluster(t, 1),
		binDir: filepath.Dir(bin), dir: t.TempDir(), served: served}
	if filepath.Base(bin) != "v2bridge" {
		t.Fatalf("the binary is %s: the doc runs v2bridge", bin)
	}
	// The operator trial's tree: flannel's config and 20 leases, 500 keys
	// of other clients.
	seed := func(p string, f url.Values) {
		if r := do(t, "PUT", d.ref.URL, "/v2/keys"+p, f); r.status != 201 {
			t.Fatalf("seeding %s: %d %s", p, r.status, r.body)
		}
	}
	seed("/coreos.com/network/config", form("value", `{"Network":"10.5.0.0/16","Backend":{"Type":"vxlan"}}`))
	for i := 0; i < 20; i++ {
		seed(fmt.Sprintf("/coreos.com/network/subnets/10.5.%d.0-24", i),
			form("value", fmt.Sprintf(`{"PublicIP":"192.168.0.%d"}`, i), "ttl", "3600"))
	}
	for i := 0; i < apps; i++ {
		seed(fmt.Sprintf("/apps/app%03d/key", i), form("value", fmt.Sprintf("app-value-%d", i)))
	}

	// Step 1: the config file of each node, and the bridges.
	for i := 0; i < 2; i++ {
		d.bridges = append(d.bridges, v2bridgetest.FreeURL(t))
		d.metrics = append(d.metrics, v2bridgetest.FreeURL(t))
	}
	var bridges []*docProc
	for i := range d.bridges {
		cfg := d.replacer(i).Replace(d.blocks["config"])
		if served != "/" {
			cfg += d.blocks["serve-prefix"]
			if !strings.Contains(d.blocks["serve-prefix"], "serve-prefix: "+served) {
				t.Fatalf("the doc's serve-prefix block does not serve %s: %q", served, d.blocks["serve-prefix"])
			}
		}
		if err := os.WriteFile(filepath.Join(d.dir, fmt.Sprintf("bridge%d.yaml", i)), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		p := d.start("start", i)
		bridges = append(bridges, p)
		if err := (&proc{cmd: p.cmd, logs: &bytes.Buffer{}, done: p.done}).healthy(d.bridges[i], 60*time.Second); err != nil {
			t.Fatalf("bridge %d: %v\n%s", i, err, p.logs)
		}
	}
	if r := d.run("check"); r.code != 0 || !strings.Contains(r.stdout, `v2bridge_mode{mode="passthrough"} 1`) {
		t.Fatalf("check: exit %d, %q", r.code, r.stdout)
	}

	// A writer through bridge 0, watchers through bridge 1.
	const dir = "/coreos.com/network/writer"
	w := startDocWriter(d.bridges[0], dir)
	wctx, wcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	watchers := map[string]*watchState{"curl": newWatchState(), "client/v2": newWatchState(),
		"python-etcd": newWatchState(), "etcdctl": newWatchState()}
	etcdctlErr := &syncBuffer{}
	defer func() {
		if t.Failed() {
			t.Logf("etcdctl's stderr:\n%s", etcdctlErr)
		}
	}()
	runs := map[string]func(){
		"curl":        func() { curlWatch(wctx, t, d.bridges[1], dir, watchers["curl"]) },
		"client/v2":   func() { clientWatch(wctx, d.bridges[1], dir, watchers["client/v2"]) },
		"python-etcd": func() { _ = pyWatch(wctx, d.bridges[1], dir, watchers["python-etcd"]) },
		"etcdctl":     func() { _ = etcdctlWatch(wctx, etcdctl, d.bridges[1], dir, watchers["etcdctl"], etcdctlErr) },
	}
	for _, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	defer func() { wcancel(); wg.Wait() }()
	waitFor(t, 30*time.Second, "the writer's first writes", func() bool { return w.ackedCount() >= 20 })

	// Step 2: the dry run.
	if r := d.run("dry-run"); r.code != 0 || !strings.Contains(r.stdout, "dry run: nothing was written") ||
		!strings.Contains(r.stdout, "source       "+d.ref.URL+" "+served+" ") {
		t.Fatalf("dry run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Step 5's refusal: a follower of flannel's prefix while the bridges
	// serve the whole tree.
	if served == "/" {
		partial := d.start("partial-follow", 0)
		d.waitFollower("/coreos.com/network")
		r := d.run("cutover")
		if r.code != 1 || !strings.Contains(r.stderr, "the follower copies only /coreos.com/network, but bridges serve /") ||
			!strings.Contains(r.stderr, "the v2 server holds /apps outside the copy") {
			t.Fatalf("cutover with a partial copy: exit %d, want 1 naming /apps\n%s%s", r.code, r.stdout, r.stderr)
		}
		if statsMode(t, d.bridges[0]) != "passthrough" {
			t.Fatal("the refused cutover moved the bridges")
		}
		partial.stop(t)
	}

	// Step 3: copy, then follow; verify.
	follower := d.start("follow", 0)
	d.waitFollower(served)
	// With the writer running, a difference may be a write the follower
	// has not applied yet: verify again until the copy is caught up.
	var r cmdResult
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if r = d.run("verify"); r.code == 0 || time.Now().After(deadline) {
			break
		}
	}
	if r.code != 0 || !strings.Contains(r.stdout, "differences  0") || strings.Contains(r.stdout, "not compared") {
		t.Fatalf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if served == "/" {
		r := d.run("verify-part")
		if want := "\nnot compared /apps (outside --v2-server-prefix /coreos.com/network; the bridges serve /)\n"; !strings.Contains(r.stdout, want) {
			t.Errorf("verify of a part: exit %d, want %q in\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}

	// Step 5: the cutover.
	if r := d.run("cutover"); r.code != 0 || !strings.Contains(r.stdout, "bridge(s) serve in v3 mode") {
		t.Fatalf("cutover: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, b := range d.bridges {
		waitFor(t, 30*time.Second, "bridge "+b+" to serve etcd v3", func() bool { return statsMode(t, b) == "v3" })
	}
	// The follower stops by itself once the cutover is done.
	select {
	case err := <-follower.done:
		follower.done <- err
	case <-time.After(30 * time.Second):
		t.Errorf("the follower still runs 30s after the cutover:\n%s", follower.logs)
	}
	before := w.ackedCount()
	waitFor(t, 30*time.Second, "writes through etcd v3", func() bool { return w.ackedCount() >= before+20 })
	w.stop()
	// The last write, repeated until etcdctl, restarted after each 401
	// with no index to resume from, is watching when it lands.
	waitFor(t, 60*time.Second, "etcdctl to see the last write", func() bool {
		if r := do(t, "PUT", d.bridges[0], "/v2/keys"+dir+"/zz-done", form("value", "done")); r.status != 200 && r.status != 201 {
			t.Fatalf("the last write: %d %s", r.status, r.body)
		}
		until := time.Now().Add(2 * time.Second)
		for time.Now().Before(until) && !watchers["etcdctl"].saw("done") {
			time.Sleep(50 * time.Millisecond) // poll the watcher's state
		}
		return watchers["etcdctl"].saw("done")
	})

	// No key the bridges serve is hidden: everything the v2 server holds
	// there (frozen since the fence) is answered the same by the bridges.
	oldFiles, _ := listFiles(t, d.ref.URL, served)
	for _, b := range d.bridges {
		now, _ := listFiles(t, b, served)
		for k, v := range oldFiles {
			if got, ok := now[k]; !ok || got != v {
				t.Errorf("%s after the cutover: %s is %q (there: %v), the v2 server holds %q", b, k, got, ok, v)
			}
		}
	}
	if served == "/" && len(oldFiles) < 1+20+apps {
		t.Fatalf("the v2 server lists %d files, want at least %d", len(oldFiles), 1+20+apps)
	}
	if served != "/" {
		r := do(t, "GET", d.bridges[0], "/v2/keys/apps/app000/key", nil)
		want := `{"errorCode":100,"message":"Key not found","cause":"/apps/app000/key is outside the served prefix ` +
			served + ` (--serve-prefix)","index":0}` + "\n"
		if r.status != 404 || r.body != want {
			t.Errorf("a key outside the served prefix: %d %q, want 404 %q", r.status, r.body, want)
		}
		if old := do(t, "GET", d.ref.URL, "/v2/keys/apps/app000/key", nil); old.status != 200 {
			t.Errorf("the v2 server lost /apps: %d %s", old.status, old.body)
		}
	}

	// Every acknowledged write is there exactly once; no value twice.
	final, _ := listFiles(t, d.bridges[1], dir)
	count := map[string]int{}
	for _, v := range final {
		count[v]++
	}
	w.mu.Lock()
	acked := append([]string(nil), w.acked...)
	tried := w.tried
	w.mu.Unlock()
	for _, v := range acked {
		if count[v] != 1 {
			t.Errorf("acknowledged write %s is there %d times", v, count[v])
		}
	}
	for v, n := range count {
		if n > 1 || (v != "done" && !tried[v]) {
			t.Errorf("value %s is there %d times (written: %v)", v, n, tried[v])
		}
	}
	t.Logf("%d writes acknowledged, %d files below %s", len(acked), len(final), dir)

	// Every watcher converges: the re-listing ones on the final tree,
	// etcdctl (which cannot re-list) on the last write, seen above.
	for name, st := range watchers {
		waitFor(t, 60*time.Second, name+" to converge", func() bool {
			return name == "etcdctl" || st.equals(final)
		})
		st.mu.Lock()
		for v := range st.seen {
			if v != "done" && !tried[v] {
				t.Errorf("%s saw a value nobody wrote: %q", name, v)
			}
		}
		t.Logf("%s: %d values seen, %d re-lists", name, len(st.seen), st.relist)
		st.mu.Unlock()
	}

	// A bridge stops promptly on SIGTERM, watchers and all.
	for i, b := range bridges {
		start := time.Now()
		b.stop(t)
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("bridge %d took %v to stop on SIGTERM", i, took)
		}
	}
}
