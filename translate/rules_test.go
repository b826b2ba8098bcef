// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"strings"
	"testing"
	"time"
)

// The v2 store's rules, request by request through memStore: each answer is
// the exact body and X-Etcd-Index a v2 client gets, and every write's answer
// is also what watchers decode from its revision. The store starts at
// revision 1; a write alone in revision r gets index r × 1,000,000.

func TestRulesOfFiles(t *testing.T) {
	newMemStore(t).run([]step{
		{"PUT", "/a", "value=1",
			`{"action":"set","node":{"key":"/a","value":"1","modifiedIndex":2000000,"createdIndex":2000000}}`, 2000000},
		// A set replaces the node: a new createdIndex.
		{"PUT", "/a", "value=2",
			`{"action":"set","node":{"key":"/a","value":"2","modifiedIndex":3000000,"createdIndex":3000000},` +
				`"prevNode":{"key":"/a","value":"1","modifiedIndex":2000000,"createdIndex":2000000}}`, 3000000},
		{"PUT", "/a", "value=3&prevExist=false",
			`{"errorCode":105,"message":"Key already exists","cause":"/a","index":3000000}`, 0},
		// An update keeps the createdIndex: the v3 key's, which a set
		// over it did not change (set-created-index in
		// docs/compatibility.md).
		{"PUT", "/a", "value=4&prevExist=true",
			`{"action":"update","node":{"key":"/a","value":"4","modifiedIndex":4000000,"createdIndex":2000000},` +
				`"prevNode":{"key":"/a","value":"2","modifiedIndex":3000000,"createdIndex":2000000}}`, 4000000},
		{"PUT", "/b", "value=1&prevExist=true",
			`{"errorCode":100,"message":"Key not found","cause":"/b","index":4000000}`, 0},
		{"PUT", "/b", "value=1&prevExist=false",
			`{"action":"create","node":{"key":"/b","value":"1","modifiedIndex":5000000,"createdIndex":5000000}}`, 5000000},
		// A missing value is the empty string.
		{"PUT", "/e", "",
			`{"action":"set","node":{"key":"/e","value":"","modifiedIndex":6000000,"createdIndex":6000000}}`, 6000000},
		{"GET", "/a", "",
			`{"action":"get","node":{"key":"/a","value":"4","modifiedIndex":4000000,"createdIndex":2000000}}`, 6000000},
		{"DELETE", "/a", "",
			`{"action":"delete","node":{"key":"/a","modifiedIndex":7000000,"createdIndex":2000000},` +
				`"prevNode":{"key":"/a","value":"4","modifiedIndex":4000000,"createdIndex":2000000}}`, 7000000},
		{"DELETE", "/a", "",
			`{"errorCode":100,"message":"Key not found","cause":"/a","index":7000000}`, 0},
		{"GET", "/a", "",
			`{"errorCode":100,"message":"Key not found","cause":"/a","index":7000000}`, 0},
		// A missing path names its first missing component.
		{"GET", "/x/y/z", "",
			`{"errorCode":100,"message":"Key not found","cause":"/x","index":7000000}`, 0},
		// The root is read only.
		{"PUT", "/", "value=1",
			`{"errorCode":107,"message":"Root is read only","cause":"/","index":7000000}`, 0},
		{"DELETE", "/", "recursive=true",
			`{"errorCode":107,"message":"Root is read only","cause":"/","index":7000000}`, 0},
		{"PUT", "/", "value=1&prevExist=true",
			`{"errorCode":107,"message":"Root is read only","cause":"/","index":7000000}`, 0},
	})
}

