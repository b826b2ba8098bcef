// SPDX-License-Identifier: Apache-2.0

package conformance

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2diff"
)

// The judge on hand-made answers, without servers: every wrong bridge answer
// must fail, even where a documented divergence sits next to it, and every
// correct or documented one must pass.

// judgeFixture is a session in which both servers made the same three
// writes: /b created (ref 4, bridge 10), /a created (5, 11), and /a replaced
// by a set (6, 13; the bridge spent 12 on housekeeping).
func judgeFixture() *v2diff.Session {
	s := v2diff.NewSession()
	put := func(k string) *v2diff.Request { return &v2diff.Request{Method: "PUT", Path: "/v2/keys" + k} }
	for _, w := range []struct {
		key, ref, br string
	}{
		{"/b", `{"action":"set","node":{"key":"/b","value":"1","modifiedIndex":4,"createdIndex":4}}`,
			`{"action":"set","node":{"key":"/b","value":"1","modifiedIndex":10,"createdIndex":10}}`},
		{"/a", `{"action":"set","node":{"key":"/a","value":"1","modifiedIndex":5,"createdIndex":5}}`,
			`{"action":"set","node":{"key":"/a","value":"1","modifiedIndex":11,"createdIndex":11}}`},
		{"/a", `{"action":"set","node":{"key":"/a","value":"2","modifiedIndex":6,"createdIndex":6},"prevNode":{"key":"/a","value":"1","modifiedIndex":5,"createdIndex":5}}`,
			`{"action":"set","node":{"key":"/a","value":"2","modifiedIndex":13,"createdIndex":13},"prevNode":{"key":"/a","value":"1","modifiedIndex":11,"createdIndex":11}}`},
	} {
		s.Register(v2diff.NewExchange([2]*v2diff.Request{put(w.key), put(w.key)},
			[2]*v2diff.Response{ok(200, "0", w.ref), ok(200, "0", w.br)}))
	}
	return s
}

// ok is a successful v2 answer; fail an error answer (no X-Raft-*).
func ok(status int, xi, body string) *v2diff.Response {
	return &v2diff.Response{Status: status, Header: http.Header{"Content-Type": {"application/json"}, "X-Etcd-Index": {xi},
		"X-Etcd-Cluster-Id": {"1"}, "X-Raft-Index": {xi}, "X-Raft-Term": {"2"}}, Body: []byte(body + "\n")}
}

func fail(status int, xi, body string) *v2diff.Response {
	return &v2diff.Response{Status: status, Header: http.Header{"Content-Type": {"application/json"}, "X-Etcd-Index": {xi},
		"X-Etcd-Cluster-Id": {"1"}}, Body: []byte(body + "\n")}
}

// eventLine is one event line of a watch body (no headers).
func eventLine(body string) *v2diff.Response {
	if body == "" {
		return &v2diff.Response{Status: 200, Header: http.Header{}}
	}
	return &v2diff.Response{Status: 200, Header: http.Header{}, Body: []byte(body + "\n")}
}

func plain(status int, body string, h ...string) *v2diff.Response {
	hdr := http.Header{}
	for i := 0; i+1 < len(h); i += 2 {
		hdr.Set(h[i], h[i+1])
	}
	return &v2diff.Response{Status: status, Header: hdr, Body: []byte(body)}
}

// exp is an expiration d from now, as v2 writes it.
func exp(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339Nano) }

func req(method, target string) *v2diff.Request { return &v2diff.Request{Method: method, Path: target} }

type judgeCase struct {
	name         string
	req, reqB    *v2diff.Request // reqB: the bridge's, when its indexes differ
	ref, br      *v2diff.Response
	watch, event bool
	// excuse is the divergence a passing answer needs ("" for none);
	// wrong marks an answer that must fail.
	excuse string
	wrong  bool
}

const (
	errKeyDeep  = `{"errorCode":209,"message":"Invalid field","cause":"key is deeper than 48 levels","index":0}`
	errTooLarge = `{"errorCode":209,"message":"Invalid field","cause":"value too large: the request exceeds the etcd v3 backend's request size limit (--max-request-bytes)","index":0}`
	err401      = `{"errorCode":401,"message":"The event in requested index is outdated and cleared","cause":"the requested history has been cleared [5/4]","index":6}`
	err300Dir   = `{"errorCode":300,"message":"Raft Internal Error","cause":"nodePath /1/d : Not a file ()","index":0}`
)

