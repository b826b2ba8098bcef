// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/proof/v2ref"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestAuthRefusesBadCredentials: a credential that is missing (the guest
// role holding nothing), wrong, unknown, malformed or oversized is refused
// with v2's answer, on the keys API and on the auth API, and the server
// stays up. No credential falls back to the guest role.
func TestAuthRefusesBadCredentials(t *testing.T) {
	authServers(t, func(t *testing.T, s authServer) {
		authSetup(t, s.url, true)
		if r := authDo(t, "PUT", s.url, "/v2/keys/foo/a", "root", rootPass, "value=1"); r.status != 201 {
			t.Fatalf("root's write: %d %s", r.status, r.body)
		}
		basic := func(userPass string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(userPass)) }
		bad := []struct{ what, header string }{
			{"no credentials (guest, without permissions)", ""},
			{"a wrong password", basic("alice:wrong")},
			{"an unknown user", basic("mallory:" + alicePass)},
			{"the root user with alice's password", basic("root:" + alicePass)},
			{"an empty password", basic("alice:")},
			{"no colon", basic("alice" + alicePass)},
			{"not base64", "Basic !!!"},
			{"another scheme", "Bearer x"},
			{"the scheme alone", "Basic"},
			{"a 64 KiB password", basic("alice:" + strings.Repeat("p", 64<<10))},
		}
		for _, b := range bad {
			set := func(r *http.Request) {
				if b.header != "" {
					r.Header.Set("Authorization", b.header)
				}
			}
			start := time.Now()
			expectKeysDenied(t, b.what+", keys API", authDoWith(t, httpClient, "GET", s.url, "/v2/keys/foo/a", set, ""))
			expectKeysDenied(t, b.what+", a write", authDoWith(t, httpClient, "PUT", s.url, "/v2/keys/foo/a", set, "value=2"))
			expectAuthDenied(t, b.what+", auth API", authDoWith(t, httpClient, "GET", s.url, "/v2/auth/users", set, ""))
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("%s: three refusals took %v", b.what, d)
			}
		}
		// v2 broke the connection on an empty user name (its handler
		// failed); the bridge refuses it as any unknown user.
		empty := func(r *http.Request) { r.Header.Set("Authorization", basic(":")) }
		if s.bridge != nil {
			expectKeysDenied(t, "an empty user name", authDoWith(t, httpClient, "GET", s.url, "/v2/keys/foo/a", empty, ""))
			expectAuthDenied(t, "an empty user name, auth API", authDoWith(t, httpClient, "GET", s.url, "/v2/auth/users", empty, ""))
		}
		// A header over net/http's 1 MiB limit is refused before any
		// check (431, or the connection closed while sending it).
		huge, err := http.NewRequest("GET", s.url+"/v2/keys/foo/a", nil)
		if err != nil {
			t.Fatal(err)
		}
		huge.Header.Set("Authorization", basic("alice:"+strings.Repeat("p", 1<<20)))
		if r, err := httpClient.Do(huge); err == nil {
			_ = r.Body.Close()
			if r.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("a 1 MiB password: %d, want 431 or a closed connection", r.StatusCode)
			}
		}
		// Still serving, and the value untouched.
		r := authDo(t, "GET", s.url, "/v2/keys/foo/a", "root", rootPass, "")
		if a, k, v := keysNode(t, r); r.status != 200 || a != "get" || k != "/foo/a" || v != "1" {
			t.Fatalf("root's read after the refusals: %d %s", r.status, r.body)
		}
	})
}