func TestRulesOfDirectories(t *testing.T) {
	newMemStore(t).run([]step{
		{"PUT", "/d", "dir=true",
			`{"action":"set","node":{"key":"/d","dir":true,"modifiedIndex":2000000,"createdIndex":2000000}}`, 2000000},
		// A set over a directory: 102.
		{"PUT", "/d", "value=x",
			`{"errorCode":102,"message":"Not a file","cause":"/d","index":2000000}`, 0},
		{"PUT", "/d", "dir=true",
			`{"errorCode":102,"message":"Not a file","cause":"/d","index":2000000}`, 0},
		{"PUT", "/d", "dir=true&prevExist=false",
			`{"errorCode":105,"message":"Key already exists","cause":"/d","index":2000000}`, 0},
		// Missing directories above a new file are made.
		{"PUT", "/d/e/f", "value=1",
			`{"action":"set","node":{"key":"/d/e/f","value":"1","modifiedIndex":3000000,"createdIndex":3000000}}`, 3000000},
		// A file where a directory must be: 104, naming the file.
		{"PUT", "/d/e/f/g", "value=1",
			`{"errorCode":104,"message":"Not a directory","cause":"/d/e/f","index":3000000}`, 0},
		{"GET", "/d/e/f/g/h", "",
			`{"errorCode":104,"message":"Not a directory","cause":"/d/e/f","index":3000000}`, 0},
		{"POST", "/d/e/f", "value=1",
			`{"errorCode":104,"message":"Not a directory","cause":"/d/e/f","index":3000000}`, 0},
		{"GET", "/d", "recursive=true",
			`{"action":"get","node":{"key":"/d","dir":true,"nodes":[{"key":"/d/e","dir":true,"nodes":[` +
				`{"key":"/d/e/f","value":"1","modifiedIndex":3000000,"createdIndex":3000000}],` +
				`"modifiedIndex":3000000,"createdIndex":3000000}],"modifiedIndex":2000000,"createdIndex":2000000}}`, 3000000},
		// A listing shows children, not their contents.
		{"GET", "/d", "",
			`{"action":"get","node":{"key":"/d","dir":true,"nodes":[{"key":"/d/e","dir":true,` +
				`"modifiedIndex":3000000,"createdIndex":3000000}],"modifiedIndex":2000000,"createdIndex":2000000}}`, 3000000},
		// A delete of a directory needs dir=true, and of a non-empty one
		// recursive=true.
		{"DELETE", "/d", "",
			`{"errorCode":102,"message":"Not a file","cause":"/d","index":3000000}`, 0},
		{"DELETE", "/d", "dir=true",
			`{"errorCode":108,"message":"Directory not empty","cause":"/d","index":3000000}`, 0},
		{"DELETE", "/d/e", "dir=true",
			`{"errorCode":108,"message":"Directory not empty","cause":"/d/e","index":3000000}`, 0},
		// A set with dir=true over a file replaces the file.
		{"PUT", "/d/e/f", "dir=true",
			`{"action":"set","node":{"key":"/d/e/f","dir":true,"modifiedIndex":4000000,"createdIndex":4000000},` +
				`"prevNode":{"key":"/d/e/f","value":"1","modifiedIndex":3000000,"createdIndex":3000000}}`, 4000000},
		// An empty directory goes with dir=true.
		{"DELETE", "/d/e/f", "dir=true",
			`{"action":"delete","node":{"key":"/d/e/f","dir":true,"modifiedIndex":5000000,"createdIndex":4000000},` +
				`"prevNode":{"key":"/d/e/f","dir":true,"modifiedIndex":4000000,"createdIndex":4000000}}`, 5000000},
		// A file goes whatever dir says.
		{"PUT", "/d/g", "value=1",
			`{"action":"set","node":{"key":"/d/g","value":"1","modifiedIndex":6000000,"createdIndex":6000000}}`, 6000000},
		{"DELETE", "/d/g", "dir=true",
			`{"action":"delete","node":{"key":"/d/g","modifiedIndex":7000000,"createdIndex":6000000},` +
				`"prevNode":{"key":"/d/g","value":"1","modifiedIndex":6000000,"createdIndex":6000000}}`, 7000000},
		{"DELETE", "/d", "recursive=true",
			`{"action":"delete","node":{"key":"/d","dir":true,"modifiedIndex":8000000,"createdIndex":2000000},` +
				`"prevNode":{"key":"/d","dir":true,"modifiedIndex":2000000,"createdIndex":2000000}}`, 8000000},
		{"GET", "/d/e", "",
			`{"errorCode":100,"message":"Key not found","cause":"/d","index":8000000}`, 0},
		{"GET", "/", "",
			`{"action":"get","node":{"dir":true}}`, 8000000},
		// An update of a directory with a value: 102; without one it
		// keeps the directory.
		{"PUT", "/u", "dir=true",
			`{"action":"set","node":{"key":"/u","dir":true,"modifiedIndex":9000000,"createdIndex":9000000}}`, 9000000},
		{"PUT", "/u", "value=x&prevExist=true",
			`{"errorCode":102,"message":"Not a file","cause":"/u","index":9000000}`, 0},
		{"PUT", "/u", "dir=true&prevExist=true",
			`{"action":"update","node":{"key":"/u","dir":true,"modifiedIndex":10000000,"createdIndex":9000000},` +
				`"prevNode":{"key":"/u","dir":true,"modifiedIndex":9000000,"createdIndex":9000000}}`, 10000000},
		// POST makes in-order children named by their index.
		{"POST", "/q", "value=a",
			`{"action":"create","node":{"key":"/q/00000000000011000000","value":"a","modifiedIndex":11000000,"createdIndex":11000000}}`, 11000000},
		{"POST", "/q", "value=b",
			`{"action":"create","node":{"key":"/q/00000000000012000000","value":"b","modifiedIndex":12000000,"createdIndex":12000000}}`, 12000000},
		{"GET", "/q", "sorted=true",
			`{"action":"get","node":{"key":"/q","dir":true,"nodes":[` +
				`{"key":"/q/00000000000011000000","value":"a","modifiedIndex":11000000,"createdIndex":11000000},` +
				`{"key":"/q/00000000000012000000","value":"b","modifiedIndex":12000000,"createdIndex":12000000}],` +
				`"modifiedIndex":11000000,"createdIndex":11000000}}`, 12000000},
	})
}

