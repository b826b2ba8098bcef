// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"
)

// TestBuildGet: what a v2 GET of a path shows, from the keys the backend
// reads for it (GetReads) in one revision.
func TestBuildGet(t *testing.T) {
	l, _ := NewLayout("/x", "_m/")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// 7 lasts, 18 expired at now, 19 expires 50 ms after now.
	ls := Leases{7: now.Add(10*time.Second + time.Second/2), 18: now, 19: now.Add(50 * time.Millisecond)}
	file := func(p, v string, rev, lease int64) *KV {
		return &KV{Key: l.DataKey(p), Value: []byte(v), CreateRevision: rev, ModRevision: rev + 1, Lease: lease}
	}
	dir := func(p string, rev, lease int64, value string) *KV {
		return &KV{Key: l.MarkerKey(p), Value: []byte(value), CreateRevision: rev, ModRevision: rev, Lease: lease}
	}
	tree := []*KV{ // /a/{b,c/d,c/e/f,_h}, /a/c a directory with a marker
		file("/a/b", "1", 3, 0), dir("/a", 2, 0, ""), dir("/a/c", 4, 0, ""),
		file("/a/c/d", "2", 5, 0), file("/a/c/e/f", "3", 6, 0), file("/a/_h", "4", 7, 0),
	}
	for _, c := range []struct {
		name      string
		p         string
		recursive bool
		state     []*KV
		want      string // the node's JSON; "null" for no node
	}{
		{
			name:  "a file",
			p:     "/f",
			state: []*KV{file("/f", "v", 3, 0)},
			want:  `{"key":"/f","value":"v","modifiedIndex":4000000,"createdIndex":3000000}`,
		},
		{
			name:  "a file with an empty value shows the value",
			p:     "/f",
			state: []*KV{file("/f", "", 3, 0)},
			want:  `{"key":"/f","value":"","modifiedIndex":4000000,"createdIndex":3000000}`,
		},
		{
			name:  "an empty directory is its marker",
			p:     "/d",
			state: []*KV{dir("/d", 3, 0, "")},
			want:  `{"key":"/d","dir":true,"modifiedIndex":3000000,"createdIndex":3000000}`,
		},
		{
			name:  "a directory lists one level, its directories without their nodes",
			p:     "/a",
			state: tree,
			want: `{"key":"/a","dir":true,"nodes":[` +
				`{"key":"/a/b","value":"1","modifiedIndex":4000000,"createdIndex":3000000},` +
				`{"key":"/a/c","dir":true,"modifiedIndex":4000000,"createdIndex":4000000}` +
				`],"modifiedIndex":2000000,"createdIndex":2000000}`,
		},
		{
			name:      "a recursive get renders every level",
			p:         "/a",
			recursive: true,
			state:     tree,
			want: `{"key":"/a","dir":true,"nodes":[` +
				`{"key":"/a/b","value":"1","modifiedIndex":4000000,"createdIndex":3000000},` +
				`{"key":"/a/c","dir":true,"nodes":[` +
				`{"key":"/a/c/d","value":"2","modifiedIndex":6000000,"createdIndex":5000000},` +
				`{"key":"/a/c/e","dir":true,"nodes":[` +
				`{"key":"/a/c/e/f","value":"3","modifiedIndex":7000000,"createdIndex":6000000}]}` +
				`],"modifiedIndex":4000000,"createdIndex":4000000}` +
				`],"modifiedIndex":2000000,"createdIndex":2000000}`,
		},
		{
			// Only v3 clients can make such a directory: it has no marker.
			name:  "a directory without a marker has no indexes",
			p:     "/v3",
			state: []*KV{file("/v3/k", "v", 3, 0)},
			want:  `{"key":"/v3","dir":true,"nodes":[{"key":"/v3/k","value":"v","modifiedIndex":4000000,"createdIndex":3000000}]}`,
		},
		{
			name:      "a file shadows the keys below it",
			p:         "/f",
			recursive: true,
			state:     []*KV{file("/f", "v", 3, 0), file("/f/g", "w", 5, 0), dir("/f/h", 6, 0, "")},
			want:      `{"key":"/f","value":"v","modifiedIndex":4000000,"createdIndex":3000000}`,
		},
		{
			name:      "a file shadows the keys below it in a listing",
			p:         "/d",
			recursive: true,
			state:     []*KV{dir("/d", 2, 0, ""), file("/d/f", "v", 3, 0), file("/d/f/g", "w", 5, 0)},
			want:      `{"key":"/d","dir":true,"nodes":[{"key":"/d/f","value":"v","modifiedIndex":4000000,"createdIndex":3000000}],"modifiedIndex":2000000,"createdIndex":2000000}`,
		},
		{
			name:  "a file shadows a marker at its own path",
			p:     "/f",
			state: []*KV{file("/f", "v", 3, 0), dir("/f", 5, 0, "")},
			want:  `{"key":"/f","value":"v","modifiedIndex":4000000,"createdIndex":3000000}`,
		},
		{
			name:  "a hidden file is readable directly",
			p:     "/a/_h",
			state: tree,
			want:  `{"key":"/a/_h","value":"4","modifiedIndex":8000000,"createdIndex":7000000}`,
		},
		{
			name:      "a hidden directory is left out of a recursive listing at every level",
			p:         "/",
			recursive: true,
			state:     []*KV{dir("/_h", 2, 0, ""), file("/_h/f", "v", 3, 0), dir("/d", 4, 0, ""), dir("/d/_g", 5, 0, "")},
			want:      `{"dir":true,"nodes":[{"key":"/d","dir":true,"modifiedIndex":4000000,"createdIndex":4000000}]}`,
		},
		{
			name:  "a hidden directory lists what is in it",
			p:     "/_h",
			state: []*KV{dir("/_h", 2, 0, ""), file("/_h/f", "v", 3, 0)},
			want:  `{"key":"/_h","dir":true,"nodes":[{"key":"/_h/f","value":"v","modifiedIndex":4000000,"createdIndex":3000000}],"modifiedIndex":2000000,"createdIndex":2000000}`,
		},
		{
			name:  "a listing is sorted by name",
			p:     "/s",
			state: []*KV{file("/s/b", "", 5, 0), file("/s/a-b", "", 4, 0), file("/s/a", "", 6, 0), file("/s/B", "", 3, 0)},
			want: `{"key":"/s","dir":true,"nodes":[` +
				`{"key":"/s/B","value":"","modifiedIndex":4000000,"createdIndex":3000000},` +
				`{"key":"/s/a","value":"","modifiedIndex":7000000,"createdIndex":6000000},` +
				`{"key":"/s/a-b","value":"","modifiedIndex":5000000,"createdIndex":4000000},` +
				`{"key":"/s/b","value":"","modifiedIndex":6000000,"createdIndex":5000000}]}`,
		},
		{
			name:  "a file with a ttl shows its lease's expiration, ttl rounded up",
			p:     "/t",
			state: []*KV{file("/t", "v", 3, 7)},
			want:  `{"key":"/t","value":"v","expiration":"2026-01-02T03:04:15.5Z","ttl":11,"modifiedIndex":4000000,"createdIndex":3000000}`,
		},
		{
			name:  "a file whose expiration has come is not there",
			p:     "/t",
			state: []*KV{file("/t", "v", 3, 18)},
			want:  "null",
		},
		{
			name:  "a file about to expire shows ttl 1",
			p:     "/t",
			state: []*KV{file("/t", "v", 3, 19)},
			want:  `{"key":"/t","value":"v","expiration":"2026-01-02T03:04:05.05Z","ttl":1,"modifiedIndex":4000000,"createdIndex":3000000}`,
		},
		{
			name:  "an expired directory is not there",
			p:     "/td",
			state: []*KV{dir("/td", 3, 18, ""), file("/td/c", "c", 4, 0)},
			want:  "null",
		},
		{
			name:      "a listing leaves out expired files, and expired directories with everything below them",
			p:         "/",
			recursive: true,
			state: []*KV{dir("/td", 3, 18, ""), file("/td/c", "c", 4, 0), dir("/td/s", 5, 0, ""), file("/td/s/f", "f", 6, 0),
				file("/td-x", "x", 7, 0), file("/t", "v", 3, 18), file("/u", "u", 3, 7)},
			want: `{"dir":true,"nodes":[{"key":"/td-x","value":"x","modifiedIndex":8000000,"createdIndex":7000000},` +
				`{"key":"/u","value":"u","expiration":"2026-01-02T03:04:15.5Z","ttl":11,"modifiedIndex":4000000,"createdIndex":3000000}]}`,
		},
		{
			name:  "a file whose lease is unknown is shown as permanent",
			p:     "/t",
			state: []*KV{file("/t", "v", 3, 8)},
			want:  `{"key":"/t","value":"v","modifiedIndex":4000000,"createdIndex":3000000}`,
		},
		{
			name:  "a directory with a ttl shows its lease's expiration",
			p:     "/td",
			state: []*KV{dir("/td", 3, 7, "0")},
			want:  `{"key":"/td","dir":true,"expiration":"2026-01-02T03:04:15.5Z","ttl":11,"modifiedIndex":3000000,"createdIndex":3000000}`,
		},
		{
			// The marker records the expiration it was granted with.
			name:  "a directory whose lease is unknown shows the expiration its marker records",
			p:     "/td",
			state: []*KV{dir("/td", 3, 8, "1767323065000000000")}, // now + 20 s
			want:  `{"key":"/td","dir":true,"expiration":"2026-01-02T03:04:25Z","ttl":20,"modifiedIndex":3000000,"createdIndex":3000000}`,
		},
		{
			name:  "a directory with a ttl in a listing shows it",
			p:     "/",
			state: []*KV{dir("/td", 3, 7, "0")},
			want:  `{"dir":true,"nodes":[{"key":"/td","dir":true,"expiration":"2026-01-02T03:04:15.5Z","ttl":11,"modifiedIndex":3000000,"createdIndex":3000000}]}`,
		},
		{
			name: "the empty root is a directory with no key",
			p:    "/",
			want: `{"dir":true}`,
		},
		{
			name:  "the root lists the top level",
			p:     "/",
			state: tree,
			want:  `{"dir":true,"nodes":[{"key":"/a","dir":true,"modifiedIndex":2000000,"createdIndex":2000000}]}`,
		},
		{
			name:  "nothing at the path is no node",
			p:     "/none",
			state: tree,
			want:  `null`,
		},
		{
			// No v2 path maps to "/n//b" or "/n/".
			name:  "keys no v2 path maps to do not make a directory",
			p:     "/n",
			state: []*KV{{Key: "/x/n//b"}, {Key: "/x/n/"}},
			want:  `null`,
		},
		{
			// "/s/a/x" sorts after "/s/a-0".."/s/a-9" ('-' < '/'), so its
			// directory comes back after siblings met in between: a few
			// (found by a scan), or many (by a map).
			name:      "a directory met again after siblings whose keys sort between",
			p:         "/s",
			recursive: true,
			state: []*KV{dir("/s", 1, 0, ""), dir("/s/a", 1, 0, ""), file("/s/a-0", "0", 1, 0), file("/s/a-1", "1", 1, 0),
				file("/s/a-2", "2", 1, 0), file("/s/a-3", "3", 1, 0), file("/s/a-4", "4", 1, 0), file("/s/a-5", "5", 1, 0),
				file("/s/a-6", "6", 1, 0), file("/s/a-7", "7", 1, 0), file("/s/a-8", "8", 1, 0), file("/s/a/x", "x", 1, 0),
				file("/s/b-0", "0", 1, 0), file("/s/b/y", "y", 1, 0)},
			want: `{"key":"/s","dir":true,"nodes":[` +
				`{"key":"/s/a","dir":true,"nodes":[{"key":"/s/a/x","value":"x","modifiedIndex":2000000,"createdIndex":1000000}],"modifiedIndex":1000000,"createdIndex":1000000},` +
				`{"key":"/s/a-0","value":"0","modifiedIndex":2000000,"createdIndex":1000000},` +
				`{"key":"/s/a-1","value":"1","modifiedIndex":2000000,"createdIndex":1000000},` +
				`{"key":"/s/a-2","value":"2","modifiedIndex":2000000,"createdIndex":1000000},` +
				`{"key":"/s/a-3","value":"3","modifiedIndex":2000000,"createdIndex":1000000},` +
				`{"key":"/s/a-4","value":"4","modifiedIndex":2000000,"createdIndex":1000000},` +
				`{"key":"/s/a-5","value":"5","modifiedIndex":2000000,"createdIndex":1000000},` +
				`{"key":"/s/a-6","value":"6","modifiedIndex":2000000,"createdIndex":1000000},` +
				`{"key":"/s/a-7","value":"7","modifiedIndex":2000000,"createdIndex":1000000},` +
				`{"key":"/s/a-8","value":"8","modifiedIndex":2000000,"createdIndex":1000000},` +
				`{"key":"/s/b","dir":true,"nodes":[{"key":"/s/b/y","value":"y","modifiedIndex":2000000,"createdIndex":1000000}]},` +
				`{"key":"/s/b-0","value":"0","modifiedIndex":2000000,"createdIndex":1000000}` +
				`],"modifiedIndex":1000000,"createdIndex":1000000}`,
		},
		{
			name:  "keys outside the data prefix are not shown",
			p:     "/",
			state: []*KV{{Key: "/y/a"}, {Key: "/a"}},
			want:  `{"dir":true}`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			lists := readGet(l, c.p, c.state)
			node := l.BuildGet(c.p, firstKV(lists[0]), firstKV(lists[1]), lists[2], lists[3], c.recursive, ls, now)
			got, err := json.Marshal(node)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// readGet answers l.GetReads(p) from state, in v3's key order, as the
// backend reads them.
func readGet(l Layout, p string, state []*KV) [][]*KV {
	reads := l.GetReads(p)
	lists := make([][]*KV, len(reads))
	for i, r := range reads {
		for _, kv := range state {
			if (r.End == "" && kv.Key == r.Key) || (r.End != "" && kv.Key >= r.Key && kv.Key < r.End) {
				lists[i] = append(lists[i], kv)
			}
		}
		sort.Slice(lists[i], func(a, b int) bool { return lists[i][a].Key < lists[i][b].Key })
	}
	return lists
}

func firstKV(kvs []*KV) *KV {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

// BenchmarkBuildGetRecursive: a recursive GET of a directory of 1,000 files
// and 10 directories, as get-recursive-1000 reads it.
func BenchmarkBuildGetRecursive(b *testing.B) {
	l, _ := NewLayout("/x", "_m/")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var state []*KV
	state = append(state, &KV{Key: l.MarkerKey("/list"), CreateRevision: 1, ModRevision: 1})
	for i := range 1000 {
		p := fmt.Sprintf("/list/k%04d", i)
		if i%100 == 0 {
			p = fmt.Sprintf("/list/d%d/k%04d", i/100, i)
			state = append(state, &KV{Key: l.MarkerKey(fmt.Sprintf("/list/d%d", i/100)), CreateRevision: 2, ModRevision: 2})
		}
		state = append(state, &KV{Key: l.DataKey(p), Value: []byte("some value"), CreateRevision: 3, ModRevision: 3})
	}
	sort.Slice(state, func(i, j int) bool { return state[i].Key < state[j].Key })
	lists := readGet(l, "/list", state)
	b.ReportAllocs()
	for b.Loop() {
		if l.BuildGet("/list", firstKV(lists[0]), firstKV(lists[1]), lists[2], lists[3], true, nil, now) == nil {
			b.Fatal("no listing")
		}
	}
}
