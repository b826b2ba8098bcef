// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/v2bridge/v2bridge/translate"
)

// v2ErrorJSON is the error body v2 writes, built independently of the code
// under test: field order errorCode, message, cause (omitted when empty),
// index (always), and a trailing newline.
func v2ErrorJSON(code int, message, cause string, index uint64) string {
	b, err := json.Marshal(struct {
		Code    int    `json:"errorCode"`
		Message string `json:"message"`
		Cause   string `json:"cause,omitempty"`
		Index   uint64 `json:"index"`
	}{code, message, cause, index})
	if err != nil {
		panic(err)
	}
	return string(b) + "\n"
}

// errUnavailable stands for the backend's "no member answers" error.
var errUnavailable = errors.New("v2bridge: etcd v3 backend is unavailable")

func strp(s string) *string { return &s }
func u64p(n uint64) *uint64 { return &n }
func boolp(b bool) *bool    { return &b }

func TestKeysRequestErrorsAnswerV2ErrorJSONWithoutTheStore(t *testing.T) {
	deep := strings.Repeat("/a", translate.MaxKeyDepth+1)
	long := "/" + strings.Repeat("k", translate.MaxKeyBytes)
	cases := []struct {
		name, method, target, body, contentType string
		code                                    int
		message, cause                          string
	}{
		{"bad query escape", "GET", "/v2/keys/a?x=%zz", "", "", 210, "Invalid POST form", `invalid URL escape "%zz"`},
		{"semicolon in query", "GET", "/v2/keys/a?x=1;y=2", "", "", 210, "Invalid POST form", "invalid semicolon separator in query"},
		{"bad body escape", "PUT", "/v2/keys/a", "value=%zz", "", 210, "Invalid POST form", `invalid URL escape "%zz"`},
		{"bad content type", "POST", "/v2/keys/a", "value=v", "application/x-www-form-urlencoded; =x", 210, "Invalid POST form", "mime: invalid media parameter"},
		{"ttl not a number", "PUT", "/v2/keys/a?ttl=abc", "", "", 202, "The given TTL in POST form is not a number", `invalid value for "ttl"`},
		{"negative ttl", "PUT", "/v2/keys/a", "ttl=-1", "", 202, "The given TTL in POST form is not a number", `invalid value for "ttl"`},
		{"bad prevIndex", "PUT", "/v2/keys/a?prevIndex=x", "", "", 203, "The given index in POST form is not a number", `invalid value for "prevIndex"`},
		{"bad prevIndex on DELETE", "DELETE", "/v2/keys/a?prevIndex=-2", "", "", 203, "The given index in POST form is not a number", `invalid value for "prevIndex"`},
		{"bad waitIndex", "GET", "/v2/keys/a?wait=true&waitIndex=-1", "", "", 203, "The given index in POST form is not a number", `invalid value for "waitIndex"`},
		{"bad recursive", "GET", "/v2/keys/a?recursive=yes", "", "", 209, "Invalid field", `invalid value for "recursive"`},
		{"bad sorted", "GET", "/v2/keys/a?sorted=2", "", "", 209, "Invalid field", `invalid value for "sorted"`},
		{"bad wait", "GET", "/v2/keys/a?wait=maybe", "", "", 209, "Invalid field", `invalid value for "wait"`},
		{"bad dir", "PUT", "/v2/keys/a?dir=x", "", "", 209, "Invalid field", `invalid value for "dir"`},
		{"bad quorum", "GET", "/v2/keys/a?quorum=", "", "", 209, "Invalid field", `invalid value for "quorum"`},
		{"bad stream", "GET", "/v2/keys/a?wait=true&stream=on", "", "", 209, "Invalid field", `invalid value for "stream"`},
		{"bad noValueOnSuccess", "PUT", "/v2/keys/a?noValueOnSuccess=y", "", "", 209, "Invalid field", `invalid value for "noValueOnSuccess"`},
		{"bad prevExist", "PUT", "/v2/keys/a?prevExist=x", "", "", 209, "Invalid field", "invalid value for prevExist"},
		{"bad refresh", "PUT", "/v2/keys/a?refresh=x", "", "", 209, "Invalid field", "invalid value for refresh"},
		{"wait on PUT", "PUT", "/v2/keys/a?wait=true", "", "", 209, "Invalid field", `"wait" can only be used with GET requests`},
		{"wait on HEAD", "HEAD", "/v2/keys/a?wait=true", "", "", 209, "Invalid field", `"wait" can only be used with GET requests`},
		{"empty prevValue", "PUT", "/v2/keys/a?prevValue=", "", "", 201, "PrevValue is Required in POST form", `"prevValue" cannot be empty`},
		{"refresh with a value", "PUT", "/v2/keys/a", "refresh=true&ttl=5&value=v", "", 211, "Value provided on refresh", "A value was provided on a refresh"},
		{"refresh without ttl", "PUT", "/v2/keys/a?refresh=true", "", "", 212, "A TTL must be provided on refresh", "No TTL value set"},
		{"control character in key", "GET", "/v2/keys/a%01b", "", "", 209, "Invalid field", "key contains a control character"},
		{"key not UTF-8", "PUT", "/v2/keys/%ff", "", "", 209, "Invalid field", "key is not valid UTF-8"},
		{"key too long", "PUT", "/v2/keys" + long, "", "", 209, "Invalid field", "key is longer than 4096 bytes"},
		{"key too deep", "PUT", "/v2/keys" + deep, "", "", 209, "Invalid field", "key is deeper than 48 levels"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &fakeStore{storeMeta: Meta{ClusterID: 0xdead}}
			s := newTestServer(t, st)
			r := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
			if c.body != "" {
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			if c.contentType != "" {
				r.Header.Set("Content-Type", c.contentType)
			}
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			checkV2Error(t, w, http.StatusBadRequest, v2ErrorJSON(c.code, c.message, c.cause, 0), "dead")
			if n := len(st.recorded()); n != 0 {
				t.Fatalf("the store got %d calls for a refused request", n)
			}
		})
	}
}

