// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// Tenants of one etcd cluster: flannel's bridges serve /coreos.com/network,
// another tenant's serve /other. Each tenant's v2 auth is its own.

const (
	flannelConfig = `{"Network":"10.5.0.0/16","Backend":{"Type":"vxlan"}}`
	mallorysPass  = "m4llory-Pa55"
	flannelPass   = "fl4nnel-Pa55"
)

// TestTenantsAuthApart: every attack on flannel's bridge through the other
// tenant's bridge is refused or has no effect there: making root, turning
// auth on, taking the guest's rights, granting itself a role over
// /coreos.com/network, reading and writing flannel's keys, listing
// flannel's users and roles. A second bridge serving flannel's subtree
// shares flannel's users, roles and flag.
func TestTenantsAuthApart(t *testing.T) {
	bound(t)
	cl := v2bridgetest.StartCluster(t, 1)
	flannel := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{Auth: true, Served: []string{"/coreos.com/network"}}).URL
	other := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{Auth: true, Served: []string{"/other"}}).URL
	waitAuthServed(t, httpClient, flannel)
	waitAuthServed(t, httpClient, other)
	if r := authDo(t, "PUT", flannel, "/v2/keys/coreos.com/network/config", "", "", "value="+flannelConfig); r.status != 201 {
		t.Fatalf("flannel's config: %d %s", r.status, r.body)
	}
	lease := "/v2/keys/coreos.com/network/subnets/10.5.1.0-24"
	if r := authDo(t, "PUT", flannel, lease, "", "", "value=node1&ttl=60"); r.status != 201 {
		t.Fatalf("flannel's lease: %d %s", r.status, r.body)
	}
	// flannelWorks: flannel, without credentials, reads its config and
	// renews its lease, and flannel's bridge has auth off with no user.
	flannelWorks := func(what string) {
		t.Helper()
		if r := authDo(t, "GET", flannel, "/v2/keys/coreos.com/network/config", "", "", ""); r.status != 200 {
			t.Errorf("%s: flannel's config read: %d %s", what, r.status, r.body)
		} else if _, key, value := keysNode(t, r); key != "/coreos.com/network/config" || value != flannelConfig {
			t.Errorf("%s: flannel's config read %s = %s", what, key, value)
		}
		if r := authDo(t, "PUT", flannel, lease+"?prevExist=true", "", "", "value=node1&ttl=60"); r.status != 200 {
			t.Errorf("%s: flannel's lease renewal: %d %s", what, r.status, r.body)
		}
		expectAuthAnswer(t, what+": flannel's flag", authDo(t, "GET", flannel, "/v2/auth/enable", "", "", ""), 200, `{"enabled":false}`)
		expectAuthAnswer(t, what+": flannel's users", authDo(t, "GET", flannel, "/v2/auth/users", "", "", ""), 200, `{"users":null}`)
	}
	flannelWorks("before")

	// The other tenant makes root, turns auth on and takes the guest's
	// rights: its own bridge only.
	for _, s := range []struct{ method, path, user, body string }{
		{"PUT", "/v2/auth/users/root", "", `{"user":"root","password":"` + mallorysPass + `"}`},
		{"PUT", "/v2/auth/enable", "", ""},
		{"PUT", "/v2/auth/roles/guest", "root", `{"role":"guest","revoke":{"kv":{"read":["/*"],"write":["/*"]}}}`},
		{"PUT", "/v2/auth/roles/net", "root", `{"role":"net","permissions":{"kv":{"read":["/coreos.com/network/*"],"write":["/coreos.com/network/*"]}}}`},
		{"PUT", "/v2/auth/users/mallory", "root", `{"user":"mallory","password":"` + mallorysPass + `","roles":["net","root"]}`},
	} {
		if r := authDo(t, s.method, other, s.path, s.user, mallorysPass, s.body); r.status/100 != 2 {
			t.Fatalf("the other tenant's %s %s: %d %s", s.method, s.path, r.status, r.body)
		}
	}
	expectKeysDenied(t, "the other tenant's bridge, no credentials", authDo(t, "GET", other, "/v2/keys/other/x", "", "", ""))
	time.Sleep(200 * time.Millisecond) // a change at a bridge of the same key space would have arrived
	flannelWorks("after the other tenant's root, auth and guest")

	// Its root and its role over /coreos.com/network reach nothing of
	// flannel's through its own bridge: not found (no credentials: refused,
	// as v2 refuses before it looks).
	for _, who := range []string{"root", "mallory"} {
		for _, m := range []struct{ method, body string }{{"GET", ""}, {"PUT", "value=x"}, {"DELETE", ""}} {
			r := authDo(t, m.method, other, "/v2/keys/coreos.com/network/config", who, mallorysPass, m.body)
			expectNotServed(t, who+" "+m.method+" through the other tenant's bridge", r, "/coreos.com/network/config", "/other")
		}
	}
	expectKeysDenied(t, "flannel's key through the other tenant's bridge, no credentials",
		authDo(t, "GET", other, "/v2/keys/coreos.com/network/config", "", "", ""))

	// Flannel turns its own auth on: its root, its user, no guest rights.
	for _, s := range []struct{ method, path, user, body string }{
		{"PUT", "/v2/auth/users/root", "", `{"user":"root","password":"` + flannelPass + `"}`},
		{"PUT", "/v2/auth/roles/flannel", "", `{"role":"flannel","permissions":{"kv":{"read":["/coreos.com/network/*"],"write":["/coreos.com/network/*"]}}}`},
		{"PUT", "/v2/auth/users/flannel", "", `{"user":"flannel","password":"` + flannelPass + `","roles":["flannel"]}`},
		{"PUT", "/v2/auth/enable", "", ""},
		{"PUT", "/v2/auth/roles/guest", "root", `{"role":"guest","revoke":{"kv":{"read":["/*"],"write":["/*"]}}}`},
	} {
		if r := authDo(t, s.method, flannel, s.path, s.user, flannelPass, s.body); r.status/100 != 2 {
			t.Fatalf("flannel's %s %s: %d %s", s.method, s.path, r.status, r.body)
		}
	}
	// The other tenant's credentials are nothing at flannel's bridge.
	for _, who := range []string{"root", "mallory"} {
		expectKeysDenied(t, who+" reads flannel's config", authDo(t, "GET", flannel, "/v2/keys/coreos.com/network/config", who, mallorysPass, ""))
		expectKeysDenied(t, who+" writes flannel's lease", authDo(t, "PUT", flannel, lease, who, mallorysPass, "value=evil"))
		expectAuthDenied(t, who+" turns flannel's auth off", authDo(t, "DELETE", flannel, "/v2/auth/enable", who, mallorysPass, ""))
		expectAuthDenied(t, who+" lists flannel's users", authDo(t, "GET", flannel, "/v2/auth/users", who, mallorysPass, ""))
		expectAuthDenied(t, who+" grants at flannel's", authDo(t, "PUT", flannel, "/v2/auth/users/mallory", who, mallorysPass,
			`{"user":"mallory","password":"x","roles":["root"]}`))
	}
	// The other tenant's bridge knows nothing of flannel's users and roles.
	expectUsers(t, "the other tenant's users", authDo(t, "GET", other, "/v2/auth/users", "root", mallorysPass, ""), "mallory", "root")
	expectAuthAnswer(t, "flannel's user at the other tenant's", authDo(t, "GET", other, "/v2/auth/users/flannel", "root", mallorysPass, ""),
		404, `{"message":"auth: User flannel does not exist."}`)
	expectAuthAnswer(t, "flannel's role at the other tenant's", authDo(t, "GET", other, "/v2/auth/roles/flannel", "root", mallorysPass, ""),
		404, `{"message":"auth: Role flannel does not exist."}`)

	// Flannel's user works; a second bridge serving flannel's subtree
	// shares its users, roles and flag.
	if r := authDo(t, "GET", flannel, "/v2/keys/coreos.com/network/config", "flannel", flannelPass, ""); r.status != 200 {
		t.Errorf("flannel's read with its credentials: %d %s", r.status, r.body)
	}
	flannel2 := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{Auth: true, Served: []string{"/coreos.com/network"}}).URL
	waitAuthServed(t, httpClient, flannel2)
	expectAuthAnswer(t, "flag at flannel's second bridge", authDo(t, "GET", flannel2, "/v2/auth/enable", "", "", ""), 200, `{"enabled":true}`)
	expectKeysDenied(t, "flannel's second bridge, no credentials", authDo(t, "GET", flannel2, "/v2/keys/coreos.com/network/config", "", "", ""))
	if r := authDo(t, "PUT", flannel2, lease+"?prevExist=true", "flannel", flannelPass, "value=node1&ttl=60"); r.status != 200 {
		t.Errorf("flannel's renewal at its second bridge: %d %s", r.status, r.body)
	}
	expectUsers(t, "users at flannel's second bridge", authDo(t, "GET", flannel2, "/v2/auth/users", "root", flannelPass, ""), "flannel", "root")
	// A change at one is at the other.
	if r := authDo(t, "DELETE", flannel2, "/v2/auth/users/flannel", "root", flannelPass, ""); r.status != 200 {
		t.Fatalf("deleting flannel's user at its second bridge: %d %s", r.status, r.body)
	}
	waitFor(t, 10*time.Second, "the deletion at flannel's first bridge", func() bool {
		return authDo(t, "GET", flannel, "/v2/keys/coreos.com/network/config", "flannel", flannelPass, "").status == 401
	})
}

