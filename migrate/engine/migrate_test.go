// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

func file(key, v string) *translate.Node { return &translate.Node{Key: key, Value: &v} }

func withExp(n *translate.Node, exp time.Time) *translate.Node { n.Expiration = &exp; return n }

func TestDiff(t *testing.T) {
	now := time.Now()
	dir := &translate.Node{Key: "/d", Dir: true}
	for _, c := range []struct {
		name     string
		src, dst *translate.Node
		tol      time.Duration
		want     string
	}{
		{"equal files", file("/k", "v"), file("/k", "v"), 5 * time.Second, ""},
		{"equal dirs", dir, dir, 0, ""},
		{"missing", file("/k", "v"), nil, 0, KindMissing},
		{"extra", nil, file("/k", "v"), 0, KindExtra},
		{"type", file("/k", "v"), &translate.Node{Key: "/k", Dir: true}, 0, KindType},
		{"value", file("/k", "a"), file("/k", "b"), 0, KindValue},
		{"empty value vs value", file("/k", ""), file("/k", "b"), 0, KindValue},
		{"ttl on the v2 server only", withExp(file("/k", "v"), now), file("/k", "v"), 0, KindTTL},
		{"ttl on bridge only", file("/k", "v"), withExp(file("/k", "v"), now), 0, KindTTL},
		{"expirations close", withExp(file("/k", "v"), now), withExp(file("/k", "v"), now.Add(2*time.Second)), 5 * time.Second, ""},
		{"expirations apart", withExp(file("/k", "v"), now), withExp(file("/k", "v"), now.Add(time.Minute)), 5 * time.Second, KindExpiry},
		{"expirations not compared", withExp(file("/k", "v"), now), withExp(file("/k", "v"), now.Add(time.Hour)), 0, ""},
	} {
		if got, _ := diff(c.src, c.dst, c.tol); got != c.want {
			t.Errorf("%s: diff = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestAcceptEvent(t *testing.T) {
	ev := func(action, key string, dir bool) *translate.Event {
		return &translate.Event{Action: action, Node: &translate.Node{Key: key, Dir: dir, ModifiedIndex: 7}}
	}
	for _, c := range []struct {
		root    string
		main    bool
		ev      *translate.Event
		wantKey string // "" = not accepted
	}{
		{"/", true, ev("set", "/a/b", false), "/a/b"},
		{"/", true, ev("set", "/a/_h", false), ""}, // hidden: its own watch
		{"/", true, ev("set", "/_h/x", false), ""},
		{"/a/_h", false, ev("set", "/a/_h", false), "/a/_h"},
		{"/_h", false, ev("set", "/_h/x", false), "/_h/x"},
		{"/_h", false, ev("set", "/_h/_y", false), ""}, // nested hidden: its own watch
		{"/app", true, ev("set", "/apple", false), ""},
		{"/app", true, ev("delete", "/", true), "/app"}, // a directory above the prefix went
		{"/app/x", true, ev("expire", "/app", true), "/app/x"},
		{"/app/_h", false, ev("delete", "/app", true), ""}, // the prefix watch handles it
		{"/app", true, ev("set", "/", true), ""},
	} {
		got := acceptEvent(c.root, c.main, c.ev)
		switch {
		case c.wantKey == "" && got != nil:
			t.Errorf("root %s: %s %s accepted as %s", c.root, c.ev.Action, c.ev.Node.Key, got.Node.Key)
		case c.wantKey != "" && (got == nil || got.Node.Key != c.wantKey):
			t.Errorf("root %s: %s %s: got %+v, want key %s", c.root, c.ev.Action, c.ev.Node.Key, got, c.wantKey)
		}
	}
}

func TestHiddenNodes(t *testing.T) {
	for _, c := range []struct{ root, key, want string }{
		{"/", "/a/b", ""},
		{"/", "/a/_h", "/a/_h"},
		{"/", "/_d/_e/f", "/_d /_d/_e"},
		{"/app", "/app/_x/y", "/app/_x"},
		{"/app/_x", "/app/_x/y", ""}, // the root itself is not below itself
		{"/app", "/other/_x", ""},
	} {
		if got := strings.Join(hiddenNodes(c.root, c.key), " "); got != c.want {
			t.Errorf("hiddenNodes(%s, %s) = %q, want %q", c.root, c.key, got, c.want)
		}
	}
}

func TestHistoryStart(t *testing.T) {
	ve := translate.NewError(translate.EcodeEventIndexCleared, "the requested history has been cleared [1021/3]", 2020)
	if n, ok := historyStart(ve); !ok || n != 1021 {
		t.Errorf("historyStart = %d %v", n, ok)
	}
	if _, ok := historyStart(translate.NewError(401, "odd", 0)); ok {
		t.Error("no start in an odd cause")
	}
}

func TestInterleave(t *testing.T) {
	var jobs []*job
	for _, p := range []string{"/a/1", "/a/2", "/a/3", "/b/1", "/c/1", "/c/2"} {
		jobs = append(jobs, &job{path: p})
	}
	var got []string
	for _, j := range interleave(jobs) {
		got = append(got, j.path)
	}
	if s := strings.Join(got, " "); s != "/a/1 /b/1 /c/1 /a/2 /c/2 /a/3" {
		t.Errorf("interleave: %s", s)
	}
}

func TestCompareTreesFolds(t *testing.T) {
	st, tt := newTree(), newTree()
	st.add(&translate.Node{Dir: true, Nodes: []*translate.Node{
		{Key: "/a", Dir: true, Nodes: []*translate.Node{file("/a/1", "x"), file("/a/2", "y")}},
		file("/b", "same"), file("/c", "src"),
	}})
	tt.add(&translate.Node{Dir: true, Nodes: []*translate.Node{
		file("/b", "same"), file("/c", "dst"),
		{Key: "/x", Dir: true, Nodes: []*translate.Node{file("/x/1", "z")}},
	}})
	var got []string
	for _, d := range compareTrees(st, tt, 0) {
		got = append(got, d.Kind+" "+d.Path+" "+strings.Repeat("+", d.Below))
	}
	if s := strings.Join(got, ","); s != "missing /a ++,value /c ,extra /x +" {
		t.Errorf("compareTrees: %s", s)
	}
}

func TestOwnership(t *testing.T) {
	o := newOwnership()
	o.set("/k", 7)
	o.set("/d", anyRev)
	if !o.owns(&translate.Node{Key: "/k", ModifiedIndex: 7}) || o.owns(&translate.Node{Key: "/k", ModifiedIndex: 8}) {
		t.Error("a file is owned at the revision recorded only")
	}
	if !o.owns(&translate.Node{Key: "/d", Dir: true, ModifiedIndex: 12}) || o.owns(&translate.Node{Key: "/d", ModifiedIndex: 12}) {
		t.Error("an implicit directory is owned at any revision, as a directory")
	}
	o.dropTree("/")
	if o.owns(&translate.Node{Key: "/k", ModifiedIndex: 7}) {
		t.Error("dropTree")
	}
}

func TestProgressPrinter(t *testing.T) {
	var b bytes.Buffer
	pp := &ProgressPrinter{W: &b, TTY: true}
	pp.Update(Progress{Phase: "copying", Done: 1500, Total: 10000, Written: 1400, Bytes: 3 << 20, Rate: 1000.4, ETA: 8500 * time.Millisecond})
	pp.Update(Progress{Phase: "copying", Done: 10000, Total: 10000})
	pp.Finish()
	l1 := "copying: 1,500/10,000 nodes (15%), 1,400 writes, 3.0 MiB, 1,000 nodes/s, ETA 9s"
	l2 := "copying: 10,000/10,000 nodes (100%), 0 writes, 0 B"
	want := "\r" + l1 + "\r" + l2 + strings.Repeat(" ", len(l1)-len(l2)) + "\n"
	if b.String() != want {
		t.Errorf("tty output:\n%q\nwant\n%q", b.String(), want)
	}
	b.Reset()
	pp = &ProgressPrinter{W: &b, Interval: time.Hour}
	for i := 0; i < 5; i++ {
		pp.Update(Progress{Phase: "copying", Done: i, Total: 5})
	}
	pp.Update(Progress{Phase: "done", Total: 5, Elapsed: time.Second})
	if got := strings.Count(b.String(), "\n"); got != 2 || strings.Contains(b.String(), "\r") {
		t.Errorf("plain output, one line per phase within the interval:\n%s", b.String())
	}
	if Count(-1234567) != "-1,234,567" || Count(12) != "12" || Bytes(1536) != "1.5 KiB" {
		t.Error("Count/Bytes")
	}
}