func TestKeysFormLargerThan10MBIsInvalidForm(t *testing.T) {
	st := &fakeStore{}
	s := newTestServer(t, st)
	w := serve(s, "PUT", "/v2/keys/a", "value="+strings.Repeat("v", 10<<20))
	checkV2Error(t, w, http.StatusBadRequest, v2ErrorJSON(210, "Invalid POST form", "http: POST too large", 0), "0")
	if n := len(st.recorded()); n != 0 {
		t.Fatalf("the store got %d calls", n)
	}
}

// checkV2Error checks an error answer: status, exact body, X-Etcd-Index from
// the body's index, the cluster id, and no X-Raft-* headers.
func checkV2Error(t *testing.T, rec *httptest.ResponseRecorder, status int, body, clusterID string) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %q", rec.Code, status, rec.Body)
	}
	if rec.Body.String() != body {
		t.Fatalf("body\n %q\nwant\n %q", rec.Body, body)
	}
	var e struct{ Index uint64 }
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatal(err)
	}
	h := rec.Header()
	if got, want := h.Values("X-Etcd-Index"), []string{strconv.FormatUint(e.Index, 10)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("X-Etcd-Index %q, want %q", got, want)
	}
	if got := h.Get("Content-Type"); got != "application/json" {
		t.Fatalf("Content-Type %q", got)
	}
	if got := h.Get("X-Etcd-Cluster-Id"); got != clusterID {
		t.Fatalf("X-Etcd-Cluster-Id %q, want %q", got, clusterID)
	}
	if h.Get("X-Raft-Index") != "" || h.Get("X-Raft-Term") != "" {
		t.Fatalf("error carries X-Raft-* headers: %v", h)
	}
}

