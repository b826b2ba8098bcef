// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/v2bridge/v2bridge/translate"
)

var testURLs = []string{"http://10.0.0.1:2379", "http://10.0.0.2:2379"}

// newTestServer builds the HTTP surface over st with a fresh registry
// serving /metrics.
func newTestServer(t testing.TB, st *fakeStore, opts ...func(*Config)) *Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := Config{Store: st, Name: "bridge-1", AdvertiseURLs: testURLs, Registry: reg, Gatherer: reg}
	for _, o := range opts {
		o(&cfg)
	}
	return New(cfg)
}

// serve runs one request through h; a body is sent as a form.
func serve(h http.Handler, method, target, body string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	if body != "" {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// decodeJSON decodes a response body that must be one JSON value and a newline.
func decodeJSON(t *testing.T, w *httptest.ResponseRecorder, v any) {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	b := w.Body.Bytes()
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatalf("body %q does not end with a newline", b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
}

func hexID(s *Server) string { return strconv.FormatUint(s.ID(), 16) }

func TestEveryEndpointAnswers(t *testing.T) {
	st := &fakeStore{getEv: &translate.Event{Action: "get", EtcdIndex: 1}, version: "3.6.16", watchers: 2}
	s := newTestServer(t, st)
	id := hexID(s)
	self := map[string]any{"id": id, "name": "bridge-1", "peerURLs": []any{},
		"clientURLs": []any{testURLs[0], testURLs[1]}}
	cases := []struct {
		method, path string
		status       int
		check        func(t *testing.T, w *httptest.ResponseRecorder)
	}{
		{"GET", "/v2/keys", 200, nil},
		{"GET", "/v2/keys/", 200, nil},
		{"GET", "/v2/keys/a/b", 200, nil},
		{"HEAD", "/v2/keys/a", 200, nil},
		{"GET", "/v2/members", 200, func(t *testing.T, w *httptest.ResponseRecorder) {
			var got map[string]any
			decodeJSON(t, w, &got)
			if want := map[string]any{"members": []any{self}}; !reflect.DeepEqual(got, want) {
				t.Fatalf("members %v, want %v", got, want)
			}
		}},
		{"GET", "/v2/members/leader", 200, func(t *testing.T, w *httptest.ResponseRecorder) {
			var got map[string]any
			decodeJSON(t, w, &got)
			if !reflect.DeepEqual(got, self) {
				t.Fatalf("leader %v, want %v", got, self)
			}
		}},
		{"GET", "/v2/machines", 200, func(t *testing.T, w *httptest.ResponseRecorder) {
			if got, want := w.Body.String(), testURLs[0]+", "+testURLs[1]; got != want {
				t.Fatalf("machines %q, want %q", got, want)
			}
		}},
		{"HEAD", "/v2/machines", 200, nil},
		{"GET", "/v2/stats/self", 200, func(t *testing.T, w *httptest.ResponseRecorder) {
			var got struct {
				Name, ID, State string
				StartTime       string
				LeaderInfo      struct{ Leader, Uptime, StartTime string }
			}
			decodeJSON(t, w, &got)
			if got.Name != "bridge-1" || got.ID != id || got.State != "StateLeader" || got.StartTime == "" ||
				got.LeaderInfo.Leader != id || got.LeaderInfo.Uptime == "" || got.LeaderInfo.StartTime == "" {
				t.Fatalf("stats/self %+v", got)
			}
		}},
		{"GET", "/v2/stats/leader", 200, func(t *testing.T, w *httptest.ResponseRecorder) {
			var got map[string]any
			decodeJSON(t, w, &got)
			if want := map[string]any{"leader": id, "followers": map[string]any{}}; !reflect.DeepEqual(got, want) {
				t.Fatalf("stats/leader %v, want %v", got, want)
			}
		}},
		{"GET", "/v2/stats/store", 200, func(t *testing.T, w *httptest.ResponseRecorder) {
			var got map[string]uint64
			decodeJSON(t, w, &got)
			if len(got) != 16 || got["watchers"] != 2 {
				t.Fatalf("stats/store %v", got)
			}
		}},
		{"GET", "/version", 200, func(t *testing.T, w *httptest.ResponseRecorder) {
			var got map[string]string
			decodeJSON(t, w, &got)
			if want := map[string]string{"etcdserver": "3.6.16", "etcdcluster": "3.6.0"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("version %v, want %v", got, want)
			}
		}},
		{"GET", "/health", 200, func(t *testing.T, w *httptest.ResponseRecorder) {
			if got := w.Body.String(); got != "{\"health\":\"true\"}\n" {
				t.Fatalf("health %q", got)
			}
		}},
		{"HEAD", "/health", 200, nil},
		{"GET", "/livez", 200, func(t *testing.T, w *httptest.ResponseRecorder) {
			if got := w.Body.String(); got != "ok\n" {
				t.Fatalf("livez %q", got)
			}
		}},
		{"GET", "/readyz", 200, func(t *testing.T, w *httptest.ResponseRecorder) {
			if got := w.Body.String(); got != "ok\n" {
				t.Fatalf("readyz %q", got)
			}
		}},
		{"GET", "/metrics", 200, func(t *testing.T, w *httptest.ResponseRecorder) {
			if !strings.Contains(w.Body.String(), "v2bridge_http_requests_total") {
				t.Fatalf("metrics lack the request counter:\n%s", w.Body)
			}
		}},
		{"GET", "/v2/auth/users", 404, nil},
		{"GET", "/v2/keysx", 404, nil},
		{"GET", "/v2/members/", 404, nil},
		{"GET", "/debug/pprof/", 404, nil},
		{"GET", "/", 404, nil},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			w := serve(s, c.method, c.path, "")
			if w.Code != c.status {
				t.Fatalf("status %d, want %d; body %q", w.Code, c.status, w.Body)
			}
			if c.check != nil {
				c.check(t, w)
			}
		})
	}
}

func TestWrongMethodsAnswer405WithAllow(t *testing.T) {
	s := newTestServer(t, &fakeStore{})
	const keys = "HEAD,GET,PUT,POST,DELETE"
	cases := []struct{ path, allow string }{
		{"/v2/keys", keys},
		{"/v2/keys/a", keys},
		{"/v2/members", "GET,POST"},
		{"/v2/members/1234", "GET,DELETE,PUT"},
		{"/v2/members/leader", "GET,DELETE,PUT"},
		{"/v2/machines", "GET,HEAD"},
		{"/v2/stats/self", "GET"},
		{"/v2/stats/leader", "GET"},
		{"/v2/stats/store", "GET"},
		{"/version", "GET"},
		{"/health", "GET,HEAD"},
	}
	for _, c := range cases {
		allowed := map[string]bool{}
		for _, m := range strings.Split(c.allow, ",") {
			allowed[m] = true
		}
		for _, m := range []string{"GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS", "TRACE"} {
			if allowed[m] {
				continue
			}
			t.Run(m+" "+c.path, func(t *testing.T) {
				w := serve(s, m, c.path, "")
				if w.Code != http.StatusMethodNotAllowed {
					t.Fatalf("status %d, want 405", w.Code)
				}
				if got := w.Header().Get("Allow"); got != c.allow {
					t.Fatalf("Allow %q, want %q", got, c.allow)
				}
				if got := w.Body.String(); got != "Method Not Allowed\n" {
					t.Fatalf("body %q", got)
				}
			})
		}
	}
}

func TestMembersRefusesMembershipChanges(t *testing.T) {
	st := &fakeStore{storeMeta: Meta{ClusterID: 0xc1}}
	s := newTestServer(t, st)
	const refused = "membership is managed on the etcd v3 cluster behind v2bridge"
	cases := []struct {
		name, method, path string
		status             int
		message            string
	}{
		{"add", "POST", "/v2/members", 405, refused},
		{"update self", "PUT", "/v2/members/" + hexID(s), 405, refused},
		{"remove self", "DELETE", "/v2/members/" + hexID(s), 405, refused},
		{"update another", "PUT", "/v2/members/8e9e05c52164694d", 404, "No such member: 8e9e05c52164694d"},
		{"remove another", "DELETE", "/v2/members/8e9e05c52164694d", 404, "No such member: 8e9e05c52164694d"},
		{"remove leader alias", "DELETE", "/v2/members/leader", 404, "No such member: leader"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := serve(s, c.method, c.path, "")
			if w.Code != c.status {
				t.Fatalf("status %d, want %d", w.Code, c.status)
			}
			var got map[string]string
			decodeJSON(t, w, &got)
			if want := map[string]string{"message": c.message}; !reflect.DeepEqual(got, want) {
				t.Fatalf("body %v, want %v", got, want)
			}
			if got := w.Header().Get("X-Etcd-Cluster-Id"); got != "c1" {
				t.Fatalf("X-Etcd-Cluster-Id %q, want c1", got)
			}
		})
	}
}

