// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestParseRequest(t *testing.T) {
	cases := []struct {
		name, method, path, query string
		code                      int
		cause                     string
		check                     func(*Request) bool
	}{
		{"root", "GET", "", "", 0, "", func(r *Request) bool { return r.Path == "/" }},
		{"root slash", "GET", "/", "", 0, "", func(r *Request) bool { return r.Path == "/" }},
		{"trailing slash dropped", "GET", "/a/b/", "", 0, "", func(r *Request) bool { return r.Path == "/a/b" }},
		{"dotdot cleaned inside", "GET", "/a/../../b", "", 0, "", func(r *Request) bool { return r.Path == "/b" }},
		{"bools", "GET", "/a", "recursive=1&sorted=T&quorum=true", 0, "", func(r *Request) bool {
			return r.Recursive && r.Sorted && r.Quorum && !r.Wait
		}},
		{"first value counts", "GET", "/a", "recursive=true&recursive=bad", 0, "", func(r *Request) bool { return r.Recursive }},
		{"empty ttl is permanent", "PUT", "/a", "ttl=", 0, "", func(r *Request) bool { return r.TTL == nil }},
		{"ttl", "PUT", "/a", "ttl=7", 0, "", func(r *Request) bool { return r.TTL != nil && *r.TTL == 7 }},
		{"prevExist three states", "PUT", "/a", "prevExist=false", 0, "", func(r *Request) bool {
			return r.PrevExist != nil && !*r.PrevExist
		}},
		{"quorum wait is not a watch", "GET", "/a", "wait=true&quorum=true", 0, "", func(r *Request) bool { return !r.IsWatch() }},
		{"wait is a watch", "GET", "/a", "wait=true&waitIndex=5", 0, "", func(r *Request) bool { return r.IsWatch() && r.WaitIndex == 5 }},
		{"refresh", "PUT", "/a", "refresh=true&ttl=5&value=", 0, "", func(r *Request) bool { return r.Refresh }},
		{"bad prevIndex", "PUT", "/a", "prevIndex=x", EcodeIndexNaN, `invalid value for "prevIndex"`, nil},
		{"empty prevIndex", "PUT", "/a", "prevIndex=", EcodeIndexNaN, `invalid value for "prevIndex"`, nil},
		{"bad waitIndex", "GET", "/a", "waitIndex=-1", EcodeIndexNaN, `invalid value for "waitIndex"`, nil},
		{"bad recursive", "GET", "/a", "recursive=yes", EcodeInvalidField, `invalid value for "recursive"`, nil},
		{"empty bool", "GET", "/a", "sorted=", EcodeInvalidField, `invalid value for "sorted"`, nil},
		{"wait on DELETE", "DELETE", "/a", "wait=true", EcodeInvalidField, `"wait" can only be used with GET requests`, nil},
		{"empty prevValue", "PUT", "/a", "prevValue=", EcodePrevValueRequired, `"prevValue" cannot be empty`, nil},
		{"bad ttl", "PUT", "/a", "ttl=1.5", EcodeTTLNaN, `invalid value for "ttl"`, nil},
		{"bad prevExist", "PUT", "/a", "prevExist=", EcodeInvalidField, "invalid value for prevExist", nil},
		{"refresh value", "PUT", "/a", "refresh=true&ttl=1&value=x", EcodeRefreshValue, "A value was provided on a refresh", nil},
		{"refresh no ttl", "PUT", "/a", "refresh=true", EcodeRefreshTTLRequired, "No TTL value set", nil},
		{"index checked before bools", "PUT", "/a", "prevIndex=x&recursive=x", EcodeIndexNaN, `invalid value for "prevIndex"`, nil},
		{"control char", "GET", "/a\x01", "", EcodeInvalidField, "key contains a control character", nil},
		{"invalid utf8", "GET", "/a\xff", "", EcodeInvalidField, "key is not valid UTF-8", nil},
		{"invalid utf8 value set", "PUT", "/a", "value=a%FFb", EcodeInvalidField, "value is not valid UTF-8", nil},
		{"invalid utf8 value swapped", "PUT", "/a", "value=%C3&prevValue=x", EcodeInvalidField, "value is not valid UTF-8", nil},
		{"invalid utf8 value created", "POST", "/a", "value=%FF", EcodeInvalidField, "value is not valid UTF-8", nil},
		{"a GET's value is not read", "GET", "/a", "value=%FF", 0, "", func(r *Request) bool { return r.Path == "/a" }},
		{"utf8 value", "PUT", "/a", "value=%E2%98%83", 0, "", func(r *Request) bool { return r.Value == "☃" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, err := url.ParseQuery(c.query)
			if err != nil {
				t.Fatal(err)
			}
			r, verr := ParseRequest(c.method, c.path, q)
			if c.code != 0 {
				if verr == nil || verr.Code != c.code || verr.Cause != c.cause || verr.Index != 0 {
					t.Fatalf("got %v, want %d %q", verr, c.code, c.cause)
				}
				return
			}
			if verr != nil {
				t.Fatalf("unexpected error %v", verr)
			}
			if !c.check(r) {
				t.Fatalf("unexpected request %+v", r)
			}
		})
	}
}

