// SPDX-License-Identifier: Apache-2.0

package conformance

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/migrate/v2diff"
)

// The judge on hand-made answers, without servers: every wrong bridge answer
// must fail, even where a documented divergence sits next to it, and every
// correct or documented one must pass.

// judgeFixture is a session in which both servers made the same writes
// (bridge index / reference index):
//
//	10 / 4   /b created
//	11 / 5   /a created
//	13 / 6   /a replaced by a set (the bridge spent 12 on housekeeping)
//	21 / 11  /d/c created (and with it the directory /d)
//	22 / 12  /d/c replaced by a set
//	23 / 13  /t created with a TTL of 2 s
//	24 / 14  /d/_h (hidden) created
//	25 / 15  (/t expires: no watch saw it, so it is not registered)
//	26 / 16  /d deleted, recursive
func judgeFixture() *v2diff.Session {
	s := v2diff.NewSession()
	ttl := `"expiration":"` + tExpiration + `","ttl":2,`
	for _, w := range []struct {
		req      string
		ref, br  string
		refX, bX string
	}{
		{"PUT /b?value=1", `{"action":"set","node":{"key":"/b","value":"1","modifiedIndex":4,"createdIndex":4}}`,
			`{"action":"set","node":{"key":"/b","value":"1","modifiedIndex":10,"createdIndex":10}}`, "4", "10"},
		{"PUT /a?value=1", `{"action":"set","node":{"key":"/a","value":"1","modifiedIndex":5,"createdIndex":5}}`,
			`{"action":"set","node":{"key":"/a","value":"1","modifiedIndex":11,"createdIndex":11}}`, "5", "11"},
		{"PUT /a?value=2", `{"action":"set","node":{"key":"/a","value":"2","modifiedIndex":6,"createdIndex":6},"prevNode":{"key":"/a","value":"1","modifiedIndex":5,"createdIndex":5}}`,
			evA13, "6", "13"},
		{"PUT /d/c?value=1&prevExist=false", refC11, evC21, "11", "21"},
		{"PUT /d/c?value=2", `{"action":"set","node":{"key":"/d/c","value":"2","modifiedIndex":12,"createdIndex":12},"prevNode":{"key":"/d/c","value":"1","modifiedIndex":11,"createdIndex":11}}`,
			evC22, "12", "22"},
		{"PUT /t?value=1&ttl=2", `{"action":"set","node":{"key":"/t","value":"1",` + ttl + `"modifiedIndex":13,"createdIndex":13}}`,
			`{"action":"set","node":{"key":"/t","value":"1",` + ttl + `"modifiedIndex":23,"createdIndex":23}}`, "13", "23"},
		{"PUT /d/_h?value=h&prevExist=false", `{"action":"create","node":{"key":"/d/_h","value":"h","modifiedIndex":14,"createdIndex":14}}`,
			evH24, "14", "24"},
		{"DELETE /d?recursive=true", `{"action":"delete","node":{"key":"/d","dir":true,"modifiedIndex":16,"createdIndex":11},"prevNode":{"key":"/d","dir":true,"modifiedIndex":11,"createdIndex":11}}`,
			evD26, "16", "26"},
	} {
		method, target, _ := strings.Cut(w.req, " ")
		r := req(method, "/v2/keys"+target)
		status := 200
		if strings.Contains(w.ref, `"create"`) {
			status = 201
		}
		s.Register(v2diff.NewExchange([2]*v2diff.Request{r, r},
			[2]*v2diff.Response{ok(status, w.refX, w.ref), ok(status, w.bX, w.br)}))
	}
	return s
}