// TestAuthNoAccessThroughAParent: a user allowed "/foo/*" and the exact
// key "/solo" reads, watches and writes those only, as v2 decided on the
// path the request names: never through a recursive read, watch or delete
// of a parent, nor an in-order POST into a parent; and the auth API is
// root's alone.
func TestAuthNoAccessThroughAParent(t *testing.T) {
	authServers(t, func(t *testing.T, s authServer) {
		authSetup(t, s.url, true)
		for _, st := range []struct{ method, path, body string }{
			{"PUT", "/v2/auth/roles/solo", `{"role":"solo","permissions":{"kv":{"read":["/solo"],"write":["/solo"]}}}`},
			{"PUT", "/v2/auth/users/alice", `{"user":"alice","grant":["solo"]}`},
			{"PUT", "/v2/keys/foo/a", "value=mine"},
			{"PUT", "/v2/keys/secret/s", "value=s3cr3t"},
			{"PUT", "/v2/keys/solo", "value=1"},
		} {
			if r := authDo(t, st.method, s.url, st.path, "root", rootPass, st.body); r.status/100 != 2 {
				t.Fatalf("%s %s: %d %s", st.method, st.path, r.status, r.body)
			}
		}
		as := func(method, path, body string) resp {
			t.Helper()
			return authDo(t, method, s.url, path, "alice", alicePass, body)
		}
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v2/keys/?recursive=true", ""},
			{"GET", "/v2/keys/", ""},
			{"GET", "/v2/keys/secret?recursive=true", ""},
			{"GET", "/v2/keys/foo", ""}, // "/foo/*" covers what is below /foo, not /foo
			{"GET", "/v2/keys/foo?recursive=true", ""},
			{"GET", "/v2/keys/solo?recursive=true", ""}, // an exact key is no "*" pattern
			{"GET", "/v2/keys/?wait=true&recursive=true&waitIndex=1", ""},
			{"GET", "/v2/keys/?wait=true&waitIndex=1", ""},
			{"GET", "/v2/keys/foo?wait=true&recursive=true&waitIndex=1", ""},
			{"GET", "/v2/keys/secret/s?wait=true&waitIndex=1", ""},
			{"GET", "/v2/keys/solo?wait=true&recursive=true&waitIndex=1", ""},
			{"POST", "/v2/keys/", "value=x"},
			{"POST", "/v2/keys/secret", "value=x"},
			{"POST", "/v2/keys/foo", "value=x"},
			{"PUT", "/v2/keys/secret/s", "value=x"},
			{"PUT", "/v2/keys/secret?dir=true", ""},
			{"DELETE", "/v2/keys/?recursive=true", ""},
			{"DELETE", "/v2/keys/foo?recursive=true", ""},
			{"DELETE", "/v2/keys/secret/s", ""},
			{"DELETE", "/v2/keys/solo?recursive=true", ""},
			{"GET", "/v2/keys/solo/", ""},
		} {
			expectKeysDenied(t, c.method+" "+c.path, as(c.method, c.path, c.body))
		}
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v2/auth/users", ""},
			{"GET", "/v2/auth/users/alice", ""},
			{"GET", "/v2/auth/roles", ""},
			{"GET", "/v2/auth/roles/rw-foo", ""},
			{"PUT", "/v2/auth/users/alice", `{"user":"alice","grant":["root"]}`},
			{"PUT", "/v2/auth/roles/rw-foo", `{"role":"rw-foo","grant":{"kv":{"read":["/*"],"write":["/*"]}}}`},
			{"DELETE", "/v2/auth/users/root", ""},
			{"PUT", "/v2/auth/enable", ""},
			{"DELETE", "/v2/auth/enable", ""},
		} {
			expectAuthDenied(t, c.method+" "+c.path, as(c.method, c.path, c.body))
		}
		if r := as("GET", "/v2/auth/enable", ""); r.status != 200 || r.body != `{"enabled":true}` {
			t.Errorf("GET /v2/auth/enable is open to all: %d %q", r.status, r.body)
		}

		// What alice may do, as v2 let her: below /foo, through "/foo/",
		// and the exact key, by the path named, in-order POST included.
		r := as("GET", "/v2/keys/foo/?recursive=true", "")
		var list struct {
			Node struct {
				Key   string
				Dir   bool
				Nodes []struct{ Key, Value string }
			}
		}
		if err := json.Unmarshal([]byte(r.body), &list); r.status != 200 || err != nil || list.Node.Key != "/foo" ||
			!list.Node.Dir || len(list.Node.Nodes) != 1 || list.Node.Nodes[0].Key != "/foo/a" || list.Node.Nodes[0].Value != "mine" {
			t.Errorf("GET /foo/?recursive=true: %d %s", r.status, r.body)
		}
		r = as("POST", "/v2/keys/foo/", "value=q")
		if a, k, v := keysNode(t, r); r.status != 201 || a != "create" || !strings.HasPrefix(k, "/foo/0") || len(k) != len("/foo/")+20 || v != "q" {
			t.Errorf("POST /foo/: %d %s", r.status, r.body)
		}
		r = as("GET", "/v2/keys/solo?wait=true&waitIndex=1", "")
		if a, k, v := keysNode(t, r); r.status != 200 || a != "set" || k != "/solo" || v != "1" {
			t.Errorf("a watch on /solo: %d %s", r.status, r.body)
		}
		r = as("POST", "/v2/keys/solo", "value=x") // allowed; /solo is a file
		if r.status != 400 || !strings.HasPrefix(r.body, `{"errorCode":104,"message":"Not a directory","cause":"/solo","index":`) {
			t.Errorf("POST into the file /solo: %d %s, want 104", r.status, r.body)
		}
		if r := as("DELETE", "/v2/keys/solo", ""); r.status != 200 {
			t.Errorf("DELETE /solo: %d %s", r.status, r.body)
		}
		r = as("POST", "/v2/keys/solo", "value=x") // v2 checks the path named: "/solo"
		if a, k, v := keysNode(t, r); r.status != 201 || a != "create" || !strings.HasPrefix(k, "/solo/0") || v != "x" {
			t.Errorf("POST /solo once it is gone: %d %s", r.status, r.body)
		}

		// None of the refused writes happened.
		r = authDo(t, "GET", s.url, "/v2/keys/secret/s", "root", rootPass, "")
		if a, k, v := keysNode(t, r); r.status != 200 || a != "get" || k != "/secret/s" || v != "s3cr3t" {
			t.Errorf("root reads /secret/s: %d %s", r.status, r.body)
		}
		if r := authDo(t, "GET", s.url, "/v2/auth/users/alice", "root", rootPass, ""); r.status != 200 ||
			!strings.Contains(r.body, `"roles":[{"role":"rw-foo"`) || strings.Contains(r.body, `"role":"root"`) {
			t.Errorf("alice's roles: %d %s", r.status, r.body)
		}
	})
}

