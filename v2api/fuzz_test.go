// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/translate"
)

// fuzzStore answers every request: a value starting with "err" gets a v2
// error, one starting with "fail" a plain error, anything else an event
// shaped by the method; a watch has its one event queued and is done.
func fuzzStore() *fakeStore {
	return &fakeStore{
		meta:      Meta{ClusterID: 0xfeed, RaftTerm: 2},
		storeMeta: Meta{ClusterID: 0xfeed},
		answer: func(op string, r *translate.Request) (*translate.Event, error) {
			switch {
			case strings.HasPrefix(r.Value, "err"):
				return nil, translate.NewError(100+len(r.Value)%10, r.Path, 9)
			case strings.HasPrefix(r.Value, "fail"):
				return nil, errors.New("backend: " + r.Value)
			}
			node := &translate.Node{Key: r.Path, Value: strp(r.Value), Dir: r.Dir, ModifiedIndex: 9, CreatedIndex: 9}
			ev := &translate.Event{Action: "set", Node: node, EtcdIndex: 9}
			switch r.Method {
			case "GET", "HEAD":
				ev.Action = "get"
			case "POST":
				ev.Action = "create"
			case "DELETE":
				ev.Action, ev.PrevNode = "delete", node
			default:
				if r.Value != "" {
					ev.PrevNode = node
				}
			}
			return ev, nil
		},
		newWatch: func() *fakeWatch {
			fw := newFakeWatch(8, 1)
			fw.events <- &translate.Event{Action: "set", Node: &translate.Node{Key: "/w", Value: strp("v"),
				ModifiedIndex: 9, CreatedIndex: 9}, EtcdIndex: 9}
			fw.end()
			return fw
		},
	}
}