func setZ(ref, br string) (*v2diff.Response, *v2diff.Response) {
	return ok(201, "7", `{"action":"set","node":{"key":"/z","value":"1"`+ref+`,"modifiedIndex":7,"createdIndex":7}}`),
		ok(201, "14", `{"action":"set","node":{"key":"/z","value":"1"`+br+`,"modifiedIndex":14,"createdIndex":14}}`)
}

func ttlCases() []judgeCase {
	var cs []judgeCase
	add := func(name, ttl, ref, br, excuse string, wrong bool) {
		r, b := setZ(ref, br)
		cs = append(cs, judgeCase{name: name, req: req("PUT", "/v2/keys/z?value=1&ttl="+ttl), ref: r, br: b,
			excuse: excuse, wrong: wrong})
	}
	now := `,"expiration":"` + exp(0) + `"`
	one := `,"expiration":"` + exp(time.Second) + `","ttl":1`
	lease := `,"expiration":"` + exp(2*time.Second) + `","ttl":2`
	add("ttl=0 lives the minimum lease", "0", now, lease, "ttl-minimum", false)
	add("ttl=1 lives the minimum lease", "1", one, lease, "", false)
	add("ttl=1 answered with a permanent key", "1", one, "", "", true)
	add("ttl=0 answered with a permanent key", "0", now, "", "", true)
	add("ttl=0 answered with a lease over the minimum", "0", now, `,"expiration":"`+exp(5*time.Second)+`","ttl":5`, "", true)
	add("ttl=0 answered with a ttl but no expiration", "0", now, `,"ttl":2`, "", true)
	add("ttl=0 answered with an expiration that disagrees with its ttl", "0", now,
		`,"expiration":"`+exp(time.Hour)+`","ttl":2`, "", true)
	add("ttl=5 answered with the minimum lease", "5", `,"expiration":"`+exp(5*time.Second)+`","ttl":5`, lease, "", true)

	huge := `,"expiration":"` + exp(9_000_000_000*time.Second) + `","ttl":9000000000`
	add("a ttl past 2262 is honoured where v2 overflows", "9000000000", "", huge, "ttl-overflow", false)
	add("a ttl past 2262 answered with another ttl", "9000000000", "", lease, "", true)
	add("a ttl past 2262 answered permanent in the node but with a ttl", "9000000000", "",
		`,"ttl":9000000000`, "", true)
	add("a ttl past 2262 where v2 did not overflow", "9000000000", huge[:len(huge)-len(`,"ttl":9000000000`)], huge,
		"", true)
	over := req("PUT", "/v2/keys/z?value=1&ttl=9000000001")
	r, _ := setZ("", "")
	cs = append(cs,
		judgeCase{name: "a ttl over v3's largest lease is refused with 202", req: over, ref: r,
			br:     fail(400, "0", `{"errorCode":202,"message":"The given TTL in POST form is not a number","cause":"ttl exceeds the maximum of 9000000000","index":0}`),
			excuse: "ttl-overflow"},
		judgeCase{name: "a huge ttl answered with 500/300", req: over, ref: r,
			br: fail(500, "13", `{"errorCode":300,"message":"Raft Internal Error","cause":"lease TTL too large","index":13}`), wrong: true},
		judgeCase{name: "a huge ttl answered with 202 for another cause", req: over, ref: r,
			br: fail(400, "0", `{"errorCode":202,"message":"The given TTL in POST form is not a number","cause":"invalid value for \"ttl\"","index":0}`), wrong: true},
		judgeCase{name: "a honourable huge ttl refused with 202", req: req("PUT", "/v2/keys/z?value=1&ttl=9000000000"), ref: r,
			br: fail(400, "0", `{"errorCode":202,"message":"The given TTL in POST form is not a number","cause":"ttl exceeds the maximum of 9000000000","index":0}`), wrong: true},
	)
	return cs
}

