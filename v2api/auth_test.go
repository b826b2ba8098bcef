// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/translate"
)

// fakeAuth is a recorder Auth: it answers with its fields and keeps the
// checks and mutations the handlers ask of it.
type fakeAuth struct {
	mu sync.Mutex // guards every field below

	state   *auth.State // nil: no current state
	keys    auth.Decision
	root    auth.Decision
	checks  []keyCheck
	roots   int
	mutated []string // "op name"

	putUser auth.User // PutUser's answer
	created bool      // PutUser's and PutRole's answer
	putRole auth.Role
	err     error // every mutation's answer

	gotUser auth.User
	gotRole auth.Role
}

type keyCheck struct {
	key              string
	recursive, write bool
}

var _ Auth = (*fakeAuth)(nil)

func (f *fakeAuth) State() (*auth.State, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state, f.state != nil
}

func (f *fakeAuth) mutate(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mutated = append(f.mutated, op)
	return f.err
}

func (f *fakeAuth) PutUser(_ context.Context, u auth.User) (auth.User, bool, error) {
	err := f.mutate("putUser " + u.User)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gotUser = u
	return f.putUser, f.created, err
}

func (f *fakeAuth) DeleteUser(_ context.Context, name string) error {
	return f.mutate("deleteUser " + name)
}

func (f *fakeAuth) PutRole(_ context.Context, r auth.Role) (auth.Role, bool, error) {
	err := f.mutate("putRole " + r.Role)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gotRole = r
	return f.putRole, f.created, err
}

func (f *fakeAuth) DeleteRole(_ context.Context, name string) error {
	return f.mutate("deleteRole " + name)
}
func (f *fakeAuth) Enable(context.Context) error  { return f.mutate("enable") }
func (f *fakeAuth) Disable(context.Context) error { return f.mutate("disable") }

func (f *fakeAuth) Keys(_ *http.Request, key string, recursive, write bool) auth.Decision {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checks = append(f.checks, keyCheck{key, recursive, write})
	return f.keys
}

func (f *fakeAuth) Root(*http.Request) auth.Decision {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roots++
	return f.root
}

// testState has two users (root with its role unstored, u with a role
// and a role deleted since) and one stored role.
func testState() *auth.State {
	return &auth.State{Rev: 7, Enabled: true,
		Users: map[string]auth.User{
			"u":    {User: "u", Password: "$2a$10$hash-of-u", Roles: []string{"gone", "r"}},
			"root": {User: "root", Password: "$2a$10$hash-of-root"},
			"bare": {User: "bare", Password: "$2a$10$hash-of-bare", Roles: []string{}},
		},
		Roles: map[string]auth.Role{
			"r": {Role: "r", Permissions: auth.Permissions{KV: auth.RWPermission{Read: []string{"/foo/*"}, Write: []string{}}}},
		}}
}

const (
	rootJSON = `{"role":"root","permissions":{"kv":{"read":["/*"],"write":["/*"]}}}`
	rJSON    = `{"role":"r","permissions":{"kv":{"read":["/foo/*"],"write":[]}}}`
)

func newAuthServer(t *testing.T, fa *fakeAuth) (*Server, *fakeStore) {
	t.Helper()
	st := &fakeStore{storeMeta: Meta{ClusterID: 0xabc}, meta: Meta{ClusterID: 0xabc}}
	return newTestServer(t, st, func(c *Config) { c.Auth = fa }), st
}

// checkAnswer checks every part of an answer clients see.
func checkAnswer(t *testing.T, w *httptest.ResponseRecorder, status int, body string, header map[string]string) {
	t.Helper()
	if w.Code != status || w.Body.String() != body {
		t.Errorf("answer %d %q, want %d %q", w.Code, w.Body, status, body)
	}
	for k := range w.Header() {
		if _, ok := header[k]; !ok {
			t.Errorf("unexpected header %s: %q", k, w.Header().Values(k))
		}
	}
	for k, v := range header {
		if got := w.Header().Values(k); !reflect.DeepEqual(got, []string{v}) {
			t.Errorf("header %s %q, want %q", k, got, v)
		}
	}
}