// FuzzKeys sends arbitrary requests through the whole handler: it must not
// panic, must answer with a real HTTP status, and whatever /v2/keys answers
// must be v2's: an error as v2 error JSON, a success as an event.
func FuzzKeys(f *testing.F) {
	for _, s := range []struct{ method, path, query, body string }{
		{"GET", "/v2/keys", "", ""},
		{"GET", "/v2/keys/", "recursive=true&sorted=true", ""},
		{"GET", "/v2/keys/a/b", "quorum=true", ""},
		{"HEAD", "/v2/keys/a", "", ""},
		{"GET", "/v2/keys/a", "value=err", ""},
		{"GET", "/v2/keys/a", "value=fail", ""},
		{"PUT", "/v2/keys/a", "", "value=v&ttl=5"},
		{"PUT", "/v2/keys/a", "value=q", "value=errx"},
		{"PUT", "/v2/keys/a", "prevExist=false", "value=fail"},
		{"PUT", "/v2/keys/a", "prevValue=x&prevIndex=3", "value=n"},
		{"PUT", "/v2/keys/a", "noValueOnSuccess=true", "value=v"},
		{"PUT", "/v2/keys/a", "refresh=true&ttl=5", ""},
		{"PUT", "/v2/keys/a", "refresh=true", ""},
		{"PUT", "/v2/keys/a", "", "refresh=true&ttl=1&value=v"},
		{"PUT", "/v2/keys/a", "ttl=-1", ""},
		{"PUT", "/v2/keys/a", "prevIndex=x", ""},
		{"PUT", "/v2/keys/a", "prevValue=", ""},
		{"PUT", "/v2/keys/a", "prevExist=maybe", ""},
		{"PUT", "/v2/keys/a", "wait=true", ""},
		{"PUT", "/v2/keys/a", "", "value=%zz"},
		{"POST", "/v2/keys/queue", "", "value=job"},
		{"DELETE", "/v2/keys/a", "recursive=true&dir=true", ""},
		{"DELETE", "/v2/keys/a", "prevIndex=4", "prevValue=x"},
		{"GET", "/v2/keys/a", "wait=true&waitIndex=4", ""},
		{"GET", "/v2/keys/a", "wait=true&stream=true&recursive=true", ""},
		{"GET", "/v2/keys/a", "wait=true&waitIndex=-1", ""},
		{"GET", "/v2/keys/a", "wait=true&quorum=true", ""},
		{"GET", "/v2/keys/a", "x=%zz", ""},
		{"GET", "/v2/keys/a", "a=1;b=2", ""},
		{"GET", "/v2/keys//a/../b/./", "", ""},
		{"GET", "/v2/keys/a\x01b", "", ""},
		{"GET", "/v2/keys/\xff", "", ""},
		{"GET", "/v2/keys/" + strings.Repeat("a/", 60), "", ""},
		{"GET", "/v2/keys/_hidden", "", ""},
		{"PATCH", "/v2/keys/a", "", "value=v"},
		{"", "/v2/keys/a", "", ""},
		{"BREW", "v2/keys", "", ""},
		{"GET", "", "", ""},
		{"GET", "/v2/members", "", ""},
		{"DELETE", "/v2/members/leader", "", ""},
		{"GET", "/v2/stats/store", "", ""},
		{"GET", "/version", "", ""},
		{"POST", "/health", "", ""},
	} {
		f.Add(s.method, s.path, s.query, s.body)
	}
	f.Fuzz(func(t *testing.T, method, p, query, body string) {
		st := fuzzStore()
		s := New(Config{Store: st, AdvertiseURLs: testURLs})
		r := &http.Request{Method: method, URL: &url.URL{Path: p, RawQuery: query}, Proto: "HTTP/1.1",
			ProtoMajor: 1, ProtoMinor: 1, Host: "bridge", ContentLength: int64(len(body)),
			Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}},
			Body:   io.NopCloser(strings.NewReader(body))}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)

		if w.Code < 100 || w.Code > 599 || http.StatusText(w.Code) == "" {
			t.Fatalf("%s %q?%q: status %d", method, p, query, w.Code)
		}
		for _, c := range st.recorded() {
			if c.req.Method != method || !strings.HasPrefix(c.req.Path, "/") || path.Clean(c.req.Path) != c.req.Path {
				t.Fatalf("%s %q: the store got %s %q", method, p, c.req.Method, c.req.Path)
			}
		}
		if p != "/v2/keys" && !strings.HasPrefix(p, "/v2/keys/") || w.Code == http.StatusMovedPermanently {
			return
		}
		h := w.Header()
		switch {
		case w.Code == http.StatusMethodNotAllowed:
			if h.Get("Allow") == "" {
				t.Fatalf("%s %q: 405 without Allow", method, p)
			}
		case w.Code >= 400:
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("%s %q?%q: %d with Content-Type %q", method, p, query, w.Code, ct)
			}
			var e struct {
				ErrorCode int     `json:"errorCode"`
				Message   string  `json:"message"`
				Index     *uint64 `json:"index"`
			}
			if err := decodeOne(w.Body.Bytes(), &e); err != nil {
				t.Fatalf("%s %q?%q: %d body %q: %v", method, p, query, w.Code, w.Body, err)
			}
			if e.ErrorCode == 0 || e.Message == "" || e.Index == nil {
				t.Fatalf("%s %q?%q: %d body %q is not a v2 error", method, p, query, w.Code, w.Body)
			}
			if h.Get("X-Etcd-Index") != strconv.FormatUint(*e.Index, 10) || h.Get("X-Etcd-Cluster-Id") != "feed" {
				t.Fatalf("%s %q?%q: error headers %v", method, p, query, h)
			}
		default:
			var ev translate.Event
			if err := decodeOne(w.Body.Bytes(), &ev); err != nil || ev.Action == "" {
				t.Fatalf("%s %q?%q: %d body %q is not an event: %v", method, p, query, w.Code, w.Body, err)
			}
			if h.Get("X-Etcd-Index") == "" || h.Get("Content-Type") != "application/json" {
				t.Fatalf("%s %q?%q: success headers %v", method, p, query, h)
			}
		}
	})
}

// decodeOne decodes a body that must be exactly one JSON object and a newline.
func decodeOne(b []byte, v any) error {
	if !bytes.HasSuffix(b, []byte("\n")) || bytes.Count(b, []byte("\n")) != 1 {
		return errors.New("not one line")
	}
	return json.Unmarshal(b, v)
}

