// SPDX-License-Identifier: Apache-2.0

package membership

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/v2bridge/v2bridge/v2api"
)

// TestMembersAreThoseOfTheSameKeySpace: the list shows the bridges of its
// data prefix and served subtree that advertise URLs and not only
// themselves, whatever their mode; a registration that does not decode is
// left out, and a later good one of the same bridge shows.
func TestMembersAreThoseOfTheSameKeySpace(t *testing.T) {
	l := NewMemberList(MemberListConfig{Bridges: Bridges("_v2bridge/"), DataPrefix: "/x", Prefix: "/app"})
	for id, g := range map[string]Registration{
		"1": {Name: "dual", Advertise: []string{"http://d:2379"}, DataPrefix: "/x", Prefix: "/app", Mode: "passthrough"},
		"2": {Name: "static", Advertise: []string{"http://s1:2379", "http://s2:2379"}, DataPrefix: "/x", Prefix: "/app", Static: true},
		"3": {Name: "other-data", Advertise: []string{"http://o:2379"}, DataPrefix: "/y", Prefix: "/app"},
		"4": {Name: "other-subtree", Advertise: []string{"http://t:2379"}, DataPrefix: "/x", Prefix: "/app/sub"},
		"5": {Name: "whole-tree", Advertise: []string{"http://w:2379"}, DataPrefix: "/x"},
		"6": {Name: "node-local", Advertise: []string{"http://127.0.0.1:12379"}, DataPrefix: "/x", Prefix: "/app", OnlySelf: true},
		"7": {Name: "no-urls", DataPrefix: "/x", Prefix: "/app"},
	} {
		l.regs[id] = g
	}
	l.decode("8", []byte("not json"))
	l.decode("1", []byte("{"))
	want := []v2api.Member{
		{ID: v2api.MemberID([]string{"http://s1:2379", "http://s2:2379"}), Name: "static", ClientURLs: []string{"http://s1:2379", "http://s2:2379"}},
	}
	byName := func(ms []v2api.Member) []v2api.Member {
		slices.SortFunc(ms, func(a, b v2api.Member) int { return strings.Compare(a.Name, b.Name) })
		return ms
	}
	if got := byName(l.Members()); !reflect.DeepEqual(got, want) {
		t.Fatalf("members %+v, want %+v", got, want)
	}
	l.decode("1", []byte(`{"name":"dual","advertise":["http://d:2379"],"dataPrefix":"/x","prefix":"/app","mode":"v3"}`))
	want = byName(append(want, v2api.Member{ID: v2api.MemberID([]string{"http://d:2379"}), Name: "dual", ClientURLs: []string{"http://d:2379"}}))
	if got := byName(l.Members()); !reflect.DeepEqual(got, want) {
		t.Fatalf("members %+v, want %+v", got, want)
	}
}