// expectNotServed asserts the answer to key outside the served prefix.
func expectNotServed(t *testing.T, what string, r resp, key, served string) {
	t.Helper()
	want := `{"errorCode":100,"message":"Key not found","cause":"` + key + ` is outside the served prefix ` + served +
		` (--serve-prefix)","index":0}`
	if r.status != 404 || r.body != want || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("%s: %d %q, want 404 %s", what, r.status, r.body, want)
	}
}

// expectAuthAnswer asserts an answer of the auth API: status and body.
func expectAuthAnswer(t *testing.T, what string, r resp, status int, body string) {
	t.Helper()
	if r.status != status || r.body != body {
		t.Errorf("%s: %d %s, want %d %s", what, r.status, r.body, status, body)
	}
}

// expectUsers asserts a 200 list of the users of these names.
func expectUsers(t *testing.T, what string, r resp, names ...string) {
	t.Helper()
	var out struct{ Users []struct{ User string } }
	if err := json.Unmarshal([]byte(r.body), &out); r.status != 200 || err != nil {
		t.Errorf("%s: %d %s (%v)", what, r.status, r.body, err)
		return
	}
	var got []string
	for _, u := range out.Users {
		got = append(got, u.User)
	}
	if !slices.Equal(got, names) {
		t.Errorf("%s: users %q, want %q", what, got, names)
	}
}