func TestRulesOfCompares(t *testing.T) {
	newMemStore(t).run([]step{
		{"PUT", "/c", "value=1",
			`{"action":"set","node":{"key":"/c","value":"1","modifiedIndex":2000000,"createdIndex":2000000}}`, 2000000},
		{"PUT", "/c", "value=3&prevValue=2",
			`{"errorCode":101,"message":"Compare failed","cause":"[2 != 1]","index":2000000}`, 0},
		{"PUT", "/c", "value=3&prevIndex=99",
			`{"errorCode":101,"message":"Compare failed","cause":"[99 != 2000000]","index":2000000}`, 0},
		{"PUT", "/c", "value=3&prevValue=2&prevIndex=99",
			`{"errorCode":101,"message":"Compare failed","cause":"[2 != 1] [99 != 2000000]","index":2000000}`, 0},
		{"PUT", "/c", "value=3&prevValue=1",
			`{"action":"compareAndSwap","node":{"key":"/c","value":"3","modifiedIndex":3000000,"createdIndex":2000000},` +
				`"prevNode":{"key":"/c","value":"1","modifiedIndex":2000000,"createdIndex":2000000}}`, 3000000},
		{"PUT", "/c", "value=4&prevIndex=3000000",
			`{"action":"compareAndSwap","node":{"key":"/c","value":"4","modifiedIndex":4000000,"createdIndex":2000000},` +
				`"prevNode":{"key":"/c","value":"3","modifiedIndex":3000000,"createdIndex":2000000}}`, 4000000},
		{"PUT", "/c", "value=5&prevExist=true&prevValue=4&prevIndex=4000000",
			`{"action":"compareAndSwap","node":{"key":"/c","value":"5","modifiedIndex":5000000,"createdIndex":2000000},` +
				`"prevNode":{"key":"/c","value":"4","modifiedIndex":4000000,"createdIndex":2000000}}`, 5000000},
		// prevExist=false is a create: the compare is not looked at.
		{"PUT", "/c", "value=6&prevExist=false&prevValue=5",
			`{"errorCode":105,"message":"Key already exists","cause":"/c","index":5000000}`, 0},
		{"PUT", "/m", "value=1&prevValue=1",
			`{"errorCode":100,"message":"Key not found","cause":"/m","index":5000000}`, 0},
		{"PUT", "/dir/f", "value=1",
			`{"action":"set","node":{"key":"/dir/f","value":"1","modifiedIndex":6000000,"createdIndex":6000000}}`, 6000000},
		{"PUT", "/dir", "value=1&prevValue=1",
			`{"errorCode":102,"message":"Not a file","cause":"/dir","index":6000000}`, 0},
		{"DELETE", "/dir", "prevValue=1",
			`{"errorCode":102,"message":"Not a file","cause":"/dir","index":6000000}`, 0},
		{"DELETE", "/c", "prevValue=x",
			`{"errorCode":101,"message":"Compare failed","cause":"[x != 5]","index":6000000}`, 0},
		{"DELETE", "/c", "prevIndex=2000000",
			`{"errorCode":101,"message":"Compare failed","cause":"[2000000 != 5000000]","index":6000000}`, 0},
		{"DELETE", "/c", "prevValue=5&prevIndex=5000000",
			`{"action":"compareAndDelete","node":{"key":"/c","modifiedIndex":7000000,"createdIndex":2000000},` +
				`"prevNode":{"key":"/c","value":"5","modifiedIndex":5000000,"createdIndex":2000000}}`, 7000000},
		{"DELETE", "/c", "prevValue=5",
			`{"errorCode":100,"message":"Key not found","cause":"/c","index":7000000}`, 0},
		// Bad compares are refused before the store is read.
		{"PUT", "/c", "value=1&prevValue=",
			`{"errorCode":201,"message":"PrevValue is Required in POST form","cause":"\"prevValue\" cannot be empty","index":0}`, 0},
		{"PUT", "/c", "value=1&prevIndex=x",
			`{"errorCode":203,"message":"The given index in POST form is not a number","cause":"invalid value for \"prevIndex\"","index":0}`, 0},
		{"PUT", "/c", "value=1&prevExist=maybe",
			`{"errorCode":209,"message":"Invalid field","cause":"invalid value for prevExist","index":0}`, 0},
	})
}

