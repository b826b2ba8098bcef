// SPDX-License-Identifier: Apache-2.0

package v2diff

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestAllowListMatchesDocs keeps the allow-list and docs/compatibility.md
// one-to-one: every entry has a section whose heading carries its ID, and
// every such section has an entry.
func TestAllowListMatchesDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "compatibility.md"))
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile("(?m)^### `([a-z0-9-]+)` — (.+)$")
	docs := map[string]string{}
	var order []string
	for _, m := range heading.FindAllStringSubmatch(string(b), -1) {
		order = append(order, m[1])
		if _, dup := docs[m[1]]; dup {
			t.Errorf("docs/compatibility.md: two sections for %q", m[1])
		}
		docs[m[1]] = m[2]
	}
	code := map[string]bool{}
	for _, d := range Divergences {
		if code[d.ID] {
			t.Errorf("allow.go: %q listed twice", d.ID)
		}
		code[d.ID] = true
		title, ok := docs[d.ID]
		if !ok {
			t.Errorf("allow.go entry %q has no section in docs/compatibility.md", d.ID)
			continue
		}
		if !strings.HasPrefix(title, d.Title) {
			t.Errorf("%q: docs title %q, allow.go title %q", d.ID, title, d.Title)
		}
		if strings.Contains(title, "*reference*") != d.Reference {
			t.Errorf("%q: marked as a reference difference in one place only", d.ID)
		}
	}
	for i, d := range Divergences {
		if i < len(order) && order[i] != d.ID {
			t.Errorf("entry %d is %q in allow.go but %q in docs/compatibility.md: keep one order", i, d.ID, order[i])
			break
		}
	}
	var extra []string
	for id := range docs {
		if !code[id] {
			extra = append(extra, id)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("docs/compatibility.md sections without an allow.go entry: %v", extra)
	}
}