// The fixture's writes as the bridge answered them, which is what their
// events must be.
const (
	evA13 = `{"action":"set","node":{"key":"/a","value":"2","modifiedIndex":13,"createdIndex":13},"prevNode":{"key":"/a","value":"1","modifiedIndex":11,"createdIndex":11}}`
	evC21 = `{"action":"create","node":{"key":"/d/c","value":"1","modifiedIndex":21,"createdIndex":21}}`
	evC22 = `{"action":"set","node":{"key":"/d/c","value":"2","modifiedIndex":22,"createdIndex":22},"prevNode":{"key":"/d/c","value":"1","modifiedIndex":21,"createdIndex":21}}`
	evH24 = `{"action":"create","node":{"key":"/d/_h","value":"h","modifiedIndex":24,"createdIndex":24}}`
	evD26 = `{"action":"delete","node":{"key":"/d","dir":true,"modifiedIndex":26,"createdIndex":21},"prevNode":{"key":"/d","dir":true,"modifiedIndex":21,"createdIndex":21}}`
	// refC11 is v2's create of /d/c, the first event of a stream from
	// waitIndex 11.
	refC11 = `{"action":"create","node":{"key":"/d/c","value":"1","modifiedIndex":11,"createdIndex":11}}`
)

// tExpiration is the expiration of the fixture's /t, read once: the
// fixture's write and the cases' events of it show the same one, however
// long the cases take to build and run.
var tExpiration = exp(2 * time.Second)

// evT25 is the expiry of /t: its prevNode is the node the TTL write left,
// with no ttl left.
func evT25(action, value string) string {
	return `{"action":"` + action + `","node":{"key":"/t","modifiedIndex":25,"createdIndex":23},"prevNode":{"key":"/t","value":"` +
		value + `","expiration":"` + tExpiration + `","modifiedIndex":23,"createdIndex":23}}`
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
	name      string
	req, reqB *v2diff.Request // reqB: the bridge's, when its indexes differ
	ref, br   *v2diff.Response
	watch     bool
	// lines are further lines of the watch (reference, bridge; "" for
	// none), judged one after the other after ref and br, its headers.
	lines [][2]string
	// excuse is the divergence a passing answer needs ("" for none);
	// wrong marks an answer that must fail.
	excuse string
	wrong  bool
}