func TestKeysErrorAnswersCarryV2ErrorJSON(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		status int
		body   string
	}{
		{"key not found", translate.NewError(100, "/a", 7), 404, v2ErrorJSON(100, "Key not found", "/a", 7)},
		{"compare failed", translate.NewError(101, "[x != y]", 7), 412, v2ErrorJSON(101, "Compare failed", "[x != y]", 7)},
		{"not a file", translate.NewError(102, "/d", 7), 403, v2ErrorJSON(102, "Not a file", "/d", 7)},
		{"not a directory", translate.NewError(104, "/f", 7), 400, v2ErrorJSON(104, "Not a directory", "/f", 7)},
		{"key exists", translate.NewError(105, "/a", 7), 412, v2ErrorJSON(105, "Key already exists", "/a", 7)},
		{"root read only", translate.NewError(107, "/", 7), 400, v2ErrorJSON(107, "Root is read only", "/", 7)},
		{"directory not empty", translate.NewError(108, "/d", 7), 403, v2ErrorJSON(108, "Directory not empty", "/d", 7)},
		{"unauthorized", translate.NewError(110, "Insufficient credentials", 0), 401,
			v2ErrorJSON(110, "The request requires user authentication", "Insufficient credentials", 0)},
		{"leader election", translate.NewError(301, "", 7), 500, v2ErrorJSON(301, "During Leader Election", "", 7)},
		{"history cleared", translate.NewError(401, "the requested history has been cleared [9/2]", 30), 400,
			v2ErrorJSON(401, "The event in requested index is outdated and cleared", "the requested history has been cleared [9/2]", 30)},
		{"wrapped v2 error", fmt.Errorf("backend: %w", translate.NewError(100, "/b", 9)), 404, v2ErrorJSON(100, "Key not found", "/b", 9)},
		{"unavailable backend", errUnavailable, 500, v2ErrorJSON(300, "Raft Internal Error", errUnavailable.Error(), 0)},
		{"wrapped unavailable", fmt.Errorf("get /a: %w", errUnavailable), 500,
			v2ErrorJSON(300, "Raft Internal Error", "get /a: "+errUnavailable.Error(), 0)},
		{"deadline", context.DeadlineExceeded, 500, v2ErrorJSON(300, "Raft Internal Error", "context deadline exceeded", 0)},
		{"request too large", errors.New("etcdserver: request is too large"), 500,
			v2ErrorJSON(300, "Raft Internal Error", "etcdserver: request is too large", 0)},
	}
	for _, c := range cases {
		for _, m := range []struct{ method, target, op string }{
			{"GET", "/v2/keys/a?recursive=true", "get"},
			{"GET", "/v2/keys/a?wait=true&quorum=true", "get"},
			{"HEAD", "/v2/keys/a", "get"},
			{"PUT", "/v2/keys/a?value=v", "write"},
			{"POST", "/v2/keys/a?value=v", "write"},
			{"DELETE", "/v2/keys/a", "write"},
		} {
			t.Run(c.name+" "+m.method, func(t *testing.T) {
				st := &fakeStore{getErr: c.err, writeErr: c.err, storeMeta: Meta{ClusterID: 0xdead},
					meta: Meta{ClusterID: 0xbeef, RaftTerm: 3}}
				s := newTestServer(t, st)
				w := serve(s, m.method, m.target, "")
				checkV2Error(t, w, c.status, c.body, "dead")
				if got := st.only(t).op; got != m.op {
					t.Fatalf("store op %q, want %q", got, m.op)
				}
			})
		}
	}
}

