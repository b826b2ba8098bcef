// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v2"

	"github.com/v2bridge/v2bridge/proof/v2ref"
)

// The v2 auth tests run every case against two servers: the reference
// (etcd 3.5 with its v2 store, which is what v2 did) and the bridge binary
// on its embedded etcd. A case that holds for one only says why.

// authServer is a v2 server under test.
type authServer struct {
	url    string
	bridge *proc // nil for the reference
}

// authServers runs f as the subtests "reference" and "bridge", each on a
// server of its own; extra are the bridge's additional arguments.
func authServers(t *testing.T, f func(t *testing.T, s authServer), extra ...string) {
	t.Run("reference", func(t *testing.T) {
		bound(t)
		f(t, authServer{url: v2ref.StartT(t, v2ref.Options{}).URL})
	})
	t.Run("bridge", func(t *testing.T) {
		p := startHealthyBridge(t, embedded(t, extra...))
		waitAuthServed(t, httpClient, p.url)
		f(t, authServer{url: p.url, bridge: p})
	})
}

// waitAuthServed waits until the server at url answers the auth API (the
// bridge, once its auth data is loaded). TestAuthServedOnceReady holds a
// ready bridge to serving it at once; the other tests wait, so that they
// fail for what they test only.
func waitAuthServed(t *testing.T, c *http.Client, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := authDoWith(t, c, "GET", url, "/v2/auth/enable", func(*http.Request) {}, "")
		if r.status == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the auth API still answers %d %s after 30s", r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond) // poll
	}
}

// TestAuthServedOnceReady (bridge only: the reference has no /readyz): a
// bridge that says it is ready serves the auth API and decides requests at
// once, so that a client of a single bridge never sees it unavailable
// after a start.
func TestAuthServedOnceReady(t *testing.T) {
	p := startHealthyBridge(t, embedded(t))
	if r := authDo(t, "GET", p.url, "/v2/auth/enable", "", "", ""); r.status != 200 || r.body != `{"enabled":false}` {
		t.Errorf("GET /v2/auth/enable once ready: %d %s", r.status, r.body)
	}
	if r := authDo(t, "PUT", p.url, "/v2/keys/k", "", "", "value=v"); r.status != 201 {
		t.Errorf("a write once ready: %d %s", r.status, r.body)
	}
}

// The users of authSetup.
const (
	rootPass  = "r00t-Pa55"
	alicePass = "al1ce-Pa55"
)

// authSetup makes, through the v2 auth API, the root user, the role "rw-foo"
// (read and write on "/foo/*"), the user alice in it, and enables auth,
// checking v2's status codes.
// With noGuest, the guest role loses its permissions first, so a request
// without credentials may do nothing.
func authSetup(t *testing.T, url string, noGuest bool) {
	t.Helper()
	steps := []struct {
		method, path, user, body string
		status                   int
	}{
		{"PUT", "/v2/auth/users/root", "", `{"user":"root","password":"` + rootPass + `"}`, 201},
		{"PUT", "/v2/auth/roles/rw-foo", "", `{"role":"rw-foo","permissions":{"kv":{"read":["/foo/*"],"write":["/foo/*"]}}}`, 201},
		{"PUT", "/v2/auth/users/alice", "", `{"user":"alice","password":"` + alicePass + `","roles":["rw-foo"]}`, 200}, // v2: 200 when roles are given
		{"PUT", "/v2/auth/enable", "", "", 200},
	}
	for _, s := range steps {
		if r := authDo(t, s.method, url, s.path, "", "", s.body); r.status != s.status {
			t.Fatalf("%s %s: %d %s, want %d", s.method, s.path, r.status, r.body, s.status)
		}
	}
	if noGuest {
		r := authDo(t, "PUT", url, "/v2/auth/roles/guest", "root", rootPass,
			`{"role":"guest","revoke":{"kv":{"read":["/*"],"write":["/*"]}}}`)
		if want := `{"role":"guest","permissions":{"kv":{"read":[],"write":[]}}}`; r.status != 200 || r.body != want {
			t.Fatalf("revoking guest's permissions: %d %q, want 200 %q", r.status, r.body, want)
		}
	}
}

