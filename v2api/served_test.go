// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestServedOnlyRefusesKeysOutsideThem(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := ServedOnly([]string{"/coreos.com/network", "/service/pg"}, inner)
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
	if ServedOnly([]string{"/"}, inner) == nil {
		t.Fatal("nil handler")
	}
}
