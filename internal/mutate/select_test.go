// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
)

func TestSelectMutationsByNameOrPattern(t *testing.T) {
	all, err := selectMutations("")
	if err != nil || len(all) != len(mutations) {
		t.Fatalf("no name: %d mutations (%v), want all %d", len(all), err, len(mutations))
	}
	one, err := selectMutations(mutations[0].Name)
	if err != nil || len(one) != 1 || one[0].Name != mutations[0].Name {
		t.Fatalf("a name: %v (%v), want the one mutation", one, err)
	}
	want := 0
	for _, m := range mutations {
		if strings.HasPrefix(m.Name, "shadow-") {
			want++
		}
	}
	some, err := selectMutations("^shadow-")
	if err != nil || len(some) != want {
		t.Fatalf("^shadow-: %d mutations (%v), want %d", len(some), err, want)
	}
	for _, name := range []string{"no-such-mutation", "(("} {
		if ms, err := selectMutations(name); err == nil {
			t.Errorf("%q selected %d mutations, want an error", name, len(ms))
		}
	}
}