// authDo sends method to url+path with basic auth (none if user is ""), a
// JSON body for the auth API or a form for the keys API.
func authDo(t *testing.T, method, url, path, user, pass, body string) resp {
	t.Helper()
	return authDoWith(t, httpClient, method, url, path, func(r *http.Request) {
		if user != "" {
			r.SetBasicAuth(user, pass)
		}
	}, body)
}

// authDoWith is authDo over client, with the request's headers set by auth.
func authDoWith(t *testing.T, c *http.Client, method, url, path string, auth func(*http.Request), body string) resp {
	t.Helper()
	bound(t)
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		ct := "application/x-www-form-urlencoded"
		if strings.HasPrefix(path, "/v2/auth") {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	auth(req)
	r, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = r.Body.Close() }()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{status: r.StatusCode, header: r.Header, body: strings.TrimSuffix(string(b), "\n")}
}

// v2Denied is v2's refusal of a /v2/keys request, with its status.
const v2Denied = `{"errorCode":110,"message":"The request requires user authentication","cause":"Insufficient credentials","index":0}`

// expectKeysDenied asserts v2's refusal of a /v2/keys request in full.
func expectKeysDenied(t *testing.T, what string, r resp) {
	t.Helper()
	if r.status != 401 || r.body != v2Denied || r.header.Get("Content-Type") != "application/json" ||
		r.header.Get("X-Etcd-Index") != "0" {
		t.Errorf("%s: %d %q (Content-Type %q, X-Etcd-Index %q), want v2's 401 %s", what, r.status, r.body,
			r.header.Get("Content-Type"), r.header.Get("X-Etcd-Index"), v2Denied)
	}
}

// expectAuthDenied asserts the auth API's refusal of a non-root request.
func expectAuthDenied(t *testing.T, what string, r resp) {
	t.Helper()
	if want := `{"message":"Insufficient credentials"}`; r.status != 401 || r.body != want ||
		r.header.Get("Content-Type") != "application/json" {
		t.Errorf("%s: %d %q (Content-Type %q), want 401 %s", what, r.status, r.body, r.header.Get("Content-Type"), want)
	}
}

// keysNode is the action and node of a /v2/keys answer, without indexes.
func keysNode(t *testing.T, r resp) (action, key, value string) {
	t.Helper()
	var a struct {
		Action string
		Node   struct{ Key, Value string }
	}
	if err := json.Unmarshal([]byte(r.body), &a); err != nil {
		t.Fatalf("%d %q: %v", r.status, r.body, err)
	}
	return a.Action, a.Node.Key, a.Node.Value
}

// TestAuthEtcdctl administers auth with the real etcdctl v2 and uses it as
// a user: every command's output and exit code, as v2 answered them.
func TestAuthEtcdctl(t *testing.T) {
	etcdctl := etcdctlV2(t)
	authServers(t, func(t *testing.T, s authServer) {
		for _, st := range etcdctlAuthSteps() {
			out, code := authEtcdctl(t, etcdctl, s.url, st.args...)
			if out != st.out || code != st.code {
				t.Fatalf("etcdctl %s: exit %d, output %q; want exit %d, %q", strings.Join(st.args, " "), code, out, st.code, st.out)
			}
		}
	})
}

// etcdctlAuthStep is one etcdctl v2 command and its whole output and exit
// code.
type etcdctlAuthStep struct {
	args []string
	out  string // stdout and stderr, in full
	code int
}