const (
	errKeyDeep  = `{"errorCode":209,"message":"Invalid field","cause":"key is deeper than 48 levels","index":0}`
	errTooLarge = `{"errorCode":209,"message":"Invalid field","cause":"value too large: the request exceeds the etcd v3 backend's request size limit (--max-request-bytes)","index":0}`
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
	windowed := `,"expiration":"` + exp(time.Second+v2diff.LeaseWindow) + `","ttl":1`
	add("ttl=0 lives a second", "0", now, windowed, "ttl-minimum", false)
	add("ttl=1 lives its second, and the lease's window", "1", one, windowed, "", false)
	add("ttl=0 answered with v3's minimum lease", "0", now, lease, "", true)
	add("ttl=1 answered with v3's minimum lease", "1", one, lease, "", true)
	add("ttl=1 answered with a permanent key", "1", one, "", "", true)
	add("ttl=0 answered with a permanent key", "0", now, "", "", true)
	add("ttl=0 answered with a lease over the minimum", "0", now, `,"expiration":"`+exp(5*time.Second)+`","ttl":5`, "", true)
	add("ttl=0 answered with a ttl but no expiration", "0", now, `,"ttl":2`, "", true)
	add("ttl=0 answered with an expiration that disagrees with its ttl", "0", now,
		`,"expiration":"`+exp(time.Hour)+`","ttl":2`, "", true)
	add("ttl=5 answered with the minimum lease", "5", `,"expiration":"`+exp(5*time.Second)+`","ttl":5`, lease, "", true)
	add("ttl=0 answered with ttl 1 and an expiration in the past", "0", now,
		`,"expiration":"`+exp(-time.Second)+`","ttl":1`, "", true)
	add("ttl=1 answered with ttl 2 and an expiration 5 s away", "1", one,
		`,"expiration":"`+exp(5*time.Second)+`","ttl":2`, "", true)
	add("ttl=0 answered with ttl 2 and an expiration 0.3 s away", "0", now,
		`,"expiration":"`+exp(300*time.Millisecond)+`","ttl":2`, "", true)

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
		judgeCase{name: "a huge ttl refused with 202 and a non-zero index", req: over, ref: r,
			br: fail(400, "13", `{"errorCode":202,"message":"The given TTL in POST form is not a number","cause":"ttl exceeds the maximum of 9000000000","index":13}`), wrong: true},
		judgeCase{name: "a honourable huge ttl refused with 202", req: req("PUT", "/v2/keys/z?value=1&ttl=9000000000"), ref: r,
			br: fail(400, "0", `{"errorCode":202,"message":"The given TTL in POST form is not a number","cause":"ttl exceeds the maximum of 9000000000","index":0}`), wrong: true},
	)
	// A DELETE parses its ttl and ignores it.
	del := req("DELETE", "/v2/keys/b?ttl=0")
	deleted := func(mi, ci int, node string) string {
		return `{"action":"delete","node":{"key":"/b"` + node + `,"modifiedIndex":` + strconv.Itoa(mi) + `,"createdIndex":` +
			strconv.Itoa(ci) + `},"prevNode":{"key":"/b","value":"1","modifiedIndex":` + strconv.Itoa(ci) +
			`,"createdIndex":` + strconv.Itoa(ci) + `}}`
	}
	cs = append(cs,
		judgeCase{name: "a DELETE ?ttl=0 ignores the ttl", req: del, ref: ok(200, "17", deleted(17, 4, "")),
			br: ok(200, "27", deleted(27, 10, ""))},
		judgeCase{name: "a DELETE ?ttl=0 answered with a ttl on the deleted node", req: del,
			ref: ok(200, "17", deleted(17, 4, "")), br: ok(200, "27", deleted(27, 10, lease)), wrong: true},
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
		{name: "a deep key refused with the wrong message and a non-zero index", req: req("PUT", "/v2/keys"+deep+"?value=1"),
			ref: created(deep), br: fail(400, "13", `{"errorCode":209,"message":"Key not found","cause":"key is deeper than 48 levels","index":13}`),
			wrong: true},
		{name: "a deep key refused with the wrong message", req: req("PUT", "/v2/keys"+deep+"?value=1"),
			ref: created(deep), br: fail(400, "0", strings.Replace(errKeyDeep, "Invalid field", "Key not found", 1)),
			wrong: true},
		{name: "a deep key refused with a non-zero index", req: req("PUT", "/v2/keys"+deep+"?value=1"),
			ref: created(deep), br: fail(400, "13", strings.Replace(errKeyDeep, `"index":0`, `"index":13`, 1)), wrong: true},
		{name: "a deep key refused with X-Raft-* headers", req: req("PUT", "/v2/keys"+deep+"?value=1"),
			ref: created(deep), br: ok(400, "0", errKeyDeep), wrong: true},
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
		{name: "a HEAD of a deep key refused with a non-zero index", req: req("HEAD", "/v2/keys"+deep),
			ref: plain(404, "", "X-Etcd-Index", "6"), br: plain(400, "", "X-Etcd-Index", "13"), wrong: true},
		{name: "a 5000-byte key is refused", req: req("PUT", "/v2/keys/"+strings.Repeat("k", 5000)+"?value=1"),
			ref: created("/" + strings.Repeat("k", 5000)), br: cause("key is longer than 4096 bytes"), excuse: "limits"},
		{name: "a 4000-byte key refused as too long", req: req("PUT", "/v2/keys/"+strings.Repeat("k", 4000)+"?value=1"),
			ref: created("/" + strings.Repeat("k", 4000)), br: cause("key is longer than 4096 bytes"), wrong: true},
	}
}

// err401 is the reference's 401 for a waitIndex it no longer keeps, at
// its index 16 (after every write of the fixture).
const err401 = `{"errorCode":401,"message":"The event in requested index is outdated and cleared","cause":"the requested history has been cleared [5/2]","index":16}`

