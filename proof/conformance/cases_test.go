// SPDX-License-Identifier: Apache-2.0

package conformance

import "strings"

// Builders for the case tables.

func keys(p string) string { return "/v2/keys" + p }

func get(p string, q ...string) step  { return step{Method: "GET", Path: keys(p), Query: q} }
func head(p string, q ...string) step { return step{Method: "HEAD", Path: keys(p), Query: q} }
func put(p string, f ...string) step  { return step{Method: "PUT", Path: keys(p), Form: f} }
func post(p string, f ...string) step { return step{Method: "POST", Path: keys(p), Form: f} }
func del(p string, q ...string) step  { return step{Method: "DELETE", Path: keys(p), Query: q} }
func raw(method, path string) step    { return step{Method: method, Path: path} }

func watch(name, p string, q ...string) step {
	return step{Method: "GET", Path: keys(p), Query: append([]string{"wait", "true"}, q...), Watch: name}
}
func await(name string) step         { return step{Await: name} }
func awaitN(name string, n int) step { return step{Await: name, Events: n} }
func awaitEnd(name string) step      { return step{Await: name, End: true} }
func (s step) want(status int) step  { s.Status = status; return s }
func (s step) code(code int) step    { s.Code = code; return s }
func (s step) save(name string) step { s.Save = name; return s }
func (s step) shape() step           { s.Shape = true; return s }
func (s step) expect(ids ...string) step {
	s.Expect = append(s.Expect, ids...)
	return s
}
func (s step) body(raw, ctype string) step { s.RawBody, s.ContentType = raw, ctype; return s }

// errCase is a case whose last step must fail with code (after setup).
func errCase(name string, setup []step, last step, status, code int) scriptCase {
	return scriptCase{Name: name, Steps: append(append([]step(nil), setup...), last.want(status).code(code))}
}

