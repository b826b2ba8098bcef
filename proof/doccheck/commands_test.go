// SPDX-License-Identifier: Apache-2.0

package doccheck

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
)

// docFiles are the documents whose commands users type: README.md and
// every file of docs/, relative to the root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

// A docText is a document split into what a reader types: the lines of
// its fenced code blocks (a line ending in a backslash joined with the
// next), with each block's info string, and the inline code spans of its
// prose.
type docText struct {
	file   string
	blocks []codeBlock
	spans  []codeSpan
}

type codeBlock struct {
	lang  string
	line  int // of the opening fence
	lines []string
}

type codeSpan struct {
	line int
	text string
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

func readDoc(t *testing.T, file string) docText {
	t.Helper()
	f, err := os.Open(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	d := docText{file: file}
	var cur *codeBlock
	indented := false // a block indented four spaces, as README's first
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fence, ok := strings.CutPrefix(strings.TrimLeft(line, " "), "```"); ok {
			if cur == nil {
				d.blocks = append(d.blocks, codeBlock{lang: strings.TrimSpace(fence), line: n})
				cur = &d.blocks[len(d.blocks)-1]
			} else {
				cur = nil
			}
			continue
		}
		if cur != nil {
			if k := len(cur.lines); k > 0 && strings.HasSuffix(cur.lines[k-1], "\\") {
				cur.lines[k-1] = strings.TrimSuffix(cur.lines[k-1], "\\") + " " + strings.TrimSpace(line)
			} else {
				cur.lines = append(cur.lines, line)
			}
			continue
		}
		if code, ok := strings.CutPrefix(line, "    "); ok && (indented || strings.TrimSpace(line) != "") && !strings.HasPrefix(strings.TrimSpace(line), "-") {
			if !indented {
				d.blocks = append(d.blocks, codeBlock{lang: "indented", line: n})
				indented = true
			}
			b := &d.blocks[len(d.blocks)-1]
			b.lines = append(b.lines, code)
			continue
		}
		indented = false
		for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
			d.spans = append(d.spans, codeSpan{line: n, text: m[1]})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

var (
	bridgeOnce  sync.Once
	bridgeHelp  map[string]string // command ("" for serving) → its help text
	bridgeErr   error
	helpCommand = []string{"", "migrate", "verify", "cutover", "rollback"}
)

// helpTexts builds the v2bridge binary and returns what `v2bridge help`
// and `v2bridge help <command>` print: the flags a user can give, as the
// user reads them.
func helpTexts(t *testing.T) map[string]string {
	t.Helper()
	bridgeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "doccheck")
		if err != nil {
			bridgeErr = err
			return
		}
		defer func() { _ = os.RemoveAll(dir) }()
		bin := filepath.Join(dir, "v2bridge")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		goTool := "go"
		if p, err := exec.LookPath("go"); err == nil {
			goTool = p
		} else if r := os.Getenv("GOROOT"); r != "" {
			goTool = filepath.Join(r, "bin", "go")
		}
		if out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "../../cmd/bridge").CombinedOutput(); err != nil {
			bridgeErr = &buildError{err, string(out)}
			return
		}
		bridgeHelp = map[string]string{}
		for _, c := range helpCommand {
			args := []string{"help"}
			if c != "" {
				args = append(args, c)
			}
			out, err := exec.CommandContext(ctx, bin, args...).Output()
			if err != nil {
				bridgeErr = err
				return
			}
			bridgeHelp[c] = string(out)
		}
	})
	if bridgeErr != nil {
		t.Fatal(bridgeErr)
	}
	return bridgeHelp
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build ./cmd/bridge: " + e.err.Error() + "\n" + e.out }

var (
	helpFlag       = regexp.MustCompile(`(?m)^ +--([a-z0-9-]+)`)
	helpDeprecated = regexp.MustCompile(`(?m)^Deprecated names \((.*)\)`)
	flagToken      = regexp.MustCompile(`--([a-z][a-z0-9-]*)(\*?)`)
)

// flagSets is each command's flags as its help lists them, and the
// deprecated names the main help gives (a name ending in '*' stands for
// every flag it begins). migrate, verify and the cutover's commands accept
// the server's flags too (the config file they share is the server's).
type flagSets struct {
	cmd        map[string]map[string]bool
	deprecated []string // prefixes, for names ending in '*'
	exact      map[string]bool
}

func bridgeFlags(t *testing.T) flagSets {
	t.Helper()
	fs := flagSets{cmd: map[string]map[string]bool{}, exact: map[string]bool{}}
	help := helpTexts(t)
	for _, c := range helpCommand {
		set := map[string]bool{}
		for _, m := range helpFlag.FindAllStringSubmatch(help[c], -1) {
			set[m[1]] = true
		}
		if len(set) < 5 {
			t.Fatalf("v2bridge help %s lists %d flags: the test no longer reads the help", c, len(set))
		}
		fs.cmd[c] = set
	}
	dep := helpDeprecated.FindStringSubmatch(help[""])
	if dep == nil {
		t.Fatal("v2bridge help names no deprecated flags (the line 'Deprecated names (...)')")
	}
	for _, m := range flagToken.FindAllStringSubmatch(dep[1], -1) {
		if m[2] == "*" {
			fs.deprecated = append(fs.deprecated, m[1])
		} else {
			fs.exact[m[1]] = true
		}
	}
	return fs
}