// GET of one member is v2's 404 "Not found" (only "leader" is served), not
// a 405 for a method the route allows.
func TestMemberGetOfAnIDIsNotFound(t *testing.T) {
	s := newTestServer(t, &fakeStore{})
	for _, id := range []string{hexID(s), "8e9e05c52164694d"} {
		w := serve(s, "GET", "/v2/members/"+id, "")
		if w.Code != http.StatusNotFound {
			t.Fatalf("GET /v2/members/%s: status %d, want 404", id, w.Code)
		}
		var got map[string]string
		decodeJSON(t, w, &got)
		if want := map[string]string{"message": "Not found"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("body %v, want %v", got, want)
		}
	}
}

func TestMachinesIsPlainText(t *testing.T) {
	s := newTestServer(t, &fakeStore{}, func(c *Config) { c.AdvertiseURLs = []string{"https://b:2379"}; c.Name = "" })
	w := serve(s, "GET", "/v2/machines", "")
	if got := w.Body.String(); got != "https://b:2379" {
		t.Fatalf("machines %q", got)
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q", ct)
	}
	var m memberJSON
	decodeJSON(t, serve(s, "GET", "/v2/members/leader", ""), &m)
	if m.Name != "v2bridge" {
		t.Fatalf("default name %q, want v2bridge", m.Name)
	}
}