// FuzzAuth sends arbitrary requests to the auth API: it must not panic, and
// every answer must be v2's: a plain 404 or 405 (with Allow), a {"message"}
// refusal, v2 error JSON, or the JSON of what was asked.
func FuzzAuth(f *testing.F) {
	for _, s := range []struct{ method, path, auth, body string }{
		{"GET", "/v2/auth/enable", "", ""},
		{"PUT", "/v2/auth/enable", "Basic cm9vdDpw", ""},
		{"DELETE", "/v2/auth/enable", "x", ""},
		{"GET", "/v2/auth/users", "", ""},
		{"GET", "/v2/auth/users/", "", ""},
		{"GET", "/v2/auth/users/u", "", ""},
		{"PUT", "/v2/auth/users/u", "", `{"user":"u","password":"p","roles":["r"]}`},
		{"PUT", "/v2/auth/users/u", "", `{"user":"u","grant":["r"],"revoke":["x"]}`},
		{"PUT", "/v2/auth/users/u", "", `{"user":"u","roles":["r"],"grant":["r"]}`},
		{"PUT", "/v2/auth/users/u", "", `{"user":"v"}`},
		{"PUT", "/v2/auth/users/u", "", `{`},
		{"DELETE", "/v2/auth/users/u", "", ""},
		{"GET", "/v2/auth/roles", "", ""},
		{"GET", "/v2/auth/roles/root", "", ""},
		{"PUT", "/v2/auth/roles/r", "", `{"role":"r","permissions":{"kv":{"read":["/a/*"]}}}`},
		{"PUT", "/v2/auth/roles/r", "", `{"role":"r","grant":{"kv":{"write":["/b"]}},"revoke":null}`},
		{"PUT", "/v2/auth/roles/r", "", `{"role":"r","permissions":{"kv":{"read":["/a"]}},"grant":{"kv":{"read":["/b"]}}}`},
		{"DELETE", "/v2/auth/roles/r", "", ""},
		{"POST", "/v2/auth/roles/r/x", "", ""},
		{"GET", "/v2/auth//users/../roles", "", ""},
		{"GET", "/v2/auth/other", "", ""},
		{"PATCH", "/v2/auth/users", "", ""},
		{"POST", "/v2/members", "", `{"peerURLs":["http://a:1"]}`},
	} {
		f.Add(s.method, s.path, s.auth, s.body)
	}
	f.Fuzz(func(t *testing.T, method, p, authz, body string) {
		fa := &fakeAuth{state: testState()}
		// The credential decides: none is root, anything else is not.
		if authz != "" {
			fa.root = auth.Deny
			if strings.HasPrefix(authz, "unavailable") {
				fa.root, fa.state = auth.Unavailable, nil
			}
		}
		if strings.HasPrefix(body, "{\"e") {
			fa.err = &auth.Error{Status: 409, Message: "auth: " + body}
		}
		fa.putUser = auth.User{User: "u", Password: "hash", Roles: []string{"r"}}
		fa.putRole = auth.Role{Role: "r"}
		s := New(Config{Store: fuzzStore(), AdvertiseURLs: testURLs, Auth: fa})
		r := &http.Request{Method: method, URL: &url.URL{Path: p}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Host: "bridge", ContentLength: int64(len(body)), Header: http.Header{"Authorization": {authz}},
			Body: io.NopCloser(strings.NewReader(body))}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)

		if w.Code < 100 || w.Code > 599 || http.StatusText(w.Code) == "" {
			t.Fatalf("%s %q: status %d", method, p, w.Code)
		}
		if strings.Contains(w.Body.String(), "hash") {
			t.Fatalf("%s %q: a password hash shows: %q", method, p, w.Body)
		}
		if !strings.HasPrefix(p, "/v2/auth/") || w.Code == http.StatusMovedPermanently ||
			w.Code == http.StatusNotFound && w.Body.String() == "404 page not found\n" {
			return
		}
		h := w.Header()
		var m map[string]any
		switch {
		case w.Code == http.StatusMethodNotAllowed:
			if h.Get("Allow") == "" || w.Body.String() != "Method Not Allowed\n" {
				t.Fatalf("%s %q: 405 %q without Allow", method, p, w.Body)
			}
		case h.Get("Content-Type") != "application/json":
			t.Fatalf("%s %q: %d with Content-Type %q", method, p, w.Code, h.Get("Content-Type"))
		case w.Code == http.StatusOK && w.Body.Len() == 0: // a delete, enable or disable
		case json.Unmarshal(w.Body.Bytes(), &m) != nil:
			t.Fatalf("%s %q: %d body %q is not JSON", method, p, w.Code, w.Body)
		case w.Code >= 400 && m["message"] == nil:
			t.Fatalf("%s %q: %d body %q is neither a refusal nor a v2 error", method, p, w.Code, w.Body)
		}
	})
}