// etcdctlAuthSteps turns v2 auth on as docs/operations.md says, uses it,
// and turns it off.
func etcdctlAuthSteps() []etcdctlAuthStep {
	asRoot := []string{"--username", "root:" + rootPass}
	asAlice := []string{"--username", "alice:" + alicePass}
	cat := func(a ...[]string) []string {
		var all []string
		for _, x := range a {
			all = append(all, x...)
		}
		return all
	}
	denied := "Error:  110: The request requires user authentication (Insufficient credentials) [0]\n"
	return []etcdctlAuthStep{
		// The password after the colon: etcdctl asks for none.
		{[]string{"user", "add", "root:" + rootPass}, "User root created\n", 0},
		{[]string{"role", "add", "rw-foo"}, "Role rw-foo created\n", 0},
		{[]string{"role", "grant", "--readwrite", "--path", "/foo/*", "rw-foo"}, "Role rw-foo updated\n", 0},
		{[]string{"user", "add", "alice:" + alicePass}, "User alice created\n", 0},
		{[]string{"user", "grant", "--roles", "rw-foo", "alice"}, "User alice updated\n", 0},
		{[]string{"auth", "enable"}, "Authentication Enabled\n", 0},
		// Auth on: the guest role still reads and writes all.
		{[]string{"set", "/bar", "guest"}, "guest\n", 0},
		{cat(asRoot, []string{"role", "revoke", "--readwrite", "--path", "/*", "guest"}), "Role guest updated\n", 0},
		{cat(asAlice, []string{"set", "/foo/a", "1"}), "1\n", 0},
		{cat(asAlice, []string{"get", "/foo/a"}), "1\n", 0},
		{cat(asAlice, []string{"set", "/bar", "2"}), denied, 4},
		{cat(asAlice, []string{"get", "/bar"}), denied, 4},
		{cat(asAlice, []string{"ls", "/foo"}), denied, 4},
		{cat(asAlice, []string{"ls", "/foo/"}), "/foo/a\n", 0},
		{[]string{"--username", "alice:wrong", "get", "/foo/a"}, denied, 4},
		{[]string{"get", "/foo/a"}, denied, 4},
		{cat(asRoot, []string{"ls", "--sort", "--recursive", "/"}), "/bar\n/foo\n/foo/a\n", 0},
		{[]string{"user", "list"}, "Insufficient credentials\n", 1},
		{cat(asAlice, []string{"user", "list"}), "Insufficient credentials\n", 1},
		{cat(asRoot, []string{"user", "list"}), "alice\nroot\n", 0},
		{cat(asRoot, []string{"user", "get", "alice"}), "User: alice\nRoles:  rw-foo\n", 0},
		{cat(asRoot, []string{"role", "get", "rw-foo"}), "Role: rw-foo\nKV Read:\n\t/foo/*\nKV Write:\n\t/foo/*\n", 0},
		{cat(asRoot, []string{"role", "list"}), "guest\nroot\nrw-foo\n", 0},
		{cat(asRoot, []string{"user", "revoke", "--roles", "rw-foo", "alice"}), "User alice updated\n", 0},
		{cat(asAlice, []string{"get", "/foo/a"}), denied, 4},
		{cat(asAlice, []string{"auth", "disable"}), "Insufficient credentials\n", 1},
		{cat(asRoot, []string{"auth", "disable"}), "Authentication Disabled\n", 0},
		{[]string{"get", "/bar"}, "guest\n", 0},
	}
}

// TestOperationsDocAuthCommands: the commands docs/operations.md gives to
// turn v2 auth on are TestAuthEtcdctl's, in its order, word for word but
// the endpoint and the passwords.
func TestOperationsDocAuthCommands(t *testing.T) {
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "## Turn v2 auth on through the bridge")
	if !ok {
		t.Fatal("docs/operations.md has no section on turning v2 auth on")
	}
	_, block, _ := strings.Cut(sec, "```\n")
	block, _, _ = strings.Cut(block, "```")
	pass := strings.NewReplacer("root:<password>", "root:"+rootPass, "alice:<password>", "alice:"+alicePass)
	steps := etcdctlAuthSteps()
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		args, ok := strings.CutPrefix(line, "etcdctl --endpoints http://bridge:2379 ")
		if !ok {
			t.Fatalf("docs/operations.md: %q is not an etcdctl command against the bridge", line)
		}
		fields := strings.Fields(pass.Replace(strings.ReplaceAll(args, "'", "")))
		for n < len(steps) && !slices.Equal(steps[n].args, fields) {
			n++
		}
		if n == len(steps) {
			t.Fatalf("docs/operations.md: %q is not among TestAuthEtcdctl's commands, in order", line)
		}
		n++
	}
	if n == 0 {
		t.Fatal("docs/operations.md: no command to turn v2 auth on")
	}
}