// TestAuthBruteForceBackOff (bridge only: v2 never limited wrong
// passwords): wrong passwords for a user from one address hold that user
// off there, so that even the right password is refused from it for a
// while; the same user from another address, or with a credential already
// verified, is not held up; and the hold ends.
func TestAuthBruteForceBackOff(t *testing.T) {
	p := startHealthyBridge(t, embedded(t))
	waitAuthServed(t, httpClient, p.url)
	authSetup(t, p.url, true)
	const bobPass = "b0b-Pa55"
	if r := authDo(t, "PUT", p.url, "/v2/auth/users/bob", "root", rootPass,
		`{"user":"bob","password":"`+bobPass+`","roles":["rw-foo"]}`); r.status != 200 {
		t.Fatalf("adding bob: %d %s", r.status, r.body)
	}
	if r := authDo(t, "PUT", p.url, "/v2/keys/foo/a", "root", rootPass, "value=1"); r.status != 201 {
		t.Fatalf("root's write: %d %s", r.status, r.body)
	}
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
		tr := &http.Transport{DialContext: d.DialContext}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	attacker, other := from("127.0.0.2"), from("127.0.0.1")
	get := func(c *http.Client, user, pass string) resp {
		t.Helper()
		return authDoWith(t, c, "GET", p.url, "/v2/keys/foo/a", func(r *http.Request) { r.SetBasicAuth(user, pass) }, "")
	}
	// Wrong passwords for alice and bob from 127.0.0.2 for a few seconds,
	// every one refused; then alice's right password from there, never
	// used before (so not a verified credential), is refused too. Should
	// a hold end just between the two, the right password gets in and
	// ends the run: alice gets a new password and the attack goes again.
	pass := alicePass
	for attempt := 1; ; attempt++ {
		attack := time.Now()
		n := 0
		for time.Since(attack) < 5*time.Second {
			for _, u := range []string{"alice", "bob"} {
				expectKeysDenied(t, "a wrong password", get(attacker, u, "guess"))
				n++
			}
		}
		r := get(attacker, "alice", pass)
		if r.status == 401 {
			expectKeysDenied(t, "alice's right password from the attacker's address", r)
			t.Logf("attack %d: %d wrong passwords in 5s, then alice held off there", attempt, n)
			break
		}
		if attempt == 3 {
			t.Fatalf("alice's right password from the attacker's address after %d attacks: %d %s", attempt, r.status, r.body)
		}
		pass = fmt.Sprintf("%s-%d", alicePass, attempt)
		if r := authDo(t, "PUT", p.url, "/v2/auth/users/alice", "root", rootPass,
			`{"user":"alice","password":"`+pass+`"}`); r.status != 200 {
			t.Fatalf("alice's new password: %d %s", r.status, r.body)
		}
	}
	if n := authCheckCount(t, p.url, "throttled"); n < 1 {
		t.Errorf("v2bridge_auth_checks_total{result=\"throttled\"} = %v after the attack, want some", n)
	}
	// Alice from another address is let in at once, and her credential,
	// verified there, then from the attacker's address too.
	if r := get(other, "alice", pass); r.status != 200 {
		t.Fatalf("alice from 127.0.0.1 during the attack: %d %s", r.status, r.body)
	}
	if r := get(attacker, "alice", pass); r.status != 200 {
		t.Fatalf("alice's verified credential from 127.0.0.2: %d %s", r.status, r.body)
	}
	// Bob's hold ends: his right password from the attacker's address
	// works within the cap (30 s), retried every second.
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	refused := 0
	for {
		r := get(attacker, "bob", bobPass)
		if r.status == 200 {
			t.Logf("bob let in from 127.0.0.2 after %d refusals, %v after the attack", refused, time.Since(start))
			break
		}
		expectKeysDenied(t, "bob while held off", r)
		refused++
		if time.Now().After(deadline) {
			t.Fatal("bob is still refused from 127.0.0.2 60s after the attack")
		}
		time.Sleep(time.Second) // a patient user's retry
	}
}

