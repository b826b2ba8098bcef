// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/translate"
)

// throughStep runs one request through s's authStep in front of a handler
// that only records it: the answer the step wrote, and the request that
// went on (nil: none did).
func throughStep(s *Server, method, target, body string) (*httptest.ResponseRecorder, *http.Request) {
	var next *http.Request
	h := s.authStep(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { next = r }))
	w := serve(h, method, target, body)
	return w, next
}

// parsedOf is the parse authStep carried on to the handler, or nil.
func parsedOf(r *http.Request) *keysRequest {
	kr, _ := r.Context().Value(parsedKeys{}).(*keysRequest)
	return kr
}

// wroteNothing checks that the step left the answer to the handler.
func wroteNothing(t *testing.T, what string, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code != 200 || w.Body.Len() != 0 || len(w.Header()) != 0 {
		t.Errorf("%s: the step wrote %d %q %v", what, w.Code, w.Body, w.Header())
	}
}

func TestAuthStepDecidesKeysOnceParsed(t *testing.T) {
	fa := &fakeAuth{state: testState(), keys: auth.Allow}
	s, _ := newAuthServer(t, fa)
	v2err := map[string]string{"Content-Type": "application/json", "X-Etcd-Cluster-Id": "abc", "X-Etcd-Index": "0"}

	// Allowed: on to the handler with the request parsed, nothing written.
	w, next := throughStep(s, "GET", "/v2/keys/foo/?recursive=true", "")
	wroteNothing(t, "allowed", w)
	if kr := parsedOf(next); next == nil || kr == nil || kr.err != nil || kr.key != "/foo/" ||
		!reflect.DeepEqual(kr.req, &translate.Request{Method: "GET", Path: "/foo", Recursive: true}) {
		t.Errorf("allowed: went on %v, parsed %+v", next != nil, parsedOf(next))
	}
	if want := []keyCheck{{"/foo/", true, false}}; !reflect.DeepEqual(fa.checks, want) {
		t.Errorf("checks %+v, want %+v", fa.checks, want)
	}

	// Denied, or no auth data yet: v2's error, nothing goes on.
	fa.checks, fa.keys = nil, auth.Deny
	w, next = throughStep(s, "PUT", "/v2/keys/a", "value=1")
	checkAnswer(t, w, 401, v2ErrorJSON(110, "The request requires user authentication", "Insufficient credentials", 0), v2err)
	fa.keys = auth.Unavailable
	w2, next2 := throughStep(s, "DELETE", "/v2/keys/a?recursive=true", "")
	checkAnswer(t, w2, 500, unavailable, v2err)
	if next != nil || next2 != nil {
		t.Error("a refused request went on to the handler")
	}
	if want := []keyCheck{{"/a", false, true}, {"/a", true, true}}; !reflect.DeepEqual(fa.checks, want) {
		t.Errorf("checks %+v, want %+v", fa.checks, want)
	}

	// A request that does not parse goes on unchecked, its parse error with
	// it, which the handler answers as v2 did: before any check.
	fa.checks, fa.keys = nil, auth.Deny
	for _, c := range []struct{ target, want string }{
		{"/v2/keys/a?recursive=maybe", v2ErrorJSON(209, "Invalid field", `invalid value for "recursive"`, 0)},
		{"/v2/keys/a?%zz", v2ErrorJSON(210, "Invalid POST form", `invalid URL escape "%zz"`, 0)},
	} {
		w, next := throughStep(s, "GET", c.target, "")
		wroteNothing(t, c.target, w)
		if kr := parsedOf(next); next == nil || kr == nil || kr.err == nil || kr.req != nil {
			t.Errorf("%s: went on %v, parsed %+v", c.target, next != nil, parsedOf(next))
		}
		checkAnswer(t, serve(s, "GET", c.target, ""), 400, c.want, v2err)
	}
	if len(fa.checks) != 0 {
		t.Errorf("requests that do not parse were checked: %+v", fa.checks)
	}
}

func TestAuthStepPassesWhatItDoesNotDecide(t *testing.T) {
	fa := &fakeAuth{state: testState(), keys: auth.Deny, root: auth.Deny}
	s, _ := newAuthServer(t, fa)
	for _, c := range []struct{ method, target string }{
		{"GET", "/version"}, {"GET", "/v2/members"}, {"GET", "/v2/members/leader"}, {"GET", "/v2/auth/enable"},
		{"GET", "/v2/stats/self"}, {"GET", "/metrics"}, {"GET", "/v2/keysx"}, {"GET", "/v2/machines"},
		{"GET", "/v2/keys//a"},                              // redirected by the router
		{"PATCH", "/v2/keys/a"}, {"POST", "/v2/auth/users"}, // a method the handler refuses
		{"POST", "/v2/auth/users/a/b"}, {"GET", "/v2/auth/roles/a/b/"}, // a path the handler refuses
		{"PUT", "/v2/members/"}, {"DELETE", "/v2/members/1/2"}, {"GET", "/v2/auth/other"}, // not found
	} {
		w, next := throughStep(s, c.method, c.target, "")
		wroteNothing(t, c.method+" "+c.target, w)
		if next == nil || parsedOf(next) != nil {
			t.Errorf("%s %s: went on %v, parsed %+v", c.method, c.target, next != nil, parsedOf(next))
		}
	}
	if len(fa.checks) != 0 || fa.roots != 0 {
		t.Errorf("checks %+v, root asked %d times: want none", fa.checks, fa.roots)
	}
}