func limitCases() []judgeCase {
	created := func(key string) *v2diff.Response {
		return ok(201, "7", `{"action":"set","node":{"key":"`+key+`","value":"1","modifiedIndex":7,"createdIndex":7}}`)
	}
	deep := strings.Repeat("/d", 60)
	big := strings.Repeat("x", 2<<20)
	nearly := strings.Repeat("x", 1<<20)
	cause := func(c string) *v2diff.Response {
		return fail(400, "0", `{"errorCode":209,"message":"Invalid field","cause":"`+c+`","index":0}`)
	}
	return []judgeCase{
		{name: "a key deeper than 48 levels is refused", req: req("PUT", "/v2/keys"+deep+"?value=1"),
			ref: created(deep), br: fail(400, "0", errKeyDeep), excuse: "limits"},
		{name: "a short key refused as deeper than 48 levels", req: req("PUT", "/v2/keys/a/b?value=1"),
			ref: created("/a/b"), br: fail(400, "0", errKeyDeep), wrong: true},
		{name: "a deep key refused with another code", req: req("PUT", "/v2/keys"+deep+"?value=1"),
			ref: created(deep), br: fail(400, "0", strings.Replace(errKeyDeep, "209", "210", 1)), wrong: true},
		{name: "a deep key refused with a 500", req: req("PUT", "/v2/keys"+deep+"?value=1"),
			ref: created(deep), br: fail(500, "0", errKeyDeep), wrong: true},
		{name: "a 2 MiB value is refused", req: &v2diff.Request{Method: "PUT", Path: "/v2/keys/big", Form: map[string][]string{"value": {big}}},
			ref: created("/big"), br: fail(400, "0", errTooLarge), excuse: "limits"},
		{name: "a 1 MiB value refused as too large", req: &v2diff.Request{Method: "PUT", Path: "/v2/keys/big", Form: map[string][]string{"value": {nearly}}},
			ref: created("/big"), br: fail(400, "0", errTooLarge), wrong: true},
		{name: "a control character is refused", req: req("PUT", "/v2/keys/a%01b?value=1"),
			ref: created(`/a\u0001b`), br: cause("key contains a control character"), excuse: "limits"},
		{name: "a clean key refused for a control character", req: req("PUT", "/v2/keys/ab?value=1"),
			ref: created("/ab"), br: cause("key contains a control character"), wrong: true},
		{name: "invalid UTF-8 is refused", req: req("GET", "/v2/keys/a%ffb"),
			ref: fail(404, "6", `{"errorCode":100,"message":"Key not found","cause":"/a\ufffdb","index":6}`),
			br:  cause("key is not valid UTF-8"), excuse: "limits"},
		{name: "valid UTF-8 refused as invalid", req: req("GET", "/v2/keys/ключ"),
			ref: fail(404, "6", `{"errorCode":100,"message":"Key not found","cause":"/ключ","index":6}`),
			br:  cause("key is not valid UTF-8"), wrong: true},
		{name: "a HEAD of a key deeper than 48 levels is refused", req: req("HEAD", "/v2/keys"+deep),
			ref: plain(404, "", "X-Etcd-Index", "6"), br: plain(400, "", "X-Etcd-Index", "0"), excuse: "limits"},
		{name: "a HEAD of a short key refused", req: req("HEAD", "/v2/keys/a/b"),
			ref: plain(404, "", "X-Etcd-Index", "6"), br: plain(400, "", "X-Etcd-Index", "0"), wrong: true},
		{name: "a 5000-byte key is refused", req: req("PUT", "/v2/keys/"+strings.Repeat("k", 5000)+"?value=1"),
			ref: created("/" + strings.Repeat("k", 5000)), br: cause("key is longer than 4096 bytes"), excuse: "limits"},
		{name: "a 4000-byte key refused as too long", req: req("PUT", "/v2/keys/"+strings.Repeat("k", 4000)+"?value=1"),
			ref: created("/" + strings.Repeat("k", 4000)), br: cause("key is longer than 4096 bytes"), wrong: true},
	}
}