// TestAuthDataPrefixesShareNoKey: bridges of the data prefixes "" and
// "/u" on one meta prefix keep their auth data apart: a user named
// "enabled" made at the first does not turn off the second's auth.
func TestAuthDataPrefixesShareNoKey(t *testing.T) {
	bound(t)
	cl := v2bridgetest.StartCluster(t, 1)
	top := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{Auth: true}).URL
	u := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{Auth: true, DataPrefix: "/u"}).URL
	waitAuthServed(t, httpClient, top)
	waitAuthServed(t, httpClient, u)
	authSetup(t, u, true)
	if r := authDo(t, "PUT", top, "/v2/auth/users/enabled", "", "", `{"user":"enabled","password":"x"}`); r.status != 201 {
		t.Fatalf("user enabled at data prefix \"\": %d %s", r.status, r.body)
	}
	time.Sleep(200 * time.Millisecond) // a change of the same key would have arrived
	expectAuthAnswer(t, "data prefix /u's flag", authDo(t, "GET", u, "/v2/auth/enable", "", "", ""), 200, `{"enabled":true}`)
	expectKeysDenied(t, "data prefix /u, no credentials", authDo(t, "GET", u, "/v2/keys/foo", "", "", ""))
}

// TestAuthUserNamedEnabled: a user named "enabled" stays when the bridges
// of another data prefix ("/u") turn their auth on.
func TestAuthUserNamedEnabled(t *testing.T) {
	bound(t)
	cl := v2bridgetest.StartCluster(t, 1)
	top := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{Auth: true}).URL
	u := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{Auth: true, DataPrefix: "/u"}).URL
	waitAuthServed(t, httpClient, top)
	waitAuthServed(t, httpClient, u)
	if r := authDo(t, "PUT", top, "/v2/auth/users/enabled", "", "", `{"user":"enabled","password":"x"}`); r.status != 201 {
		t.Fatalf("user enabled: %d %s", r.status, r.body)
	}
	authSetup(t, u, false)
	time.Sleep(200 * time.Millisecond) // a change of the same key would have arrived
	expectAuthAnswer(t, "the user enabled", authDo(t, "GET", top, "/v2/auth/users/enabled", "", "", ""), 200,
		`{"user":"enabled"}`)
	expectAuthAnswer(t, "data prefix \"\"'s flag", authDo(t, "GET", top, "/v2/auth/enable", "", "", ""), 200, `{"enabled":false}`)
}

