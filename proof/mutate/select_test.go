// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
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

func TestByPackageCountsEachDirectorysMutations(t *testing.T) {
	rows := []row{
		{m: Mutation{File: "migrate/shadow/writes.go"}, result: caught},
		{m: Mutation{File: "v3backend/hub/hub.go"}, result: caughtByTimeout},
		{m: Mutation{File: "migrate/shadow/compare.go"}, result: survivedResult},
		{m: Mutation{File: "v3backend/mirror.go"}, result: brokenResult},
	}
	want := "| package | mutations | caught |\n|---|---|---|\n" +
		"| `migrate/shadow` | 2 | 1 |\n| `v3backend` | 1 | 0 |\n| `v3backend/hub` | 1 | 1 |\n\n"
	if got := byPackage(rows); got != want {
		t.Errorf("byPackage:\n%s\nwant\n%s", got, want)
	}
}

func TestAFullRunKeepsTheLeftOutSection(t *testing.T) {
	f := filepath.Join(t.TempDir(), "RESULTS.md")
	if got := keptSection(f); got != "" {
		t.Errorf("no file: kept %q", got)
	}
	if err := os.WriteFile(f, []byte("# old table\n| a |\n"+leftOut+"\n- `x`: harmless, because.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := keptSection(f), leftOut+"\n- `x`: harmless, because.\n"; got != want {
		t.Errorf("kept %q, want %q", got, want)
	}
}