// authCheckCount is v2bridge_auth_checks_total{result} at url's /metrics.
func authCheckCount(t *testing.T, url, result string) float64 {
	t.Helper()
	prefix := `v2bridge_auth_checks_total{result="` + result + `"} `
	for _, line := range strings.Split(do(t, "GET", url, "/metrics", nil).body, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", prefix)
	return 0
}

// TestAuthSecretsStayOutOfLogsAndMetrics (bridge only): with debug logging,
// nothing of a password, a basic-auth header or a stored hash reaches the
// log or /metrics, nor a user's name /metrics.
func TestAuthSecretsStayOutOfLogsAndMetrics(t *testing.T) {
	var etcdURL string
	p := startHealthyBridge(t, func() (string, []string, []string) {
		url, args := embeddedArgs(t)
		for i := range args {
			if args[i] == "--embedded-client-urls" {
				etcdURL = args[i+1]
			}
		}
		return url, nil, append(args, "--log-level", "debug")
	})
	waitAuthServed(t, httpClient, p.url)
	authSetup(t, p.url, true)
	const newPass = "n3w-Pa55-for-alice"
	secrets := []string{rootPass, alicePass, newPass, "wr0ng-Pa55"}
	for _, st := range []struct{ method, path, user, pass, body string }{
		{"GET", "/v2/keys/foo/a", "alice", alicePass, ""},
		{"PUT", "/v2/keys/foo/a", "alice", alicePass, "value=1"},
		{"GET", "/v2/keys/foo/a?wait=true&waitIndex=1", "alice", alicePass, ""},
		{"GET", "/v2/keys/foo/a", "alice", "wr0ng-Pa55", ""},
		{"GET", "/v2/keys/foo/a", "mallory", "wr0ng-Pa55", ""},
		{"PUT", "/v2/auth/users/alice", "root", rootPass, `{"user":"alice","password":"` + newPass + `"}`},
		{"GET", "/v2/auth/users/alice", "root", rootPass, ""},
		{"GET", "/v2/keys/foo/a", "alice", newPass, ""},
		{"PUT", "/v2/auth/users/carol", "alice", newPass, `{"user":"carol","password":"` + alicePass + `"}`},
	} {
		r := authDo(t, st.method, p.url, st.path, st.user, st.pass, st.body)
		for _, s := range secrets {
			if strings.Contains(r.body, s) {
				t.Errorf("%s %s answered a password: %s", st.method, st.path, r.body)
			}
		}
		if strings.Contains(r.body, "$2a$") || strings.Contains(r.body, "$2b$") {
			t.Errorf("%s %s answered a hash: %s", st.method, st.path, r.body)
		}
	}
	for _, up := range []string{"root:" + rootPass, "alice:" + alicePass, "alice:" + newPass, "alice:wr0ng-Pa55"} {
		secrets = append(secrets, base64.StdEncoding.EncodeToString([]byte(up)))
	}
	// The stored hashes, read from etcd v3.
	v3, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = v3.Close() }()
	keys := auth.KeysFor("_v2bridge/", "", nil)
	for _, u := range []string{"root", "alice"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		g, err := v3.Get(ctx, keys.User(u))
		cancel()
		if err != nil || len(g.Kvs) != 1 {
			t.Fatalf("user %s in v3: %v %v", u, g, err)
		}
		var stored auth.User
		if err := json.Unmarshal(g.Kvs[0].Value, &stored); err != nil || !strings.HasPrefix(stored.Password, "$2") {
			t.Fatalf("user %s in v3 is no bcrypt hash: %s %v", u, g.Kvs[0].Value, err)
		}
		for _, s := range secrets[:3] {
			if strings.Contains(string(g.Kvs[0].Value), s) {
				t.Errorf("a password in clear in v3: %s", g.Kvs[0].Value)
			}
		}
		secrets = append(secrets, stored.Password)
	}
	metrics := do(t, "GET", p.url, "/metrics", nil).body
	for _, s := range append(secrets, "alice", "mallory") {
		if strings.Contains(metrics, s) {
			t.Errorf("/metrics holds %q", s)
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("no exit on SIGTERM")
	}
	logs := p.logs.String()
	if !strings.Contains(logs, `"msg":"request"`) || !strings.Contains(logs, `"path":"/v2/auth/users/alice"`) {
		t.Fatalf("no debug request lines in the log:\n%s", logs)
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("the log holds %q", s)
		}
	}
}