var (
	jsonHeaders  = map[string]string{"Content-Type": "application/json", "X-Etcd-Cluster-Id": "abc"}
	plainHeaders = map[string]string{"Content-Type": "application/json"}
	denied       = `{"message":"Insufficient credentials"}`
	unavailable  = v2ErrorJSON(300, "Raft Internal Error", authUnavailable, 0)
)

func TestAuthAPIIsNotFoundWithoutAuth(t *testing.T) {
	s := newTestServer(t, &fakeStore{})
	for _, p := range []string{"/v2/auth/enable", "/v2/auth/users", "/v2/auth/roles/root"} {
		w := serve(s, "GET", p, "")
		checkAnswer(t, w, 404, "404 page not found\n", map[string]string{"Content-Type": "text/plain; charset=utf-8",
			"X-Content-Type-Options": "nosniff"})
	}
}

func TestAuthEnableGetIsOpenAndWritesNeedRoot(t *testing.T) {
	fa := &fakeAuth{state: testState(), root: auth.Deny}
	s, _ := newAuthServer(t, fa)
	checkAnswer(t, serve(s, "GET", "/v2/auth/enable", ""), 200, "{\"enabled\":true}\n", jsonHeaders)
	checkAnswer(t, serve(s, "PUT", "/v2/auth/enable", ""), 401, denied, plainHeaders)
	checkAnswer(t, serve(s, "DELETE", "/v2/auth/enable", ""), 401, denied, plainHeaders)
	if fa.roots != 2 || len(fa.mutated) != 0 {
		t.Errorf("root asked %d times (want 2), mutations %q (want none)", fa.roots, fa.mutated)
	}
	fa.root = auth.Allow
	checkAnswer(t, serve(s, "PUT", "/v2/auth/enable", ""), 200, "", jsonHeaders)
	checkAnswer(t, serve(s, "DELETE", "/v2/auth/enable", ""), 200, "", jsonHeaders)
	fa.err = &auth.Error{Status: 409, Message: "auth: already disabled"}
	checkAnswer(t, serve(s, "DELETE", "/v2/auth/enable", ""), 409, `{"message":"auth: already disabled"}`, jsonHeaders)
	if want := []string{"enable", "disable", "disable"}; !reflect.DeepEqual(fa.mutated, want) {
		t.Errorf("mutations %q, want %q", fa.mutated, want)
	}
	w := serve(s, "POST", "/v2/auth/enable", "")
	checkAnswer(t, w, 405, "Method Not Allowed\n", map[string]string{"Allow": "GET,PUT,DELETE",
		"Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff"})
}

func TestAuthWithoutCurrentStateIsUnavailable(t *testing.T) {
	fa := &fakeAuth{root: auth.Unavailable}
	s, _ := newAuthServer(t, fa)
	v2err := map[string]string{"Content-Type": "application/json", "X-Etcd-Index": "0"}
	checkAnswer(t, serve(s, "GET", "/v2/auth/enable", ""), 500, unavailable, v2err)
	checkAnswer(t, serve(s, "GET", "/v2/auth/users", ""), 500, unavailable, v2err)
	checkAnswer(t, serve(s, "PUT", "/v2/auth/roles/r", `{"role":"r"}`), 500, unavailable, v2err)
	fa.root = auth.Allow // root decided, yet no state to show
	checkAnswer(t, serve(s, "GET", "/v2/auth/roles", ""), 500, unavailable, v2err)
	checkAnswer(t, serve(s, "GET", "/v2/auth/users/u", ""), 500, unavailable, v2err)
	if len(fa.mutated) != 0 {
		t.Errorf("mutations %q while unavailable", fa.mutated)
	}
}

