// SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

const envPrefix = "V2BRIDGE_"

// envReservedPrefixes name variables of the project's own test and benchmark
// tooling, which the binary ignores rather than refuses.
var envReservedPrefixes = []string{envPrefix + "TEST_", envPrefix + "BENCH_"}

// envName is the environment variable that sets a flag.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// knownEnvNames are the variables of every command's flags: a variable meant
// for `migrate` must not stop the server.
func knownEnvNames() []string {
	seen := map[string]bool{}
	add := func(fs *flag.FlagSet) {
		fs.VisitAll(func(f *flag.Flag) { seen[envName(f.Name)] = true })
	}
	add(newFlagSet(&config{}, io.Discard))
	for _, cmd := range []string{"migrate", "verify"} {
		add(newMigrateFlagSet(cmd, &config{}, &migrateFlags{}, io.Discard))
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// checkEnv refuses V2BRIDGE_* variables that no flag reads: a misspelt
// V2BRIDGE_ENDPOINT would otherwise silently leave the setting at its default.
func checkEnv(environ []string) error {
	known := knownEnvNames()
	isKnown := map[string]bool{}
	for _, n := range known {
		isKnown[n] = true
	}
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || isKnown[name] || reservedEnv(name) {
			continue
		}
		unknown = append(unknown, name)
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	msgs := make([]string, len(unknown))
	for i, n := range unknown {
		msgs[i] = fmt.Sprintf("unknown environment variable %s (did you mean %s?)", n, closest(n, known))
	}
	return fmt.Errorf("%s; `%s --help` lists them all", strings.Join(msgs, "; "), progName)
}

func reservedEnv(name string) bool {
	for _, p := range envReservedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// closest is the candidate with the smallest edit distance to s.
func closest(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		if d := editDistance(s, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