// TestAuthClientCertificates: over TLS with --client-cert-auth, as v2 did,
// a request with an Authorization header is that header's user (a wrong
// one refused, never the certificate's), and one without is the user its
// certificate's common name names, or the guest if no user has that name.
func TestAuthClientCertificates(t *testing.T) {
	pk := newPKI(t)
	scert, skey := pk.issue("server", "server", true)
	ca := filepath.Join(pk.dir, "ca.pem")
	cc := newCertClients(t, pk)
	t.Run("reference", func(t *testing.T) {
		bound(t)
		ref := v2ref.StartT(t, v2ref.Options{ExtraArgs: []string{"--listen-client-url", "https://127.0.0.1:0",
			"--cert-file", scert, "--key-file", skey, "--trusted-ca-file", ca, "--client-cert-auth"}})
		authCertCases(t, cc, ref.URL)
	})
	t.Run("bridge", func(t *testing.T) {
		var url string
		startHealthyBridge(t, func() (string, []string, []string) {
			_, args := embeddedArgs(t)
			url = "https://" + strings.TrimPrefix(v2bridgetest.FreeURL(t), "http://")
			metrics := v2bridgetest.FreeURL(t)
			return metrics, nil, append(args, "--listen-client-urls", url, "--cert-file", scert, "--key-file", skey,
				"--trusted-ca-file", ca, "--client-cert-auth", "--listen-metrics-urls", metrics)
		})
		waitAuthServed(t, cc.root, url)
		authCertCases(t, cc, url)
	})
}