func TestErrorStatus(t *testing.T) {
	for code, status := range map[int]int{100: 404, 101: 412, 102: 403, 104: 400, 105: 412, 107: 400, 108: 403,
		110: 401, 201: 400, 209: 400, 300: 500, 301: 500, 401: 400} {
		if got := NewError(code, "", 0).StatusCode(); got != status {
			t.Errorf("code %d: status %d, want %d", code, got, status)
		}
	}
	if got := string(NewError(100, "/a", 3).JSON()); got != `{"errorCode":100,"message":"Key not found","cause":"/a","index":3}`+"\n" {
		t.Errorf("JSON %q", got)
	}
	if got := string(NewError(401, "", 0).JSON()); got != `{"errorCode":401,"message":"The event in requested index is outdated and cleared","index":0}`+"\n" {
		t.Errorf("JSON %q", got)
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"/a", "/a/../b", "//x", "/a%2Fb", "/\x00", "/_h/x"} {
		f.Add("PUT", s, "value=1&ttl=5&prevExist=true")
	}
	f.Fuzz(func(t *testing.T, method, p, query string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		r, verr := ParseRequest(method, p, q)
		if verr != nil {
			if verr.Index != 0 || verr.StatusCode() != 400 {
				t.Fatalf("request error %v must be 400 with index 0", verr)
			}
			return
		}
		// Whatever the input, the key is a clean absolute path inside the
		// data key space.
		if r.Path == "" || r.Path[0] != '/' || (len(r.Path) > 1 && r.Path[len(r.Path)-1] == '/') {
			t.Fatalf("path %q", r.Path)
		}
		l, _ := NewLayout("/x", "_v2bridge/")
		if k := l.DataKey(r.Path); len(k) < 2 || k[:2] != "/x" {
			t.Fatalf("key %q escapes the prefix", k)
		}
	})
}

// IsWatchRequest tells a watch from the raw request as ParseRequest and
// Request.IsWatch decide it from the parsed one.
func TestIsWatchRequest(t *testing.T) {
	for _, c := range []struct {
		method, target string
		watch          bool
	}{
		{"GET", "/v2/keys/a?wait=true", true},
		{"GET", "/v2/keys/a?wait=1&stream=true", true},
		{"GET", "/v2/keys/a?wait=TRUE", true},
		{"GET", "/v2/keys/a?wait=t&recursive=true&waitIndex=1", true},
		{"GET", "/v2/keys?wait=true", true},
		{"GET", "/v2/keys/a?wait=true&quorum=true", false}, // v2 serves a quorum wait as a plain GET
		{"GET", "/v2/keys/a?wait=true&quorum=false", true},
		{"GET", "/v2/keys/a", false},
		{"GET", "/v2/keys/a?wait=false", false},
		{"GET", "/v2/keys/a?wait=bogus", false},
		{"HEAD", "/v2/keys/a?wait=true", false},
		{"PUT", "/v2/keys/a?wait=true", false},
		{"GET", "/v2/keysx?wait=true", false},
		{"GET", "/v2/stats/store?wait=true", false},
	} {
		r := httptest.NewRequest(c.method, c.target, nil)
		if got := IsWatchRequest(r); got != c.watch {
			t.Errorf("%s %s: watch %v, want %v", c.method, c.target, got, c.watch)
		}
		if key, ok := strings.CutPrefix(r.URL.Path, "/v2/keys"); ok && (key == "" || key[0] == '/') {
			if req, err := ParseRequest(c.method, key, r.URL.Query()); err == nil && req.IsWatch() != c.watch {
				t.Errorf("%s %s: ParseRequest makes it a watch: %v", c.method, c.target, req.IsWatch())
			}
		}
	}
}