func watchJudgeCases() []judgeCase {
	w := func(q string) *v2diff.Request { return req("GET", "/v2/keys/a?wait=true&"+q) }
	ev := func(key string, mi int) string {
		return `{"action":"set","node":{"key":"` + key + `","value":"2","modifiedIndex":` + strconv.Itoa(mi) +
			`,"createdIndex":` + strconv.Itoa(mi) + `}}`
	}
	horizon := func(name string, q, qb, body, excuse string, wrong bool) judgeCase {
		return judgeCase{name: name, req: w(q), reqB: w(qb), watch: true,
			ref: fail(400, "6", err401), br: ok(200, "15", body), excuse: excuse, wrong: wrong}
	}
	waiting := func(name, key, qb string, wrong bool) judgeCase {
		br := ok(200, "15", "")
		br.Body = nil
		c := judgeCase{name: name, req: req("GET", "/v2/keys"+key+"?wait=true&waitIndex=5"),
			reqB: req("GET", "/v2/keys"+key+"?wait=true&"+qb), watch: true, ref: fail(400, "6", err401), br: br,
			wrong: wrong}
		if !wrong {
			c.excuse = "history-horizon"
		}
		return c
	}
	stream := func(name, q, qb, body, excuse string, wrong bool) judgeCase {
		return judgeCase{name: name, req: req("GET", "/v2/keys/d?wait=true&stream=true&"+q),
			reqB: req("GET", "/v2/keys/d?wait=true&stream=true&"+qb), watch: true, event: true,
			ref: eventLine(""), br: eventLine(body), excuse: excuse, wrong: wrong}
	}
	return []judgeCase{
		horizon("history beyond v2's horizon is served", "waitIndex=5", "waitIndex=12", ev("/a", 13), "history-horizon", false),
		horizon("history answered with an event for another key", "waitIndex=5", "waitIndex=12", ev("/b", 14), "", true),
		horizon("history answered with an event before waitIndex", "waitIndex=5", "waitIndex=12", ev("/a", 11), "", true),
		horizon("history answered with an event after X-Etcd-Index", "waitIndex=5", "waitIndex=12", ev("/a", 16), "", true),
		horizon("history answered with a later event, skipping the first match", "waitIndex=5", "waitIndex=11",
			ev("/a", 13), "", true),
		horizon("history answered with an event at another write's index", "waitIndex=5", "waitIndex=10",
			ev("/a", 10), "", true),
		horizon("history answered with a get", "waitIndex=5", "waitIndex=12",
			`{"action":"get","node":{"key":"/a","value":"2","modifiedIndex":13,"createdIndex":13}}`, "", true),
		horizon("history answered with a delete carrying a value", "waitIndex=5", "waitIndex=12",
			`{"action":"delete","node":{"key":"/a","value":"2","modifiedIndex":14,"createdIndex":11}}`, "", true),
		horizon("history answered with a child event on a non-recursive watch", "waitIndex=5", "waitIndex=14",
			ev("/a/x", 14), "", true),
		horizon("history answered with a sibling's event on a recursive watch", "recursive=true&waitIndex=5",
			"recursive=true&waitIndex=14", ev("/ab", 14), "", true),
		horizon("history serves a child event on a recursive watch", "recursive=true&waitIndex=5",
			"recursive=true&waitIndex=14", ev("/a/x", 14), "history-horizon", false),
		waiting("a watch beyond v2's horizon waits when no write matches", "/c", "waitIndex=12", false),
		waiting("a watch beyond v2's horizon waits though a write matches", "/a", "waitIndex=11", true),
		{name: "history answered with a 500", req: w("waitIndex=5"), reqB: w("waitIndex=12"), watch: true,
			ref: fail(400, "6", err401), br: fail(500, "13", `{"errorCode":300,"message":"Raft Internal Error","index":13}`),
			wrong: true},
		stream("a stream goes on after its event from history", "recursive=true&waitIndex=5", "recursive=true&waitIndex=11",
			ev("/d/c", 14), "stream-history", false),
		stream("a stream goes on with a garbage expire for an unrelated key", "recursive=true&waitIndex=5",
			"recursive=true&waitIndex=11", `{"action":"expire","node":{"key":"/zzz","modifiedIndex":14}}`, "", true),
		stream("a stream goes on with an event before waitIndex", "recursive=true&waitIndex=5",
			"recursive=true&waitIndex=11", ev("/d/c", 10), "", true),
		stream("a stream goes on with a line that is not JSON", "recursive=true&waitIndex=5",
			"recursive=true&waitIndex=11", `{"action":"set"`, "", true),
		stream("a stream without waitIndex has an event v2 did not send", "recursive=true", "recursive=true",
			ev("/d/c", 14), "", true),
		{name: "history serves the delete of a directory above", req: req("GET", "/v2/keys/d/x?wait=true&waitIndex=5"),
			reqB: req("GET", "/v2/keys/d/x?wait=true&waitIndex=11"), watch: true, ref: fail(400, "6", err401),
			br:     ok(200, "15", `{"action":"delete","node":{"key":"/d","dir":true,"modifiedIndex":14,"createdIndex":10},"prevNode":{"key":"/d","dir":true,"modifiedIndex":10,"createdIndex":10}}`),
			excuse: "history-horizon"},
		{name: "history answered with the delete of a directory elsewhere", req: req("GET", "/v2/keys/d/x?wait=true&waitIndex=5"),
			reqB: req("GET", "/v2/keys/d/x?wait=true&waitIndex=11"), watch: true, ref: fail(400, "6", err401),
			br:    ok(200, "13", `{"action":"delete","node":{"key":"/e","dir":true,"modifiedIndex":13,"createdIndex":10},"prevNode":{"key":"/e","dir":true,"modifiedIndex":10,"createdIndex":10}}`),
			wrong: true},
	}
}

