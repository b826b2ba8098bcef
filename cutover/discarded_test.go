// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"reflect"
	"testing"

	"github.com/v2bridge/v2bridge/translate"
)

func TestRollbackListsEachDiscardedFileOnceWithItsLastValue(t *testing.T) {
	layout, _ := translate.NewLayout("", "_v2bridge/")
	f := newFakeEtcd(testKeys)
	f.apply(change{key: "/c", val: "old"}, change{key: layout.MarkerKey("/gone"), val: ""})
	f.put(testKeys.Mode, string((&Record{Mode: ModeV3, Generation: 2}).Encode()), 0)
	f.mu.Lock()
	since := f.rev
	f.mu.Unlock()
	f.apply(change{key: "/a", val: "v1"})
	f.apply(change{key: "/a", val: "v2"})
	f.apply(change{key: layout.MarkerKey("/d"), val: ""}, change{key: "/d/b", val: "x"})
	f.apply(change{key: "/d/b", val: "y"})
	f.apply(change{key: "/c", del: true})
	f.apply(change{key: layout.MarkerKey("/e"), val: ""})
	f.apply(change{key: layout.MarkerKey("/gone"), del: true})
	f.apply(change{key: "/n", val: "new"}, change{key: "/n", del: true}) // put, then deleted
	o, _ := testOptions(t, f, nil)
	o.setDefaults()
	got, err := o.v3ChangesSince(context.Background(), since)
	if err != nil {
		t.Fatal(err)
	}
	want := []Discarded{
		{Path: "/a", Value: "v2"},
		{Path: "/c", Deleted: true},
		{Path: "/d/b", Value: "y"},
		{Path: "/e", Dir: true},
		{Path: "/gone", Dir: true, Deleted: true},
		{Path: "/n", Deleted: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("discarded:\n got %+v\nwant %+v", got, want)
	}
	var lines []string
	for _, d := range got {
		lines = append(lines, d.String())
	}
	wantLines := []string{`/a = "v2"`, "/c (deleted)", `/d/b = "y"`, "/e (directory)", "/gone (directory, deleted)", "/n (deleted)"}
	if !reflect.DeepEqual(lines, wantLines) {
		t.Fatalf("lines %q, want %q", lines, wantLines)
	}
}