// authEtcdctl runs etcdctl v2 against url with stdin closed (a prompt would
// fail, not wait) and returns its output and exit code.
func authEtcdctl(t *testing.T, etcdctl, url string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, etcdctl, append([]string{"--endpoints", url}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=2")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee) && ctx.Err() == nil:
		return string(out), ee.ExitCode()
	}
	t.Fatalf("etcdctl %v: %v\n%s", args, err, out)
	return "", 0
}

// TestAuthPythonEtcd reads, writes and watches with python-etcd as a user,
// and sees the refusals v2 gave it.
func TestAuthPythonEtcd(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import etcd").Run(); err != nil {
		missingClient(t, "python3-etcd not installed (Debian package python3-etcd; .ci/run installs it)")
	}
	authServers(t, func(t *testing.T, s authServer) {
		authSetup(t, s.url, true)
		port := s.url[strings.LastIndex(s.url, ":")+1:]
		script := `
import etcd, sys
def client(**kw):
    return etcd.Client(host="127.0.0.1", port=` + port + `, protocol="http", **kw)
alice = client(username="alice", password="` + alicePass + `")
wrong = client(username="alice", password="wrong")
guest = client()
root = client(username="root", password="` + rootPass + `")
def denied(f):
    try:
        f()
    except etcd.EtcdInsufficientPermissions as e:
        assert str(e) == "The request requires user authentication : Insufficient credentials", str(e)
        return
    sys.exit("not denied")
r = alice.write("/foo/a", "1")
assert (r.action, r.key, r.value) == ("set", "/foo/a", "1"), (r.action, r.key, r.value)
assert alice.read("/foo/a").value == "1"
r = alice.write("/foo/a", "2", prevValue="1")
assert (r.action, r.value) == ("compareAndSwap", "2")
r = alice.write("/foo/", "q", append=True)
assert r.action == "create" and r.key.startswith("/foo/0") and r.value == "q", (r.action, r.key)
keys = sorted(c.key for c in alice.read("/foo/", recursive=True).children)
assert keys == sorted(["/foo/a", r.key]), keys
idx = alice.read("/foo/a").modifiedIndex
r = root.write("/foo/a", "3")
w = alice.watch("/foo/a", index=idx + 1, timeout=10)
assert (w.action, w.key, w.value) == ("set", "/foo/a", "3"), (w.action, w.key, w.value)
w = alice.watch("/foo/", index=r.modifiedIndex, recursive=True, timeout=10)
assert (w.key, w.value) == ("/foo/a", "3"), (w.key, w.value)
root.write("/top", "t")
denied(lambda: alice.read("/top"))
denied(lambda: alice.write("/top", "x"))
denied(lambda: alice.read("/", recursive=True))
denied(lambda: alice.watch("/top", index=1, timeout=10))
denied(lambda: alice.delete("/foo", recursive=True))
denied(lambda: wrong.read("/foo/a"))
denied(lambda: guest.read("/foo/a"))
alice.delete("/foo/a")
try:
    alice.read("/foo/a")
    sys.exit("read of a deleted key")
except etcd.EtcdKeyNotFound:
    pass
assert root.read("/top").value == "t"
print("ok")
`
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, py, "-c", script).CombinedOutput()
		if err != nil || string(out) != "ok\n" {
			t.Fatalf("python-etcd: %v\n%s", err, out)
		}
	})
}

