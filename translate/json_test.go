// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestAppendJSONIsWhatJSONMarshalWrites: the hand-written encoding of an
// event equals encoding/json's, byte for byte, for every field, every
// omitempty rule and every escape.
func TestAppendJSONIsWhatJSONMarshalWrites(t *testing.T) {
	exp := time.Date(2026, 11, 30, 23, 29, 21, 123456789, time.UTC)
	expZone := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	var all strings.Builder
	for c := 0; c < 256; c++ {
		all.WriteByte(byte(c))
	}
	cases := map[string]*Event{
		"empty":              {},
		"action only":        {Action: ActionDelete},
		"set over a file":    {Action: ActionSet, Node: &Node{Key: "/a/b", Value: strPtr("v"), ModifiedIndex: 7000000, CreatedIndex: 7000000}, PrevNode: &Node{Key: "/a/b", Value: strPtr(""), ModifiedIndex: 3, CreatedIndex: 2}},
		"dir with TTL":       {Action: ActionUpdate, Node: &Node{Key: "/d", Dir: true, Expiration: &exp, TTL: 60, ModifiedIndex: 9}},
		"expiration in zone": {Action: ActionGet, Node: &Node{Key: "/x", Expiration: &expZone, TTL: -1}},
		"listing": {Action: ActionGet, Node: &Node{Key: "/d", Dir: true, Nodes: []*Node{
			{Key: "/d/a", Value: strPtr("1"), ModifiedIndex: 1, CreatedIndex: 1}, nil,
			{Key: "/d/e", Dir: true, Nodes: []*Node{}}, {Key: "/d/f", Dir: true, Nodes: []*Node{{Key: "/d/f/g", Value: strPtr("<&>")}}}}}},
		"escapes":          {Action: "a\"b\\c", Node: &Node{Key: all.String(), Value: strPtr("\u2028\u2029 é 日本 \xff\xfe \xed\xa0\x80 </script>")}},
		"invalid UTF-8":    {Action: "\xc3", Node: &Node{Key: "/\xe2\x82", Value: strPtr("\xf0\x9f\x98")}},
		"empty value":      {Action: ActionCreate, Node: &Node{Key: "/k", Value: strPtr("")}},
		"largest indexes":  {Action: ActionGet, Node: &Node{Key: "/k", ModifiedIndex: 1<<64 - 1, CreatedIndex: 1 << 63, TTL: -1 << 63}},
		"no value on succ": {Action: ActionSet},
	}
	for name, ev := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ev.AppendJSON([]byte("prefix"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("got\n%s\nwant\nprefix%s", got, want)
			}
		})
	}
	bad := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := (&Event{Node: &Node{Nodes: []*Node{{Expiration: &bad}}}}).AppendJSON(nil); err == nil {
		t.Fatal("an expiration JSON cannot show encoded without an error")
	}
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("set", "/a", "v", uint64(1), int64(0), false)
	f.Add("\x00<>&\u2028", "\xff", "é\"\\", uint64(1<<63), int64(-5), true)
	f.Fuzz(func(t *testing.T, action, key, value string, idx uint64, ttl int64, dir bool) {
		n := &Node{Key: key, Value: &value, Dir: dir, TTL: ttl, ModifiedIndex: idx, CreatedIndex: idx / 2}
		ev := &Event{Action: action, Node: n, PrevNode: &Node{Key: value, Nodes: []*Node{n, {Key: action}}}}
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ev.AppendJSON(nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("got %s (%v), want %s", got, err, want)
		}
	})
}