func TestKeysSuccessCarriesIndexRaftAndClusterHeaders(t *testing.T) {
	node := &translate.Node{Key: "/a", Value: strp("v"), ModifiedIndex: 42, CreatedIndex: 42}
	prev := &translate.Node{Key: "/a", Value: strp("old"), ModifiedIndex: 40, CreatedIndex: 38}
	const nodeJSON = `"node":{"key":"/a","value":"v","modifiedIndex":42,"createdIndex":42}`
	const prevJSON = `"prevNode":{"key":"/a","value":"old","modifiedIndex":40,"createdIndex":38}`
	cases := []struct {
		name   string
		method string
		ev     *translate.Event
		status int
		body   string
	}{
		{"get", "GET", &translate.Event{Action: "get", Node: node}, 200, `{"action":"get",` + nodeJSON + `}`},
		{"head", "HEAD", &translate.Event{Action: "get", Node: node}, 200, `{"action":"get",` + nodeJSON + `}`},
		{"set of a new key", "PUT", &translate.Event{Action: "set", Node: node}, 201, `{"action":"set",` + nodeJSON + `}`},
		{"set over a key", "PUT", &translate.Event{Action: "set", Node: node, PrevNode: prev}, 200,
			`{"action":"set",` + nodeJSON + `,` + prevJSON + `}`},
		{"create", "PUT", &translate.Event{Action: "create", Node: node}, 201, `{"action":"create",` + nodeJSON + `}`},
		{"in-order create", "POST", &translate.Event{Action: "create", Node: node}, 201, `{"action":"create",` + nodeJSON + `}`},
		{"update", "PUT", &translate.Event{Action: "update", Node: node, PrevNode: prev}, 200,
			`{"action":"update",` + nodeJSON + `,` + prevJSON + `}`},
		{"compareAndSwap", "PUT", &translate.Event{Action: "compareAndSwap", Node: node, PrevNode: prev}, 200,
			`{"action":"compareAndSwap",` + nodeJSON + `,` + prevJSON + `}`},
		{"delete", "DELETE", &translate.Event{Action: "delete", Node: &translate.Node{Key: "/a", ModifiedIndex: 42, CreatedIndex: 38}, PrevNode: prev}, 200,
			`{"action":"delete","node":{"key":"/a","modifiedIndex":42,"createdIndex":38},` + prevJSON + `}`},
		{"compareAndDelete", "DELETE", &translate.Event{Action: "compareAndDelete", Node: &translate.Node{Key: "/a", ModifiedIndex: 42, CreatedIndex: 38}, PrevNode: prev}, 200,
			`{"action":"compareAndDelete","node":{"key":"/a","modifiedIndex":42,"createdIndex":38},` + prevJSON + `}`},
		{"root get", "GET", &translate.Event{Action: "get", Node: &translate.Node{Dir: true}}, 200, `{"action":"get","node":{"dir":true}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := *c.ev
			ev.EtcdIndex = 42
			st := &fakeStore{getEv: &ev, writeEv: &ev, meta: Meta{ClusterID: 0xbeef, MemberID: 5, RaftTerm: 9},
				storeMeta: Meta{ClusterID: 0xdead}}
			s := newTestServer(t, st)
			w := serve(s, c.method, "/v2/keys/a", "")
			if w.Code != c.status {
				t.Fatalf("status %d, want %d", w.Code, c.status)
			}
			if got, want := w.Body.String(), c.body+"\n"; got != want {
				t.Fatalf("body\n %s\nwant\n %s", got, want)
			}
			for h, want := range map[string]string{"Content-Type": "application/json", "X-Etcd-Index": "42",
				"X-Raft-Index": "42", "X-Raft-Term": "9", "X-Etcd-Cluster-Id": "beef"} {
				if got := w.Header().Values(h); len(got) != 1 || got[0] != want {
					t.Errorf("%s %q, want %q", h, got, want)
				}
			}
		})
	}
}

func TestKeysNoValueOnSuccessKeepsOnlyTheActionOfWrites(t *testing.T) {
	node := &translate.Node{Key: "/a", Value: strp("v"), ModifiedIndex: 5, CreatedIndex: 5}
	prev := &translate.Node{Key: "/a", Value: strp("old"), ModifiedIndex: 4, CreatedIndex: 4}
	cases := []struct {
		method, action string
		status         int
		stripped       bool
	}{
		{"PUT", "set", 200, true},
		{"PUT", "create", 201, true},
		{"POST", "create", 201, true},
		{"PUT", "update", 200, true},
		{"PUT", "compareAndSwap", 200, true},
		{"DELETE", "delete", 200, false},
		{"DELETE", "compareAndDelete", 200, false},
		{"GET", "get", 200, false},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.action, func(t *testing.T) {
			ev := &translate.Event{Action: c.action, Node: node, PrevNode: prev, EtcdIndex: 5}
			st := &fakeStore{getEv: ev, writeEv: ev}
			s := newTestServer(t, st)
			w := serve(s, c.method, "/v2/keys/a?noValueOnSuccess=true", "")
			if w.Code != c.status {
				t.Fatalf("status %d, want %d", w.Code, c.status)
			}
			want := `{"action":"` + c.action + `"}` + "\n"
			if !c.stripped {
				b, _ := json.Marshal(ev)
				want = string(b) + "\n"
			}
			if got := w.Body.String(); got != want {
				t.Fatalf("body %s, want %s", got, want)
			}
			if w.Header().Get("X-Etcd-Index") != "5" {
				t.Fatalf("X-Etcd-Index %q", w.Header().Get("X-Etcd-Index"))
			}
			if !st.only(t).req.NoValueOnSuccess {
				t.Fatal("the store did not see noValueOnSuccess")
			}
		})
	}
}

func TestKeysHandTheParsedRequestToTheStore(t *testing.T) {
	cases := []struct {
		name, method, target, body string
		op                         string
		want                       translate.Request
	}{
		{"root", "GET", "/v2/keys", "", "get", translate.Request{Method: "GET", Path: "/"}},
		{"root slash", "GET", "/v2/keys/", "", "get", translate.Request{Method: "GET", Path: "/"}},
		{"trailing slash dropped", "GET", "/v2/keys/a/b/", "", "get", translate.Request{Method: "GET", Path: "/a/b"}},
		{"escaped key", "GET", "/v2/keys/a%20b/%5Fc", "", "get", translate.Request{Method: "GET", Path: "/a b/_c"}},
		{"get flags", "GET", "/v2/keys/d?recursive=true&sorted=1&quorum=T", "", "get",
			translate.Request{Method: "GET", Path: "/d", Recursive: true, Sorted: true, Quorum: true}},
		{"head", "HEAD", "/v2/keys/a", "", "get", translate.Request{Method: "HEAD", Path: "/a"}},
		{"quorum wait is a get", "GET", "/v2/keys/a?wait=true&quorum=true", "", "get",
			translate.Request{Method: "GET", Path: "/a", Wait: true, Quorum: true}},
		{"watch", "GET", "/v2/keys/a?wait=true&waitIndex=12&recursive=true&stream=true", "", "watch",
			translate.Request{Method: "GET", Path: "/a", Wait: true, WaitIndex: 12, Recursive: true, Stream: true}},
		{"put from the body", "PUT", "/v2/keys/a", "value=v&ttl=5&prevExist=false", "write",
			translate.Request{Method: "PUT", Path: "/a", Value: "v", TTL: u64p(5), PrevExist: boolp(false)}},
		{"body wins over query", "PUT", "/v2/keys/a?value=q&ttl=1", "value=b", "write",
			translate.Request{Method: "PUT", Path: "/a", Value: "b", TTL: u64p(1)}},
		{"first value counts", "PUT", "/v2/keys/a?value=x&value=y", "", "write", translate.Request{Method: "PUT", Path: "/a", Value: "x"}},
		{"empty ttl is permanent", "PUT", "/v2/keys/a?ttl=", "", "write", translate.Request{Method: "PUT", Path: "/a"}},
		{"missing value is empty", "PUT", "/v2/keys/a?dir=true", "", "write", translate.Request{Method: "PUT", Path: "/a", Dir: true}},
		{"cas", "PUT", "/v2/keys/a?prevValue=o&prevIndex=4&value=n", "", "write",
			translate.Request{Method: "PUT", Path: "/a", Value: "n", PrevValue: "o", PrevIndex: 4}},
		{"refresh", "PUT", "/v2/keys/a?refresh=true&ttl=9&prevExist=true", "", "write",
			translate.Request{Method: "PUT", Path: "/a", Refresh: true, TTL: u64p(9), PrevExist: boolp(true)}},
		{"post", "POST", "/v2/keys/q", "value=job", "write", translate.Request{Method: "POST", Path: "/q", Value: "job"}},
		{"delete ignores its body", "DELETE", "/v2/keys/a?recursive=true", "prevValue=x", "write",
			translate.Request{Method: "DELETE", Path: "/a", Recursive: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := &translate.Event{Action: "get"}
			fw := newFakeWatch(1, 1)
			fw.end()
			st := &fakeStore{getEv: ev, writeEv: ev, watch: fw}
			s := newTestServer(t, st)
			w := serve(s, c.method, c.target, c.body)
			if w.Code != 200 {
				t.Fatalf("status %d; body %q", w.Code, w.Body)
			}
			got := st.only(t)
			if got.op != c.op {
				t.Fatalf("store op %q, want %q", got.op, c.op)
			}
			if !reflect.DeepEqual(*got.req, c.want) {
				t.Fatalf("request\n %+v\nwant\n %+v", *got.req, c.want)
			}
		})
	}
}
