// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxMainLines bounds package main's production code: flags, configuration,
// one call per command and its output. The steps of a command and the rules
// it applies belong to the package that owns them (steps, modes,
// cutover, ...), where they are tested with fakes.
const maxMainLines = 1800

func TestPackageMainHoldsFlagsAndCallsOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	total, counted := 0, 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		total += bytes.Count(b, []byte("\n")) // as wc -l counts
		counted++
	}
	if counted == 0 {
		t.Fatal("no production file found: the test runs from the package's directory")
	}
	if total > maxMainLines {
		t.Fatalf("package main has %d production lines in %d files, over %d: move the command's steps or rules "+
			"to the package that owns them", total, counted, maxMainLines)
	}
}