// watchJudgeCases are watches from a past waitIndex: v2 answers 401 where
// the bridge answers from history (history-horizon).
func watchJudgeCases() []judgeCase {
	// hist is a watch of target (a key, maybe with ?recursive=true) from
	// waitIndex 2 on the reference (cleared) and wb on the bridge, which
	// answers body at X-Etcd-Index 26 (every write of the fixture made).
	hist := func(name, target, wb, body, excuse string, wrong bool) judgeCase {
		sep := "?"
		if strings.Contains(target, "?") {
			sep = "&"
		}
		return judgeCase{name: name, req: req("GET", "/v2/keys"+target+sep+"wait=true&waitIndex=2"),
			reqB: req("GET", "/v2/keys"+target+sep+"wait=true&waitIndex="+wb), watch: true,
			ref: fail(400, "16", err401), br: ok(200, "26", body), excuse: excuse, wrong: wrong}
	}
	right := func(name, target, wb, body string) judgeCase {
		return hist(name, target, wb, body, "history-horizon", false)
	}
	wrong := func(name, target, wb, body string) judgeCase { return hist(name, target, wb, body, "", true) }
	waiting := func(name, key, wb string, wrong bool) judgeCase {
		c := hist(name, key, wb, "", "", wrong)
		c.br = waitingHead("26")
		if !wrong {
			c.excuse = "history-horizon"
		}
		return c
	}
	a13 := func(from, to string) string { return strings.Replace(evA13, from, to, 1) }
	return []judgeCase{
		right("history beyond v2's horizon is served, prevNode and all", "/a", "12", evA13),
		wrong("history answered without the write's prevNode", "/a", "12",
			`{"action":"set","node":{"key":"/a","value":"2","modifiedIndex":13,"createdIndex":13}}`),
		wrong("history answered with the old value", "/a", "12", a13(`"value":"2"`, `"value":"1"`)),
		wrong("history answered with another key's prevNode", "/a", "12",
			a13(`"prevNode":{"key":"/a"`, `"prevNode":{"key":"/b"`)),
		wrong("history answered with another prevNode of the key", "/a", "12",
			a13(`"modifiedIndex":11,"createdIndex":11}}`, `"modifiedIndex":10,"createdIndex":10}}`)),
		wrong("history answered with createdIndex after modifiedIndex", "/a", "12",
			a13(`"modifiedIndex":13,"createdIndex":13`, `"modifiedIndex":13,"createdIndex":14`)),
		wrong("history answered with a prevNode the write did not have", "/d/c", "21",
			strings.Replace(evC21, `}}`, `},"prevNode":{"key":"/d/c","value":"0","modifiedIndex":20,"createdIndex":20}}`, 1)),
		wrong("history answered with another action", "/a", "12", a13(`"set"`, `"compareAndSwap"`)),
		wrong("history answered with an event for another key", "/a", "12", evC21),
		wrong("history answered with an event before waitIndex", "/a", "12",
			`{"action":"set","node":{"key":"/a","value":"1","modifiedIndex":11,"createdIndex":11}}`),
		{name: "history answered with an event after X-Etcd-Index", req: req("GET", "/v2/keys/d/c?wait=true&waitIndex=2"),
			reqB: req("GET", "/v2/keys/d/c?wait=true&waitIndex=22"), watch: true,
			ref: fail(400, "11", strings.Replace(err401, `"index":16`, `"index":11`, 1)), br: ok(200, "21", evC22), wrong: true},
		wrong("history answered with a later event, skipping the first match", "/a", "11", evA13),
		wrong("history answered with an event at another write's index", "/a", "10",
			`{"action":"set","node":{"key":"/a","value":"2","modifiedIndex":10,"createdIndex":10}}`),
		wrong("history answered with an event at no write's index", "/a", "12",
			`{"action":"set","node":{"key":"/a","value":"2","modifiedIndex":12,"createdIndex":12}}`),
		wrong("history answered with a get", "/a", "12", a13(`"set"`, `"get"`)),
		wrong("history answered with a delete carrying a value", "/a", "12", a13(`"set"`, `"delete"`)),
		wrong("history answered with a child event on a non-recursive watch", "/d", "21", evC21),
		wrong("history answered with a sibling's event on a recursive watch", "/d/c?recursive=true", "22",
			strings.ReplaceAll(evH24, "/d/_h", "/d/cc")),
		right("history serves a child event on a recursive watch", "/d?recursive=true", "21", evC21),
		right("history serves a hidden key, as v2's history does", "/d?recursive=true", "23", evH24),
		right("history serves the delete of a directory above", "/d/x", "25", evD26),
		wrong("history answered with the delete of a directory elsewhere", "/d/x", "25",
			strings.ReplaceAll(evD26, `"/d"`, `"/e"`)),
		right("history serves an expiry no watch saw", "/t", "24", evT25("expire", "1")),
		wrong("history answers an expiry as a delete", "/t", "24", evT25("delete", "1")),
		wrong("history answers an expiry with another value", "/t", "24", evT25("expire", "2")),
		wrong("history answers an expiry with a ttl left", "/t", "24",
			strings.Replace(evT25("expire", "1"), `"modifiedIndex":23`, `"ttl":2,"modifiedIndex":23`, 1)),
		wrong("history answers an expiry of a key without TTL", "/b", "11",
			`{"action":"expire","node":{"key":"/b","modifiedIndex":25,"createdIndex":10},"prevNode":{"key":"/b","value":"1","modifiedIndex":10,"createdIndex":10}}`),
		waiting("a watch beyond v2's horizon waits when no write matches", "/c", "12", false),
		waiting("a watch beyond v2's horizon waits though a write matches", "/a", "11", true),
		{name: "history answered with a 500", req: req("GET", "/v2/keys/a?wait=true&waitIndex=2"),
			reqB: req("GET", "/v2/keys/a?wait=true&waitIndex=12"), watch: true, ref: fail(400, "16", err401),
			br: fail(500, "26", `{"errorCode":300,"message":"Raft Internal Error","index":26}`), wrong: true},
	}
}