func TestAuthUsersAndRolesNeedRoot(t *testing.T) {
	fa := &fakeAuth{state: testState(), root: auth.Deny}
	s, _ := newAuthServer(t, fa)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v2/auth/users", ""}, {"GET", "/v2/auth/users/", ""}, {"GET", "/v2/auth/users/u", ""},
		{"PUT", "/v2/auth/users/u", `{"user":"u","password":"p"}`}, {"DELETE", "/v2/auth/users/u", ""},
		{"GET", "/v2/auth/roles", ""}, {"GET", "/v2/auth/roles/root", ""},
		{"PUT", "/v2/auth/roles/r", `{"role":"r"}`}, {"DELETE", "/v2/auth/roles/r", ""},
		{"POST", "/v2/members", `{"peerURLs":["http://1.2.3.4:2380"]}`}, {"DELETE", "/v2/members/1234", ""},
		{"PUT", "/v2/members/1234", `{"peerURLs":["http://1.2.3.4:2380"]}`},
	} {
		checkAnswer(t, serve(s, c.method, c.path, c.body), 401, denied, plainHeaders)
	}
	if fa.roots != 12 || len(fa.mutated) != 0 {
		t.Errorf("root asked %d times (want 12), mutations %q (want none)", fa.roots, fa.mutated)
	}
	// Reading the membership needs nothing.
	if w := serve(s, "GET", "/v2/members", ""); w.Code != 200 || fa.roots != 12 {
		t.Errorf("GET /v2/members: %d, root asked %d times", w.Code, fa.roots)
	}
}

func TestAuthListsShowRolesInFull(t *testing.T) {
	fa := &fakeAuth{state: testState(), root: auth.Allow}
	s, _ := newAuthServer(t, fa)
	checkAnswer(t, serve(s, "GET", "/v2/auth/users", ""), 200,
		`{"users":[{"user":"bare"},{"user":"root","roles":[`+rootJSON+`]},{"user":"u","roles":[`+rJSON+`]}]}`+"\n",
		jsonHeaders)
	checkAnswer(t, serve(s, "GET", "/v2/auth/roles/", ""), 200, `{"roles":[`+rJSON+`,`+rootJSON+`]}`+"\n", jsonHeaders)
	fa.state = &auth.State{}
	checkAnswer(t, serve(s, "GET", "/v2/auth/users/", ""), 200, "{\"users\":null}\n", jsonHeaders)
	checkAnswer(t, serve(s, "GET", "/v2/auth/roles", ""), 200, `{"roles":[`+rootJSON+`]}`+"\n", jsonHeaders)
	checkAnswer(t, serve(s, "GET", "/v2/auth/users?%zz", ""), 500, `{"message":"Internal Server Error"}`, jsonHeaders)
	w := serve(s, "PUT", "/v2/auth/users", "")
	checkAnswer(t, w, 405, "Method Not Allowed\n", map[string]string{"Allow": "GET",
		"Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff"})
}

func TestAuthGetUserAndRole(t *testing.T) {
	fa := &fakeAuth{state: testState(), root: auth.Allow}
	s, _ := newAuthServer(t, fa)
	checkAnswer(t, serve(s, "GET", "/v2/auth/users/root", ""), 200, `{"user":"root","roles":[`+rootJSON+`]}`+"\n", jsonHeaders)
	checkAnswer(t, serve(s, "GET", "/v2/auth/users/bare/", ""), 200, `{"user":"bare"}`+"\n", jsonHeaders)
	checkAnswer(t, serve(s, "GET", "/v2/auth/users/x", ""), 404, `{"message":"auth: User x does not exist."}`, jsonHeaders)
	// A role deleted after it was granted fails the user's GET, as in v2.
	checkAnswer(t, serve(s, "GET", "/v2/auth/users/u", ""), 404, `{"message":"auth: Role gone does not exist."}`, jsonHeaders)
	checkAnswer(t, serve(s, "GET", "/v2/auth/roles/r", ""), 200, rJSON+"\n", jsonHeaders)
	checkAnswer(t, serve(s, "GET", "/v2/auth/roles/root", ""), 200, rootJSON+"\n", jsonHeaders)
	checkAnswer(t, serve(s, "GET", "/v2/auth/roles/guest", ""), 404, `{"message":"auth: Role guest does not exist."}`, jsonHeaders)
	for _, p := range []string{"/v2/auth/users/a/b", "/v2/auth/roles/a/b/"} {
		checkAnswer(t, serve(s, "POST", p, ""), 400, `{"message":"Invalid path"}`, plainHeaders)
	}
	for _, p := range []string{"/v2/auth", "/v2/auth/", "/v2/auth/enable/", "/v2/auth/other", "/v2/auth/usersx"} {
		if w := serve(s, "GET", p, ""); w.Code != 404 || w.Body.String() != "404 page not found\n" {
			t.Errorf("GET %s: %d %q, want a plain 404", p, w.Code, w.Body)
		}
	}
	w := serve(s, "POST", "/v2/auth/roles/r", "")
	checkAnswer(t, w, 405, "Method Not Allowed\n", map[string]string{"Allow": "GET,PUT,DELETE",
		"Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff"})
}

