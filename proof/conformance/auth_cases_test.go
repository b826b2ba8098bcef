// SPDX-License-Identifier: Apache-2.0

package conformance

import (
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/v2bridge/v2bridge/migrate/v2diff"
)

// The auth cases: v2's auth API and authenticated key requests. Auth is
// global to a server, so each case starts and ends with auth disabled and
// no user or role stored (clearAuth), and the other cases never see it.

// authPath is a path of the auth API.
func authPath(sub string) string { return "/v2/auth" + sub }

// authReq is a request of the auth API with a JSON body.
func authReq(method, sub, body string) step {
	st := step{Method: method, Path: authPath(sub), RawBody: body}
	if body != "" {
		st.ContentType = "application/json"
	}
	return st
}

// password is the password the cases give user.
func password(user string) string { return user + "-pw" }

// basic is an HTTP basic Authorization header.
func basic(user, pw string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))
}

// as sends the step with user's credentials; authz with a raw header.
func (s step) as(user string) step      { s.Authorization = basic(user, password(user)); return s }
func (s step) authz(header string) step { s.Authorization = header; return s }

// newUser creates user with roles (201 without roles, 200 with: v2's
// answers).
func newUser(user string, roles ...string) step {
	body := fmt.Sprintf(`{"user":%q,"password":%q}`, user, password(user))
	status := 201
	if len(roles) > 0 {
		body = fmt.Sprintf(`{"user":%q,"password":%q,"roles":%s}`, user, password(user), jsonList(roles))
		status = 200
	}
	return authReq("PUT", "/users/"+user, body).as("root").want(status)
}

// newRole creates role with read and write patterns.
func newRole(role string, read, write []string) step {
	return authReq("PUT", "/roles/"+role, fmt.Sprintf(`{"role":%q,"permissions":{"kv":{"read":%s,"write":%s}}}`,
		role, jsonList(read), jsonList(write))).as("root").want(201)
}

func jsonList(l []string) string {
	out := "["
	for i, s := range l {
		if i > 0 {
			out += ","
		}
		out += fmt.Sprintf("%q", s)
	}
	return out + "]"
}

// enableAuth creates root and enables auth.
func enableAuth() []step {
	return []step{newUser("root"), authReq("PUT", "/enable", "").as("root").want(200)}
}

func denied(s step) step { return s.want(401) }

// keyDenied is a keys request v2 refuses with error 110.
func keyDenied(s step) step { return s.want(401).code(110) }