func createdIndexCases() []judgeCase {
	get := func(key string, ci, mi int) *v2diff.Response {
		return ok(200, "14", `{"action":"get","node":{"key":"`+key+`","value":"2","modifiedIndex":`+strconv.Itoa(mi)+
			`,"createdIndex":`+strconv.Itoa(ci)+`}}`)
	}
	refA := ok(200, "6", `{"action":"get","node":{"key":"/a","value":"2","modifiedIndex":6,"createdIndex":6}}`)
	return []judgeCase{
		{name: "a read after a set shows the original createdIndex", req: req("GET", "/v2/keys/a"),
			ref: refA, br: get("/a", 11, 13), excuse: "set-created-index"},
		{name: "a read after a set shows an earlier createdIndex that is not the original", req: req("GET", "/v2/keys/a"),
			ref: refA, br: get("/a", 10, 13), wrong: true},
		{name: "a read after a set shows a createdIndex between writes", req: req("GET", "/v2/keys/a"),
			ref: refA, br: get("/a", 12, 13), wrong: true},
		{name: "a key never replaced shows another createdIndex", req: req("GET", "/v2/keys/b"),
			ref: ok(200, "6", `{"action":"get","node":{"key":"/b","value":"1","modifiedIndex":4,"createdIndex":4}}`),
			br:  get("/b", 11, 10), wrong: true},
	}
}

func dirUpdateCases() []judgeCase {
	put := req("PUT", "/v2/keys/d?dir=true&prevExist=true&ttl=600")
	answer := func(xi, node string) *v2diff.Response {
		return ok(200, xi, `{"action":"update","node":{"key":"/d","dir":true`+node+`},"prevNode":{"key":"/d","dir":true,"modifiedIndex":10,"createdIndex":10}}`)
	}
	lease := `,"expiration":"` + exp(600*time.Second) + `","ttl":600`
	ref := fail(500, "0", err300Dir)
	return []judgeCase{
		{name: "a directory's TTL is updated as in 3.4", req: put, ref: ref,
			br: answer("14", lease+`,"modifiedIndex":14,"createdIndex":10`), excuse: "dir-ttl-update"},
		{name: "a directory update without ttl makes it permanent", req: req("PUT", "/v2/keys/d?prevExist=true"),
			ref: ref, br: answer("14", `,"modifiedIndex":14,"createdIndex":10`), excuse: "dir-ttl-update"},
		{name: "a directory update answered with another TTL", req: put, ref: ref,
			br: answer("14", `,"expiration":"`+exp(5*time.Second)+`","ttl":5,"modifiedIndex":14,"createdIndex":10`), wrong: true},
		{name: "a directory update answered with a new createdIndex", req: put, ref: ref,
			br: answer("14", lease+`,"modifiedIndex":14,"createdIndex":14`), wrong: true},
		{name: "a directory update answered with a value", req: put, ref: ref,
			br: answer("14", `,"value":"x"`+lease+`,"modifiedIndex":14,"createdIndex":10`), wrong: true},
		{name: "a directory update whose X-Etcd-Index is not its own", req: put, ref: ref,
			br: answer("20", lease+`,"modifiedIndex":14,"createdIndex":10`), wrong: true},
		{name: "a directory update answered as text", req: put, ref: ref,
			br: func() *v2diff.Response {
				r := answer("14", lease+`,"modifiedIndex":14,"createdIndex":10`)
				r.Header.Set("Content-Type", "text/plain")
				return r
			}(), wrong: true},
	}
}