func TestAuthPutUser(t *testing.T) {
	fa := &fakeAuth{state: testState(), root: auth.Allow}
	s, _ := newAuthServer(t, fa)
	for _, c := range []struct {
		name, body string
		out        auth.User
		created    bool
		status     int
		want       string
	}{
		{"create without roles", `{"user":"n","password":"p"}`, auth.User{User: "n", Password: "hash"}, true,
			201, `{"user":"n","roles":null}`},
		{"create with roles", `{"user":"n","password":"p","roles":["r"]}`,
			auth.User{User: "n", Password: "hash", Roles: []string{"r"}}, true, 200, `{"user":"n","roles":["r"]}`},
		{"update", `{"user":"n","password":"p2","grant":["r"]}`,
			auth.User{User: "n", Password: "hash", Roles: []string{"r"}, Grant: []string{"r"}}, false, 200,
			`{"user":"n","roles":["r"]}`},
		{"root holds root", `{"user":"root","password":"p"}`, auth.User{User: "root", Password: "hash"}, true,
			201, `{"user":"root","roles":["root"]}`},
		{"root updated as stored", `{"user":"root","revoke":["root"]}`,
			auth.User{User: "root", Password: "hash", Roles: []string{}}, false, 200, `{"user":"root","roles":[]}`},
	} {
		fa.putUser, fa.created = c.out, c.created
		name := strings.SplitN(strings.SplitN(c.body, `"user":"`, 2)[1], `"`, 2)[0]
		checkAnswer(t, serve(s, "PUT", "/v2/auth/users/"+name, c.body), c.status, c.want+"\n", jsonHeaders)
	}
	if want := (auth.User{User: "root", Revoke: []string{"root"}}); !reflect.DeepEqual(fa.gotUser, want) {
		t.Errorf("store got %+v, want %+v", fa.gotUser, want)
	}
	fa.mutated = nil
	for _, c := range []struct{ body, msg string }{
		{`{"user":"n"`, "Invalid JSON in request body."},
		{`{"user":"n","roles":"r"}`, "Invalid JSON in request body."},
		{"", "Invalid JSON in request body."},
		{`{"user":"` + strings.Repeat("n", maxAuthBody) + `"}`, "Invalid JSON in request body."},
		{`{"user":"m","password":"p"}`, "User JSON name does not match the name in the URL"},
		{`{"password":"p"}`, "User JSON name does not match the name in the URL"},
		{`{"user":"n","roles":["r"],"revoke":["r"]}`, "User JSON contains both roles and grant/revoke"},
	} {
		checkAnswer(t, serve(s, "PUT", "/v2/auth/users/n", c.body), 400, `{"message":"`+c.msg+`"}`, jsonHeaders)
	}
	if len(fa.mutated) != 0 {
		t.Errorf("refused requests reached the store: %q", fa.mutated)
	}
	fa.err = &auth.Error{Status: 409, Message: "auth: User n already exists."}
	checkAnswer(t, serve(s, "PUT", "/v2/auth/users/n", `{"user":"n","password":"p","roles":["r"]}`), 409,
		`{"message":"auth: User n already exists."}`, jsonHeaders)
	fa.err = errUnavailable
	checkAnswer(t, serve(s, "PUT", "/v2/auth/users/n", `{"user":"n","password":"p"}`), 500,
		v2ErrorJSON(300, "Raft Internal Error", errUnavailable.Error(), 0),
		map[string]string{"Content-Type": "application/json", "X-Etcd-Cluster-Id": "abc", "X-Etcd-Index": "0"})
	fa.err = nil
	checkAnswer(t, serve(s, "DELETE", "/v2/auth/users/n", ""), 200, "", jsonHeaders)
	fa.err = &auth.Error{Status: 403, Message: "auth: Cannot delete root user while auth is enabled."}
	checkAnswer(t, serve(s, "DELETE", "/v2/auth/users/root", ""), 403,
		`{"message":"auth: Cannot delete root user while auth is enabled."}`, jsonHeaders)
	if want := []string{"putUser n", "putUser n", "deleteUser n", "deleteUser root"}; !reflect.DeepEqual(fa.mutated, want) {
		t.Errorf("mutations %q, want %q", fa.mutated, want)
	}
}