func authCases() []scriptCase {
	var cs []scriptCase
	add := func(c ...scriptCase) { cs = append(cs, c...) }
	with := func(steps ...[]step) []step {
		var out []step
		for _, s := range steps {
			out = append(out, s...)
		}
		return out
	}

	add(scriptCase{Name: "auth api with auth disabled", Steps: []step{
		authReq("GET", "/enable", "").want(200),
		authReq("GET", "/users", "").want(200),
		authReq("GET", "/users/", "").want(200),
		authReq("GET", "/roles", "").want(200),
		authReq("GET", "/roles/", "").want(200),
		authReq("GET", "/users/nobody", "").want(404),
		authReq("GET", "/roles/root", "").want(200),
		authReq("GET", "/roles/guest", "").want(404),
		authReq("GET", "/users/a/b", "").want(400),
		authReq("DELETE", "/roles/a/b/c", "").want(400),
		authReq("GET", "/users/a/", "").want(404),
		authReq("POST", "/users", "").want(405),
		authReq("HEAD", "/roles", "").want(405),
		authReq("POST", "/users/a", "").want(405),
		authReq("PATCH", "/roles/a", "").want(405),
		authReq("POST", "/enable", "").want(405),
		authReq("HEAD", "/enable", "").want(405),
		authReq("PUT", "/enable", "").want(409),
		authReq("DELETE", "/enable", "").want(409),
		raw("GET", "/v2/auth").want(404),
		raw("GET", "/v2/auth/").want(404),
		raw("GET", "/v2/auth/enable/").want(404),
		raw("GET", "/v2/auth/other").want(404),
		raw("GET", "/v2/auth/users?%zz").want(500),
		raw("GET", "//v2/auth/users").want(307).expect("redirect-status"),
		raw("GET", "/v2/auth/users/a/../b").want(307).expect("redirect-status"),
	}})

	add(scriptCase{Name: "users", Steps: []step{
		newRole("r1", []string{"/a/*"}, nil),
		newUser("u1"),
		authReq("PUT", "/users/u1", `{"user":"u1","password":"other"}`).want(200),
		newUser("u2", "r1"),
		authReq("PUT", "/users/u2", `{"user":"u2","password":"p","roles":["r1"]}`).want(409),
		authReq("PUT", "/users/u1", `{"user":"u1","grant":["r1"]}`).want(200),
		authReq("PUT", "/users/u1", `{"user":"u1","grant":["r1"]}`).want(409),
		authReq("PUT", "/users/u1", `{"user":"u1","revoke":["r9"]}`).want(409),
		authReq("PUT", "/users/u1", `{"user":"u1","grant":["r9"],"revoke":["r1"]}`).want(200),
		authReq("PUT", "/users/u1", `{"user":"u1","revoke":["r9"]}`).want(200),
		authReq("PUT", "/users/u1", `{"user":"u1"}`).want(400),
		authReq("PUT", "/users/u3", `{"user":"u3"}`).want(400),
		authReq("PUT", "/users/u3", `{"user":"u3","grant":["r1"]}`).want(404),
		authReq("PUT", "/users/u3", `{"user":"u3","password":"p","roles":["r1"],"grant":["r1"]}`).want(400),
		authReq("PUT", "/users/u3", `{"user":"u4","password":"p"}`).want(400),
		authReq("PUT", "/users/u3", `{"password":"p"}`).want(400),
		authReq("PUT", "/users/u3", `{"user":"u3","password":`).want(400),
		authReq("PUT", "/users/u3", `{"user":"u3","roles":"r1"}`).want(400),
		authReq("PUT", "/users/u3", "").want(400),
		authReq("PUT", "/users/u3", `{"user":"u3","password":"p","roles":["missing"]}`).want(200),
		authReq("GET", "/users/u3", "").want(404),
		authReq("GET", "/users", "").want(200),
		authReq("GET", "/users/u2", "").want(200),
		authReq("GET", "/users/u1/", "").want(200),
		newUser("root"),
		authReq("GET", "/users/root", "").want(200),
		authReq("PUT", "/users/root", `{"user":"root","revoke":["root"]}`).want(200),
		authReq("GET", "/users/root", "").want(200),
		authReq("DELETE", "/users/u2", "").want(200),
		authReq("DELETE", "/users/u2", "").want(404),
		authReq("GET", "/users/u2", "").want(404),
		authReq("DELETE", "/users/root", "").want(200),
		authReq("GET", "/users", "").want(200),
	}})

	add(scriptCase{Name: "odd names", Steps: []step{
		authReq("PUT", "/users/a%2Fb", `{"user":"a/b","password":"p"}`).want(400),
		authReq("GET", "/roles/a%2Fb", "").want(400),
		authReq("PUT", "/users/a%20b", `{"user":"a b","password":"p"}`).want(201),
		authReq("GET", "/users/a%20b", "").want(200),
		authReq("PUT", "/roles/%C3%A9t%C3%A9", `{"role":"été"}`).want(201),
		authReq("PUT", "/users/a%20b", `{"user":"a b","grant":["été"]}`).want(200),
		authReq("GET", "/users", "").want(200),
		authReq("GET", "/roles", "").want(200),
		authReq("PUT", "/users/x?y=1", `{"user":"x","password":"p"}`).want(201),
		authReq("PUT", "/users/ROOT", `{"user":"ROOT","password":"p"}`).want(201),
		authReq("GET", "/users/ROOT", "").want(200),
		authReq("DELETE", "/users/a%20b", "").want(200),
		authReq("DELETE", "/roles/%C3%A9t%C3%A9", "").want(200),
	}})

	add(scriptCase{Name: "roles", Steps: []step{
		authReq("PUT", "/roles/r1", `{"role":"r1","permissions":{"kv":{"read":["/a/*"]}}}`).want(201),
		authReq("PUT", "/roles/r1", `{"role":"r1","permissions":{"kv":{"read":["/b"]}}}`).want(409),
		authReq("PUT", "/roles/r1", `{"role":"r1","grant":{"kv":{"write":["/a/*","/c"]}}}`).want(200),
		authReq("PUT", "/roles/r1", `{"role":"r1","grant":{"kv":{"write":["/c"]}}}`).want(409),
		authReq("PUT", "/roles/r1", `{"role":"r1","revoke":{"kv":{"read":["/a/*"],"write":["/zz"]}}}`).want(200),
		authReq("PUT", "/roles/r1", `{"role":"r1","revoke":{"kv":{"read":["/zz"]}}}`).want(400),
		authReq("PUT", "/roles/r1", `{"role":"r1","permissions":{"kv":{"read":["/a"]}},"grant":{"kv":{"read":["/b"]}}}`).want(400),
		authReq("PUT", "/roles/r1", `{"role":"r2"}`).want(400),
		authReq("PUT", "/roles/r1", `{"role":"r1"`).want(400),
		authReq("PUT", "/roles/r2", `{"role":"r2","grant":{"kv":{"read":["/b"]}}}`).want(404),
		authReq("PUT", "/roles/r3", `{"role":"r3"}`).want(201),
		authReq("PUT", "/roles/r4", `{"role":"r4","grant":{"kv":{}}}`).want(201),
		authReq("PUT", "/roles/root", `{"role":"root"}`).want(403),
		authReq("PUT", "/roles/root", `{"role":"root","grant":{"kv":{"read":["/x"]}}}`).want(403),
		authReq("DELETE", "/roles/root", "").want(403),
		authReq("PUT", "/roles/guest", `{"role":"guest","permissions":{"kv":{"read":["/*"]}}}`).want(201),
		authReq("GET", "/roles", "").want(200),
		authReq("GET", "/roles/r1", "").want(200),
		authReq("GET", "/roles/r3", "").want(200),
		authReq("DELETE", "/roles/r1", "").want(200),
		authReq("DELETE", "/roles/r1", "").want(404),
		authReq("GET", "/roles/r1", "").want(404),
		authReq("GET", "/roles", "").want(200),
	}})

	add(scriptCase{Name: "enable and disable", Steps: with(
		[]step{authReq("PUT", "/enable", "").as("root").want(409), newUser("u1")},
		enableAuth(),
		[]step{
			authReq("GET", "/enable", "").want(200),
			authReq("PUT", "/enable", "").as("root").want(409),
			denied(authReq("PUT", "/enable", "")),
			denied(authReq("GET", "/users", "")),
			denied(authReq("GET", "/roles", "").authz(basic("root", "wrong"))),
			denied(authReq("GET", "/roles/root", "").authz(basic("nobody", "x"))),
			denied(authReq("GET", "/users/u1", "").authz("Bearer token")),
			denied(authReq("GET", "/users/u1", "").authz("Basic !!!")),
			denied(authReq("GET", "/users", "").as("u1")),
			denied(authReq("PUT", "/users/u2", `{"user":"u2","password":"p"}`).as("u1")),
			denied(authReq("DELETE", "/enable", "").as("u1")),
			denied(raw("POST", "/v2/members").body(`{"peerURLs":["http://10.9.9.9:2380"]}`, "application/json")),
			denied(raw("DELETE", "/v2/members/1234").as("u1")),
			authReq("GET", "/roles", "").as("root").want(200),
			authReq("GET", "/users", "").as("root").want(200),
			authReq("DELETE", "/users/root", "").as("root").want(403),
			authReq("GET", "/users/a/b", "").want(400),
			authReq("POST", "/users", "").want(405),
			authReq("DELETE", "/enable", "").as("root").want(200),
			authReq("GET", "/enable", "").want(200),
			authReq("DELETE", "/enable", "").as("root").want(409),
			authReq("GET", "/roles/guest", "").want(200),
		},
	)})

	add(scriptCase{Name: "keys under the default guest", Steps: with(enableAuth(), []step{
		newUser("norole"),
		put("/a", "value", "1").want(201),
		get("/a").want(200),
		get("/a").as("root").want(200),
		keyDenied(get("/a").authz(basic("root", "wrong"))),
		keyDenied(get("/a").authz(basic("nobody", "x"))),
		keyDenied(get("/a").authz("Basic !!!")),
		keyDenied(put("/a", "value", "2").authz("Bearer token")),
		keyDenied(get("/a").as("norole")),
		head("/a").as("norole").want(401), // no body to carry the code
		get("/a", "recursive", "true").want(200),
		// The key checked is the path as sent: "" is not under "/*".
		keyDenied(get("", "recursive", "true")),
		get("/", "recursive", "true").want(200),
		del("/a").want(200),
		// A request that does not parse is refused before it is checked.
		get("/a", "recursive", "maybe").authz("Bearer token").want(400),
		watch("w", "/a").authz("Bearer token").want(401),
	})})

	guest := func(body string) step { return authReq("PUT", "/roles/guest", body).as("root").want(200) }
	add(scriptCase{Name: "keys under a restricted guest", May: []string{"set-created-index"}, Steps: with(enableAuth(), []step{
		put("/a/b", "value", "1").as("root").want(201),
		guest(`{"role":"guest","revoke":{"kv":{"write":["/*"]}}}`),
		keyDenied(put("/a/b", "value", "2")),
		keyDenied(post("/a")),
		keyDenied(del("/a/b")),
		get("/a/b").want(200),
		head("/a/b").want(200),
		get("/a", "recursive", "true").want(200),
		watch("w", "/a", "recursive", "true").want(200),
		put("/a/b", "value", "3").as("root").want(200),
		await("w"),
		guest(`{"role":"guest","revoke":{"kv":{"read":["/*"]}}}`),
		keyDenied(get("/a/b")),
		keyDenied(get("/a", "recursive", "true")),
		watch("w2", "/a/b").want(401).code(110),
		guest(`{"role":"guest","grant":{"kv":{"read":["/a/b"]}}}`),
		get("/a/b").want(200),
		// v2 held the guest to its key patterns even on a recursive
		// request.
		get("/a/b", "recursive", "true").want(200),
		keyDenied(get("/a/b/")),
		authReq("DELETE", "/roles/guest", "").as("root").want(200),
		keyDenied(get("/a/b")),
		get("/a/b").as("root").want(200),
	})})

	add(scriptCase{Name: "keys of a user with prefix read", Steps: with(enableAuth(), []step{
		newRole("ro", []string{"/foo/*"}, nil),
		newUser("u", "ro"),
		authReq("PUT", "/roles/guest", `{"role":"guest","revoke":{"kv":{"read":["/*"],"write":["/*"]}}}`).
			as("root").want(200),
		put("/foo/a", "value", "1").as("root").want(201),
		put("/foo/d/e", "value", "1").as("root").want(201),
		get("/foo/a").as("u").want(200),
		head("/foo/a").as("u").want(200),
		get("/foo/d/e").as("u").want(200),
		get("/foo/nothing").as("u").want(404),
		get("/foo/").as("u").want(200),
		get("/foo/", "recursive", "true").as("u").want(200),
		get("/foo/d", "recursive", "true", "sorted", "true").as("u").want(200),
		keyDenied(get("/foo").as("u")),
		keyDenied(get("/foo", "recursive", "true").as("u")),
		keyDenied(get("/").as("u")),
		keyDenied(get("").as("u")),
		keyDenied(get("/foobar").as("u")),
		keyDenied(put("/foo/a", "value", "2").as("u")),
		keyDenied(post("/foo/q", "value", "2").as("u")),
		keyDenied(del("/foo/a").as("u")),
		keyDenied(put("/foo/a", "value", "2", "prevValue", "1").as("u")),
		watch("w1", "/foo/a").as("u").want(200),
		watch("w2", "/foo/", "recursive", "true").as("u").want(200),
		watch("w3", "/foo", "recursive", "true").as("u").want(401).code(110),
		watch("s1", "/foo/", "recursive", "true", "stream", "true").as("u").want(200),
		watch("s2", "/foo", "recursive", "true", "stream", "true").as("u").want(401).code(110),
		put("/foo/a", "value", "2").as("root").want(200),
		await("w1"), await("w2"), await("s1"),
		// A running watch is not checked again: v2 checked it once, when it
		// started.
		watch("w4", "/foo/d/e").as("u").want(200),
		authReq("PUT", "/roles/ro", `{"role":"ro","revoke":{"kv":{"read":["/foo/*"]}}}`).as("root").want(200),
		keyDenied(get("/foo/d/e").as("u")),
		put("/foo/d/e", "value", "2").as("root").want(200),
		await("w4"),
		watch("w5", "/foo/d/e").as("u").want(401).code(110),
	})})

	add(scriptCase{Name: "keys of a user with exact patterns", Steps: with(enableAuth(), []step{
		newRole("ex", []string{"/bar", "/q", "/d"}, []string{"/bar", "/q", "/d"}),
		newUser("u", "ex"),
		authReq("PUT", "/roles/guest", `{"role":"guest","revoke":{"kv":{"read":["/*"],"write":["/*"]}}}`).
			as("root").want(200),
		put("/bar", "value", "1").as("u").want(201),
		get("/bar").as("u").want(200),
		put("/bar", "value", "2", "prevValue", "1").as("u").want(200),
		keyDenied(get("/bar", "recursive", "true").as("u")),
		// v2 checked any request asking recursive=true as recursive, a
		// write's included.
		keyDenied(put("/bar", "value", "3", "recursive", "true").as("u")),
		keyDenied(post("/q", "value", "x", "recursive", "true").as("u")),
		keyDenied(put("/bar/x", "value", "1").as("u")),
		keyDenied(get("/bar/").as("u")),
		del("/bar", "prevIndex", "1").as("u").want(412),
		del("/bar").as("u").want(200),
		// In-order creation is a write of the directory.
		post("/q", "value", "job").as("u").want(201).save("job"),
		get("/q").as("u").want(200),
		keyDenied(get("/q", "recursive", "true").as("u")),
		keyDenied(get("/q", "recursive", "true", "sorted", "true").as("u")),
		// Directory operations: a non-recursive delete is a write of the
		// key; a recursive one needs a pattern covering everything below.
		put("/d", "dir", "true").as("u").want(201),
		get("/d").as("u").want(200),
		keyDenied(del("/d", "recursive", "true").as("u")),
		keyDenied(del("/d", "dir", "true", "recursive", "true").as("u")),
		watch("w", "/d").as("u").want(200),
		keyDenied(watch("w2", "/d", "recursive", "true").as("u")),
		del("/d", "dir", "true").as("u").want(200),
		await("w"),
		put("/d", "dir", "true").as("u").want(201),
		authReq("PUT", "/roles/ex", `{"role":"ex","grant":{"kv":{"read":["/d/*"],"write":["/d/*"]}}}`).
			as("root").want(200),
		put("/d/x", "value", "1").as("u").want(201),
		// "/d/*" covers everything below "/d/", not "/d" itself.
		keyDenied(get("/d", "recursive", "true").as("u")),
		get("/d/", "recursive", "true").as("u").want(200),
		del("/d/", "recursive", "true").as("u").want(200),
	})})
	return cs
}

