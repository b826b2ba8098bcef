// SPDX-License-Identifier: Apache-2.0

// Package main is the mutation check (make mutate): it plants each bug of a
// hand-written list (mutations.go) in a copy of one file, given to go test
// with -overlay so the tree is never touched, runs the tests that should
// catch it, and prints which did. It exits non-zero if any bug survives.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

func main() {
	run := flag.String("run", "", "run only the mutation of this name, or those whose names match this regular expression")
	results := flag.String("results", "", "also write the table to this file (Markdown)")
	timeout := flag.Duration("timeout", 90*time.Second, "go test -timeout of each run; a run that hits it counts as caught by timeout")
	baseline := flag.Bool("baseline", true, "first run each test command on the unmutated tree (it must pass)")
	test := flag.String("test", "", "with -run: this go test command instead of the mutation's own (to see what else catches it)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "mutate: no arguments expected; -run NAME runs one mutation")
		os.Exit(2)
	}
	if *test != "" && *run == "" {
		fmt.Fprintln(os.Stderr, "mutate: -test needs -run naming one mutation")
		os.Exit(2)
	}
	code, err := mutate(os.Stdout, *run, *test, *results, *timeout, *baseline)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
	}
	os.Exit(code)
}

// mutate runs the mutations named (all when name is empty) from the module
// root, the working directory; it returns the exit status.
func mutate(out io.Writer, name, test, results string, timeout time.Duration, baseline bool) (int, error) {
	if _, err := os.Stat("go.mod"); err != nil {
		return 2, errors.New("run from the module root (make mutate)")
	}
	ms, err := selectMutations(name)
	if err != nil {
		return 2, err
	}
	if test != "" {
		if len(ms) != 1 {
			return 2, fmt.Errorf("-test needs -run to name one mutation; %q names %d", name, len(ms))
		}
		ms[0].Test = test
	}
	for _, m := range ms {
		if _, err := m.apply("."); err != nil {
			return 2, err
		}
	}
	tmp, err := os.MkdirTemp("", "mutate-")
	if err != nil {
		return 2, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	start := time.Now()
	if baseline {
		seen := map[string]bool{}
		for _, m := range ms {
			if seen[m.Test] {
				continue
			}
			seen[m.Test] = true
			// Without -count=1: a result go test cached for this very tree
			// will do.
			cmd := strings.Join(slices.DeleteFunc(strings.Fields(m.Test), func(f string) bool { return f == "-count=1" }), " ")
			fmt.Fprintf(os.Stderr, "baseline: %s\n", cmd)
			r := runTest(goCmd, cmd, "", timeout)
			if r.err != nil || r.exit != 0 {
				_, _ = os.Stderr.Write(r.output)
				return 2, fmt.Errorf("the unmutated tree fails %q: fix the tree or the command first", m.Test)
			}
		}
	}
	var rows []row
	survived := 0
	for i, m := range ms {
		fmt.Fprintf(os.Stderr, "[%d/%d] %s: %s\n", i+1, len(ms), m.Name, m.Test)
		overlay, err := m.overlay(".", filepath.Join(tmp, fmt.Sprint(i)))
		if err != nil {
			return 2, err
		}
		r := runTest(goCmd, m.Test, overlay, timeout)
		rw := row{m: m, took: r.took}
		rw.result, rw.catcher = judge(r)
		if rw.result != caught && rw.result != caughtByTimeout {
			survived++
			_, _ = os.Stderr.Write(r.output)
		}
		fmt.Fprintf(os.Stderr, "    %s %s (%s)\n", rw.result, rw.catcher, rw.took.Round(time.Second))
		rows = append(rows, rw)
	}
	table := render(rows, start, time.Since(start))
	_, _ = io.WriteString(out, table)
	if results != "" {
		if err := os.WriteFile(results, []byte(resultsHeader+table+keptSection(results)), 0o600); err != nil {
			return 2, err
		}
	}
	if survived > 0 {
		return 1, fmt.Errorf("%d of %d mutations not caught", survived, len(rows))
	}
	return 0, nil
}

// selectMutations is the mutations name selects: all when empty, else the
// one of that name, else those whose names match it as a regular
// expression (MUTATE='^shadow-' runs a package's).
func selectMutations(name string) ([]Mutation, error) {
	if name == "" {
		return mutations, nil
	}
	for _, m := range mutations {
		if m.Name == name {
			return []Mutation{m}, nil
		}
	}
	re, err := regexp.Compile(name)
	if err != nil {
		return nil, fmt.Errorf("no mutation named %q, nor a regular expression: %w", name, err)
	}
	var ms []Mutation
	for _, m := range mutations {
		if re.MatchString(m.Name) {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no mutation named or matching %q", name)
	}
	return ms, nil
}

const resultsHeader = "# make mutate: the last full run\n\n" +
	"Written by `make mutate` (the list is in `mutations.go`, `audit.go` and `scope.go`). Each row is one bug planted in one file, the\n" +
	"tests that should catch it, and the test that did.\n\n"

// leftOut heads RESULTS.md's hand-written section on the bugs planted and
// left out of the list (each with why it is harmless), which a full run
// keeps.
const leftOut = "\n## Planted and left out of the list\n"

// keptSection is the section of the results file from leftOut on, if any.
func keptSection(results string) string {
	b, err := os.ReadFile(results) //nolint:gosec // G304: the results file named on the command line
	if err != nil {
		return ""
	}
	if i := bytes.Index(b, []byte(leftOut)); i >= 0 {
		return string(b[i:])
	}
	return ""
}

// apply returns the content of m's file with the mutation made; the text to
// find must occur exactly once.
func (m Mutation) apply(root string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(root, m.File)) //nolint:gosec // G304: a file of the list, in this tree
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	if n := bytes.Count(b, []byte(m.Find)); n != 1 {
		return nil, fmt.Errorf("%s: the text to find occurs %d times in %s, not once (the code changed: update the list)", m.Name, n, m.File)
	}
	return bytes.Replace(b, []byte(m.Find), []byte(m.Replace), 1), nil
}

// overlay writes the mutated file and a go build -overlay file replacing
// m.File by it, under dir; it returns the overlay file's path.
func (m Mutation) overlay(root, dir string) (string, error) {
	b, err := m.apply(root)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	src, err := filepath.Abs(filepath.Join(root, m.File))
	if err != nil {
		return "", err
	}
	mutated := filepath.Join(dir, filepath.Base(m.File))
	if err := os.WriteFile(mutated, b, 0o600); err != nil {
		return "", err
	}
	j, err := json.Marshal(map[string]map[string]string{"Replace": {src: mutated}})
	if err != nil {
		return "", err
	}
	ov := filepath.Join(dir, "overlay.json")
	return ov, os.WriteFile(ov, j, 0o600)
}

// testRun is what one go test run did.
type testRun struct {
	output []byte
	exit   int
	took   time.Duration
	err    error // it could not be run, or was killed
}

// testArgs turns a test command ("go test -count=1 -run X ./pkg/") into go's
// arguments, with the overlay (if any) and the timeout.
func testArgs(command, overlay string, timeout time.Duration) ([]string, error) {
	f := strings.Fields(command)
	if len(f) < 3 || f[0] != "go" || f[1] != "test" {
		return nil, fmt.Errorf("not a go test command: %q", command)
	}
	args := []string{"test", "-timeout=" + timeout.String()}
	if overlay != "" {
		args = append(args, "-overlay="+overlay)
	}
	return append(args, f[2:]...), nil
}

// runTest runs command, bounded by timeout plus time to build (go test's
// own -timeout ends a hung test binary with its stacks; the outer bound
// is for a build or a go command that hangs).
func runTest(goCmd, command, overlay string, timeout time.Duration) testRun {
	args, err := testArgs(command, overlay, timeout)
	if err != nil {
		return testRun{err: err}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Minute)
	defer cancel()
	var buf bytes.Buffer
	cmd := exec.CommandContext(ctx, goCmd, args...) //nolint:gosec // G204: the commands are the list's own
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.WaitDelay = 10 * time.Second
	if overlay != "" {
		// Also for the go commands the tests run: the integration tests
		// build the bridge binary, which must carry the bug too.
		cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -overlay="+overlay))
	}
	start := time.Now()
	err = cmd.Run()
	r := testRun{output: buf.Bytes(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		r.err = fmt.Errorf("killed after %v", timeout+5*time.Minute)
	case errors.As(err, &ee):
		r.exit = ee.ExitCode()
	default:
		r.err = err
	}
	return r
}

// Results of one mutation.
const (
	caught          = "caught"
	caughtByTimeout = "caught (timeout)"
	survivedResult  = "SURVIVED"
	brokenResult    = "BROKEN" // does not build, or could not be run: fix the list
)

var (
	failLine    = regexp.MustCompile(`(?m)^--- FAIL: (\S+)`)
	timeoutLine = regexp.MustCompile(`(?m)^panic: test timed out after`)
	runningLine = regexp.MustCompile(`(?m)^\s*running tests:\n\s+(\S+)`)
	buildFailed = regexp.MustCompile(`(?m)\[(build failed|setup failed)\]|^# |: cannot use |undefined: `)
)

// judge reads a run: caught (and by which test), caught by timeout (and the
// test that was running), survived, or broken.
func judge(r testRun) (result, catcher string) {
	out := r.output
	switch {
	case r.err != nil:
		return brokenResult, r.err.Error()
	case r.exit == 0:
		return survivedResult, ""
	case timeoutLine.Match(out):
		if m := runningLine.FindSubmatch(out); m != nil {
			return caughtByTimeout, string(m[1])
		}
		return caughtByTimeout, "?"
	case failLine.Match(out):
		return caught, string(failLine.FindSubmatch(out)[1])
	case buildFailed.Match(out):
		return brokenResult, "does not build"
	case bytes.Contains(out, []byte("\npanic: ")) || bytes.HasPrefix(out, []byte("panic: ")):
		return caught, "a panic"
	default:
		return caught, fmt.Sprintf("exit status %d", r.exit)
	}
}

type row struct {
	m               Mutation
	result, catcher string
	took            time.Duration
}

// render is the table of rows as Markdown.
func render(rows []row, start time.Time, total time.Duration) string {
	var b strings.Builder
	n := 0
	for _, r := range rows {
		if r.result == caught || r.result == caughtByTimeout {
			n++
		}
	}
	fmt.Fprintf(&b, "%s: %d of %d mutations caught in %s.\n\n", start.UTC().Format("2006-01-02 15:04 MST"), n, len(rows),
		total.Round(time.Second))
	b.WriteString(byPackage(rows))
	b.WriteString("| mutation | file | what | result | caught by | time |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		c := r.catcher
		if c != "" {
			c = "`" + c + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s | %s |\n", r.m.Name, r.m.File, r.m.What, r.result, c,
			r.took.Round(100*time.Millisecond))
	}
	return b.String()
}

// byPackage is the table of how many mutations each package (a file's
// directory) had, and how many were caught.
func byPackage(rows []row) string {
	type count struct{ n, caught int }
	counts := map[string]*count{}
	var pkgs []string
	for _, r := range rows {
		pkg := filepath.Dir(r.m.File)
		c := counts[pkg]
		if c == nil {
			c = &count{}
			counts[pkg] = c
			pkgs = append(pkgs, pkg)
		}
		c.n++
		if r.result == caught || r.result == caughtByTimeout {
			c.caught++
		}
	}
	slices.Sort(pkgs)
	var b strings.Builder
	b.WriteString("| package | mutations | caught |\n|---|---|---|\n")
	for _, p := range pkgs {
		fmt.Fprintf(&b, "| `%s` | %d | %d |\n", p, counts[p].n, counts[p].caught)
	}
	b.WriteString("\n")
	return b.String()
}