func TestAuthPutRole(t *testing.T) {
	fa := &fakeAuth{state: testState(), root: auth.Allow}
	s, _ := newAuthServer(t, fa)
	// A create answers with the role as sent.
	fa.putRole, fa.created = auth.Role{Role: "n", Permissions: auth.Permissions{KV: auth.RWPermission{
		Read: []string{"/a"}, Write: []string{}}}}, true
	checkAnswer(t, serve(s, "PUT", "/v2/auth/roles/n", `{"role":"n","permissions":{"kv":{"read":["/a"]}}}`), 201,
		`{"role":"n","permissions":{"kv":{"read":["/a"],"write":null}}}`+"\n", jsonHeaders)
	checkAnswer(t, serve(s, "PUT", "/v2/auth/roles/n", `{"role":"n","grant":{"kv":{}}}`), 201,
		`{"role":"n","permissions":{"kv":{"read":null,"write":null}},"grant":{"kv":{"read":null,"write":null}}}`+"\n",
		jsonHeaders)
	// An update answers with the role as it is now.
	fa.putRole, fa.created = auth.Role{Role: "n", Permissions: auth.Permissions{KV: auth.RWPermission{
		Read: []string{"/a"}, Write: []string{"/b"}}}, Grant: &auth.Permissions{}}, false
	checkAnswer(t, serve(s, "PUT", "/v2/auth/roles/n", `{"role":"n","grant":{"kv":{"write":["/b"]}}}`), 200,
		`{"role":"n","permissions":{"kv":{"read":["/a"],"write":["/b"]}}}`+"\n", jsonHeaders)
	want := auth.Role{Role: "n", Grant: &auth.Permissions{KV: auth.RWPermission{Write: []string{"/b"}}}}
	if !reflect.DeepEqual(fa.gotRole, want) {
		t.Errorf("store got %+v, want %+v", fa.gotRole, want)
	}
	fa.mutated = nil
	for _, c := range []struct{ body, msg string }{
		{`[`, "Invalid JSON in request body."},
		{`{"role":"m"}`, "Role JSON name does not match the name in the URL"},
		{`{"role":"n","permissions":{"kv":{"read":["/a"]}},"revoke":{"kv":{"read":["/a"]}}}`,
			"Role JSON contains both permissions and grant/revoke"},
	} {
		checkAnswer(t, serve(s, "PUT", "/v2/auth/roles/n", c.body), 400, `{"message":"`+c.msg+`"}`, jsonHeaders)
	}
	if len(fa.mutated) != 0 {
		t.Errorf("refused requests reached the store: %q", fa.mutated)
	}
	fa.err = &auth.Error{Status: 403, Message: "auth: Cannot modify role root: is root role."}
	checkAnswer(t, serve(s, "PUT", "/v2/auth/roles/root", `{"role":"root"}`), 403,
		`{"message":"auth: Cannot modify role root: is root role."}`, jsonHeaders)
	checkAnswer(t, serve(s, "DELETE", "/v2/auth/roles/root", ""), 403,
		`{"message":"auth: Cannot modify role root: is root role."}`, jsonHeaders)
	fa.err = nil
	checkAnswer(t, serve(s, "DELETE", "/v2/auth/roles/n", ""), 200, "", jsonHeaders)
	if want := []string{"putRole root", "deleteRole root", "deleteRole n"}; !reflect.DeepEqual(fa.mutated, want) {
		t.Errorf("mutations %q, want %q", fa.mutated, want)
	}
}

