// SPDX-License-Identifier: Apache-2.0

package doccheck

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// root is the module's root, from this package's directory.
const root = "../.."

// A map is a section of a markdown file listing one package per line: a
// table row whose first cell, or a list item whose text, starts with the
// package path in backticks.
type docMap struct {
	file    string         // relative to root
	section string         // the section's heading, for messages
	heading *regexp.Regexp // matches it
}

var maps = []docMap{
	{"docs/design.md", "## <n>. Package map", regexp.MustCompile(`^## [0-9]+\. Package map$`)},
}

// pkg is a directory of the module holding Go files.
type pkg struct {
	nonTest, test []string // file names
}

// tree walks the module and returns its packages and the nested modules
// (directories with a go.mod of their own, not walked), by path relative to
// the root with forward slashes.
func tree(t *testing.T) (pkgs map[string]*pkg, modules []string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root is not %s: %v", root, err)
	}
	pkgs = map[string]*pkg{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && path != root {
				t.Logf("skipping %s: %v", path, err)
				return fs.SkipDir
			}
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			name := d.Name()
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" {
				return fs.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				modules = append(modules, rel) // its own module, as proof/reference/ is
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".go") || !d.Type().IsRegular() {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if dir == "." {
			t.Errorf("%s: a Go file at the module root; the map has no line for the root package", rel)
			return nil
		}
		p := pkgs[dir]
		if p == nil {
			p = &pkg{}
			pkgs[dir] = p
		}
		if strings.HasSuffix(d.Name(), "_test.go") {
			p.test = append(p.test, d.Name())
		} else {
			p.nonTest = append(p.nonTest, d.Name())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking the module: %v", err)
	}
	if len(pkgs) == 0 {
		t.Fatal("no packages found under the module root")
	}
	return pkgs, modules
}

// entry is one line of a map.
type entry struct {
	path string
	line int
	text string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// readMap returns the entries of m's section, in order, reading m.file
// under dir.
func readMap(t *testing.T, dir string, m docMap) []entry {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, m.file))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var (
		entries []entry
		in      bool
		found   bool
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = m.heading.MatchString(line)
			found = found || in
			continue
		}
		if !in {
			continue
		}
		var first string
		switch {
		case strings.HasPrefix(line, "|"):
			first, _, _ = strings.Cut(strings.TrimPrefix(line, "|"), "|") // the first cell
		case strings.HasPrefix(line, "- "), strings.HasPrefix(line, "* "):
			first = line
		default:
			continue
		}
		if mm := backticked.FindStringSubmatch(first); mm != nil {
			entries = append(entries, entry{path: mm[1], line: n, text: line})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("%s has no section %q: it holds the package map", m.file, m.section)
	}
	if len(entries) == 0 {
		t.Fatalf("%s: the package map section lists no package (one line per package, its path in backticks)", m.file)
	}
	return entries
}

// TestPackageMaps: every package of the module, and every nested module, has
// a line in docs/design.md's package map (README.md links to it), and every
// line names a package (or nested module) that exists.
func TestPackageMaps(t *testing.T) {
	pkgs, modules := tree(t)
	for _, m := range maps {
		entries := readMap(t, root, m)
		listed := map[string]entry{}
		for _, e := range entries {
			if prev, dup := listed[e.path]; dup {
				t.Errorf("%s:%d: `%s` is listed twice (also line %d)", m.file, e.line, e.path, prev.line)
			}
			listed[e.path] = e
			_, isPkg := pkgs[e.path]
			switch {
			case isPkg:
			case slices.Contains(modules, e.path):
				if !strings.Contains(e.text, "module") {
					t.Errorf("%s:%d: `%s` is a Go module of its own: its line must say so", m.file, e.line, e.path)
				}
			default:
				t.Errorf("%s:%d: `%s` is not a package of the module any more: remove or rename its line",
					m.file, e.line, e.path)
			}
		}
		var missing []string
		for p := range pkgs {
			if _, ok := listed[p]; !ok {
				missing = append(missing, p)
			}
		}
		for _, mod := range modules {
			if _, ok := listed[mod]; !ok {
				missing = append(missing, mod+" (its own module)")
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			t.Errorf("%s: the package map (section %q) has no line for: %s\n(add one line each: the path in backticks, and what the package owns)",
				m.file, m.section, strings.Join(missing, ", "))
		}
	}
}

// TestPackageDocs: every package has a doc comment, a comment directly above
// the package clause of one of its non-test files ("// Package name ..." for
// a library, "// Command ..." for a main package), or, for a package of tests
// only, of one of its test files. The license line alone is not one.
func TestPackageDocs(t *testing.T) {
	pkgs, _ := tree(t)
	fset := token.NewFileSet()
	var undocumented []string
	for dir, p := range pkgs {
		files := p.nonTest
		if len(files) == 0 {
			files = p.test
		}
		documented := false
		for _, name := range files {
			f, err := parser.ParseFile(fset, filepath.Join(root, dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Errorf("%s/%s: %v", dir, name, err)
				continue
			}
			if doc := strings.TrimSpace(f.Doc.Text()); doc != "" && !strings.HasPrefix(doc, "SPDX-License-Identifier") {
				documented = true
				break
			}
		}
		if !documented {
			undocumented = append(undocumented, dir)
		}
	}
	if len(undocumented) > 0 {
		sort.Strings(undocumented)
		t.Errorf("packages without a package doc comment: %s\n(put one in a doc.go: \"// Package name ...\" above the package clause, saying what the package owns and what it does not do)",
			strings.Join(undocumented, ", "))
	}
}

// TestReadMapFindsRowsAndItems: the map reader takes the first backticked
// path of a table row's first cell or of a list item, and nothing else.
func TestReadMapFindsRowsAndItems(t *testing.T) {
	dir := t.TempDir()
	text := "# x\n\n## 1. Package map\n\n| package | owns |\n|---|---|\n| `a/b` | uses `c` |\n| plain | `d` |\n" +
		"- `e` — owns `f`\nprose `g`\n\n## 2. Next\n\n| `h` | x |\n"
	if err := os.MkdirAll(filepath.Join(dir, "docs"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "docs", "design.md"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range readMap(t, dir, maps[0]) {
		got = append(got, e.path)
	}
	if want := []string{"a/b", "e"}; !slices.Equal(got, want) {
		t.Errorf("readMap = %q, want %q", got, want)
	}
}

// The design of record stays a 20-minute read: at most 5,000 words, as wc
// counts them.
func TestDesignIsAShortRead(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(b))); n > 5000 {
		t.Fatalf("docs/design.md has %d words; the design of record must stay within 5,000", n)
	}
}
