// SPDX-License-Identifier: Apache-2.0

package v2diff

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCompare checks the normalisation on hand-made answers, without servers.
func TestCompare(t *testing.T) {
	get := &Request{Method: "GET", Path: "/v2/keys/d"}
	sortedGet := &Request{Method: "GET", Path: "/v2/keys/d?sorted=true"}
	casByIndex := &Request{Method: "PUT", Path: "/v2/keys/d?value=x&prevIndex=4"}
	casByValue := &Request{Method: "PUT", Path: "/v2/keys/d?value=x&prevValue=1"}
	hdr := func(idx string) http.Header {
		return http.Header{"Content-Type": {"application/json"}, "X-Etcd-Index": {idx}}
	}
	// Both servers made the same three writes: ref at 4,5,6, bridge at 10,12,13.
	writes := func(s *Session) {
		for _, p := range [][2]uint64{{4, 10}, {5, 12}, {6, 13}} {
			s.Idx[Ref].Add(p[0])
			s.Idx[Bridge].Add(p[1])
		}
	}
	cases := []struct {
		name     string
		req      *Request
		ref, br  string
		refX, bX string
		want     []string // Where of each remaining difference
	}{
		{"indexes through the writes", get,
			`{"action":"get","node":{"key":"/d","value":"v","modifiedIndex":5,"createdIndex":4}}`,
			`{"action":"get","node":{"key":"/d","value":"v","modifiedIndex":12,"createdIndex":10}}`, "6", "14", nil},
		{"a different write", get,
			`{"action":"get","node":{"key":"/d","value":"v","modifiedIndex":5,"createdIndex":4}}`,
			`{"action":"get","node":{"key":"/d","value":"v","modifiedIndex":13,"createdIndex":10}}`, "6", "13",
			[]string{"body.node.modifiedIndex"}},
		{"current index after a different write", get, `{"action":"get"}`, `{"action":"get"}`, "5", "13",
			[]string{"header X-Etcd-Index"}},
		{"value", get, `{"action":"get","node":{"key":"/d","value":"v"}}`,
			`{"action":"get","node":{"key":"/d","value":"w"}}`, "6", "13", []string{"body.node.value"}},
		{"ttl and expiration tolerances", get,
			`{"action":"get","node":{"key":"/d","expiration":"2030-01-01T00:00:00.5Z","ttl":100}}`,
			`{"action":"get","node":{"key":"/d","expiration":"2030-01-01T00:00:00.95Z","ttl":99}}`, "6", "13", nil},
		{"expirations too far apart", get,
			`{"action":"get","node":{"key":"/d","expiration":"2030-01-01T00:00:00.5Z","ttl":100}}`,
			`{"action":"get","node":{"key":"/d","expiration":"2030-01-01T00:00:01.05Z","ttl":100}}`, "6", "13",
			[]string{"body.node.expiration"}},
		{"ttl too far apart", get, `{"action":"get","node":{"key":"/d","ttl":100}}`,
			`{"action":"get","node":{"key":"/d","ttl":97}}`, "6", "13", []string{"body.node.ttl"}},
		{"unsorted listing in any order", get,
			`{"action":"get","node":{"key":"/d","dir":true,"nodes":[{"key":"/d/b","dir":true},{"key":"/d/a","dir":true}]}}`,
			`{"action":"get","node":{"key":"/d","dir":true,"nodes":[{"key":"/d/a","dir":true},{"key":"/d/b","dir":true}]}}`,
			"6", "13", nil},
		{"sorted listing in order", sortedGet,
			`{"action":"get","node":{"key":"/d","dir":true,"nodes":[{"key":"/d/b","dir":true},{"key":"/d/a","dir":true}]}}`,
			`{"action":"get","node":{"key":"/d","dir":true,"nodes":[{"key":"/d/a","dir":true},{"key":"/d/b","dir":true}]}}`,
			"6", "13", []string{"body.node.nodes"}},
		{"in-order names", get,
			`{"action":"get","node":{"key":"/d/00000000000000000005"}}`,
			`{"action":"get","node":{"key":"/d/00000000000000000011"}}`, "6", "13", nil},
		{"compare failure cause", casByIndex,
			`{"errorCode":101,"message":"Compare failed","cause":"[4 != 6]","index":6}`,
			`{"errorCode":101,"message":"Compare failed","cause":"[10 != 13]","index":13}`, "6", "13", nil},
		{"compare failure cause by value: numbers are values", casByValue,
			`{"errorCode":101,"message":"Compare failed","cause":"[1 != 2]","index":6}`,
			`{"errorCode":101,"message":"Compare failed","cause":"[2 != 1]","index":13}`, "6", "13", []string{"body.cause"}},
		{"history cleared", get,
			`{"errorCode":401,"message":"The event in requested index is outdated and cleared","cause":"the requested history has been cleared [5/4]","index":6}`,
			`{"errorCode":401,"message":"The event in requested index is outdated and cleared","cause":"the requested history has been cleared [12/10]","index":13}`,
			"6", "13", nil},
		{"history cleared up to after the current index", get,
			`{"errorCode":401,"message":"The event in requested index is outdated and cleared","cause":"the requested history has been cleared [5/4]","index":6}`,
			`{"errorCode":401,"message":"The event in requested index is outdated and cleared","cause":"the requested history has been cleared [14/10]","index":13}`,
			"6", "13", []string{"body.cause"}},
		{"field order", get, `{"action":"get","node":{"key":"/d","value":"v"}}`,
			`{"node":{"value":"v","key":"/d"},"action":"get"}`, "6", "13", []string{"body field order"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewSession()
			writes(s)
			x := NewExchange([2]*Request{c.req, c.req}, [2]*Response{
				{Status: 200, Header: hdr(c.refX), Body: []byte(c.ref + "\n")},
				{Status: 200, Header: hdr(c.bX), Body: []byte(c.br + "\n")}})
			var got []string
			for _, d := range s.Compare(x, c.req.BoolParam("sorted")) {
				got = append(got, d.Where)
			}
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("differences %q, want %q", got, c.want)
			}
		})
	}
}