func endpointCases() []judgeCase {
	redirect := func(status int, loc string) *v2diff.Response {
		text := map[int]string{301: "Moved Permanently", 307: "Temporary Redirect"}[status]
		return plain(status, "<a href=\""+loc+"\">"+text+"</a>.\n\n", "Content-Type", "text/html; charset=utf-8",
			"Location", loc)
	}
	return []judgeCase{
		{name: "OPTIONS is refused like any unrouted method", req: req("OPTIONS", "/v2/keys/"),
			ref:    plain(200, "", "Access-Control-Allow-Origin", "*"),
			br:     plain(405, "Method Not Allowed", "Allow", "HEAD,GET,PUT,POST,DELETE", "Content-Type", "text/plain"),
			excuse: "cors"},
		{name: "OPTIONS refused with another body", req: req("OPTIONS", "/v2/keys/"), ref: plain(200, ""),
			br: plain(405, `{"message":"boom"}`, "Allow", "HEAD,GET,PUT,POST,DELETE"), wrong: true},
		{name: "OPTIONS answered 404", req: req("OPTIONS", "/v2/keys/"), ref: plain(200, ""),
			br: plain(404, "404 page not found\n", "Content-Type", "text/plain"), wrong: true},
		{name: "an unclean path is redirected with 301", req: req("GET", "/v2/keys//a"),
			ref: redirect(307, "/v2/keys/a"), br: redirect(301, "/v2/keys/a"), excuse: "redirect-status"},
		{name: "an unclean path is redirected with 301 and no body", req: req("GET", "/v2/keys//a"),
			ref: redirect(307, "/v2/keys/a"), br: plain(301, "", "Location", "/v2/keys/a"), excuse: "redirect-status"},
		{name: "an unclean path redirected with 301 and an error page", req: req("GET", "/v2/keys//a"),
			ref: redirect(307, "/v2/keys/a"), br: plain(301, "500 internal error\n", "Location", "/v2/keys/a"),
			wrong: true},
		{name: "an unclean path redirected elsewhere", req: req("GET", "/v2/keys//a"),
			ref: redirect(307, "/v2/keys/a"), br: redirect(301, "/v2/keys/b"), wrong: true},
		{name: "v2 auth is not found", req: req("GET", "/v2/auth/users"),
			ref: plain(200, `{"users":null}`+"\n", "Content-Type", "application/json", "X-Etcd-Cluster-Id", "1"),
			br:  plain(404, "404 page not found\n", "Content-Type", "text/plain; charset=utf-8"), excuse: "v2-auth"},
		{name: "v2 auth answered with a 500", req: req("GET", "/v2/auth/users"),
			ref: plain(200, `{"users":null}`+"\n", "Content-Type", "application/json"),
			br:  plain(500, `{"message":"boom"}`+"\n", "Content-Type", "application/json"), wrong: true},
		{name: "same answer", req: req("GET", "/v2/keys/b"),
			ref: ok(200, "6", `{"action":"get","node":{"key":"/b","value":"1","modifiedIndex":4,"createdIndex":4}}`),
			br:  ok(200, "13", `{"action":"get","node":{"key":"/b","value":"1","modifiedIndex":10,"createdIndex":10}}`)},
	}
}

func judgeCases() []judgeCase {
	var cs []judgeCase
	for _, f := range []func() []judgeCase{ttlCases, limitCases, watchJudgeCases, createdIndexCases, dirUpdateCases,
		endpointCases} {
		cs = append(cs, f()...)
	}
	return cs
}