// TestAuthClientV2 reads, writes and watches with the v2 Go client's
// Username and Password, and sees v2's refusals as its errors.
func TestAuthClientV2(t *testing.T) {
	authServers(t, func(t *testing.T, s authServer) {
		authSetup(t, s.url, true)
		keys := func(user, pass string) client.KeysAPI {
			c, err := client.New(client.Config{Endpoints: []string{s.url}, Transport: client.DefaultTransport,
				HeaderTimeoutPerRequest: 10 * time.Second, Username: user, Password: pass})
			if err != nil {
				t.Fatal(err)
			}
			return client.NewKeysAPI(c)
		}
		alice, root := keys("alice", alicePass), keys("root", rootPass)
		wrong, guest := keys("alice", "wrong"), keys("", "")
		ctx := ctxT(t, time.Minute)

		set, err := alice.Set(ctx, "/foo/a", "1", nil)
		if err != nil || set.Action != "set" || set.Node.Key != "/foo/a" || set.Node.Value != "1" || set.PrevNode != nil {
			t.Fatalf("set as alice: %+v %v", set, err)
		}
		got, err := alice.Get(ctx, "/foo/a", nil)
		if err != nil || got.Action != "get" || got.Node.Value != "1" || got.Node.ModifiedIndex != set.Node.ModifiedIndex {
			t.Fatalf("get as alice: %+v %v", got, err)
		}
		cas, err := alice.Set(ctx, "/foo/a", "2", &client.SetOptions{PrevIndex: set.Node.ModifiedIndex})
		if err != nil || cas.Action != "compareAndSwap" || cas.Node.Value != "2" || cas.PrevNode.Value != "1" {
			t.Fatalf("CAS as alice: %+v %v", cas, err)
		}
		// A watch as alice sees root's write.
		w := alice.Watcher("/foo/", &client.WatcherOptions{AfterIndex: cas.Node.ModifiedIndex, Recursive: true})
		done := make(chan *client.Response, 1)
		go func() {
			r, err := w.Next(ctx)
			if err != nil {
				t.Errorf("watch as alice: %v", err)
			}
			done <- r
		}()
		put, err := root.Set(ctx, "/foo/b", "from-root", nil)
		if err != nil {
			t.Fatal(err)
		}
		if ev := <-done; ev == nil || ev.Action != "set" || ev.Node.Key != "/foo/b" || ev.Node.Value != "from-root" ||
			ev.Node.ModifiedIndex != put.Node.ModifiedIndex {
			t.Fatalf("watch as alice: %+v, want root's set of /foo/b", ev)
		}

		if _, err := root.Set(ctx, "/top", "t", nil); err != nil {
			t.Fatal(err)
		}
		refusals := map[string]func() error{
			"alice gets /top":          func() error { _, err := alice.Get(ctx, "/top", nil); return err },
			"alice sets /top":          func() error { _, err := alice.Set(ctx, "/top", "x", nil); return err },
			"alice lists / recursive":  func() error { _, err := alice.Get(ctx, "/", &client.GetOptions{Recursive: true}); return err },
			"alice watches /top":       func() error { _, err := alice.Watcher("/top", nil).Next(ctx); return err },
			"alice creates in /":       func() error { _, err := alice.CreateInOrder(ctx, "/", "x", nil); return err },
			"a wrong password":         func() error { _, err := wrong.Get(ctx, "/foo/a", nil); return err },
			"no credentials (guest)":   func() error { _, err := guest.Get(ctx, "/foo/a", nil); return err },
			"no credentials, a watch":  func() error { _, err := guest.Watcher("/foo/a", nil).Next(ctx); return err },
			"alice deletes /foo whole": func() error { _, err := alice.Delete(ctx, "/foo", &client.DeleteOptions{Recursive: true}); return err },
		}
		for what, f := range refusals {
			var ce client.Error
			if err := f(); !errors.As(err, &ce) || ce.Code != client.ErrorCodeUnauthorized ||
				ce.Message != "The request requires user authentication" || ce.Cause != "Insufficient credentials" || ce.Index != 0 {
				t.Errorf("%s: %v, want error 110 (Insufficient credentials) at index 0", what, err)
			}
		}
		if g, err := root.Get(ctx, "/foo/b", nil); err != nil || g.Node.Value != "from-root" {
			t.Fatalf("the refused writes changed /foo/b: %+v %v", g, err)
		}
	})
}