// accepts reports whether command c (a key of cmd) takes flag name.
func (fs flagSets) accepts(c, name string) bool {
	if fs.cmd[c][name] || fs.cmd[""][name] || fs.exact[name] {
		return true
	}
	for _, p := range fs.deprecated {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// any reports whether some command takes name; a name ending in '*' (a
// family, as `--v2-server-*`) must begin a flag.
func (fs flagSets) any(name string, family bool) bool {
	for c := range fs.cmd {
		if fs.accepts(c, name) {
			return true
		}
		if family {
			for f := range fs.cmd[c] {
				if strings.HasPrefix(f, name) {
					return true
				}
			}
		}
	}
	return family && slices.ContainsFunc(fs.deprecated, func(p string) bool { return strings.HasPrefix(p, name) || strings.HasPrefix(name, p) })
}

// otherTools are the flags the docs name of programs other than v2bridge,
// by program: a doc's `--flag` is one of these or one of the bridge's.
var otherTools = map[string][]string{
	"etcd": {"max-txn-ops", "max-request-bytes", "quota-backend-bytes", "pre-vote", "enable-v2", "cors",
		"auto-compaction-retention"},
	"etcdctl":   {"prefix", "print-value-only", "readwrite", "path", "roles", "username", "forever", "cluster"},
	"flanneld":  {"etcd-endpoints", "etcd-prefix", "etcd-cafile", "etcd-certfile", "etcd-keyfile", "etcd-username", "etcd-password", "kube-subnet-mgr", "etcd-api-version"},
	"go test":   {"count", "run", "fuzz", "fuzztime", "short", "race", "cover", "coverpkg", "overlay", "seed", "v"},
	"curl":      {"cacert"},
	"systemctl": {"now"},
}

func otherTool(name string) bool {
	for _, flags := range otherTools {
		if slices.Contains(flags, name) {
			return true
		}
	}
	return false
}

// bridgeCommand finds a v2bridge command in a shell line: the command (""
// for serving, or migrate, verify, cutover, rollback, help, version) and
// its words after it, or ok false.
func bridgeCommand(line string) (cmd string, words []string, ok bool) {
	fields := strings.Fields(strings.NewReplacer("[", " ", "]", " ", "|", " ").Replace(line))
	i := 0
	for i < len(fields) && (strings.Contains(fields[i], "=") && !strings.HasPrefix(fields[i], "-") || fields[i] == "exec" || fields[i] == "$") {
		i++ // VAR=value, exec, a prompt
	}
	if i == len(fields) || (fields[i] != "v2bridge" && !strings.HasSuffix(fields[i], "/v2bridge")) {
		return "", nil, false
	}
	words = fields[i+1:]
	for j, w := range words {
		if strings.HasPrefix(w, "-") {
			continue
		}
		switch w {
		case "migrate":
			if j+1 < len(words) && (words[j+1] == "cutover" || words[j+1] == "rollback") {
				return words[j+1], words, true
			}
			return w, words, true
		case "verify", "help", "version":
			return w, words, true
		}
	}
	return "", words, true
}

// TestDocFlagsExist: every flag a doc names is the bridge's, as its help
// lists it, or of a program listed in otherTools; a v2bridge command line
// in a code block gives only flags that command takes, and a config file
// only keys that are the server's flags.
func TestDocFlagsExist(t *testing.T) {
	fs := bridgeFlags(t)
	for _, file := range docFiles(t) {
		d := readDoc(t, file)
		for _, b := range d.blocks {
			for k, line := range b.lines {
				if b.lang == "yaml" || strings.HasPrefix(strings.TrimSpace(b.lines[0]), "# /etc/v2bridge/") {
					if m := regexp.MustCompile(`^([a-z][a-z0-9-]*):`).FindStringSubmatch(line); m != nil && !fs.cmd[""][m[1]] {
						t.Errorf("%s:%d: the config file key %q is no flag of v2bridge (v2bridge help)", file, b.line+1+k, m[1])
					}
					continue
				}
				cmd, words, ok := bridgeCommand(line)
				if !ok {
					continue
				}
				if cmd == "help" || cmd == "version" {
					cmd = ""
				}
				for _, w := range words {
					if !strings.HasPrefix(w, "-") || w == "-" || w == "--" {
						continue
					}
					name := strings.TrimLeft(w, "-")
					name, _, _ = strings.Cut(name, "=")
					if name == "help" || name == "h" {
						continue
					}
					if !fs.accepts(cmd, name) {
						t.Errorf("%s:%d: v2bridge %s takes no --%s (v2bridge help %s): %s", file, b.line+1+k, cmd, name, cmd, strings.TrimSpace(line))
					}
				}
			}
		}
		for _, s := range d.spans {
			for _, m := range flagToken.FindAllStringSubmatch(s.text, -1) {
				name := m[1]
				family := m[2] == "*" || strings.HasPrefix(s.text[strings.Index(s.text, m[0])+len(m[0]):], "-*")
				if strings.HasSuffix(name, "-") {
					name, family = strings.TrimSuffix(name, "-"), true
				}
				if !fs.any(name, family) && !otherTool(name) && name != "help" {
					t.Errorf("%s:%d: `%s` names --%s, which is no flag of v2bridge (v2bridge help) nor of a program in otherTools",
						file, s.line, s.text, name)
				}
			}
		}
	}
}

var (
	makeTarget  = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):([^=]|$)`)
	makeCommand = regexp.MustCompile(`(?:^|[;&|]\s*|\s)make\s+((?:[A-Z][A-Z0-9_]*=\S*\s+)*)([a-z][a-z0-9-]*)`)
)

// TestDocMakeTargetsExist: every `make <target>` in a doc's code, inline
// or in a block, is a target of the Makefile.
func TestDocMakeTargetsExist(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	if !targets["run"] || !targets["test"] {
		t.Fatalf("the Makefile has no run or test target (read %d targets): the test no longer reads it", len(targets))
	}
	seen := map[string]bool{}
	check := func(file string, line int, text string) {
		for _, m := range makeCommand.FindAllStringSubmatch(" "+text, -1) {
			seen[m[2]] = true
			if !targets[m[2]] {
				t.Errorf("%s:%d: make %s: no such target in the Makefile", file, line, m[2])
			}
		}
	}
	for _, file := range docFiles(t) {
		d := readDoc(t, file)
		for _, b := range d.blocks {
			for k, l := range b.lines {
				check(file, b.line+1+k, l)
			}
		}
		for _, s := range d.spans {
			check(file, s.line, s.text)
		}
	}
	for _, want := range []string{"run", "test"} {
		if !seen[want] {
			t.Errorf("no doc shows make %s: the README's quick start does", want)
		}
	}
}

// TestDocVariablesExist: every V2BRIDGE_ variable a doc names is a flag's
// (v2bridge help prints each flag's), or the test suite's
// (V2BRIDGE_TEST_*, V2BRIDGE_BENCH_*).
func TestDocVariablesExist(t *testing.T) {
	known := map[string]bool{}
	for _, h := range helpTexts(t) {
		for _, m := range regexp.MustCompile(`\$(V2BRIDGE_[A-Z0-9_]+)`).FindAllStringSubmatch(h, -1) {
			known[m[1]] = true
		}
	}
	variable := regexp.MustCompile(`V2BRIDGE_[A-Z0-9_]*[A-Z0-9]`)
	var unknown []string
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(b), "\n") {
			for _, v := range variable.FindAllString(line, -1) {
				if known[v] || strings.HasPrefix(v, "V2BRIDGE_TEST_") || strings.HasPrefix(v, "V2BRIDGE_BENCH_") ||
					strings.Contains(line, v+"_<") || strings.Contains(line, v+"_*") || strings.Contains(line, v+"` → `") {
					// a placeholder, a family, or the example of a typo
					continue
				}
				unknown = append(unknown, file+":"+strconv.Itoa(n+1)+": "+v)
			}
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		t.Errorf("V2BRIDGE_ variables no flag reads (v2bridge help):\n%s", strings.Join(unknown, "\n"))
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinksResolve: every relative link of README.md and docs/ names a
// file of the repository and, with a #fragment into a markdown file, one of
// its headings (by the anchor GitHub gives it).
func TestDocLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a, nil
	}
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		inCode := false
		for n, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
			}
			if inCode {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				full := filepath.Join(root, file)
				if path != "" {
					full = filepath.Join(root, filepath.Dir(file), path)
				}
				if _, err := os.Stat(full); err != nil {
					t.Errorf("%s:%d: link %s: no such file", file, n+1, target)
					continue
				}
				if frag == "" || !strings.HasSuffix(full, ".md") {
					continue
				}
				a, err := anchorsOf(full)
				if err != nil {
					t.Errorf("%s:%d: link %s: %v", file, n+1, target, err)
				} else if !a[frag] {
					t.Errorf("%s:%d: link %s: no heading with the anchor #%s", file, n+1, target, frag)
				}
			}
		}
	}
}

// headingAnchor is the anchor GitHub gives a markdown heading's text:
// lower case, punctuation but '-' and '_' dropped, spaces made '-'.
func headingAnchor(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// headingAnchors is the anchor of every heading of a markdown document (a
// repeated one also gets GitHub's "-1", "-2", ...).
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if inCode || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		a := headingAnchor(text)
		if k := seen[a]; k > 0 {
			out[a+"-"+strconv.Itoa(k)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
