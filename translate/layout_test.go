// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"strings"
	"testing"
)

func TestNewLayout(t *testing.T) {
	for _, c := range []struct {
		dp, mp string
		ok     bool
	}{
		{"", "_v2bridge/", true},
		{"/x", "_v2bridge/", true},
		{"/x/", "_v2bridge/", true},
		{"x", "_v2bridge/", false},
		{"", "", false},
		{"", "/meta/", false},
		{"/x", "/x/meta/", false},
		{"/x", "/", false},
		{"/x", "/y/", true},
	} {
		_, err := NewLayout(c.dp, c.mp)
		if (err == nil) != c.ok {
			t.Errorf("NewLayout(%q, %q) = %v, want ok=%v", c.dp, c.mp, err, c.ok)
		}
	}
}

func TestLayoutKeys(t *testing.T) {
	l, _ := NewLayout("/x", "_m/")
	for _, c := range []struct{ got, want string }{
		{l.DataKey("/a/b"), "/x/a/b"},
		{l.DataChildPrefix("/"), "/x/"},
		{l.DataChildPrefix("/a"), "/x/a/"},
		{l.MarkerKey("/a"), "_m/d/x/a"},
		{l.MarkerChildPrefix("/"), "_m/d/x/"},
		{l.MarkerChildPrefix("/a"), "_m/d/x/a/"},
		{PrefixEnd("/a/"), "/a0"},
		{PrefixEnd("a\xff"), "b"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if p, ok := l.PathOfMarker("_m/d/x/a/b"); !ok || p != "/a/b" {
		t.Errorf("PathOfMarker %q %v", p, ok)
	}
	if _, ok := l.PathOfData("/xy/a"); ok {
		t.Error("PathOfData accepted a key outside the prefix")
	}
	lo, hi := l.WatchRange()
	for _, k := range []string{l.DataKey("/a"), l.MarkerKey("/a"), l.JournalKey(), l.LeaseKey(7)} {
		if k < lo || k >= hi {
			t.Errorf("%q outside the watch range [%q,%q)", k, lo, hi)
		}
	}
	if got := strings.Join(Ancestors("/a/b/c"), " "); got != "/a /a/b" {
		t.Errorf("Ancestors %q", got)
	}
}

func TestMatches(t *testing.T) {
	set := func(k string) *Event { return &Event{Action: ActionSet, Node: &Node{Key: k}} }
	del := func(k string, dir bool) *Event { return &Event{Action: ActionDelete, Node: &Node{Key: k, Dir: dir}} }
	for _, c := range []struct {
		key       string
		recursive bool
		ev        *Event
		want      bool
	}{
		{"/foo", false, set("/foo"), true},
		{"/foo", false, set("/foo/bar"), false},
		{"/foo", true, set("/foo/bar"), true},
		{"/foo", true, set("/foobar"), false},
		{"/", true, set("/a/b"), true},
		{"/", true, set("/_h"), false},
		{"/a", true, set("/a/_h/x"), false},
		{"/a/_h", true, set("/a/_h/x"), true},
		{"/a/_h", false, set("/a/_h"), true},
		{"/a/b", false, del("/a", true), true},
		{"/a/b", false, del("/a", false), false},
		{"/ab", false, del("/a", true), false},
		{"/a/b", false, &Event{Action: ActionExpire, Node: &Node{Key: "/a", Dir: true}}, true},
	} {
		if got := Matches(c.key, c.recursive, c.ev); got != c.want {
			t.Errorf("Matches(%q, %v, %s %s) = %v", c.key, c.recursive, c.ev.Action, c.ev.Node.Key, got)
		}
	}
}

// TestMirrored: the keys the bridge keeps a copy of are its data keys,
// markers, sequence keys and lease records; not the journal, nor another
// data prefix's markers and sequences sharing the meta prefix, nor keys
// outside both spaces.
func TestMirrored(t *testing.T) {
	for _, c := range []struct {
		name string
		l    Layout
		key  string
		want bool
	}{
		{"data key", Layout{DataPrefix: "/x", MetaPrefix: "_m/"}, "/x/a/b", true},
		{"data key of the root's child", Layout{DataPrefix: "", MetaPrefix: "_m/"}, "/a", true},
		{"directory marker", Layout{DataPrefix: "/x", MetaPrefix: "_m/"}, "_m/d/x/a", true},
		{"root's directory marker", Layout{DataPrefix: "/x", MetaPrefix: "_m/"}, "_m/d/x/", true},
		{"sequence key", Layout{DataPrefix: "/x", MetaPrefix: "_m/"}, "_m/s/x/q", true},
		{"sequence key of the root", Layout{DataPrefix: "", MetaPrefix: "_m/"}, "_m/s/", true},
		{"lease record", Layout{DataPrefix: "/x", MetaPrefix: "_m/"}, "_m/l/694d8b1c2e3f4a01", true},
		{"journal", Layout{DataPrefix: "/x", MetaPrefix: "_m/"}, "_m/j", false},
		{"another data prefix's key", Layout{DataPrefix: "/x", MetaPrefix: "_m/"}, "/xy/a", false},
		{"the data prefix itself", Layout{DataPrefix: "/x", MetaPrefix: "_m/"}, "/x", false},
		{"another data prefix's marker", Layout{DataPrefix: "/x", MetaPrefix: "_m/"}, "_m/d/xy/a", false},
		{"another data prefix's sequence key", Layout{DataPrefix: "/x", MetaPrefix: "_m/"}, "_m/s/y/q", false},
		{"unknown meta key", Layout{DataPrefix: "/x", MetaPrefix: "_m/"}, "_m/z", false},
		{"bare marker tag", Layout{DataPrefix: "/x", MetaPrefix: "_m/"}, "_m/d", false},
		{"key outside both spaces", Layout{DataPrefix: "", MetaPrefix: "_m/"}, "a", false},
	} {
		if got := c.l.Mirrored(c.key); got != c.want {
			t.Errorf("%s: %+v.Mirrored(%q) = %v, want %v", c.name, c.l, c.key, got, c.want)
		}
	}
	// Every key the layout makes is mirrored but the journal's.
	l := Layout{DataPrefix: "/x", MetaPrefix: "_m/"}
	for _, k := range []string{l.DataKey("/a"), l.MarkerKey("/a"), l.MarkerChildPrefix("/a"), l.SeqKey("/a"), l.LeaseKey(7)} {
		if !l.Mirrored(k) {
			t.Errorf("%q is not mirrored", k)
		}
	}
	if l.Mirrored(l.JournalKey()) {
		t.Error("the journal is mirrored")
	}
}
