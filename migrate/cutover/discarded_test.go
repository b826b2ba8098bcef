// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/translate"
)

func TestRollbackListsEachDiscardedFileOnceWithItsLastValue(t *testing.T) {
	layout, _ := translate.NewLayout("", "_v2bridge/")
	f := newFakeEtcd(testKeys)
	ak := auth.KeysFor("_v2bridge/", "", nil)
	f.apply(change{key: "/c", val: "old"}, change{key: layout.MarkerKey("/gone"), val: ""}, change{key: ak.Role("apps"), val: "{}"})
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
	f.apply(change{key: ak.User("alice"), val: `{"user":"alice","password":"$2a$10$secret"}`})
	f.apply(change{key: ak.Role("apps"), del: true})
	f.apply(change{key: ak.Enabled(), val: "true"})
	f.apply(change{key: auth.KeysFor("_v2bridge/", "/other", nil).User("bob"), val: "{}"}) // another key space's
	f.apply(change{key: "/v2/auth/users/alice", val: "data"})                              // a data key of the same path
	o, _ := testOptions(t, f, nil)
	o.Auth = ak
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
		{Path: "/v2/auth/users/alice", Value: "data"},
		{Path: "/v2/auth/enable", Auth: true},
		{Path: "/v2/auth/roles/apps", Auth: true, Deleted: true},
		{Path: "/v2/auth/users/alice", Auth: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("discarded:\n got %+v\nwant %+v", got, want)
	}
	var lines []string
	for _, d := range got {
		lines = append(lines, d.String())
	}
	wantLines := []string{`/a = "v2"`, "/c (deleted)", `/d/b = "y"`, "/e (directory)", "/gone (directory, deleted)", "/n (deleted)",
		`/v2/auth/users/alice = "data"`, "/v2/auth/enable (auth data)", "/v2/auth/roles/apps (auth data, deleted)",
		"/v2/auth/users/alice (auth data)"}
	if !reflect.DeepEqual(lines, wantLines) {
		t.Fatalf("lines %q, want %q", lines, wantLines)
	}
}

// etcd before 3.4.25 and 3.5.8 answers a progress request at once, while the
// scan's watch is still replaying the history: the scan must not end there
// and miss the writes it has not been sent yet. The last change is outside
// the bridge's keys, so the watched range is idle up to the current revision.
func TestRollbackScanOutlastsAnEarlyProgressAnswer(t *testing.T) {
	f := newFakeEtcd(testKeys)
	f.earlyProgress = true
	f.put(testKeys.Mode, string((&Record{Mode: ModeV3, Generation: 2}).Encode()), 0)
	f.mu.Lock()
	since := f.rev
	f.mu.Unlock()
	f.apply(change{key: "/a", val: "v1"})
	f.apply(change{key: "other/app", val: "x"}) // not a bridge's key
	o, _ := testOptions(t, f, nil)
	o.setDefaults()
	got, err := o.v3ChangesSince(testCtx(t, time.Minute), since)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Discarded{{Path: "/a", Value: "v1"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("discarded %+v, want %+v", got, want)
	}
}