func TestJudge(t *testing.T) {
	for _, c := range judgeCases() {
		t.Run(c.name, func(t *testing.T) {
			s := judgeFixture()
			rb := c.reqB
			if rb == nil {
				rb = c.req
			}
			x := v2diff.NewExchange([2]*v2diff.Request{c.req, rb}, [2]*v2diff.Response{c.ref, c.br})
			x.Watch, x.Event = c.watch, c.event
			fails, excused := judge(s, x, false)
			switch {
			case c.wrong && len(fails) == 0:
				t.Errorf("a wrong answer passed (excused: %v)\n%s", excused, report(x, nil))
			case !c.wrong && len(fails) > 0:
				t.Errorf("a right answer failed\n%s", report(x, fails))
			case !c.wrong && c.excuse == "" && len(excused) > 0:
				t.Errorf("excused by %v, want no excuse", excused)
			case !c.wrong && c.excuse != "" && (excused[c.excuse] == 0 || len(excused) != 1):
				t.Errorf("excused by %v, want only %s", excused, c.excuse)
			}
		})
	}
}

// TestUndeclaredExcuse: a scripted case fails on an entry it did not declare.
func TestUndeclaredExcuse(t *testing.T) {
	c := scriptCase{Steps: []step{get("/a").expect("limits"), get("/b")}, May: []string{"set-created-index"}}
	for _, tc := range []struct {
		excused map[string]int
		want    string
	}{
		{map[string]int{"limits": 1, "set-created-index": 2}, ""},
		{map[string]int{"ttl-minimum": 1, "limits": 1}, "ttl-minimum"},
		{map[string]int{}, ""},
	} {
		if got := strings.Join(undeclared(tc.excused, c.allowed()), ","); got != tc.want {
			t.Errorf("undeclared(%v) = %q, want %q", tc.excused, got, tc.want)
		}
	}
}

// TestSetCreatedIndexAfterALateEvent: an event registered after later writes
// (an expiry a watch reports at the end of a sequence) shifts the ordinals
// of those writes; the key's original create is still recognised.
func TestSetCreatedIndexAfterALateEvent(t *testing.T) {
	s := judgeFixture() // /a created at ref 5 / bridge 11, replaced at 6 / 13
	expire := req("GET", "/v2/keys/e?wait=true")
	s.Register(v2diff.NewExchange([2]*v2diff.Request{expire, expire}, [2]*v2diff.Response{
		eventLine(`{"action":"expire","node":{"key":"/e","modifiedIndex":3,"createdIndex":2}}`),
		eventLine(`{"action":"expire","node":{"key":"/e","modifiedIndex":9,"createdIndex":8}}`)}))
	x := v2diff.NewExchange([2]*v2diff.Request{req("GET", "/v2/keys/a"), req("GET", "/v2/keys/a")}, [2]*v2diff.Response{
		ok(200, "6", `{"action":"get","node":{"key":"/a","value":"2","modifiedIndex":6,"createdIndex":6}}`),
		ok(200, "13", `{"action":"get","node":{"key":"/a","value":"2","modifiedIndex":13,"createdIndex":11}}`)})
	fails, excused := judge(s, x, false)
	if len(fails) > 0 || excused["set-created-index"] != 1 {
		t.Errorf("excused %v, failures:\n%s", excused, report(x, fails))
	}
}

// TestRandomPlanCoversTheBudget: a run plans at least the operations asked,
// or exactly the sequences asked.
func TestRandomPlanCoversTheBudget(t *testing.T) {
	defer func(ops, seqs int) { *flagOps, *flagSeqs = ops, seqs }(*flagOps, *flagSeqs)
	for _, c := range []struct{ ops, seqs int }{{10000, 0}, {1, 0}, {0, 1}, {5000, 7}} {
		*flagOps, *flagSeqs = c.ops, c.seqs
		expiring, rest, ops := randomPlan(42)
		n := len(expiring) + len(rest)
		switch {
		case c.seqs > 0 && n != c.seqs:
			t.Errorf("-sequences=%d: %d planned", c.seqs, n)
		case c.seqs == 0 && (ops < c.ops || n == 0):
			t.Errorf("-ops=%d: %d operations in %d sequences planned", c.ops, ops, n)
		}
	}
}