// TestAuthWatchOutlivesRevoke: v2 checks a watch once, when it starts. A
// running watch, long-poll or stream, still gets its events after its
// user's permission, role and user itself are gone; a new one is refused.
func TestAuthWatchOutlivesRevoke(t *testing.T) {
	authServers(t, func(t *testing.T, s authServer) {
		authSetup(t, s.url, true)
		write := func(value string) {
			t.Helper()
			if r := authDo(t, "PUT", s.url, "/v2/keys/foo/w", "root", rootPass, "value="+value); r.status/100 != 2 {
				t.Fatalf("root's write: %d %s", r.status, r.body)
			}
		}
		write("0")
		long := startAuthWatch(t, s, "/v2/keys/foo/w?wait=true", "alice", alicePass)
		stream := startAuthWatch(t, s, "/v2/keys/foo/w?wait=true&stream=true", "alice", alicePass)

		r := authDo(t, "PUT", s.url, "/v2/auth/roles/rw-foo", "root", rootPass,
			`{"role":"rw-foo","revoke":{"kv":{"read":["/foo/*"],"write":["/foo/*"]}}}`)
		if want := `{"role":"rw-foo","permissions":{"kv":{"read":[],"write":[]}}}`; r.status != 200 || r.body != want {
			t.Fatalf("revoke: %d %q, want 200 %q", r.status, r.body, want)
		}
		expectKeysDenied(t, "a new watch after the revoke",
			authDo(t, "GET", s.url, "/v2/keys/foo/w?wait=true", "alice", alicePass, ""))
		write("1")
		if ev := long.next(t); ev != "set /foo/w 1" {
			t.Fatalf("long-poll watch after the revoke: %q, want the event", ev)
		}
		if ev := stream.next(t); ev != "set /foo/w 1" {
			t.Fatalf("stream watch after the revoke: %q, want the event", ev)
		}
		for _, step := range []struct{ method, path, body, want string }{
			{"PUT", "/v2/auth/users/alice", `{"user":"alice","revoke":["rw-foo"]}`, `{"user":"alice","roles":[]}`},
			{"DELETE", "/v2/auth/users/alice", "", ""},
		} {
			if r := authDo(t, step.method, s.url, step.path, "root", rootPass, step.body); r.status != 200 || r.body != step.want {
				t.Fatalf("%s %s: %d %q, want 200 %q", step.method, step.path, r.status, r.body, step.want)
			}
			write(step.method)
			if ev := stream.next(t); ev != "set /foo/w "+step.method {
				t.Fatalf("stream watch after %s %s: %q, want the event", step.method, step.path, ev)
			}
		}
	})
}

// authWatch is a watch's events, as "action key value" lines.
type authWatch struct {
	events chan string
}

// startAuthWatch starts a watch on path as user and returns once the server
// has answered its head (so it is registered); the test's end stops it.
func startAuthWatch(t *testing.T, s authServer, path, user, pass string) *authWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(user, pass)
	c := &http.Client{} // no timeout: the watch lives as long as the test
	head := time.AfterFunc(30*time.Second, cancel)
	r, err := c.Do(req)
	head.Stop()
	if err != nil {
		cancel()
		t.Fatalf("watch %s: %v", path, err)
	}
	if r.StatusCode != 200 {
		cancel()
		t.Fatalf("watch %s: %d", path, r.StatusCode)
	}
	w := &authWatch{events: make(chan string, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(w.events)
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			var ev struct {
				Action string
				Node   struct{ Key, Value string }
			}
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				w.events <- "not JSON: " + sc.Text()
				continue
			}
			w.events <- ev.Action + " " + ev.Node.Key + " " + ev.Node.Value
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = r.Body.Close()
		<-done
	})
	return w
}

// next is the watch's next event, "" if it ended without one.
func (w *authWatch) next(t *testing.T) string {
	t.Helper()
	select {
	case ev := <-w.events:
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30s")
		return ""
	}
}