// waitingHead is the headers of a watch that is waiting (no body yet).
func waitingHead(xi string) *v2diff.Response {
	r := ok(200, xi, "")
	r.Body = nil
	return r
}

// streamCases are streams from a past waitIndex: v2 sends its one event
// from history and is silent after (stream-history); each case is the
// headers and then the lines, judged one by one.
func streamCases() []judgeCase {
	// stream watches key from waitIndex 11 on the reference and 21 on the
	// bridge (the create of /d/c, v2's one event), begun when the servers
	// were at xiRef and xiBridge.
	stream := func(name, key, xiRef, xiBridge string, lines [][2]string, wrong bool) judgeCase {
		q := "?wait=true&stream=true"
		if key == "/d" {
			q += "&recursive=true"
		}
		c := judgeCase{name: name, req: req("GET", "/v2/keys"+key+q+"&waitIndex=11"),
			reqB: req("GET", "/v2/keys"+key+q+"&waitIndex=21"), watch: true,
			ref: waitingHead(xiRef), br: waitingHead(xiBridge), lines: lines, wrong: wrong}
		if !wrong {
			c.excuse = "stream-history"
		}
		return c
	}
	d := "/d" // recursive
	first := [2]string{refC11, evC21}
	then := func(bridge string) [2]string { return [2]string{"", bridge} }
	return []judgeCase{
		stream("a stream goes on with every later event", d, "12", "22",
			[][2]string{first, then(evC22), then(evD26)}, false),
		stream("a stream goes on with a hidden key from history, as v2's history does", d, "14", "24",
			[][2]string{first, then(evC22), then(evH24), then(evD26)}, false),
		stream("a stream on a key hears the delete of its directory", "/d/c", "12", "22",
			[][2]string{first, then(evC22), then(evD26)}, false),
		stream("a stream repeats an event", d, "12", "22",
			[][2]string{first, then(evC22), then(evC22)}, true),
		stream("a stream goes back to an older index", d, "12", "22",
			[][2]string{first, then(evC22), then(evD26), then(evC22)}, true),
		stream("a stream shows a hidden key it is not told of live", d, "12", "22",
			[][2]string{first, then(evC22), then(evH24)}, true),
		stream("a stream skips an event", d, "12", "22", [][2]string{first, then(evD26)}, true),
		stream("a stream shows a key outside the watched path", d, "12", "22",
			[][2]string{first, then(evC22), then(evT25("expire", "1"))}, true),
		stream("a stream on a key shows a sibling", "/d/c", "14", "24",
			[][2]string{first, then(evC22), then(evH24)}, true),
		stream("a stream goes on with the old value", d, "12", "22",
			[][2]string{first, then(strings.Replace(evC22, `"value":"2"`, `"value":"1"`, 1))}, true),
		stream("a stream goes on with a garbage expire for an unrelated key", d, "12", "22",
			[][2]string{first, then(`{"action":"expire","node":{"key":"/zzz","modifiedIndex":23}}`)}, true),
		stream("a stream goes on with a line that is not JSON", d, "12", "22",
			[][2]string{first, then(`{"action":"set"`)}, true),
		stream("a stream from history v2 did not answer from history", d, "10", "13",
			[][2]string{first, then(evC22)}, true),
		stream("a stream has an event though v2 sent none", d, "12", "22", [][2]string{then(evC21)}, true),
		{name: "a stream without waitIndex has an event v2 did not send",
			req: req("GET", "/v2/keys/d?wait=true&stream=true&recursive=true"), watch: true, ref: waitingHead("12"), br: waitingHead("22"),
			lines: [][2]string{then(evD26)}, wrong: true},
	}
}