// TestExpirationsOfAnswersMadeApart: each server computes an expiration
// from the moment it made its answer, so answers made up to 900 ms apart
// (a slow machine: the reference asked first, then the bridge) may differ
// by that much more than the tolerance, and answers made together may not.
func TestExpirationsOfAnswersMadeApart(t *testing.T) {
	req := &Request{Method: "PUT", Path: "/v2/keys/d?value=v&ttl=3600"}
	body := func(exp string) []byte {
		return []byte(`{"action":"set","node":{"key":"/d","value":"v","expiration":"` + exp +
			`","ttl":3600,"modifiedIndex":4,"createdIndex":4}}` + "\n")
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		name                       string
		refSent, refAt, bSent, bAt int // ms
		bridgeExp                  string
		want                       []string
	}{
		// The reference's expiration is 01:00:00.5 in every case.
		{"827 ms apart, answers made 900 ms apart", 0, 300, 400, 900, "2030-01-01T01:00:01.327Z", nil},
		{"827 ms apart, answers made together", 0, 5, 5, 10, "2030-01-01T01:00:01.327Z",
			[]string{"body.node.expiration"}},
		{"1.5 s apart, answers made 900 ms apart", 0, 300, 400, 900, "2030-01-01T01:00:02Z",
			[]string{"body.node.expiration"}},
		{"827 ms apart, times unknown", 0, 0, 0, 0, "2030-01-01T01:00:01.327Z", []string{"body.node.expiration"}},
		{"450 ms apart, times unknown", 0, 0, 0, 0, "2030-01-01T01:00:00.95Z", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewSession()
			s.Idx[Ref].Add(4)
			s.Idx[Bridge].Add(4)
			hdr := http.Header{"Content-Type": {"application/json"}, "X-Etcd-Index": {"4"}}
			r := &Response{Status: 201, Header: hdr, Body: body("2030-01-01T01:00:00.5Z")}
			b := &Response{Status: 201, Header: hdr, Body: body(c.bridgeExp)}
			if c.refAt != 0 {
				r.Sent, r.At, b.Sent, b.At = at(c.refSent), at(c.refAt), at(c.bSent), at(c.bAt)
			}
			var got []string
			for _, d := range s.Compare(NewExchange([2]*Request{req, req}, [2]*Response{r, b}), false) {
				got = append(got, d.Where)
			}
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("differences %q, want %q", got, c.want)
			}
		})
	}
}

// TestSetCreatedIndexNeedsAReplace: the divergence excuses an older
// createdIndex only for a key that a set replaced at the index v2 shows.
func TestSetCreatedIndexNeedsAReplace(t *testing.T) {
	put := &Request{Method: "PUT", Path: "/v2/keys/a"}
	s := NewSession()
	resp := func(idx, body string) *Response {
		return &Response{Status: 200, Header: http.Header{"X-Etcd-Index": {idx}}, Body: []byte(body)}
	}
	// Write 1 creates /a (ref 4, bridge 10); write 2 is a set replacing it.
	s.Register(NewExchange([2]*Request{put, put}, [2]*Response{
		resp("4", `{"action":"set","node":{"key":"/a","value":"1","modifiedIndex":4,"createdIndex":4}}`),
		resp("10", `{"action":"set","node":{"key":"/a","value":"1","modifiedIndex":10,"createdIndex":10}}`)}))
	s.Register(NewExchange([2]*Request{put, put}, [2]*Response{
		resp("5", `{"action":"set","node":{"key":"/a","value":"2","modifiedIndex":5,"createdIndex":5},"prevNode":{"key":"/a","value":"1","modifiedIndex":4,"createdIndex":4}}`),
		resp("11", `{"action":"set","node":{"key":"/a","value":"2","modifiedIndex":11,"createdIndex":11},"prevNode":{"key":"/a","value":"1","modifiedIndex":10,"createdIndex":10}}`)}))
	get := &Request{Method: "GET", Path: "/v2/keys/a"}
	for _, c := range []struct {
		key, refCI, brCI string
		excused          bool
	}{
		{"/a", "5", "10", true},  // v2's replace vs the original create
		{"/a", "4", "10", false}, // not a difference at all, but not this one either
		{"/b", "5", "10", false}, // another key
		{"/a", "5", "11", false}, // the bridge's is not older
	} {
		x := NewExchange([2]*Request{get, get}, [2]*Response{
			resp("5", `{"action":"get","node":{"key":"`+c.key+`","value":"2","modifiedIndex":5,"createdIndex":`+c.refCI+`}}`),
			resp("11", `{"action":"get","node":{"key":"`+c.key+`","value":"2","modifiedIndex":11,"createdIndex":`+c.brCI+`}}`)})
		excused := false
		for _, d := range s.Compare(x, false) {
			if dv := Excuse(s, x, d); dv != nil && dv.ID == "set-created-index" {
				excused = true
			}
		}
		if excused != c.excused {
			t.Errorf("%s created %s vs %s: excused %v, want %v", c.key, c.refCI, c.brCI, excused, c.excused)
		}
	}
}