// TestJournalJSONIsWhatJSONMarshalWrites: a journal record is encoded as
// json.Marshal would, for every field.
func TestJournalJSONIsWhatJSONMarshalWrites(t *testing.T) {
	exp := time.Date(2026, 11, 30, 23, 29, 21, 123456789, time.UTC)
	for name, j := range map[string]Journal{
		"action only": {Action: ActionSet},
		"compare-and-swap with TTL": {Action: ActionCompareAndSwap, Node: &Node{Key: "/a", Value: strPtr(""), Expiration: &exp, TTL: 60, CreatedIndex: 5},
			PrevNode: &Node{Key: "/a", Value: strPtr(""), Expiration: &exp, TTL: 1, ModifiedIndex: 7, CreatedIndex: 5}, DataPrefix: "/x<y>"},
		"refresh": {Action: ActionUpdate, Node: &Node{Key: "/d", Dir: true}, Refresh: true},
		"sweep":   {Action: ActionExpire, Node: &Node{Key: "/d", Dir: true}, Sweep: true, DataPrefix: "/p"},
		"escapes": {Action: "\x01\"", Node: &Node{Key: "/\u2028&"}},
	} {
		want, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := j.appendJSON(nil); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: got %s (%v), want %s", name, got, err, want)
		}
	}
}

// journalSamples are records as bridges write them, and near misses.
var journalSamples = []string{
	`{"a":"set"}`,
	`{"a":"compareAndSwap","n":{"key":"/a","value":"","expiration":"2026-11-30T23:29:21.123456789Z","ttl":60,"createdIndex":5},"p":{"key":"/a","value":"","expiration":"2026-11-30T23:29:20Z","ttl":1,"modifiedIndex":7,"createdIndex":5},"dp":"/x"}`,
	`{"a":"update","n":{"key":"/d","dir":true},"r":true}`,
	`{"a":"expire","n":{"key":"/d","dir":true},"s":true,"dp":"/p"}`,
	`{"a":"delete","n":{},"p":{"key":"/k","value":"","modifiedIndex":18446744073709551615}}`,
	`{"a":"set","n":{"key":"/k","ttl":-9223372036854775808}}`,
	`{"a":"set","n":{"key":"/k","ttl":9223372036854775808}}`,
	`{"a":"set","n":{"key":"/k","modifiedIndex":-1}}`,
	`{"a":"set","n":{"key":"/k","modifiedIndex":01}}`,
	`{"a":"set","n":{"key":"/\u00e9"}}`,
	`{"a":"set","n":{"key":"/é\""}}`,
	`{"a":"set","n":{"key":"/a","nodes":[{"key":"/a/b"}]}}`,
	`{"a":"set","n":null}`,
	`{"a":"set","A":"x"}`,
	`{"a":"set","a":"get"}`,
	`{"a":"set"} `,
	`{"a":"set"}x`,
	`{ "a":"set"}`,
	`{"a":"set","n":{"key":"/k","expiration":"2026-13-30T23:29:21Z"}}`,
	`{"a":"set","n":{"key":"/k","expiration":"yesterday"}}`,
	`{"a":"\xff"}`,
	`{"a":"set","r":false}`,
	`{"a":"set","n":{"key":"/k"},"dp":""}`,
	`{"a":5}`,
	``,
}

// TestJournalDecodingIsJSONUnmarshal: a record decodes to exactly what
// json.Unmarshal makes of it, and fails where it fails.
func TestJournalDecodingIsJSONUnmarshal(t *testing.T) {
	for _, s := range journalSamples {
		checkJournalDecoding(t, []byte(s))
	}
	if !fastJournal([]byte(journalSamples[1]), &Journal{}) {
		t.Fatal("a record as bridges write it was not read directly")
	}
}

func checkJournalDecoding(t *testing.T, data []byte) {
	t.Helper()
	var want, got Journal
	werr := json.Unmarshal(data, &want)
	gerr := decodeJournal(data, &got)
	if (werr == nil) != (gerr == nil) || (werr == nil && !reflect.DeepEqual(got, want)) {
		t.Fatalf("%q: got %+v (%v), want %+v (%v)", data, got, gerr, want, werr)
	}
}

func FuzzJournalDecoding(f *testing.F) {
	for _, s := range journalSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkJournalDecoding(t, data)
		// And every record a bridge writes is read directly.
		var j Journal
		if json.Unmarshal(data, &j) == nil && (j.Node == nil || j.Node.Nodes == nil) && (j.PrevNode == nil || j.PrevNode.Nodes == nil) {
			b, err := j.appendJSON(nil)
			if err == nil && !fastJournal(b, &Journal{}) && !strings.ContainsAny(string(b), "\\") {
				t.Fatalf("%s was not read directly", b)
			}
		}
	})
}