// scriptedCases covers the v2 keys API outside watches.
func scriptedCases() []scriptCase {
	var cs []scriptCase
	add := func(c ...scriptCase) { cs = append(cs, c...) }

	// Endpoints and methods; paths.
	add(
		scriptCase{Name: "method not allowed", Steps: []step{raw("PATCH", "/v2/keys/a").want(405),
			raw("OPTIONS", "/v2/keys/").want(200).expect("cors")}},
		scriptCase{Name: "unknown paths", Steps: []step{raw("GET", "/v2/nothing").want(404),
			raw("GET", "/v2/keysx").want(404), raw("GET", "/v3nope").want(404)}},
		scriptCase{Name: "unclean paths redirect", Steps: []step{
			put("/a/b", "value", "1").want(201),
			raw("GET", "/v2/keys//a/b").want(307).expect("redirect-status"),
			raw("GET", "/v2/keys/a/./b").want(307).expect("redirect-status"),
			raw("GET", "/v2/keys/a/x/../b?recursive=true").want(307).expect("redirect-status"),
			raw("PUT", "/v2/keys//a/c?value=2").want(307).expect("redirect-status"),
		}},
		scriptCase{Name: "trailing slash and root", Steps: []step{
			put("/a/", "value", "1").want(201),
			get("/a/").want(200), get("").want(200), get("/").want(200),
			get("", "recursive", "true").want(200),
		}},
		scriptCase{Name: "endpoints", Steps: []step{
			raw("GET", "/v2/members").want(200).shape().expect("members"),
			raw("GET", "/v2/members/leader").want(200).shape().expect("members"),
			raw("GET", "/v2/stats/self").want(200).shape(),
			raw("GET", "/v2/stats/leader").want(200).shape(),
			raw("GET", "/v2/stats/store").want(200).shape(),
			raw("GET", "/version").want(200).shape(),
			raw("GET", "/health").want(200).shape().expect("health-format"),
			raw("DELETE", "/v2/members/1234").want(404).shape(),
			raw("GET", "/v2/machines").want(200).shape(),
			raw("HEAD", "/v2/machines").want(200).shape(),
			raw("POST", "/v2/machines").want(405),
			raw("PUT", "/version").want(405),
		}},
	)

	// Request parsing.
	setupFile := []step{put("/f", "value", "v").want(201)}
	for _, b := range []string{"recursive", "sorted", "wait", "quorum", "stream"} {
		add(errCase("bad bool "+b, setupFile, get("/f", b, "yes"), 400, 209))
	}
	add(
		errCase("bad bool dir", setupFile, put("/f", "dir", "x"), 400, 209),
		errCase("bad bool noValueOnSuccess", setupFile, put("/f", "value", "1", "noValueOnSuccess", "x"), 400, 209),
		errCase("bad prevExist", setupFile, put("/f", "value", "1", "prevExist", "maybe"), 400, 209),
		errCase("bad refresh", setupFile, put("/f", "refresh", "maybe", "ttl", "5"), 400, 209),
		errCase("bad prevIndex", setupFile, put("/f", "value", "1", "prevIndex", "-1"), 400, 203),
		errCase("bad prevIndex on delete", setupFile, del("/f", "prevIndex", "x"), 400, 203),
		errCase("bad waitIndex", setupFile, get("/f", "wait", "true", "waitIndex", "x"), 400, 203),
		errCase("bad waitIndex without wait", setupFile, get("/f", "waitIndex", "abc"), 400, 203),
		errCase("negative ttl", setupFile, put("/f", "value", "1", "ttl", "-5"), 400, 202),
		errCase("non-numeric ttl", setupFile, put("/f", "value", "1", "ttl", "ten"), 400, 202),
		errCase("wait on PUT", setupFile, put("/f", "value", "1", "wait", "true"), 400, 209),
		errCase("wait on DELETE", setupFile, del("/f", "wait", "true"), 400, 209),
		errCase("wait on POST", setupFile, post("/d", "wait", "true"), 400, 209),
		errCase("empty prevValue", setupFile, put("/f", "value", "1", "prevValue", ""), 400, 201),
		errCase("empty prevValue on delete", setupFile, del("/f", "prevValue", ""), 400, 201),
		errCase("refresh with value", setupFile, put("/f", "value", "1", "refresh", "true", "ttl", "50"), 400, 211),
		errCase("refresh without ttl", setupFile, put("/f", "refresh", "true"), 400, 212),
		errCase("unparsable form", setupFile, put("/f").body("value=%zz", ""), 400, 210),
		errCase("form too large", setupFile, put("/f").body("value="+strings.Repeat("x", 11<<20), ""), 400, 210),
		errCase("unparsable post form", nil, post("/q").body("%%", ""), 400, 210),
		scriptCase{Name: "bool spellings", Steps: []step{
			put("/d/a", "value", "1"),
			get("/d", "recursive", "1", "sorted", "T"), get("/d", "recursive", "TRUE", "sorted", "True"),
			get("/d", "recursive", "t", "sorted", "0"), get("/d", "recursive", "F", "sorted", "FALSE"),
			del("/d", "recursive", "True").want(200),
		}},
		scriptCase{Name: "refresh false with value", Steps: []step{
			put("/f", "value", "1", "refresh", "false").want(201),
			put("/f", "value", "2", "refresh", "false", "ttl", "").want(200),
		}},
		scriptCase{Name: "body wins over query", Steps: []step{
			{Method: "PUT", Path: keys("/f?value=query"), Form: []string{"value", "body"}, Status: 201},
			get("/f").want(200),
			{Method: "PUT", Path: keys("/g?value=query&ttl=100"), Status: 201},
			get("/g").want(200),
		}},
		scriptCase{Name: "first of repeated values", Steps: []step{
			put("/f", "value", "one", "value", "two").want(201),
			get("/f", "recursive", "false", "recursive", "true").want(200),
		}},
		scriptCase{Name: "missing value is empty", Steps: []step{
			put("/f").want(201), get("/f").want(200),
			put("/g", "value", "").want(201), get("/g").want(200),
		}},
		scriptCase{Name: "empty ttl is permanent", Steps: []step{
			put("/f", "value", "1", "ttl", "").want(201), get("/f").want(200),
		}},
		scriptCase{Name: "get parameters on DELETE come from the query", Steps: []step{
			put("/d/a", "value", "1"),
			{Method: "DELETE", Path: keys("/d"), Form: []string{"recursive", "true"}, Status: 200},
		}},
		scriptCase{Name: "form body on DELETE is ignored", Steps: []step{
			put("/d/a", "value", "1"),
			del("/d").body("recursive=true", "").want(403).code(102),
		}},
	)

	// Get.
	add(
		scriptCase{Name: "get", Steps: []step{
			put("/f", "value", "v").want(201),
			put("/d/a", "value", "1"), put("/d/b/c", "value", "2"), put("/d/e", "dir", "true"),
			put("/d/_h", "value", "hidden"), put("/d/_hd/x", "value", "3"),
			get("/f").want(200),
			get("/d").want(200),
			get("/d", "recursive", "true").want(200),
			get("/d", "sorted", "true").want(200),
			get("/d", "recursive", "true", "sorted", "true").want(200),
			get("/d/e").want(200),
			get("/d/_h").want(200),
			get("/d/_hd", "recursive", "true").want(200),
			get("", "recursive", "true", "sorted", "true").want(200),
			get("/d/b/c", "recursive", "true").want(200),
		}},
		errCase("get missing", nil, get("/nope"), 404, 100),
		errCase("get missing deep", []step{put("/d/x", "value", "1")}, get("/d/nope/a/b"), 404, 100),
		errCase("get missing top of deep", nil, get("/nope/a/b"), 404, 100),
		errCase("get through file", setupFile, get("/f/x/y"), 400, 104),
		scriptCase{Name: "get root empty", Steps: []step{get("").want(200), get("", "recursive", "true").want(200)}},
		scriptCase{Name: "quorum get", Steps: []step{
			put("/d/a", "value", "1"),
			get("/d/a", "quorum", "true").want(200),
			get("/d", "quorum", "true", "recursive", "true", "sorted", "true").want(200),
			get("/nope", "quorum", "true").want(404).code(100),
		}},
		scriptCase{Name: "quorum with wait is a get", Steps: []step{
			put("/a", "value", "1"),
			get("/a", "quorum", "true", "wait", "true").want(200),
			get("/nope", "quorum", "true", "wait", "true").want(404),
		}},
		scriptCase{Name: "head", Steps: []step{
			put("/a", "value", "1"), put("/d/x", "value", "1"),
			head("/a").want(200), head("/d", "recursive", "true").want(200),
			head("/nope").want(404), head("/a/b").want(400),
			head("").want(200),
		}},
	)

	// Set.
	add(
		scriptCase{Name: "set new and overwrite", Steps: []step{
			put("/a", "value", "1").want(201),
			put("/a", "value", "2").want(200),
			get("/a").want(200).expect("set-created-index"),
			put("/a", "value", "3").want(200).expect("set-created-index"),
			del("/a").want(200).expect("set-created-index"),
		}},
		scriptCase{Name: "set creates directories", Steps: []step{
			put("/a/b/c/d", "value", "1").want(201),
			get("/a", "recursive", "true", "sorted", "true").want(200),
			put("/a/b/e", "value", "2").want(201),
			get("/a", "recursive", "true", "sorted", "true").want(200),
		}},
		scriptCase{Name: "set dir", Steps: []step{
			put("/d", "dir", "true").want(201),
			get("/d").want(200),
			put("/d", "dir", "true").want(403).code(102),
			put("/d", "value", "1").want(403).code(102),
			put("/f", "value", "1").want(201),
			put("/f", "dir", "true").want(200),
			get("/f").want(200),
			put("/f/x", "value", "1").want(201),
		}},
		errCase("set under file", setupFile, put("/f/x/y", "value", "1"), 400, 104),
		errCase("set root", nil, put("", "value", "1"), 400, 107),
		errCase("set root dir", nil, put("/", "dir", "true"), 400, 107),
		scriptCase{Name: "set hidden", Steps: []step{
			put("/_h", "value", "1").want(201), get("/_h").want(200), get("").want(200),
			put("/d/_hd/x", "value", "1").want(201), get("/d", "recursive", "true").want(200),
			get("/d/_hd", "recursive", "true").want(200),
		}},
		scriptCase{Name: "set without ttl makes permanent", Steps: []step{
			put("/a", "value", "1", "ttl", "500").want(201),
			get("/a").want(200),
			put("/a", "value", "2").want(200),
			get("/a").want(200).expect("set-created-index"),
		}},
	)

	// create (prevExist=false).
	add(
		scriptCase{Name: "create", Steps: []step{
			put("/a", "value", "1", "prevExist", "false").want(201),
			put("/a", "value", "2", "prevExist", "false").want(412).code(105),
			put("/d", "dir", "true", "prevExist", "false").want(201),
			put("/d", "dir", "true", "prevExist", "false").want(412).code(105),
			put("/d", "value", "x", "prevExist", "false").want(412).code(105),
			put("/e/f/g", "value", "1", "prevExist", "false").want(201),
			get("", "recursive", "true", "sorted", "true").want(200),
		}},
		scriptCase{Name: "create ignores compare", Steps: []step{
			put("/a", "value", "1", "prevExist", "false", "prevValue", "zz").want(201),
			put("/a", "value", "1", "prevExist", "false", "prevIndex", "1").want(412).code(105),
		}},
		errCase("create root", nil, put("", "dir", "true", "prevExist", "false"), 400, 107),
		errCase("create under file", setupFile, put("/f/x", "value", "1", "prevExist", "false"), 400, 104),
	)

	// update (prevExist=true).
	add(
		scriptCase{Name: "update", Steps: []step{
			put("/a", "value", "1").want(201),
			put("/a", "value", "2", "prevExist", "true").want(200),
			put("/a", "prevExist", "true").want(200),
			get("/a").want(200),
			put("/a", "value", "3", "prevExist", "true", "ttl", "300").want(200),
			get("/a").want(200),
			put("/a", "value", "4", "prevExist", "true").want(200),
			get("/a").want(200),
		}},
		errCase("update missing", nil, put("/nope", "value", "1", "prevExist", "true"), 404, 100),
		errCase("update missing deep", nil, put("/nope/x", "value", "1", "prevExist", "true"), 404, 100),
		errCase("update dir with value", []step{put("/d", "dir", "true")},
			put("/d", "value", "1", "prevExist", "true"), 403, 102),
		errCase("update root", nil, put("", "value", "1", "prevExist", "true"), 400, 107),
		errCase("update under file", setupFile, put("/f/x", "value", "1", "prevExist", "true"), 400, 104),
		scriptCase{Name: "update dir ttl", Steps: []step{
			put("/d", "dir", "true", "ttl", "300").want(201),
			put("/d", "dir", "true", "ttl", "600", "prevExist", "true").want(500).code(300).expect("dir-ttl-update"),
		}},
		scriptCase{Name: "update dir without value", Steps: []step{
			put("/d/x", "value", "1"),
			put("/d", "prevExist", "true").want(500).code(300).expect("dir-ttl-update"),
		}},
	)

	// CompareAndSwap.
	add(
		scriptCase{Name: "cas by value", Steps: []step{
			put("/a", "value", "one").want(201),
			put("/a", "value", "two", "prevValue", "bad").want(412).code(101),
			put("/a", "value", "two", "prevValue", "one").want(200),
			put("/a", "value", "three", "prevValue", "two", "prevExist", "true").want(200),
			get("/a").want(200),
		}},
		scriptCase{Name: "cas by index", Steps: []step{
			put("/a", "value", "one").want(201).save("a"),
			put("/x", "value", "other").want(201).save("x"),
			put("/a", "value", "two", "prevIndex", "{x.mi}").want(412).code(101),
			put("/a", "value", "two", "prevIndex", "{a.mi}").want(200).save("a2"),
			put("/a", "value", "three", "prevIndex", "{a.mi}").want(412).code(101),
			put("/a", "value", "three", "prevIndex", "{a2.mi}", "prevValue", "two").want(200).save("a3"),
			put("/a", "value", "four", "prevIndex", "{a.mi}", "prevValue", "bad").want(412).code(101),
			put("/a", "value", "four", "prevIndex", "{a3.mi}", "prevValue", "bad").want(412).code(101),
			put("/a", "value", "four", "prevIndex", "{a.mi}", "prevValue", "three").want(412).code(101),
			get("/a").want(200),
		}},
		scriptCase{Name: "cas keeps created index and ttl rules", Steps: []step{
			put("/a", "value", "one", "prevExist", "false").want(201),
			put("/a", "value", "two", "prevValue", "one", "ttl", "300").want(200),
			get("/a").want(200),
			put("/a", "value", "three", "prevValue", "two").want(200),
			get("/a").want(200),
		}},
		errCase("cas missing", nil, put("/nope", "value", "1", "prevValue", "x"), 404, 100),
		errCase("cas missing by index", nil, put("/nope", "value", "1", "prevIndex", "5"), 404, 100),
		errCase("cas dir", []step{put("/d", "dir", "true")}, put("/d", "value", "1", "prevValue", "x"), 403, 102),
		errCase("cas root", nil, put("", "value", "1", "prevValue", "x"), 400, 107),
		errCase("cas under file", setupFile, put("/f/x", "value", "1", "prevValue", "x"), 400, 104),
		errCase("cas prevExist true missing", nil, put("/nope", "value", "1", "prevExist", "true", "prevValue", "x"), 404, 100),
	)

	// CompareAndDelete.
	add(
		scriptCase{Name: "cad", Steps: []step{
			put("/a", "value", "one").want(201).save("a"),
			put("/b", "value", "x").save("b"),
			del("/a", "prevValue", "bad").want(412).code(101),
			del("/a", "prevIndex", "{b.mi}").want(412).code(101),
			del("/a", "prevIndex", "{b.mi}", "prevValue", "bad").want(412).code(101),
			del("/a", "prevIndex", "{a.mi}", "prevValue", "one").want(200),
			get("/a").want(404),
			put("/a", "value", "two").save("a"),
			del("/a", "prevIndex", "{a.mi}").want(200),
			put("/a", "value", "three"),
			del("/a", "prevValue", "three", "prevExist", "false").want(200),
		}},
		errCase("cad missing", nil, del("/nope", "prevValue", "x"), 404, 100),
		errCase("cad dir", []step{put("/d", "dir", "true")}, del("/d", "prevValue", "x"), 403, 102),
		errCase("cad dir recursive", []step{put("/d/x", "value", "1")}, del("/d", "prevValue", "x", "recursive", "true"), 403, 102),
		errCase("cad root", nil, del("", "prevValue", "x"), 403, 102),
		errCase("cad under file", setupFile, del("/f/x", "prevIndex", "3"), 400, 104),
	)

	// Delete and directory rules (102/104/105/107/108).
	add(
		scriptCase{Name: "delete", Steps: []step{
			put("/a", "value", "1"), put("/b", "value", "2"), put("/d/x", "value", "1"), put("/e", "dir", "true"),
			put("/t", "value", "1", "ttl", "300"),
			del("/a").want(200),
			del("/b", "dir", "true").want(200),
			del("/d").want(403).code(102),
			del("/d", "dir", "true").want(403).code(108),
			del("/e").want(403).code(102),
			del("/e", "dir", "true").want(200),
			del("/d", "recursive", "true").want(200),
			del("/t").want(200),
			get("", "recursive", "true").want(200),
		}},
		scriptCase{Name: "delete recursive nested", Steps: []step{
			put("/d/a/b/c", "value", "1"), put("/d/a/x", "value", "2", "ttl", "300"), put("/d/_h", "value", "3"),
			del("/d/a", "recursive", "true").want(200),
			del("/d", "recursive", "true", "dir", "false").want(200),
			get("/d").want(404),
		}},
		scriptCase{Name: "delete prevExist ignored", Steps: []step{
			put("/a", "value", "1"),
			del("/a", "prevExist", "false").want(200),
			put("/a", "value", "1"),
			del("/a", "prevExist", "maybe").want(400),
		}},
		errCase("delete missing", nil, del("/nope"), 404, 100),
		errCase("delete missing deep", []step{put("/d", "dir", "true")}, del("/d/x/y", "recursive", "true"), 404, 100),
		errCase("delete root", nil, del(""), 400, 107),
		errCase("delete root recursive", nil, del("/", "recursive", "true"), 400, 107),
		errCase("delete under file", setupFile, del("/f/x"), 400, 104),
		scriptCase{Name: "delete hidden", Steps: []step{
			put("/d/_h", "value", "1"), del("/d/_h").want(200), get("/d").want(200),
		}},
		scriptCase{Name: "empty dir keeps existing", Steps: []step{
			put("/d/x", "value", "1"), del("/d/x").want(200), get("/d").want(200),
			del("/d").want(403).code(102), del("/d", "dir", "true").want(200),
		}},
	)

	// In-order keys.
	add(
		scriptCase{Name: "post", Steps: []step{
			post("/q", "value", "1").want(201).save("p1"),
			post("/q", "value", "2").want(201),
			post("/q", "dir", "true").want(201),
			post("/q").want(201),
			get("/q", "sorted", "true").want(200),
			get("/q", "recursive", "true").want(200),
			get("{p1.key}").want(200),
			del("{p1.key}").want(200),
		}},
		scriptCase{Name: "post into existing and nested dir", Steps: []step{
			put("/q/x", "value", "1"),
			post("/q", "value", "a").want(201),
			post("/r/s/t", "value", "b").want(201),
			get("", "recursive", "true", "sorted", "true").want(200),
		}},
		scriptCase{Name: "post root and hidden", Steps: []step{
			post("", "value", "top").want(201).save("p"),
			get("{p.key}").want(200),
			post("/_hd", "value", "h").want(201),
			get("/_hd", "recursive", "true").want(200),
		}},
		scriptCase{Name: "post with ttl", Steps: []step{
			post("/q", "value", "1", "ttl", "300").want(201).save("p"),
			get("{p.key}").want(200),
		}},
		errCase("post to file", setupFile, post("/f", "value", "1"), 400, 104),
		errCase("post under file", setupFile, post("/f/x", "value", "1"), 400, 104),
		errCase("post bad ttl", nil, post("/q", "value", "1", "ttl", "x"), 400, 202),
	)

	// TTL and refresh.
	add(
		scriptCase{Name: "ttl", Steps: []step{
			put("/a", "value", "1", "ttl", "100").want(201),
			get("/a").want(200),
			put("/d", "dir", "true", "ttl", "200").want(201),
			put("/d/x", "value", "1", "ttl", "300").want(201),
			get("/d", "recursive", "true").want(200),
			get("").want(200),
			put("/a", "value", "2", "ttl", "400").want(200),
			get("/a").want(200).expect("set-created-index"),
		}},
		scriptCase{Name: "ttl zero", Steps: []step{
			put("/z", "value", "1", "ttl", "0").want(201).expect("ttl-minimum"),
		}},
		scriptCase{Name: "ttl one", Steps: []step{
			put("/z", "value", "1", "ttl", "1").want(201),
		}},
		scriptCase{Name: "ttl huge", Steps: []step{
			put("/z", "value", "1", "ttl", "9000000000").want(201).expect("ttl-overflow"),
			put("/y", "value", "1", "ttl", "9000000001", "prevExist", "false").want(201).expect("ttl-overflow"),
		}},
		scriptCase{Name: "ttl huge update", Steps: []step{
			put("/u", "value", "1").want(201),
			put("/u", "value", "2", "prevExist", "true", "ttl", "9000000000").want(200).expect("ttl-overflow"),
		}},
		scriptCase{Name: "refresh set", Steps: []step{
			put("/a", "value", "1", "ttl", "100").want(201),
			put("/a", "refresh", "true", "ttl", "300").want(200),
			get("/a").want(200).expect("set-created-index"),
			put("/a", "refresh", "true", "ttl", "200", "value", "").want(200),
		}},
		scriptCase{Name: "refresh update", Steps: []step{
			put("/a", "value", "1", "ttl", "100").want(201),
			put("/a", "refresh", "true", "ttl", "300", "prevExist", "true").want(200),
			get("/a").want(200),
		}},
		scriptCase{Name: "refresh cas", Steps: []step{
			put("/a", "value", "1", "ttl", "100").want(201).save("a"),
			put("/a", "refresh", "true", "ttl", "300", "prevValue", "1").want(200),
			put("/a", "refresh", "true", "ttl", "300", "prevValue", "2").want(412).code(101),
			put("/a", "refresh", "true", "ttl", "300", "prevIndex", "{a.mi}").want(412).code(101),
			get("/a").want(200),
		}},
		scriptCase{Name: "refresh permanent key", Steps: []step{
			put("/a", "value", "1").want(201),
			put("/a", "refresh", "true", "ttl", "300").want(200),
			get("/a").want(200).expect("set-created-index"),
		}},
		errCase("refresh missing", nil, put("/nope", "refresh", "true", "ttl", "5"), 404, 100),
		errCase("refresh dir", []step{put("/d", "dir", "true", "ttl", "100")}, put("/d", "refresh", "true", "ttl", "5"), 403, 102),
		errCase("refresh under file", setupFile, put("/f/x", "refresh", "true", "ttl", "5"), 400, 104),
		errCase("refresh create", []step{put("/a", "value", "1")}, put("/a", "refresh", "true", "ttl", "5", "prevExist", "false"), 412, 105),
	)

	// Parameter combinations v2 ignores or combines.
	add(
		scriptCase{Name: "dir with value", Steps: []step{
			put("/d", "dir", "true", "value", "ignored").want(201),
			get("/d").want(200),
			post("/q", "dir", "true", "value", "ignored").want(201),
			get("/q", "recursive", "true").want(200),
		}},
		scriptCase{Name: "refresh create missing", Steps: []step{
			put("/a", "refresh", "true", "ttl", "100", "prevExist", "false").want(201),
			get("/a").want(200),
		}},
		scriptCase{Name: "ignored parameters", Steps: []step{
			put("/a", "value", "1", "recursive", "true", "sorted", "true", "quorum", "true", "stream", "true").want(201),
			post("/q", "value", "1", "prevExist", "true", "prevValue", "zz").want(201),
			get("/a", "ttl", "5", "prevValue", "x", "dir", "true", "waitIndex", "3").want(200),
			del("/a", "ttl", "5", "value", "x", "sorted", "true").want(200),
			put("/d", "dir", "true", "prevExist", "true").want(404).code(100),
			put("/d/x", "dir", "true", "value", "v", "prevExist", "false", "ttl", "").want(201),
			del("/d", "dir", "true", "recursive", "false").want(403).code(108),
		}},
		scriptCase{Name: "cas with ttl and compare on a ttl key", Steps: []step{
			put("/a", "value", "1", "ttl", "100").save("a"),
			put("/a", "value", "2", "prevIndex", "{a.mi}", "ttl", "200").want(200),
			del("/a", "prevValue", "2").want(200),
		}},
	)

	// noValueOnSuccess.
	add(scriptCase{Name: "noValueOnSuccess", May: []string{"set-created-index"}, Steps: []step{
		put("/a", "value", "1", "noValueOnSuccess", "true").want(201),
		put("/a", "value", "2", "noValueOnSuccess", "true").want(200),
		put("/b", "value", "1", "prevExist", "false", "noValueOnSuccess", "true").want(201),
		put("/a", "value", "3", "prevExist", "true", "noValueOnSuccess", "true").want(200),
		put("/a", "value", "4", "prevValue", "3", "noValueOnSuccess", "true").want(200),
		post("/q", "value", "1", "noValueOnSuccess", "true").want(201),
		put("/a", "refresh", "true", "ttl", "100", "noValueOnSuccess", "true").want(200),
		del("/a", "noValueOnSuccess", "true").want(200),
		del("/b", "prevValue", "1", "noValueOnSuccess", "true").want(200),
		get("/q", "noValueOnSuccess", "true").want(200),
		put("/b", "value", "1", "prevValue", "zz", "noValueOnSuccess", "true"),
	}})

	// Values and keys.
	add(
		scriptCase{Name: "limits", Steps: []step{
			put("/"+strings.Repeat("k", 5000), "value", "1").want(201).expect("limits"),
			put(strings.Repeat("/d", 60), "value", "1").want(201).expect("limits"),
			head(strings.Repeat("/e", 60)).want(404).expect("limits"),
			put("/big", "value", strings.Repeat("x", 2<<20)).want(201).expect("limits"),
			{Method: "PUT", Path: "/v2/keys/a%01b", Form: []string{"value", "1"}, Status: 201, Expect: []string{"limits"}},
			{Method: "GET", Path: "/v2/keys/a%00b", Status: 404, Expect: []string{"limits"}},
			{Method: "GET", Path: "/v2/keys/a%ffb", Status: 404, Expect: []string{"limits"}},
			put("/bin", "value", "a\xffb").want(201).expect("limits"),
			{Method: "POST", Path: "/v2/keys/q", Form: []string{"value", "\xff"}, Status: 201, Expect: []string{"limits"}},
			put("/nearly-big", "value", strings.Repeat("x", 1<<20)).want(201),
			get("/nearly-big").want(200),
		}},
		scriptCase{Name: "values", Steps: []step{
			put("/u", "value", "ünïcødé ☃ \"quoted\" <tag> & \\ back").want(201),
			put("/nl", "value", "line1\nline2\ttab").want(201),
			put("/big", "value", strings.Repeat("x", 100000)).want(201),
			get("", "recursive", "true", "sorted", "true").want(200),
		}},
		scriptCase{Name: "odd key names", Steps: []step{
			put("/a b", "value", "1").want(201),
			{Method: "PUT", Path: "/v2/keys/p%25q", Form: []string{"value", "2"}, Status: 201},
			put("/x.y-z_w~", "value", "3").want(201),
			put("/ключ", "value", "4").want(201),
			put("/a:b@c", "value", "5").want(201),
			get("", "sorted", "true").want(200),
		}},
	)
	return cs
}
