// SPDX-License-Identifier: Apache-2.0

package steps

import (
	"reflect"
	"strings"
	"testing"

	"github.com/v2bridge/v2bridge/migrate/shadow"
)

func TestVerifyWarnsOfShadowsNarrowerThanTheFollowedCopy(t *testing.T) {
	recs := []shadow.Record{
		{Name: "whole", Host: "a", AdvertiseURLs: []string{"http://a:2379"}, Prefix: "/"},
		{Name: "same", Host: "b", AdvertiseURLs: []string{"http://b:2379"}, Prefix: "/coreos.com"},
		{Name: "narrow", Host: "c", AdvertiseURLs: []string{"http://c:2379"}, Prefix: "/coreos.com/network"},
	}
	if got, want := narrower(recs, "/coreos.com"), []string{"narrow on c (http://c:2379)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("narrower: %q, want %q", got, want)
	}
	if got := narrower(recs, ""); got != nil {
		t.Fatalf("without a follower: %q, want none", got)
	}
	var out strings.Builder
	printShadow(&out, recs, "/coreos.com", nil)
	want := "  warning: narrow on c (http://c:2379) compares less than the followed copy /coreos.com (its --shadow-prefix): " +
		"what lies outside is never checked\n"
	if !strings.HasSuffix(out.String(), want) || strings.Count(out.String(), "warning:") != 1 {
		t.Fatalf("printShadow:\n%s\nwant it to end with\n%s", out.String(), want)
	}
	if js := shadowJSON(recs, "/coreos.com", nil); js.Followed != "/coreos.com" || !reflect.DeepEqual(js.Narrower, []string{"narrow on c (http://c:2379)"}) {
		t.Fatalf("shadowJSON: %+v", js)
	}
}
