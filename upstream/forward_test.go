// SPDX-License-Identifier: Apache-2.0

package upstream

import (
	"net/http/httptest"
	"testing"
)

func TestWhatIsForwardedAndWhatIsAnsweredLocally(t *testing.T) {
	for _, c := range []struct {
		path      string
		forwarded bool
	}{
		{"/v2/keys", true},
		{"/v2/keys/a/b", true},
		{"/v2/stats/store", true},
		{"/v2/stats/self", false},
		{"/v2/stats/leader", false},
		{"/v2/auth/users", true},
		{"/version", true},
		{"/health", true},
		{"/v2/members", false},
		{"/v2/members/leader", false},
		{"/v2/machines", false},
		{"/readyz", false},
		{"/livez", false},
		{"/metrics", false},
		{"/v2/keysfoo", false},
	} {
		if got := forwarded(c.path); got != c.forwarded {
			t.Errorf("forwarded(%q) = %v, want %v", c.path, got, c.forwarded)
		}
	}
}

func TestOnlyWaitingGetsOnTheKeysAreWatches(t *testing.T) {
	for _, c := range []struct {
		method, target string
		watch          bool
	}{
		{"GET", "/v2/keys/a?wait=true", true},
		{"GET", "/v2/keys/a?wait=1&stream=true", true},
		{"GET", "/v2/keys/a?wait=true&quorum=true", false}, // v2 serves a quorum wait as a plain GET
		{"GET", "/v2/keys/a?wait=true&quorum=false", true},
		{"GET", "/v2/keys/a", false},
		{"GET", "/v2/keys/a?wait=false", false},
		{"GET", "/v2/keys/a?wait=bogus", false},
		{"PUT", "/v2/keys/a?wait=true", false},
		{"GET", "/v2/stats/store?wait=true", false},
	} {
		if got := isWatch(httptest.NewRequest(c.method, c.target, nil)); got != c.watch {
			t.Errorf("%s %s: watch %v, want %v", c.method, c.target, got, c.watch)
		}
	}
}
