// SPDX-License-Identifier: Apache-2.0

package passthrough

import (
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
