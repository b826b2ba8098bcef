// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"fmt"
	"net/url"
	"reflect"
	"testing"
	"time"
)

// TestFindForeignCountsWhatNoV2ClientWrote: what bridges wrote (a whole-tree
// bridge's files and directories, a scoped bridge's subtree) is not
// counted; everything else is, however many top-level names come first,
// files as well as directories, and beside a scoped bridge's subtree in
// the directories it created above it.
func TestFindForeignCountsWhatNoV2ClientWrote(t *testing.T) {
	ep := startMember(t, nil)
	whole := newBackend(t, ep, nil)
	scoped := newBackendWith(t, ep, func(c *Config) { c.Layout = c.Layout.WithServed([]string{"/coreos.com/network"}) })
	v3 := otherClient(t, ep)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	write := func(b *Backend, method, p string, form url.Values) {
		t.Helper()
		if _, _, err := b.Write(ctx, request(t, method, p, form)); err != nil {
			t.Fatalf("%s %s: %v", method, p, err)
		}
	}
	put := func(k, v string) {
		t.Helper()
		if _, err := v3.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	find := func() []ForeignDir {
		t.Helper()
		got, err := FindForeign(ctx, v3, whole.layout)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	write(scoped, "PUT", "/coreos.com/network/config", url.Values{"value": {"{}"}})
	write(scoped, "PUT", "/coreos.com/network/subnets/a", url.Values{"value": {"x"}, "ttl": {"600"}})
	write(whole, "PUT", "/top", url.Values{"value": {"v2"}})
	write(whole, "PUT", "/leased", url.Values{"value": {"v2"}, "ttl": {"600"}})
	write(whole, "PUT", "/patroni/leader", url.Values{"value": {"v2"}})
	write(whole, "PUT", "/coreos.com/own", url.Values{"value": {"v2"}}) // into the directory the scoped bridge made
	write(whole, "PUT", "/gone", url.Values{"value": {"v2"}})
	write(whole, "DELETE", "/gone", nil)
	if got := find(); got != nil {
		t.Fatalf("only bridges wrote, yet FindForeign found %v", got)
	}

	for i := range 1200 { // sorting before /registry
		put(fmt.Sprintf("/a%04d", i), "v3")
	}
	put("/registry/pods/p1", "v3")
	put("/registry/pods/p2", "v3")
	put("/coreos.com/network-v6/config", "v3") // another tenant beside flannel's subtree
	put("/coreos.com/loose", "v3")
	put("/top", "v3 overwrote it")
	got := find()
	var want []ForeignDir
	for i := range 1200 {
		want = append(want, ForeignDir{Path: fmt.Sprintf("/a%04d", i), Keys: 1})
	}
	want = append(want, ForeignDir{"/coreos.com/loose", 1}, ForeignDir{"/coreos.com/network-v6", 1},
		ForeignDir{"/registry", 2}, ForeignDir{"/top", 1})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FindForeign = %d paths, first %v, last %v\nwant %d, first %v, last %v", len(got), head(got), tail(got), len(want), head(want), tail(want))
	}
}

func head(fs []ForeignDir) []ForeignDir { return fs[:min(len(fs), 2)] }
func tail(fs []ForeignDir) []ForeignDir { return fs[max(0, len(fs)-5):] }