func TestStatsStoreCountsOperationsAndWatchers(t *testing.T) {
	st := &fakeStore{watchers: 3, answer: func(op string, r *translate.Request) (*translate.Event, error) {
		if r.Value == "fail" {
			return nil, translate.NewError(translate.EcodeKeyNotFound, r.Path, 1)
		}
		return &translate.Event{Action: "get", EtcdIndex: 1}, nil
	}}
	fw := newFakeWatch(1, 1)
	fw.end()
	st.watch = fw
	s := newTestServer(t, st)
	for _, r := range []struct{ method, target string }{
		{"GET", "/v2/keys/a"},
		{"HEAD", "/v2/keys/a"},
		{"GET", "/v2/keys/a?quorum=true"},
		{"GET", "/v2/keys/a?value=fail"},
		{"PUT", "/v2/keys/a?value=v"},
		{"PUT", "/v2/keys/a?value=fail"},
		{"PUT", "/v2/keys/a?value=fail&dir=true"},
		{"POST", "/v2/keys/q?value=v"},
		{"PUT", "/v2/keys/a?prevExist=false"},
		{"PUT", "/v2/keys/a?prevExist=false&value=fail"},
		{"PUT", "/v2/keys/a?prevExist=true"},
		{"PUT", "/v2/keys/a?prevExist=true&value=fail"},
		{"PUT", "/v2/keys/a?prevValue=x"},
		{"PUT", "/v2/keys/a?prevIndex=3&prevExist=true"},
		{"PUT", "/v2/keys/a?prevValue=x&value=fail"},
		{"DELETE", "/v2/keys/a"},
		{"DELETE", "/v2/keys/a?recursive=true&value=fail"},
		{"DELETE", "/v2/keys/a?prevIndex=3"},
		{"DELETE", "/v2/keys/a?prevValue=x&value=fail"},
		{"DELETE", "/v2/keys/a?prevExist=false"},             // prevExist is ignored on DELETE: a delete
		{"DELETE", "/v2/keys/a?prevExist=false&prevIndex=3"}, // and a compareAndDelete
		{"PUT", "/v2/keys/a?ttl=bad"},                        // refused before the store: not counted
		{"GET", "/v2/keys/a?wait=true"},                      // a watch is not an operation
	} {
		serve(s, r.method, r.target, "")
	}
	var got map[string]uint64
	decodeJSON(t, serve(s, "GET", "/v2/stats/store", ""), &got)
	want := map[string]uint64{
		"getsSuccess": 3, "getsFail": 1,
		"setsSuccess": 1, "setsFail": 2,
		"createSuccess": 2, "createFail": 1,
		"updateSuccess": 1, "updateFail": 1,
		"compareAndSwapSuccess": 2, "compareAndSwapFail": 1,
		"deleteSuccess": 2, "deleteFail": 1,
		"compareAndDeleteSuccess": 2, "compareAndDeleteFail": 1,
		"expireCount": 0, "watchers": 3,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stats/store\n got %v\nwant %v", got, want)
	}
}