// causeCases are errors whose causes carry indexes or values.
func causeCases() []judgeCase {
	cleared := func(cause, index string) string {
		return `{"errorCode":401,"message":"The event in requested index is outdated and cleared","cause":"the requested history has been cleared ` +
			cause + `","index":` + index + `}`
	}
	watch := func(name, bridgeCause string, wrong bool) judgeCase {
		return judgeCase{name: name, req: req("GET", "/v2/keys/a?wait=true&waitIndex=2"),
			reqB: req("GET", "/v2/keys/a?wait=true&waitIndex=9"), watch: true,
			ref: fail(400, "16", cleared("[5/2]", "16")), br: fail(400, "26", cleared(bridgeCause, "26")), wrong: wrong}
	}
	cas := func(name, q, qb, ref, br string, wrong bool) judgeCase {
		e := func(xi, cause string) *v2diff.Response {
			return fail(412, xi, `{"errorCode":101,"message":"Compare failed","cause":"`+cause+`","index":`+xi+`}`)
		}
		return judgeCase{name: name, req: req("PUT", "/v2/keys/a?value=3&"+q), reqB: req("PUT", "/v2/keys/a?value=3&"+qb),
			ref: e("16", ref), br: e("26", br), wrong: wrong}
	}
	return []judgeCase{
		watch("a 401 names an oldest kept index after waitIndex", "[13/9]", false),
		watch("a 401 whose oldest kept index lies past the current index", "[30/9]", true),
		watch("a 401 whose oldest kept index is not after waitIndex", "[9/9]", true),
		cas("a compare-failed cause names the values", "prevValue=1", "prevValue=1", "[1 != 2]", "[1 != 2]", false),
		cas("a compare-failed cause with the two values swapped", "prevValue=1", "prevValue=1", "[1 != 2]", "[2 != 1]",
			true),
		cas("a compare-failed cause maps the indexes", "prevIndex=5", "prevIndex=11", "[5 != 6]", "[11 != 13]", false),
		cas("a compare-failed cause with the two indexes swapped", "prevIndex=5", "prevIndex=11", "[5 != 6]",
			"[13 != 11]", true),
		cas("a compare-failed cause naming another index", "prevIndex=5", "prevIndex=11", "[5 != 6]", "[11 != 10]", true),
		cas("both compares failed", "prevValue=1&prevIndex=5", "prevValue=1&prevIndex=11", "[1 != 2] [5 != 6]",
			"[1 != 2] [11 != 13]", false),
		cas("both compares failed, values swapped", "prevValue=1&prevIndex=5", "prevValue=1&prevIndex=11",
			"[1 != 2] [5 != 6]", "[2 != 1] [11 != 13]", true),
	}
}

