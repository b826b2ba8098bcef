// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/v2bridge/v2bridge/bridge/auth"
)

func TestServedOnlyRefusesKeysOutsideThem(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := ServedOnly([]string{"/coreos.com/network", "/service/pg"}, nil, inner)
	for _, c := range []struct {
		method, target string
		status         int
		body           string
	}{
		{"GET", "/v2/keys/coreos.com/network", http.StatusTeapot, ""},
		{"GET", "/v2/keys/coreos.com/network/subnets?wait=true&recursive=true", http.StatusTeapot, ""},
		{"PUT", "/v2/keys/coreos.com/network/subnets/10.5.1.0-24", http.StatusTeapot, ""},
		{"GET", "/v2/members", http.StatusTeapot, ""},
		{"PUT", "/v2/keys/service/pg/leader", http.StatusTeapot, ""},
		{"GET", "/v2/keys/service", http.StatusNotFound,
			`{"errorCode":100,"message":"Key not found","cause":"/service is outside the served prefix /coreos.com/network,/service/pg (--serve-prefix)","index":0}` + "\n"},
		{"GET", "/v2/keysx", http.StatusTeapot, ""},
		{"GET", "/v2/keys/apps/a", http.StatusNotFound,
			`{"errorCode":100,"message":"Key not found","cause":"/apps/a is outside the served prefix /coreos.com/network,/service/pg (--serve-prefix)","index":0}` + "\n"},
		{"PUT", "/v2/keys/coreos.com/networkx", http.StatusNotFound,
			`{"errorCode":100,"message":"Key not found","cause":"/coreos.com/networkx is outside the served prefix /coreos.com/network,/service/pg (--serve-prefix)","index":0}` + "\n"},
		{"GET", "/v2/keys/?recursive=true", http.StatusNotFound,
			`{"errorCode":100,"message":"Key not found","cause":"/ is outside the served prefix /coreos.com/network,/service/pg (--serve-prefix)","index":0}` + "\n"},
		{"GET", "/v2/keys/coreos.com?wait=true", http.StatusNotFound,
			`{"errorCode":100,"message":"Key not found","cause":"/coreos.com is outside the served prefix /coreos.com/network,/service/pg (--serve-prefix)","index":0}` + "\n"},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(c.method, c.target, nil))
		if w.Code != c.status || w.Body.String() != c.body {
			t.Errorf("%s %s: %d %q, want %d %q", c.method, c.target, w.Code, w.Body.String(), c.status, c.body)
		}
		if c.status == http.StatusNotFound && (w.Header().Get("Content-Type") != "application/json" || w.Header().Get("X-Etcd-Index") != "0") {
			t.Errorf("%s %s: headers %v", c.method, c.target, w.Header())
		}
	}
	if ServedOnly([]string{"/"}, nil, inner) == nil {
		t.Fatal("nil handler")
	}
}

// TestServedOnlyRefusesBeforeNotFound: under auth, a key outside the served
// subtrees that the credentials (or the guest role) do not reach gets v2's
// 401, as etcd v2 answers before it looks for a key; one they reach, or
// any while there is no auth data, is not found. A served key goes on to
// be decided there.
func TestServedOnlyRefusesBeforeNotFound(t *testing.T) {
	var went int
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { went++; w.WriteHeader(http.StatusTeapot) })
	fa := &fakeAuth{state: testState()}
	h := ServedOnly([]string{"/coreos.com/network"}, fa, inner)
	notFound := v2ErrorJSON(100, "Key not found", "/other/a is outside the served prefix /coreos.com/network (--serve-prefix)", 0)
	v2err := map[string]string{"Content-Type": "application/json", "X-Etcd-Index": "0"}
	for _, c := range []struct {
		decision     auth.Decision
		method, url  string
		status       int
		body         string
		check        keyCheck
		wentToInside bool
	}{
		{auth.Deny, "GET", "/v2/keys/other/a", 401, v2ErrorJSON(110, "The request requires user authentication", "Insufficient credentials", 0), keyCheck{"/other/a", false, false}, false},
		{auth.Deny, "PUT", "/v2/keys/other/a?recursive=true", 401, v2ErrorJSON(110, "The request requires user authentication", "Insufficient credentials", 0), keyCheck{"/other/a", true, true}, false},
		{auth.Allow, "DELETE", "/v2/keys/other/a", 404, notFound, keyCheck{"/other/a", false, true}, false},
		{auth.Unavailable, "GET", "/v2/keys/other/a", 404, notFound, keyCheck{"/other/a", false, false}, false},
	} {
		fa.checks, fa.keys, went = nil, c.decision, 0
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(c.method, c.url, nil))
		checkAnswer(t, w, c.status, c.body, v2err)
		if !reflect.DeepEqual(fa.checks, []keyCheck{c.check}) || went != 0 {
			t.Errorf("%s %s: checks %+v, want %+v; went on %d times", c.method, c.url, fa.checks, c.check, went)
		}
	}
	// A served key is the v3 side's to decide; a request that does not
	// parse is not found, unchecked.
	fa.checks, fa.keys = nil, auth.Deny
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/v2/keys/coreos.com/network/config", nil))
	if w.Code != http.StatusTeapot || len(fa.checks) != 0 {
		t.Errorf("a served key: %d, checks %+v", w.Code, fa.checks)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/v2/keys/other/a?recursive=maybe", nil))
	checkAnswer(t, w, 404, notFound, v2err)
	if len(fa.checks) != 0 {
		t.Errorf("an unparsed request was checked: %+v", fa.checks)
	}
}