// TestTenantAuthAdoptsTheSharedOne: the first bridge serving flannel's
// subtree starts with the users, roles and flag the bridges of its data
// prefix shared before (here: a bridge serving all, which keeps them where
// they were), so an upgrade changes nothing flannel sees; later changes
// there do not reach it.
func TestTenantAuthAdoptsTheSharedOne(t *testing.T) {
	bound(t)
	cl := v2bridgetest.StartCluster(t, 1)
	all := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{Auth: true}).URL
	waitAuthServed(t, httpClient, all)
	authSetup(t, all, true)
	if r := authDo(t, "PUT", all, "/v2/keys/foo/config", "root", rootPass, "value=1"); r.status != 201 {
		t.Fatalf("a write as root: %d %s", r.status, r.body)
	}
	scoped := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{Auth: true, Served: []string{"/foo"}}).URL
	waitAuthServed(t, httpClient, scoped)
	expectAuthAnswer(t, "the scoped bridge's flag", authDo(t, "GET", scoped, "/v2/auth/enable", "", "", ""), 200, `{"enabled":true}`)
	expectKeysDenied(t, "the scoped bridge, no credentials", authDo(t, "GET", scoped, "/v2/keys/foo/config", "", "", ""))
	if r := authDo(t, "GET", scoped, "/v2/keys/foo/config", "alice", alicePass, ""); r.status != 200 {
		t.Errorf("alice at the scoped bridge: %d %s", r.status, r.body)
	}
	if r := authDo(t, "DELETE", all, "/v2/auth/enable", "root", rootPass, ""); r.status != 200 {
		t.Fatalf("auth off at the bridge serving all: %d %s", r.status, r.body)
	}
	time.Sleep(200 * time.Millisecond) // a change of the same key space would have arrived
	expectAuthAnswer(t, "the scoped bridge's flag after", authDo(t, "GET", scoped, "/v2/auth/enable", "", "", ""), 200, `{"enabled":true}`)
	expectKeysDenied(t, "the scoped bridge after, no credentials", authDo(t, "GET", scoped, "/v2/keys/foo/config", "", "", ""))
}

// TestTenantsAuthApartBinary: the same through the bridge binary: the other
// tenant's root, auth and guest leave flannel's bridge as it was (etcdctl
// v2 reads flannel's config without credentials), and flannel's key is
// refused, not found, to the other tenant's clients without credentials.
func TestTenantsAuthApartBinary(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	scoped := func(prefix string) string {
		return startHealthyBridge(t, func() (string, []string, []string) {
			url := v2bridgetest.FreeURL(t)
			return url, nil, []string{"--listen-client-urls", url, "--endpoints", strings.Join(cl.Endpoints(), ","),
				"--serve-prefix", prefix, "--log-level", "warn"}
		}).url
	}
	flannel, other := scoped("/coreos.com/network"), scoped("/other")
	waitAuthServed(t, httpClient, flannel)
	waitAuthServed(t, httpClient, other)
	if r := authDo(t, "PUT", flannel, "/v2/keys/coreos.com/network/config", "", "", "value="+flannelConfig); r.status != 201 {
		t.Fatalf("flannel's config: %d %s", r.status, r.body)
	}
	authSetup(t, other, true)
	expectKeysDenied(t, "flannel's key through the other tenant's bridge, no credentials",
		authDo(t, "GET", other, "/v2/keys/coreos.com/network/config", "", "", ""))
	expectNotServed(t, "flannel's key through the other tenant's bridge as its root",
		authDo(t, "GET", other, "/v2/keys/coreos.com/network/config", "root", rootPass, ""), "/coreos.com/network/config", "/other")
	time.Sleep(200 * time.Millisecond) // a change of the same key space would have arrived
	expectAuthAnswer(t, "flannel's flag", authDo(t, "GET", flannel, "/v2/auth/enable", "", "", ""), 200, `{"enabled":false}`)
	out, code := authEtcdctl(t, etcdctlV2(t), flannel, "get", "/coreos.com/network/config")
	if code != 0 || out != flannelConfig+"\n" {
		t.Errorf("etcdctl get of flannel's config: exit %d, %q", code, out)
	}
}