func TestKeysAreCheckedAsV2CheckedThem(t *testing.T) {
	fa := &fakeAuth{state: testState(), keys: auth.Allow}
	s, st := newAuthServer(t, fa)
	st.getEv = &translate.Event{Action: "get", EtcdIndex: 4}
	st.writeEv = &translate.Event{Action: "set", EtcdIndex: 4}
	fw := newFakeWatch(4, 1)
	fw.events <- &translate.Event{Action: "set"}
	st.watch = fw
	for _, c := range []struct {
		method, target string
		want           keyCheck
	}{
		{"GET", "/v2/keys/foo/bar", keyCheck{"/foo/bar", false, false}},
		{"HEAD", "/v2/keys/foo", keyCheck{"/foo", false, false}},
		{"GET", "/v2/keys/foo/?recursive=true", keyCheck{"/foo/", true, false}},
		{"GET", "/v2/keys?recursive=true", keyCheck{"", true, false}},
		{"GET", "/v2/keys/foo?wait=true&recursive=true", keyCheck{"/foo", true, false}},
		{"PUT", "/v2/keys/foo?value=1", keyCheck{"/foo", false, true}},
		{"POST", "/v2/keys/q", keyCheck{"/q", false, true}},
		{"DELETE", "/v2/keys/d?dir=true", keyCheck{"/d", false, true}},
		{"DELETE", "/v2/keys/d?recursive=true", keyCheck{"/d", true, true}},
		{"GET", "/v2/keys/a%20b", keyCheck{"/a b", false, false}},
	} {
		fa.checks = nil
		if w := serve(s, c.method, c.target, ""); w.Code >= 300 {
			t.Errorf("%s %s: %d %s", c.method, c.target, w.Code, w.Body)
		}
		if want := []keyCheck{c.want}; !reflect.DeepEqual(fa.checks, want) {
			t.Errorf("%s %s: checks %+v, want %+v", c.method, c.target, fa.checks, want)
		}
	}
	// A request that does not parse is refused before any check.
	fa.checks = nil
	serve(s, "GET", "/v2/keys/a?recursive=maybe", "")
	if len(fa.checks) != 0 {
		t.Errorf("an unparsed request was checked: %+v", fa.checks)
	}
}

func TestKeysDeniedOrUnavailableNeverReachTheStore(t *testing.T) {
	fa := &fakeAuth{state: testState(), keys: auth.Deny}
	s, st := newAuthServer(t, fa)
	v2err := map[string]string{"Content-Type": "application/json", "X-Etcd-Cluster-Id": "abc", "X-Etcd-Index": "0"}
	for _, target := range []string{"/v2/keys/a", "/v2/keys/a?wait=true"} {
		checkAnswer(t, serve(s, "GET", target, ""), 401,
			v2ErrorJSON(110, "The request requires user authentication", "Insufficient credentials", 0), v2err)
	}
	checkAnswer(t, serve(s, "PUT", "/v2/keys/a", "value=1"), 401,
		v2ErrorJSON(110, "The request requires user authentication", "Insufficient credentials", 0), v2err)
	fa.keys = auth.Unavailable
	checkAnswer(t, serve(s, "DELETE", "/v2/keys/a", ""), 500, unavailable, v2err)
	if cs := st.recorded(); len(cs) != 0 {
		t.Errorf("refused requests reached the store: %+v", cs)
	}
	body := serve(s, "GET", "/metrics", "").Body.String()
	for _, line := range []string{
		`v2bridge_http_requests_total{action="error",code="401",method="GET"} 2`,
		`v2bridge_http_requests_total{action="error",code="401",method="PUT"} 1`,
		`v2bridge_http_requests_total{action="error",code="500",method="DELETE"} 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("metrics lack %s", line)
		}
	}
}