func TestVersionReportsClusterVersionOrNotDecided(t *testing.T) {
	cases := []struct {
		name    string
		version string
		err     error
		want    map[string]string
	}{
		{"known", "3.5.17", nil, map[string]string{"etcdserver": "3.5.17", "etcdcluster": "3.5.0"}},
		{"store fails", "", errors.New("no member answers"), map[string]string{"etcdserver": "not_decided", "etcdcluster": "not_decided"}},
		{"no minor", "3", nil, map[string]string{"etcdserver": "3", "etcdcluster": "not_decided"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestServer(t, &fakeStore{version: c.version, versionErr: c.err})
			w := serve(s, "GET", "/version", "")
			if w.Code != 200 {
				t.Fatalf("status %d", w.Code)
			}
			var got map[string]string
			decodeJSON(t, w, &got)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("version %v, want %v", got, c.want)
			}
		})
	}
}

func TestProbesReportTheStore(t *testing.T) {
	cases := []struct {
		name   string
		st     *fakeStore
		path   string
		status int
		body   string
	}{
		{"health ok", &fakeStore{}, "/health", 200, "{\"health\":\"true\"}\n"},
		{"health failing", &fakeStore{healthErr: errors.New("no leader")}, "/health", 503, "{\"health\":\"false\"}\n"},
		{"live", &fakeStore{}, "/livez", 200, "ok\n"},
		{"wedged", &fakeStore{wedged: true}, "/livez", 503, "wedged\n"},
		{"ready", &fakeStore{}, "/readyz", 200, "ok\n"},
		{"not ready", &fakeStore{notReady: true}, "/readyz", 503, "not ready: backend or its watch unavailable\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestServer(t, c.st)
			for _, h := range []http.Handler{s, s.MetricsHandler()} {
				w := serve(h, "GET", c.path, "")
				if w.Code != c.status || w.Body.String() != c.body {
					t.Fatalf("got %d %q, want %d %q", w.Code, w.Body, c.status, c.body)
				}
			}
		})
	}
}

func TestMetricsHandlerServesOnlyProbesAndMetrics(t *testing.T) {
	s := newTestServer(t, &fakeStore{})
	h := s.MetricsHandler()
	for path, status := range map[string]int{"/metrics": 200, "/health": 200, "/livez": 200, "/readyz": 200,
		"/v2/keys/a": 404, "/v2/members": 404, "/version": 404} {
		if w := serve(h, "GET", path, ""); w.Code != status {
			t.Errorf("%s: status %d, want %d", path, w.Code, status)
		}
	}
	// Without a gatherer there is no /metrics.
	bare := New(Config{Store: &fakeStore{}})
	if w := serve(bare, "GET", "/metrics", ""); w.Code != 404 {
		t.Errorf("/metrics without a gatherer: status %d, want 404", w.Code)
	}
}