// runAuthCase runs c between two clearings of the servers' auth data.
func (e *env) runAuthCase(t *testing.T, c scriptCase) {
	e.clearAuth(t)
	defer e.clearAuth(t)
	e.runCase(t, c)
}

// clearAuth disables auth and deletes every user and role on both servers
// (not compared), as root with the cases' password.
func (e *env) clearAuth(t *testing.T) {
	t.Helper()
	ctx, cancel := ctxFor(t, requestTimeout)
	defer cancel()
	root := basic("root", password("root"))
	for _, srv := range e.pair {
		do := func(method, p string, ok ...int) *v2diff.Response {
			resp, err := srv.Do(ctx, &v2diff.Request{Method: method, Path: p, Authorization: root})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range ok {
				if resp.Status == s {
					return resp
				}
			}
			t.Fatalf("%s: clearing auth: %s %s: %s", srv.Side, method, p, resp)
			return nil
		}
		do("DELETE", authPath("/enable"), 200, 409)
		users, _ := v2diff.DecodeJSON(do("GET", authPath("/users"), 200).Body).(map[string]any)
		list, _ := users["users"].([]any)
		for _, u := range list {
			um, _ := u.(map[string]any)
			do("DELETE", authPath("/users/"+str(um["user"])), 200)
		}
		roles, _ := v2diff.DecodeJSON(do("GET", authPath("/roles"), 200).Body).(map[string]any)
		list, _ = roles["roles"].([]any)
		for _, r := range list {
			rm, _ := r.(map[string]any)
			if name := str(rm["role"]); name != "root" {
				do("DELETE", authPath("/roles/"+name), 200)
			}
		}
	}
}