func TestAuthStepAsksRootOfRootsRequests(t *testing.T) {
	fa := &fakeAuth{state: testState(), root: auth.Deny}
	s, _ := newAuthServer(t, fa)
	v2err := map[string]string{"Content-Type": "application/json", "X-Etcd-Index": "0"}
	reqs := []struct{ method, target string }{
		{"PUT", "/v2/auth/enable"}, {"DELETE", "/v2/auth/enable"},
		{"GET", "/v2/auth/users"}, {"GET", "/v2/auth/roles/"},
		{"GET", "/v2/auth/users/u"}, {"PUT", "/v2/auth/users/u/"}, {"DELETE", "/v2/auth/roles/r"},
		{"POST", "/v2/members"}, {"PUT", "/v2/members/1234"}, {"DELETE", "/v2/members/1234"},
	}
	for _, d := range []struct {
		decision auth.Decision
		status   int
		body     string
		header   map[string]string
	}{{auth.Deny, 401, denied, plainHeaders}, {auth.Unavailable, 500, unavailable, v2err}} {
		fa.root, fa.roots = d.decision, 0
		for _, c := range reqs {
			w, next := throughStep(s, c.method, c.target, "")
			checkAnswer(t, w, d.status, d.body, d.header)
			if next != nil {
				t.Errorf("%s %s went on to the handler", c.method, c.target)
			}
		}
		if fa.roots != len(reqs) {
			t.Errorf("root asked %d times, want %d", fa.roots, len(reqs))
		}
	}
	fa.root, fa.roots = auth.Allow, 0
	for _, c := range reqs {
		w, next := throughStep(s, c.method, c.target, "")
		wroteNothing(t, c.method+" "+c.target, w)
		if next == nil {
			t.Errorf("%s %s: root's request did not go on", c.method, c.target)
		}
	}
}

// TestAuthStepFailsClosed holds the step to the routes: with root and every
// key denied, no request under the auth API or the membership is answered
// but with v2's refusal, with an error v2 gave before asking root, or as a
// read v2 left open.
func TestAuthStepFailsClosed(t *testing.T) {
	fa := &fakeAuth{state: testState(), keys: auth.Deny, root: auth.Deny}
	s, st := newAuthServer(t, fa)
	open := map[string]bool{"GET /v2/auth/enable": true, "GET /v2/members": true, "GET /v2/members/1234": true,
		"GET /v2/members/leader": true}
	for _, p := range []string{"/v2/auth/enable", "/v2/auth/users", "/v2/auth/users/", "/v2/auth/users/u",
		"/v2/auth/users/u/", "/v2/auth/roles", "/v2/auth/roles/r", "/v2/auth/roles/r/x", "/v2/members",
		"/v2/members/", "/v2/members/1234", "/v2/members/leader", "/v2/members/1234/", "/v2/keys/a",
		"/v2/keys/a?wait=true", "/v2/keys"} {
		for _, m := range []string{"GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS"} {
			w := serve(s, m, p, "")
			switch {
			case w.Code == 401 || w.Code == 400 || w.Code == 404 || w.Code == 405:
			case open[m+" "+p] && w.Code == 200:
			default:
				t.Errorf("%s %s: %d %q", m, p, w.Code, w.Body)
			}
		}
	}
	if len(fa.mutated) != 0 || len(st.recorded()) != 0 || strings.Contains(serve(s, "GET", "/metrics", "").Body.String(),
		`code="200"`) {
		t.Errorf("refused requests were served: auth %q, store %+v", fa.mutated, st.recorded())
	}
}

// BenchmarkKeysGetThroughAuth is the cost of a GET allowed by authStep,
// its parse carried to the handler (go test -bench KeysGetThroughAuth
// -benchmem ./v2api/).
func BenchmarkKeysGetThroughAuth(b *testing.B) {
	fa := &fakeAuth{state: testState(), keys: auth.Allow}
	st := &fakeStore{storeMeta: Meta{ClusterID: 0xabc}, meta: Meta{ClusterID: 0xabc},
		getEv: &translate.Event{Action: "get", EtcdIndex: 4}}
	s := newTestServer(b, st, func(c *Config) { c.Auth = fa })
	b.ReportAllocs()
	for b.Loop() {
		fa.checks = fa.checks[:0]
		s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v2/keys/foo/bar", nil))
	}
}