func TestMetricsCountKeysRequestsByActionAndCode(t *testing.T) {
	st := &fakeStore{getEv: &translate.Event{Action: "get", EtcdIndex: 4},
		writeErr: translate.NewError(translate.EcodeNodeExist, "/a", 4)}
	fw := newFakeWatch(4, 1)
	fw.events <- &translate.Event{Action: "set"}
	st.watch = fw
	s := newTestServer(t, st)
	serve(s, "GET", "/v2/keys/a", "")
	serve(s, "PUT", "/v2/keys/a?prevExist=false", "")
	serve(s, "GET", "/v2/keys/a?wait=true", "")
	serve(s, "PUT", "/v2/keys/a?ttl=x", "")
	body := serve(s, "GET", "/metrics", "").Body.String()
	for _, line := range []string{
		`v2bridge_http_requests_total{action="get",code="200",method="GET"} 1`,
		`v2bridge_http_requests_total{action="error",code="412",method="PUT"} 1`,
		`v2bridge_http_requests_total{action="error",code="400",method="PUT"} 1`,
		`v2bridge_http_requests_total{action="watch",code="200",method="GET"} 1`,
		`v2bridge_http_request_duration_seconds_count{action="get",method="GET"} 1`,
		`v2bridge_http_request_duration_seconds_count{action="error",method="PUT"} 2`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("metrics lack %s", line)
		}
	}
	if strings.Contains(body, `v2bridge_http_request_duration_seconds_count{action="watch"`) {
		t.Errorf("watches are timed:\n%s", body)
	}
}

func TestPprofIsServedOnlyWhenEnabled(t *testing.T) {
	on := newTestServer(t, &fakeStore{}, func(c *Config) { c.EnablePprof = true })
	off := newTestServer(t, &fakeStore{})
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap?debug=1"} {
		if w := serve(on, "GET", p, ""); w.Code != 200 {
			t.Errorf("enabled %s: status %d", p, w.Code)
		}
		if w := serve(off, "GET", p, ""); w.Code != 404 {
			t.Errorf("disabled %s: status %d", p, w.Code)
		}
	}
}

func TestNonCleanPathsAreRedirected(t *testing.T) {
	st := &fakeStore{}
	s := newTestServer(t, st)
	for target, loc := range map[string]string{
		"/v2/keys//a":      "/v2/keys/a",
		"/v2/keys/a/./b":   "/v2/keys/a/b",
		"/v2/keys/a/../b/": "/v2/keys/b/",
	} {
		w := serve(s, "GET", target, "")
		if w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != loc {
			t.Errorf("%s: %d Location %q, want 301 %q", target, w.Code, w.Header().Get("Location"), loc)
		}
	}
	if n := len(st.recorded()); n != 0 {
		t.Fatalf("store got %d calls for redirected requests", n)
	}
}

// TestKeysShortcutAnswersAsTheRouter: /v2/keys requests skip the router;
// every path answers as the router alone would answer it.
func TestKeysShortcutAnswersAsTheRouter(t *testing.T) {
	ev := &translate.Event{Action: "get", Node: &translate.Node{Key: "/a", Value: strp("v"), ModifiedIndex: 5, CreatedIndex: 5}, EtcdIndex: 5}
	for _, target := range []string{"/v2/keys", "/v2/keys/", "/v2/keys/a", "/v2/keys/a/", "/v2/keys/a/b?recursive=true",
		"/v2/keysa", "/v2/key", "/v2/keys//a", "/v2/keys/a/./b", "/v2/keys/../keys/a", "/v2/keys/a/..", "/v2/keys/.",
		"/v2/keys/%2F", "/v2/members", "/v2/../v2/keys/a"} {
		direct, routed := &fakeStore{getEv: ev}, &fakeStore{getEv: ev}
		w1 := serve(newTestServer(t, direct), "GET", target, "")
		w2 := httptest.NewRecorder()
		newTestServer(t, routed).router.ServeHTTP(w2, httptest.NewRequest("GET", target, nil))
		if w1.Code != w2.Code || w1.Header().Get("Location") != w2.Header().Get("Location") || w1.Body.String() != w2.Body.String() ||
			len(direct.recorded()) != len(routed.recorded()) {
			t.Errorf("%s: %d %q %q (store calls %d), the router %d %q %q (%d)", target, w1.Code, w1.Header().Get("Location"), w1.Body,
				len(direct.recorded()), w2.Code, w2.Header().Get("Location"), w2.Body, len(routed.recorded()))
		}
	}
}
