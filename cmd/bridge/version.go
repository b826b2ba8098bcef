// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Set at build time with -ldflags "-X main.version=... -X main.gitCommit=...".
var (
	version   = "dev"
	gitCommit = "unknown"
)

// buildVersion is the stamped version and commit or, for a binary built
// without the Makefile (go build, go install), what the Go toolchain
// recorded: the module version and the VCS revision.
func buildVersion() (ver, commit string) {
	ver, commit = version, gitCommit
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ver, commit
	}
	if ver == "dev" && bi.Main.Version != "" {
		ver = bi.Main.Version
	}
	if commit == "unknown" {
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && commit != "unknown" {
			commit += "-dirty"
		}
	}
	return ver, commit
}

func printVersion(w io.Writer) {
	ver, commit := buildVersion()
	_, _ = fmt.Fprintf(w, "%s version: %s\ngit commit: %s\ngo version: %s\ngo os/arch: %s/%s\n",
		progName, ver, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
