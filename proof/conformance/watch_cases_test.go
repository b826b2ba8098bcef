// SPDX-License-Identifier: Apache-2.0

package conformance

// watchCases covers v2 watches (and the watch sides of deletes, TTLs and hidden keys).
// A watch is started on both servers (the response headers have arrived, so
// the watcher exists), then the write is made on both, then the events are
// compared. "No event" is checked without sleeping: a later write that does
// match must be the first event reported.
func watchCases() []scriptCase {
	return []scriptCase{
		{Name: "key", Steps: []step{
			put("/a", "value", "0"),
			watch("w", "/a").want(200),
			put("/a", "value", "1").want(200),
			await("w"), awaitEnd("w"),
		}},
		{Name: "missing key then create", Steps: []step{
			watch("w", "/a").want(200),
			put("/a", "value", "1", "prevExist", "false").want(201),
			await("w"),
		}},
		{Name: "every action", May: []string{"set-created-index"}, Steps: []step{
			watch("w1", "/a"), put("/a", "value", "1"), await("w1"),
			watch("w2", "/a"), put("/a", "value", "2"), await("w2"),
			watch("w3", "/a"), put("/a", "value", "3", "prevExist", "true"), await("w3"),
			watch("w4", "/a"), put("/a", "value", "4", "prevValue", "3"), await("w4"),
			watch("w5", "/a"), del("/a", "prevValue", "4"), await("w5"),
			watch("w6", "/a"), put("/a", "value", "5", "prevExist", "false"), await("w6"),
			watch("w7", "/a"), del("/a"), await("w7"),
			watch("w8", "/d", "recursive", "true"), post("/d", "value", "p"), await("w8"),
			watch("w9", "/e"), put("/e", "dir", "true"), await("w9"),
			watch("w10", "/e"), del("/e", "dir", "true"), await("w10"),
		}},
		{Name: "recursive", Steps: []step{
			put("/d/x", "value", "0"),
			watch("w", "/d", "recursive", "true"),
			put("/d/y/z", "value", "1"),
			await("w"),
			watch("root", "/", "recursive", "true"),
			put("/other", "value", "1"),
			await("root"),
		}},
		{Name: "recursive boundary", Steps: []step{
			watch("w", "/d", "recursive", "true"),
			put("/dd", "value", "1"),
			put("/d/x", "value", "1"),
			await("w"),
		}},
		{Name: "non-recursive ignores children", Steps: []step{
			put("/d/x", "value", "0"),
			watch("w", "/d"),
			put("/d/x", "value", "1"),
			del("/d", "recursive", "true"),
			await("w"),
		}},
		{Name: "dir delete notifies key inside", Steps: []step{
			put("/d/x/y", "value", "0"),
			watch("w1", "/d/x/y"), watch("w2", "/d/x"), watch("w3", "/d", "recursive", "true"),
			del("/d", "recursive", "true"),
			await("w1"), await("w2"), await("w3"),
		}},
		{Name: "dir delete does not notify missing key inside", Steps: []step{
			put("/d/x", "value", "0"),
			watch("w", "/d/nope"),
			del("/d", "recursive", "true"),
			put("/d/nope", "value", "1"),
			await("w"),
		}},
		{Name: "hidden", Steps: []step{
			put("/d/x", "value", "0"),
			watch("rec", "/d", "recursive", "true"),
			watch("exact", "/d/_h"),
			watch("under", "/d/_hd/y"),
			put("/d/_h", "value", "1"),
			await("exact"),
			put("/d/_hd/y", "value", "2"),
			await("under"),
			put("/d/x", "value", "3"),
			await("rec"),
			watch("inside", "/d/_hd", "recursive", "true"),
			put("/d/_hd/z", "value", "4"),
			await("inside"),
		}},
		{Name: "waitIndex history", May: []string{"set-created-index"}, Steps: []step{
			put("/a", "value", "1").save("a1"),
			put("/a", "value", "2").save("a2"),
			put("/b", "value", "3"),
			watch("w1", "/a", "waitIndex", "{a1.mi}").want(200),
			await("w1"),
			watch("w2", "/a", "waitIndex", "{a1.mi+1}").want(200),
			await("w2"),
			watch("w3", "/", "recursive", "true", "waitIndex", "{a2.mi+1}").want(200),
			await("w3"),
			watch("w4", "/a", "waitIndex", "0"),
			put("/a", "value", "4"),
			await("w4"),
		}},
		{Name: "waitIndex future", May: []string{"set-created-index"}, Steps: []step{
			put("/a", "value", "1").save("a1"),
			watch("w", "/a", "waitIndex", "{a1.mi+3}"),
			put("/a", "value", "2"),
			put("/a", "value", "3"),
			put("/a", "value", "4"),
			await("w"),
		}},
		{Name: "waitIndex history dir delete", Steps: []step{
			put("/d/x", "value", "1"),
			del("/d", "recursive", "true").save("del"),
			watch("w", "/d/x", "waitIndex", "{del.mi}"),
			await("w"),
		}},
		{Name: "waitIndex history skips refresh", May: []string{"set-created-index"}, Steps: []step{
			put("/a", "value", "1", "ttl", "100").save("a1"),
			put("/a", "refresh", "true", "ttl", "200"),
			watch("w", "/a", "waitIndex", "{a1.mi+1}"),
			put("/a", "value", "2"),
			await("w"),
		}},
		{Name: "refresh wakes no watcher", May: []string{"set-created-index"}, Steps: []step{
			put("/a", "value", "1", "ttl", "100"),
			watch("w", "/a"),
			put("/a", "refresh", "true", "ttl", "200"),
			put("/a", "refresh", "true", "ttl", "300", "prevExist", "true"),
			put("/a", "value", "2"),
			await("w"),
		}},
		{Name: "stream", Steps: []step{
			watch("s", "/d", "recursive", "true", "stream", "true").want(200),
			put("/d/a", "value", "1"),
			put("/d/b", "value", "2"),
			del("/d/a"),
			awaitN("s", 3),
			put("/d/c", "value", "3"),
			await("s"),
		}},
		{Name: "stream from history", Steps: []step{
			put("/d/a", "value", "1").save("a"),
			put("/d/_x", "value", "2"),
			watch("s", "/d", "recursive", "true", "stream", "true", "waitIndex", "{a.mi}"),
			await("s"),
			// v2 answers a past waitIndex from history with one event and
			// never registers the stream for more. The bridge goes on:
			// /d/_x from history (v2's history shows hidden keys), then
			// /d/c live (live, the hidden /d/_h is not shown).
			put("/d/_h", "value", "3"),
			put("/d/c", "value", "4"),
			await("s").expect("stream-history"),
			await("s").expect("stream-history"),
		}},
		{Name: "waitIndex history shows hidden keys", Steps: []step{
			put("/d/x", "value", "1"),
			put("/d/_h", "value", "2").save("h"),
			watch("w", "/d", "recursive", "true", "waitIndex", "{h.mi}"),
			await("w"),
			watch("root", "/", "recursive", "true", "waitIndex", "{h.mi}"),
			await("root"),
		}},
		{Name: "waitIndex history dir delete is a plain prefix", Steps: []step{
			put("/d/x", "value", "1"),
			del("/d", "recursive", "true").save("del"),
			watch("w1", "/dd", "waitIndex", "{del.mi}"),
			await("w1"),
			watch("w2", "/d/nope/deeper", "waitIndex", "{del.mi}"),
			await("w2"),
		}},
		{Name: "history horizon", May: []string{"set-created-index"}, Steps: []step{
			put("/hh", "value", "first").save("first"),
			{Method: "PUT", Path: keys("/hh"), Form: []string{"value", "v{i}"}, Bulk: 1001},
			watch("w", "/hh", "waitIndex", "{first.mi}").want(400).code(401),
			watch("w2", "/hh", "waitIndex", "{first.mi+1001}").want(200),
			await("w2"),
		}},
		{Name: "quorum wait is a get", Steps: []step{
			put("/a", "value", "1"),
			get("/a", "wait", "true", "quorum", "true").want(200),
		}},
		{Name: "expire", Steps: []step{
			put("/t", "value", "1", "ttl", "2"),
			watch("w", "/t"),
			await("w"),
			get("/t").want(404),
		}},
		// The expire event as v2 recorded it, seconds after the expiry (the
		// later expiry of /u is the clock: cases do not sleep), from the
		// bridge's ring and from v3 history (past the ring).
		{Name: "expire from history", Steps: []step{
			put("/k", "value", "1", "ttl", "600"),
			del("/k").save("k"),
			put("/t", "value", "1", "ttl", "2").save("t"),
			put("/u", "value", "1", "ttl", "5"),
			watch("t", "/t"), await("t"),
			watch("u", "/u"), await("u"),
			watch("ring", "/t", "waitIndex", "{t.mi+1}"), await("ring"),
			{Method: "PUT", Path: keys("/fill"), Form: []string{"value", "v{i}"}, Bulk: bridgeRingSize / 2},
			watch("v3", "/t", "waitIndex", "{t.mi+1}"), await("v3"),
			watch("del", "/k", "waitIndex", "{k.mi}"), await("del"),
		}},
		// The TTL outlasts the fill, both servers written at once, on a busy
		// machine and under the race detector (about 2 s there): an expiry
		// in the middle of it would come at a different place in each
		// server's history.
		{Name: "expire to a watch from a past waitIndex", Steps: []step{
			// The fill must end before the expiry on both servers (the
			// expire's index counts the writes before it): a short fill and
			// a TTL that outlasts it on a loaded machine.
			put("/t", "value", "1", "ttl", "8").save("t"),
			{Method: "PUT", Path: keys("/fill"), Form: []string{"value", "v{i}"}, Bulk: bridgeRingSize / 10},
			watch("w", "/t", "waitIndex", "{t.mi+1}"),
			await("w"),
		}},
		{Name: "expire dir does not notify missing key inside", Steps: []step{
			put("/td", "dir", "true", "ttl", "2"),
			put("/td/x", "value", "1"),
			watch("w", "/td/nope"),
			watch("sync", "/td/x"),
			await("sync"),
			put("/td/nope", "value", "again"),
			await("w"),
		}},
		{Name: "expire dir", Steps: []step{
			put("/td", "dir", "true", "ttl", "2"),
			put("/td/x", "value", "1"),
			put("/td/y/z", "value", "2"),
			watch("w1", "/td/x"), watch("w2", "/td", "recursive", "true"), watch("w3", "/", "recursive", "true"),
			await("w1"), await("w2"), await("w3"),
			get("/td").want(404),
		}},
	}
}
