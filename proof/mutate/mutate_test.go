// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// root is the module's root, from this package's directory.
const root = "../.."

// TestEveryMutationAppliesOnceToTheTree keeps the list in step with the
// code: each text to find is still there, once, so make mutate would plant
// every bug; names are unique and each command is a go test command.
func TestEveryMutationAppliesOnceToTheTree(t *testing.T) {
	if len(mutations) < 20 {
		t.Errorf("%d mutations; the check is meant to have at least 20", len(mutations))
	}
	names := map[string]bool{}
	for _, m := range mutations {
		if names[m.Name] {
			t.Errorf("two mutations are named %q", m.Name)
		}
		names[m.Name] = true
		if m.What == "" || m.Find == "" || m.Find == m.Replace {
			t.Errorf("%s: needs a description and a text to find that it changes", m.Name)
		}
		if _, err := m.apply(root); err != nil {
			t.Error(err)
		}
		args, err := testArgs(m.Test, "/tmp/o.json", time.Minute)
		if err != nil {
			t.Errorf("%s: %v", m.Name, err)
			continue
		}
		pkg := args[len(args)-1]
		if !strings.HasPrefix(pkg, "./") {
			t.Errorf("%s: the command %q does not end with the package to test", m.Name, m.Test)
		} else if _, err := os.Stat(filepath.Join(root, pkg)); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
	}
}

func TestApplyRefusesATextThatIsNotThereExactlyOnce(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.go"), []byte("a := 1\nb := 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, find := range []string{":= 1", "c := 1"} {
		m := Mutation{Name: "m", File: "f.go", Find: find, Replace: ":= 2"}
		if _, err := m.apply(dir); err == nil {
			t.Errorf("apply with %q (not exactly once in the file) did not fail", find)
		}
	}
	m := Mutation{Name: "m", File: "f.go", Find: "b := 1", Replace: "b := 2"}
	got, err := m.apply(dir)
	if err != nil || string(got) != "a := 1\nb := 2\n" {
		t.Errorf("apply = %q, %v; want %q", got, err, "a := 1\nb := 2\n")
	}
	ov, err := m.overlay(dir, filepath.Join(dir, "o"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(ov)
	if err != nil {
		t.Fatal(err)
	}
	src, _ := filepath.Abs(filepath.Join(dir, "f.go"))
	mutated := filepath.Join(dir, "o", "f.go")
	if want := `{"Replace":{"` + src + `":"` + mutated + `"}}`; string(b) != want {
		t.Errorf("overlay = %s; want %s", b, want)
	}
	if b, _ := os.ReadFile(mutated); string(b) != "a := 1\nb := 2\n" {
		t.Errorf("mutated file = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f.go")); string(b) != "a := 1\nb := 1\n" {
		t.Errorf("the original was changed: %q", b)
	}
}

func TestTestArgs(t *testing.T) {
	got, err := testArgs("go test -short -count=1 -run ^TestX$ ./translate/", "/o.json", 2*time.Minute)
	want := []string{"test", "-timeout=2m0s", "-overlay=/o.json", "-short", "-count=1", "-run", "^TestX$", "./translate/"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("testArgs = %q, %v; want %q", got, err, want)
	}
	got, err = testArgs("go test ./x/", "", time.Minute)
	if want := []string{"test", "-timeout=1m0s", "./x/"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("testArgs without overlay = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"", "go vet ./x/", "make test", "go test"} {
		if _, err := testArgs(bad, "", time.Minute); err == nil {
			t.Errorf("testArgs(%q) did not fail", bad)
		}
	}
}

func TestJudge(t *testing.T) {
	for _, c := range []struct {
		name            string
		run             testRun
		result, catcher string
	}{
		{"passes", testRun{output: []byte("ok  \tx\t0.1s\n")}, survivedResult, ""},
		{"a test fails", testRun{exit: 1, output: []byte("=== RUN   TestA\n--- PASS: TestA (0.00s)\n" +
			"=== RUN   TestB\n    --- FAIL: TestB/sub (0.00s)\n--- FAIL: TestB (0.00s)\n--- FAIL: TestC (0.00s)\nFAIL\n")},
			caught, "TestB"},
		{"hangs", testRun{exit: 1, output: []byte("panic: test timed out after 2m0s\n\trunning tests:\n" +
			"\t\tTestHang (2m0s)\n\ngoroutine 17 [running]:\n")}, caughtByTimeout, "TestHang"},
		{"does not build", testRun{exit: 1, output: []byte("# x\nx/a.go:3:2: undefined: y\nFAIL\tx [build failed]\n")},
			brokenResult, "does not build"},
		{"panics outside a test", testRun{exit: 2, output: []byte("panic: boom\n\ngoroutine 7 [running]:\n")},
			caught, "a panic"},
		{"killed", testRun{err: os.ErrDeadlineExceeded}, brokenResult, os.ErrDeadlineExceeded.Error()},
	} {
		if r, by := judge(c.run); r != c.result || by != c.catcher {
			t.Errorf("%s: judge = %q, %q; want %q, %q", c.name, r, by, c.result, c.catcher)
		}
	}
}