// TestRulesOfTTLs: a TTL is a lease; the key answers with its expiration,
// and goes, with an expire event, when the lease runs out.
func TestRulesOfTTLs(t *testing.T) {
	m := newMemStore(t)
	m.run([]step{
		// v2's ttl=0 expires at once; the bridge's shortest lease is 1 s.
		{"PUT", "/z", "value=1&ttl=0",
			`{"action":"set","node":{"key":"/z","value":"1","expiration":"2026-01-02T03:04:06Z","ttl":1,` +
				`"modifiedIndex":2000000,"createdIndex":2000000}}`, 2000000},
		{"PUT", "/t", "value=1&ttl=5",
			`{"action":"set","node":{"key":"/t","value":"1","expiration":"2026-01-02T03:04:10Z","ttl":5,` +
				`"modifiedIndex":3000000,"createdIndex":3000000}}`, 3000000},
		{"PUT", "/p", "value=1&ttl=5",
			`{"action":"set","node":{"key":"/p","value":"1","expiration":"2026-01-02T03:04:10Z","ttl":5,` +
				`"modifiedIndex":4000000,"createdIndex":4000000}}`, 4000000},
		// A set without a ttl makes the key permanent.
		{"PUT", "/p", "value=2",
			`{"action":"set","node":{"key":"/p","value":"2","modifiedIndex":5000000,"createdIndex":5000000},` +
				`"prevNode":{"key":"/p","value":"1","expiration":"2026-01-02T03:04:10Z","ttl":5,` +
				`"modifiedIndex":4000000,"createdIndex":4000000}}`, 5000000},
		{"PUT", "/t", "value=1&ttl=-1",
			`{"errorCode":202,"message":"The given TTL in POST form is not a number","cause":"invalid value for \"ttl\"","index":0}`, 0},
		{"PUT", "/t", "value=1&ttl=9000000001",
			`{"errorCode":202,"message":"The given TTL in POST form is not a number","cause":"ttl exceeds the maximum of 9000000000","index":0}`, 0},
		{"PUT", "/t", "refresh=true",
			`{"errorCode":212,"message":"A TTL must be provided on refresh","cause":"No TTL value set","index":0}`, 0},
		{"PUT", "/t", "refresh=true&ttl=5&value=2",
			`{"errorCode":211,"message":"Value provided on refresh","cause":"A value was provided on a refresh","index":0}`, 0},
		{"PUT", "/r", "refresh=true&ttl=5",
			`{"errorCode":100,"message":"Key not found","cause":"/r","index":5000000}`, 0},
		{"PUT", "/td", "dir=true&ttl=2",
			`{"action":"set","node":{"key":"/td","dir":true,"expiration":"2026-01-02T03:04:07Z","ttl":2,` +
				`"modifiedIndex":6000000,"createdIndex":6000000}}`, 6000000},
		{"PUT", "/td/f", "value=1",
			`{"action":"set","node":{"key":"/td/f","value":"1","modifiedIndex":7000000,"createdIndex":7000000}}`, 7000000},
	})
	m.advance(time.Second)
	m.run([]step{
		{"GET", "/z", "", `{"errorCode":100,"message":"Key not found","cause":"/z","index":8000000}`, 0},
		// A refresh keeps the value, sets the TTL anew, and wakes no
		// watcher (memStore checks).
		{"PUT", "/t", "refresh=true&ttl=10",
			`{"action":"set","node":{"key":"/t","value":"1","expiration":"2026-01-02T03:04:16Z","ttl":10,` +
				`"modifiedIndex":9000000,"createdIndex":9000000},` +
				`"prevNode":{"key":"/t","value":"1","expiration":"2026-01-02T03:04:10Z","ttl":4,` +
				`"modifiedIndex":3000000,"createdIndex":3000000}}`, 9000000},
	})
	m.advance(time.Second)
	// Reads show the createdIndex of the v3 key, which a set over it keeps
	// (set-created-index in docs/compatibility.md).
	m.run([]step{
		{"GET", "/td/f", "", `{"errorCode":100,"message":"Key not found","cause":"/td","index":11000000}`, 0},
		{"GET", "/t", "",
			`{"action":"get","node":{"key":"/t","value":"1","expiration":"2026-01-02T03:04:16Z","ttl":9,` +
				`"modifiedIndex":9000000,"createdIndex":3000000}}`, 11000000},
		{"GET", "/p", "",
			`{"action":"get","node":{"key":"/p","value":"2","modifiedIndex":5000000,"createdIndex":4000000}}`, 11000000},
	})
	// What watchers saw of the expiries: the clamped key a second after its
	// write, the TTL directory with its contents (swept, silently) at two.
	var expired []string
	for _, ev := range m.watched {
		if ev.Action == ActionExpire {
			expired = append(expired, strings.TrimSuffix(string(ev.JSON()), "\n"))
		}
	}
	want := []string{
		`{"action":"expire","node":{"key":"/z","modifiedIndex":8000000,"createdIndex":2000000},` +
			`"prevNode":{"key":"/z","value":"1","modifiedIndex":2000000,"createdIndex":2000000}}`,
		`{"action":"expire","node":{"key":"/td","dir":true,"modifiedIndex":10000000,"createdIndex":6000000},` +
			`"prevNode":{"key":"/td","dir":true,"expiration":"2026-01-02T03:04:07Z","modifiedIndex":6000000,"createdIndex":6000000}}`,
	}
	if strings.Join(expired, "\n") != strings.Join(want, "\n") {
		t.Fatalf("expire events\n%s\nwant\n%s", strings.Join(expired, "\n"), strings.Join(want, "\n"))
	}
}