// certClients are https clients with certificates for the common names
// root, alice and nobody.
type certClients struct{ root, alice, nobody *http.Client }

func newCertClients(t *testing.T, pk *pki) certClients {
	pool := x509.NewCertPool()
	pool.AddCert(pk.ca)
	clientFor := func(cn string) *http.Client {
		c, k := pk.issue("client-"+cn, cn, false)
		pair, err := tls.LoadX509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair},
			MinVersion: tls.VersionTLS12}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	return certClients{root: clientFor("root"), alice: clientFor("alice"), nobody: clientFor("nobody")}
}

// authCertCases is TestAuthClientCertificates on the server at url.
func authCertCases(t *testing.T, cc certClients, url string) {
	rootC, aliceC, nobodyC := cc.root, cc.alice, cc.nobody
	none := func(*http.Request) {}
	basic := func(u, p string) func(*http.Request) { return func(r *http.Request) { r.SetBasicAuth(u, p) } }

	// Set up as root by certificate: no password is needed for that, but
	// root must exist before auth is on.
	for _, st := range []struct{ method, path, body string }{
		{"PUT", "/v2/auth/users/root", `{"user":"root","password":"` + rootPass + `"}`},
		{"PUT", "/v2/auth/roles/rw-foo", `{"role":"rw-foo","permissions":{"kv":{"read":["/foo/*"],"write":["/foo/*"]}}}`},
		{"PUT", "/v2/auth/users/alice", `{"user":"alice","password":"` + alicePass + `","roles":["rw-foo"]}`},
		{"PUT", "/v2/auth/enable", ""},
		{"PUT", "/v2/auth/roles/guest", `{"role":"guest","revoke":{"kv":{"read":["/*"],"write":["/*"]}}}`},
		{"PUT", "/v2/keys/top", "value=t"},
		{"PUT", "/v2/keys/foo/a", "value=a"},
	} {
		if r := authDoWith(t, rootC, st.method, url, st.path, none, st.body); r.status/100 != 2 {
			t.Fatalf("%s %s as root by certificate: %d %s", st.method, st.path, r.status, r.body)
		}
	}
	ok := func(what string, r resp, value string) {
		t.Helper()
		if a, _, v := keysNode(t, r); r.status != 200 || a != "get" || v != value {
			t.Errorf("%s: %d %s, want %q", what, r.status, r.body, value)
		}
	}
	ok("alice by certificate reads /foo/a", authDoWith(t, aliceC, "GET", url, "/v2/keys/foo/a", none, ""), "a")
	expectKeysDenied(t, "alice by certificate reads /top", authDoWith(t, aliceC, "GET", url, "/v2/keys/top", none, ""))
	expectAuthDenied(t, "alice by certificate lists users", authDoWith(t, aliceC, "GET", url, "/v2/auth/users", none, ""))
	ok("alice's certificate with root's password reads /top",
		authDoWith(t, aliceC, "GET", url, "/v2/keys/top", basic("root", rootPass), ""), "t")
	expectKeysDenied(t, "root's certificate with a wrong password",
		authDoWith(t, rootC, "GET", url, "/v2/keys/top", basic("root", "wrong"), ""))
	expectKeysDenied(t, "root's certificate with a malformed header",
		authDoWith(t, rootC, "GET", url, "/v2/keys/top", func(r *http.Request) { r.Header.Set("Authorization", "Bearer x") }, ""))
	ok("root's certificate with alice's password reads /foo/a",
		authDoWith(t, rootC, "GET", url, "/v2/keys/foo/a", basic("alice", alicePass), ""), "a")
	expectKeysDenied(t, "root's certificate with alice's password reads /top",
		authDoWith(t, rootC, "GET", url, "/v2/keys/top", basic("alice", alicePass), ""))
	expectKeysDenied(t, "a certificate naming no user (guest)", authDoWith(t, nobodyC, "GET", url, "/v2/keys/foo/a", none, ""))
	expectAuthDenied(t, "a certificate naming no user, auth API", authDoWith(t, nobodyC, "GET", url, "/v2/auth/users", none, ""))
	// The guest role given read on /foo/*: the unknown name reads it.
	if r := authDoWith(t, rootC, "PUT", url, "/v2/auth/roles/guest", none,
		`{"role":"guest","grant":{"kv":{"read":["/foo/*"]}}}`); r.status != 200 {
		t.Fatalf("granting guest: %d %s", r.status, r.body)
	}
	ok("a certificate naming no user reads as guest", authDoWith(t, nobodyC, "GET", url, "/v2/keys/foo/a", none, ""), "a")
	r := authDoWith(t, rootC, "GET", url, "/v2/auth/users", none, "")
	if r.status != 200 || !strings.Contains(r.body, `"user":"alice"`) {
		t.Errorf("root by certificate lists users: %d %s", r.status, r.body)
	}
}