// listingCases: listings are compared in key order unless the request
// says sorted=true (sorted-listings).
func listingCases() []judgeCase {
	listing := func(names ...string) string {
		var nodes []string
		for _, n := range names {
			nodes = append(nodes, `{"key":"/l/`+n+`","dir":true,"modifiedIndex":10,"createdIndex":10}`)
		}
		return `{"action":"get","node":{"key":"/l","dir":true,"nodes":[` + strings.Join(nodes, ",") + `],"modifiedIndex":10,"createdIndex":10}}`
	}
	sorted := req("GET", "/v2/keys/l?sorted=true")
	return []judgeCase{
		{name: "an unsorted listing in another order", req: req("GET", "/v2/keys/l"),
			ref: ok(200, "16", strings.ReplaceAll(listing("b", "a"), ":10", ":4")), br: ok(200, "26", listing("a", "b"))},
		{name: "a sorted listing in order", req: sorted,
			ref: ok(200, "16", strings.ReplaceAll(listing("a", "b"), ":10", ":4")), br: ok(200, "26", listing("a", "b"))},
		{name: "a sorted listing out of order", req: sorted,
			ref: ok(200, "16", strings.ReplaceAll(listing("a", "b"), ":10", ":4")), br: ok(200, "26", listing("b", "a")),
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
			br:  plain(404, "404 page not found\n", "Content-Type", "text/plain; charset=utf-8"), wrong: true},
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
	for _, f := range []func() []judgeCase{ttlCases, limitCases, watchJudgeCases, streamCases, causeCases,
		listingCases, createdIndexCases, dirUpdateCases, endpointCases} {
		cs = append(cs, f()...)
	}
	return cs
}

// TestJudge judges each case as the runner does (caseRun.finish): the
// exchange is registered, then compared and excused; a watch's lines
// follow its headers, one exchange each.
func TestJudge(t *testing.T) {
	for _, c := range judgeCases() {
		t.Run(c.name, func(t *testing.T) {
			s := judgeFixture()
			rb := c.reqB
			if rb == nil {
				rb = c.req
			}
			reqs := [2]*v2diff.Request{c.req, rb}
			x := v2diff.NewExchange(reqs, [2]*v2diff.Response{c.ref, c.br})
			x.Watch = c.watch
			exchanges := []*v2diff.Exchange{x}
			for _, l := range c.lines {
				x := v2diff.NewExchange(reqs, [2]*v2diff.Response{eventLine(l[0]), eventLine(l[1])})
				x.Watch, x.Event = true, true
				exchanges = append(exchanges, x)
			}
			var fails []string
			excused := map[string]int{}
			for i, x := range exchanges {
				s.Register(x)
				f, e := judge(s, x, x.Req[v2diff.Ref].BoolParam("sorted"))
				if len(f) > 0 {
					fails = append(fails, fmt.Sprintf("exchange %d:\n%s", i+1, report(x, f)))
				}
				for id, n := range e {
					excused[id] += n
				}
			}
			switch {
			case c.wrong && len(fails) == 0:
				t.Errorf("a wrong answer passed (excused: %v)\n%s", excused, reportAll(exchanges))
			case !c.wrong && len(fails) > 0:
				t.Errorf("a right answer failed\n%s", strings.Join(fails, ""))
			case !c.wrong && c.excuse == "" && len(excused) > 0:
				t.Errorf("excused by %v, want no excuse", excused)
			case !c.wrong && c.excuse != "" && (excused[c.excuse] == 0 || len(excused) != 1):
				t.Errorf("excused by %v, want only %s", excused, c.excuse)
			}
		})
	}
}

func reportAll(xs []*v2diff.Exchange) string {
	var b strings.Builder
	for i, x := range xs {
		fmt.Fprintf(&b, "exchange %d:\n%s", i+1, report(x, nil))
	}
	return b.String()
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
