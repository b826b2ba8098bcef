// SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// flagGroup is a heading of --help and the server flags under it.
type flagGroup struct {
	title string
	names []string
}

// flagGroups orders every server flag for --help; a test keeps it complete.
var flagGroups = []flagGroup{
	{"Serving the v2 API", []string{"listen-client-urls", "advertise-client-urls", "advertise-only-self", "mode-lease-ttl", "name",
		"cert-file", "key-file", "trusted-ca-file", "client-cert-auth", "client-crl-file", "tls-min-version",
		"listen-metrics-urls", "client-metrics", "enable-pprof", "http-idle-timeout", "http-body-read-timeout", "max-connections", "keys-detach"}},
	{"Passthrough to the etcd v2 server being migrated from, the v2 server (the migration's first step; heartbeat and request flags below apply);\n" +
		"with an etcd v3 cluster too, dual mode (the mode record in etcd v3 says which side serves)",
		[]string{"v2-server"}},
	{"Shadow comparison in dual mode (while it passes through, reads and writes are checked against etcd v3, off the request path)",
		[]string{"shadow-sample-rate", "shadow-queue", "shadow-prefix"}},
	{"Watches", []string{"watch-history-events", "watch-replay-max-revisions", "watch-detach"}},
	{"The etcd v3 cluster", []string{"endpoints", "discovery-srv", "discovery-srv-name", "endpoints-auto-sync-interval",
		"cacert", "cert", "key", "insecure-skip-tls-verify", "user",
		"dial-timeout", "dial-keepalive-time", "dial-keepalive-timeout", "request-timeout", "start-timeout", "write-batch",
		"heartbeat-interval", "heartbeat-timeout", "heartbeat-failures"}},
	{"Embedded etcd (a private store for trying the bridge out; see the backend rule below)", []string{"embedded", "data-dir",
		"embedded-client-urls", "embedded-peer-urls", "embedded-auto-compaction-retention", "embedded-in-process"}},
	{"Key layout in etcd v3", []string{"data-prefix", "meta-prefix", "serve-prefix"}},
	{"Logging, configuration, version", []string{"log-level", "log-format", "config-file", "version"}},
}

const usageHead = `%[1]s serves the etcd v2 keys and watch API from an etcd v3 cluster.

Usage:
  %[1]s [flags]                      serve (the default)
  %[1]s [flags] migrate [flags]      copy an etcd v2 server's tree into the v3 cluster
  %[1]s [flags] migrate cutover [flags]   switch every dual-mode bridge to etcd v3 at once
  %[1]s [flags] migrate rollback [flags]  switch them back to the old v2 server
  %[1]s [flags] verify [flags]       compare an etcd v2 server's tree with the bridge's view
  %[1]s version                      print the version
  %[1]s help [migrate|verify|cutover|rollback]  this text, or a command's

Flags given before a command apply to it, so "%[1]s --log-level debug migrate ..." works.
Flags take one or two dashes; each is followed by the environment variable that sets it.
`

const usageTail = `
Settings: every flag can be set on the command line, as its V2BRIDGE_ variable, or in the
YAML --config-file under the flag's name (lists allowed). Precedence, highest first:
  command line > environment > config file > default
A V2BRIDGE_ variable that no flag reads is an error naming the closest real one.
Deprecated names (--v2-upstream; migrate's --from*) still work, with a warning.

Backend rule: with --v2-server the bridge forwards every v2 request to that v2 server
(passthrough mode; no etcd v3 is used). With --v2-server and --endpoints (or --discovery-srv)
it runs in dual mode: it serves from the side the mode record in etcd v3 names (the v2 server
until "migrate cutover", etcd v3 after it; the record beats the flags). Otherwise it serves
--endpoints (or --discovery-srv). A private embedded etcd runs
only with --embedded, or when no backend setting is given at all (no --endpoints,
--discovery-srv, --embedded or --config-file: what "make run" does); it says so at startup
and in the v2bridge_embedded_store metric. Its data is in --data-dir and nothing else shares it.

Exit status: 0 on success and for help, 1 on an error, 2 on a command-line mistake.
`

// printUsage writes the server's help, flags grouped, to w.
func printUsage(w io.Writer) {
	fs := newFlagSet(&config{}, io.Discard)
	_, _ = fmt.Fprintf(w, usageHead, progName)
	for _, g := range flagGroups {
		_, _ = fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, n := range g.names {
			if f := fs.Lookup(n); f != nil {
				printFlag(w, f)
			}
		}
	}
	_, _ = fmt.Fprint(w, usageTail)
}

// printFlag writes one flag as --name TYPE  $VARIABLE, then its usage;
// deprecated names are left out.
func printFlag(o io.Writer, f *flag.Flag) {
	if isAlias(f) {
		return
	}
	name, usage := flag.UnquoteUsage(f)
	if _, ok := f.Value.(*optionalBool); ok {
		name = ""
	}
	def := ""
	switch {
	case f.DefValue == "" || f.DefValue == "false" || f.DefValue == "0" || f.DefValue == "0s":
	case name == "string":
		def = fmt.Sprintf(" (default %q)", f.DefValue)
	default:
		def = fmt.Sprintf(" (default %s)", f.DefValue)
	}
	if name != "" {
		name = " " + name
	}
	left := "  --" + f.Name + name
	_, _ = fmt.Fprintf(o, "%-46s $%s\n        %s%s\n", left, envName(f.Name), usage, def)
}

// helpFor prints the help of a command named in `v2bridge help CMD`.
func helpFor(w io.Writer, args []string) error {
	if len(args) == 0 {
		printUsage(w)
		return nil
	}
	switch args[0] {
	case "migrate", "verify":
		if args[0] == "migrate" && len(args) > 1 && (args[1] == "cutover" || args[1] == "rollback") {
			return helpFor(w, args[1:])
		}
		fs := newMigrateFlagSet(args[0], &config{}, &migrateFlags{}, w)
		fs.Usage()
		return nil
	case "cutover", "rollback":
		fs := newCutoverFlagSet(args[0], &config{}, &cutoverFlags{}, w)
		fs.Usage()
		return nil
	case "version", "help":
		printUsage(w)
		return nil
	}
	return usageErrorf("help: unknown command %q (commands: %s)", args[0], strings.Join(commands, ", "))
}
