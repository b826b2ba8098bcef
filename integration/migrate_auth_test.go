// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/proof/v2ref"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// doAs sends a request with basic auth (user "" sends none) and a body.
func doAs(t *testing.T, method, base, path, user, body string) resp {
	t.Helper()
	bound(t)
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(body, "{") {
		req.Header.Set("Content-Type", "application/json")
	} else if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if name, pw, ok := strings.Cut(user, ":"); ok {
		req.SetBasicAuth(name, pw)
	}
	r, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = r.Body.Close() }()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{status: r.StatusCode, header: r.Header, body: string(b)}
}

// TestMigrateAuthThroughCutover: a v2 server with auth enabled, users
// and roles; a dual-mode bridge; the doc's auth commands (migrate --follow,
// verify, cutover), run verbatim. Passwords are learned from requests the
// v2 server accepted; the cutover refuses while one is unknown; after it
// the bridge enforces the same rules from etcd v3; a rollback with an auth
// change made through etcd v3 is refused without --force.
func TestMigrateAuthThroughCutover(t *testing.T) {
	bin := buildBridge(t)
	d := &docRun{t: t, blocks: docBlocks(t), ref: v2ref.StartT(t, v2ref.Options{}), cl: v2bridgetest.StartCluster(t, 1),
		binDir: filepath.Dir(bin), dir: t.TempDir(), served: "/"}
	for _, name := range []string{"auth-follow", "auth-verify", "auth-cutover"} {
		if !strings.Contains(d.blocks[name], `--v2-server-user "root:$ROOT_PASSWORD"`) {
			t.Fatalf("docs/migration.md's %s block: %q", name, d.blocks[name])
		}
	}
	t.Setenv("ROOT_PASSWORD", "rootpw")
	const root, alice, bob = "root:rootpw", "alice:alicepw", "bob:bobpw"
	old := d.ref.URL
	must := func(r resp, what string) {
		t.Helper()
		if r.status/100 != 2 {
			t.Fatalf("%s: %d %s", what, r.status, r.body)
		}
	}
	must(doAs(t, "PUT", old, "/v2/keys/apps/x", "", "value=1"), "seeding /apps/x")
	must(doAs(t, "PUT", old, "/v2/keys/flannel/y", "", "value=2"), "seeding /flannel/y")
	must(doAs(t, "PUT", old, "/v2/auth/users/root", "", `{"user":"root","password":"rootpw"}`), "creating root")
	must(doAs(t, "PUT", old, "/v2/auth/roles/apps", "", `{"role":"apps","permissions":{"kv":{"read":["/apps/*"],"write":["/apps/*"]}}}`), "creating role apps")
	must(doAs(t, "PUT", old, "/v2/auth/users/alice", "", `{"user":"alice","password":"alicepw","roles":["apps"]}`), "creating alice")
	must(doAs(t, "PUT", old, "/v2/auth/enable", "", ""), "enabling auth")
	// The guest role (made by enabling) may read, not write.
	must(doAs(t, "PUT", old, "/v2/auth/roles/guest", root, `{"role":"guest","revoke":{"kv":{"write":["/*"]}}}`), "restricting guest")

	// A dual-mode bridge, configured as the doc says.
	d.bridges = []string{v2bridgetest.FreeURL(t)}
	d.metrics = []string{v2bridgetest.FreeURL(t)}
	if err := os.WriteFile(filepath.Join(d.dir, "bridge0.yaml"), []byte(d.replacer(0).Replace(d.blocks["config"])), 0o600); err != nil {
		t.Fatal(err)
	}
	p := d.start("start", 0)
	if err := (&proc{cmd: p.cmd, logs: &bytes.Buffer{}, done: p.done}).healthy(d.bridges[0], 60*time.Second); err != nil {
		t.Fatalf("bridge: %v\n%s", err, p.logs)
	}
	br := d.bridges[0]

	follower := d.start("auth-follow", 0)
	d.waitFollower("/")
	v3 := d.cl.Client(t)
	keys := auth.KeysFor("_v2bridge/", "", nil)
	stored := func(name string) auth.User {
		r, err := v3.Get(ctxT(t, 5*time.Second), keys.User(name))
		if err != nil {
			t.Fatal(err)
		}
		var u auth.User
		if len(r.Kvs) == 1 {
			if err := json.Unmarshal(r.Kvs[0].Value, &u); err != nil {
				t.Fatal(err)
			}
		}
		return u
	}
	if u := stored("root"); u.Password == "" || strings.Join(u.Roles, ",") != "root" {
		t.Fatalf("root in etcd v3 after the copy: %+v", u)
	}
	if u := stored("alice"); u.Password != "" || strings.Join(u.Roles, ",") != "apps" {
		t.Fatalf("alice in etcd v3 after the copy: %+v (no password known yet)", u)
	}

	// Alice's password is learned from a request the v2 server accepted;
	// a wrong one the v2 server refused is not.
	if r := doAs(t, "GET", br, "/v2/keys/apps/x", "alice:wrong", ""); r.status != 401 {
		t.Fatalf("a wrong password through the bridge (v2 server): %d %s", r.status, r.body)
	}
	asked := time.Now()
	must(doAs(t, "GET", br, "/v2/keys/apps/x", alice, ""), "alice reading /apps/x through the bridge")
	waitFor(t, 30*time.Second, "alice's password learned", func() bool { return stored("alice").Password != "" })
	t.Logf("alice's password stored in etcd v3 %v after her request was sent", time.Since(asked).Round(time.Millisecond))

	// A user made on the v2 server while following: copied within a poll,
	// its password unknown.
	must(doAs(t, "PUT", old, "/v2/auth/users/bob", root, `{"user":"bob","password":"bobpw","roles":["apps"]}`), "creating bob")
	waitFor(t, 30*time.Second, "bob copied by the follower", func() bool { return stored("bob").User == "bob" })

	res := d.run("auth-verify")
	if res.code != 0 || !strings.Contains(res.stdout, "auth         0 differences") ||
		!strings.Contains(res.stdout, "passwords    unknown to the bridges for bob") {
		t.Fatalf("verify: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res = d.run("auth-cutover")
	if res.code == 0 || !strings.Contains(res.stderr, "no password for bob") || !strings.Contains(res.stderr, "--allow-unknown-passwords") ||
		strings.Contains(res.stdout, "fencing") {
		t.Fatalf("a cutover with bob's password unknown: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	must(doAs(t, "PUT", br, "/v2/keys/apps/bob", bob, "value=b"), "bob writing through the bridge")
	waitFor(t, 30*time.Second, "bob's password learned", func() bool { return stored("bob").Password != "" })
	res = d.run("auth-verify")
	if res.code != 0 || !strings.Contains(res.stdout, "auth         0 differences") || strings.Contains(res.stdout, "passwords") {
		t.Fatalf("verify once every password is known: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	// The JSON summaries say the same.
	common := []string{"--v2-server", old, "--v2-server-user", root, "--endpoints", strings.Join(d.cl.Endpoints(), ","),
		"--progress", "none", "--output", "json"}
	var vj struct {
		OK   bool            `json:"ok"`
		Auth json.RawMessage `json:"auth"`
	}
	compact := func(b []byte) string {
		var out bytes.Buffer
		if err := json.Compact(&out, b); err != nil {
			return err.Error()
		}
		return out.String()
	}
	r := runBinary(t, nil, append([]string{"verify"}, common...)...)
	if err := json.Unmarshal([]byte(r.stdout), &vj); err != nil || r.code != 0 || !vj.OK ||
		compact(vj.Auth) != `{"differences":[],"unknownPasswords":[]}` {
		t.Fatalf("verify --output json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	r = runBinary(t, nil, append([]string{"migrate", "--dry-run"}, common...)...)
	if err := json.Unmarshal([]byte(r.stdout), &vj); err != nil || r.code != 0 || !vj.OK || compact(vj.Auth) !=
		`{"enabled":true,"users":["alice","bob","root"],"roles":["apps","guest"],"unknownPasswords":[],"changed":false}` {
		t.Fatalf("migrate --dry-run --output json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}

	res = d.run("auth-cutover")
	if res.code != 0 || !strings.Contains(res.stdout, "copied the users and roles one last time: 3 users, 2 roles, auth enabled: true") {
		t.Fatalf("cutover: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	select {
	case <-follower.done:
		follower.done <- nil
	case <-time.After(30 * time.Second):
		t.Errorf("the follower still runs after the cutover:\n%s", follower.logs)
	}
	if m := statsMode(t, br); m != "v3" {
		t.Fatalf("the bridge's mode after the cutover: %q", m)
	}

	// The bridge now serves from etcd v3 and enforces the same rules.
	denied := `{"errorCode":110,"message":"The request requires user authentication","cause":"Insufficient credentials","index":0}` + "\n"
	for _, c := range []struct {
		method, path, user, body string
		status                   int
		denied                   bool
	}{
		{"GET", "/v2/keys/apps/x", alice, "", 200, false},
		{"PUT", "/v2/keys/apps/z", alice, "value=z", 201, false},
		{"GET", "/v2/keys/flannel/y", alice, "", 401, true},
		{"PUT", "/v2/keys/flannel/y", alice, "value=3", 401, true},
		{"GET", "/v2/keys/apps/x", "alice:wrong", "", 401, true},
		{"GET", "/v2/keys/apps/x", bob, "", 200, false},   // learned before the cutover
		{"GET", "/v2/keys/flannel/y", "", "", 200, false}, // guest reads
		{"PUT", "/v2/keys/flannel/y", "", "value=3", 401, true},
		{"GET", "/v2/keys/flannel/y", root, "", 200, false},
	} {
		r := doAs(t, c.method, br, c.path, c.user, c.body)
		if r.status != c.status || (c.denied && r.body != denied) {
			t.Errorf("%s %s as %q after the cutover: %d %s, want %d", c.method, c.path, c.user, r.status, r.body, c.status)
		}
	}
	if r := doAs(t, "GET", br, "/v2/auth/users/alice", root, ""); r.status != 200 || !strings.Contains(r.body, `"user":"alice"`) {
		t.Errorf("root reading alice after the cutover: %d %s", r.status, r.body)
	}
	if r := doAs(t, "GET", br, "/v2/auth/users", alice, ""); r.status != 401 || r.body != `{"message":"Insufficient credentials"}` {
		t.Errorf("alice listing the users after the cutover: %d %q", r.status, r.body)
	}

	// An auth change through etcd v3 is named by a rollback, which refuses.
	must(doAs(t, "PUT", br, "/v2/auth/users/carol", root, `{"user":"carol","password":"carolpw"}`), "creating carol through the bridge")
	rb := runBinary(t, nil, "migrate", "rollback", "--v2-server", old, "--v2-server-user", root, "--endpoints", strings.Join(d.cl.Endpoints(), ","))
	out := rb.stdout + rb.stderr
	if rb.code == 0 || !strings.Contains(out, "/v2/auth/users/carol (auth data)") || strings.Contains(out, "$2a$") {
		t.Errorf("a rollback after an auth change through etcd v3: exit %d\n%s", rb.code, out)
	}
	if m := statsMode(t, br); m != "v3" {
		t.Errorf("the bridge's mode after the refused rollback: %q", m)
	}
	// No password nor hash in any output.
	for name, text := range map[string]string{"bridge": p.logs.String(), "follower": follower.logs.String(), "rollback": out} {
		for _, secret := range []string{"alicepw", "bobpw", "carolpw", "rootpw", "$2a$"} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s's output holds %q", name, secret)
			}
		}
	}
}