// TestAuthPasswordsOver72Bytes: bcrypt reads 72 bytes of a password. v2
// refused a longer new password (HTTP 500, its bcrypt's error), and a
// password matched on its first 72 bytes.
func TestAuthPasswordsOver72Bytes(t *testing.T) {
	authServers(t, func(t *testing.T, s authServer) {
		authSetup(t, s.url, true)
		if r := authDo(t, "PUT", s.url, "/v2/keys/foo/a", "root", rootPass, "value=1"); r.status != 201 {
			t.Fatalf("root's write: %d %s", r.status, r.body)
		}
		p72 := strings.Repeat("p", 72)
		refused := func(what, method, path, body string) {
			t.Helper()
			r := authDo(t, method, s.url, path, "root", rootPass, body)
			if want := `{"message":"Internal Server Error"}`; r.status != 500 || r.body != want ||
				r.header.Get("Content-Type") != "application/json" {
				t.Errorf("%s: %d %s (Content-Type %q), want v2's 500 %s", what, r.status, r.body, r.header.Get("Content-Type"), want)
			}
		}
		refused("a new user with a 73-byte password", "PUT", "/v2/auth/users/long",
			`{"user":"long","password":"`+p72+`X","roles":["rw-foo"]}`)
		if r := authDo(t, "GET", s.url, "/v2/auth/users/long", "root", rootPass, ""); r.status != 404 {
			t.Errorf("the refused user exists: %d %s", r.status, r.body)
		}
		refused("alice's password changed to 73 bytes", "PUT", "/v2/auth/users/alice", `{"user":"alice","password":"`+p72+`X"}`)
		if r := authDo(t, "GET", s.url, "/v2/keys/foo/a", "alice", alicePass, ""); r.status != 200 {
			t.Errorf("alice's password after the refused change: %d %s", r.status, r.body)
		}
		if r := authDo(t, "PUT", s.url, "/v2/auth/users/long", "root", rootPass,
			`{"user":"long","password":"`+p72+`","roles":["rw-foo"]}`); r.status != 200 || r.body != `{"user":"long","roles":["rw-foo"]}` {
			t.Fatalf("a user with a 72-byte password: %d %s", r.status, r.body)
		}
		for _, pass := range []string{p72, p72 + "X", p72 + strings.Repeat("Y", 100)} {
			r := authDo(t, "GET", s.url, "/v2/keys/foo/a", "long", pass, "")
			if a, k, v := keysNode(t, r); r.status != 200 || a != "get" || k != "/foo/a" || v != "1" {
				t.Errorf("a %d-byte password matching on 72: %d %s", len(pass), r.status, r.body)
			}
		}
		expectKeysDenied(t, "71 of the 72 bytes", authDo(t, "GET", s.url, "/v2/keys/foo/a", "long", p72[:71], ""))
	})
}