// TestAPlanFailsWhenWhatItDecidedOnChanged: a write decided on a snapshot
// is not applied when another write changed what the decision read, so a
// concurrent write cannot slip a v2 rule past it; planned again, it gets
// the rule's error.
func TestAPlanFailsWhenWhatItDecidedOnChanged(t *testing.T) {
	cases := []struct {
		name         string
		setup        []step // applied first
		method, path string
		form         string
		meanwhile    [3]string // method, path, form of the concurrent write
		errAfter     string    // the error the write gets when planned again
	}{
		{name: "a create, and the key is created meanwhile",
			method: "PUT", path: "/a", form: "value=1&prevExist=false",
			meanwhile: [3]string{"PUT", "/a", "value=2"},
			errAfter:  `{"errorCode":105,"message":"Key already exists","cause":"/a","index":2000000}`},
		{name: "a delete of an empty directory, and a child appears meanwhile",
			setup: []step{{"PUT", "/d", "dir=true",
				`{"action":"set","node":{"key":"/d","dir":true,"modifiedIndex":2000000,"createdIndex":2000000}}`, 2000000}},
			method: "DELETE", path: "/d", form: "dir=true",
			meanwhile: [3]string{"PUT", "/d/x", "value=1"},
			errAfter:  `{"errorCode":108,"message":"Directory not empty","cause":"/d","index":3000000}`},
		{name: "a compare-and-swap, and the value changes meanwhile",
			setup: []step{{"PUT", "/c", "value=1",
				`{"action":"set","node":{"key":"/c","value":"1","modifiedIndex":2000000,"createdIndex":2000000}}`, 2000000}},
			method: "PUT", path: "/c", form: "value=3&prevValue=1",
			meanwhile: [3]string{"PUT", "/c", "value=2"},
			errAfter:  `{"errorCode":101,"message":"Compare failed","cause":"[1 != 2]","index":3000000}`},
		{name: "a set below a directory, and a file replaces it meanwhile",
			setup: []step{{"PUT", "/p", "dir=true",
				`{"action":"set","node":{"key":"/p","dir":true,"modifiedIndex":2000000,"createdIndex":2000000}}`, 2000000},
				{"DELETE", "/p", "dir=true",
					`{"action":"delete","node":{"key":"/p","dir":true,"modifiedIndex":3000000,"createdIndex":2000000},` +
						`"prevNode":{"key":"/p","dir":true,"modifiedIndex":2000000,"createdIndex":2000000}}`, 3000000}},
			method: "PUT", path: "/p/q", form: "value=1",
			meanwhile: [3]string{"PUT", "/p", "value=file"},
			errAfter:  `{"errorCode":104,"message":"Not a directory","cause":"/p","index":4000000}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newMemStore(t)
			m.run(c.setup)
			plan, verr := m.plan(m.parse(c.method, c.path, c.form))
			if verr != nil {
				t.Fatalf("planning: %v", verr)
			}
			if _, verr := m.do(c.meanwhile[0], c.meanwhile[1], c.meanwhile[2]); verr != nil {
				t.Fatalf("the concurrent write: %v", verr)
			}
			rev := m.rev
			if res, ok := m.commit(plan); ok {
				t.Fatalf("applied over a changed store: %s", res.JSON())
			}
			if m.rev != rev {
				t.Fatalf("a failed transaction moved the revision from %d to %d", rev, m.rev)
			}
			m.run([]step{{c.method, c.path, c.form, c.errAfter, 0}})
		})
	}
}
