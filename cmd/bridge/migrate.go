// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/v2bridge/v2bridge/migrate/engine"
	"github.com/v2bridge/v2bridge/migrate/steps"
	"github.com/v2bridge/v2bridge/translate"
)

// backendFlagNames are the server's flags that matter to migrate and verify:
// where the v3 cluster is, how to reach it, and the bridge's key layout.
var backendFlagNames = []string{
	"endpoints", "dial-timeout", "cacert", "cert", "key", "insecure-skip-tls-verify", "user",
	"request-timeout", "data-prefix", "meta-prefix", "config-file", "log-level", "log-format",
}

// migrateFlags are the settings of `v2bridge migrate` and `v2bridge verify`.
type migrateFlags struct {
	v2ServerFlags
	hidden                    string
	noDiscovery               bool
	dryRun, follow, overwrite bool
	prune                     bool
	concurrency               int
	ttlTolerance, ttlResync   time.Duration
	progress                  string
	maxDiffs                  int
	compareExpiration         bool
	output                    string
}

// v2ServerFlags are the --v2-server* flags of the commands that talk to
// the v2 server: migrate, verify, and migrate cutover and rollback. Their
// old names, --from*, still work (alias.go).
type v2ServerFlags struct {
	v2Server, v2ServerPrefix                  string
	v2ServerCACert, v2ServerCert, v2ServerKey string
	v2ServerInsecure                          bool
	v2ServerUser                              string
	v2ServerTimeout                           time.Duration
}

// add registers the flags on fs; what names what is asked of the v2 server
// in --v2-server's usage, and timeout is --v2-server-timeout's default.
func (f *v2ServerFlags) add(fs *flag.FlagSet, what, prefixUsage, timeoutUsage string, timeout time.Duration) {
	const server = "the v2 server"
	fs.StringVar(&f.v2Server, "v2-server", "", "comma-separated client URLs of the etcd v2 server being migrated from (the v2 server; tried in list order), "+what+
		" (required), e.g. http://old-etcd:2379")
	fs.StringVar(&f.v2ServerPrefix, "v2-server-prefix", "", prefixUsage+" (default: --serve-prefix, which defaults to /: all the bridges serve)")
	fs.StringVar(&f.v2ServerCACert, "v2-server-cacert", "", "CA bundle to verify "+server+"'s certificate")
	fs.StringVar(&f.v2ServerCert, "v2-server-cert", "", "client certificate for "+server)
	fs.StringVar(&f.v2ServerKey, "v2-server-key", "", "client key for "+server)
	fs.BoolVar(&f.v2ServerInsecure, "v2-server-insecure-skip-tls-verify", false, "do not verify "+server+"'s certificate")
	fs.StringVar(&f.v2ServerUser, "v2-server-user", "", "v2 server user as name:password (v2 auth)")
	fs.DurationVar(&f.v2ServerTimeout, "v2-server-timeout", timeout, timeoutUsage)
	for _, n := range []string{"", "-prefix", "-cacert", "-cert", "-key", "-insecure-skip-tls-verify", "-user", "-timeout"} {
		addAlias(fs, "from"+n, "v2-server"+n)
	}
}

// defaultPrefix makes --v2-server-prefix, when no source set it, the served
// prefix of the bridges' settings (--serve-prefix, from the same flags,
// V2BRIDGE_* variables or --config-file), so that every command covers what
// the bridges serve unless told otherwise. A migration covers one subtree:
// bridges serving several need --v2-server-prefix.
func (f *v2ServerFlags) defaultPrefix(c *config) error {
	if f.v2ServerPrefix == "" {
		p, err := cleanServePrefix(c)
		if err != nil {
			return err
		}
		f.v2ServerPrefix = p
	}
	f.v2ServerPrefix = path.Join("/", f.v2ServerPrefix) // as the old server and the cutover's check name it
	return nil
}

// tls is the client TLS for the old server (nil: its system defaults), and
// checks --v2-server-user.
func (f *v2ServerFlags) tls() (*tls.Config, error) {
	if f.v2ServerUser != "" && !strings.Contains(f.v2ServerUser, ":") {
		return nil, usageErrorf("--v2-server-user must be name:password")
	}
	if f.v2ServerCACert == "" && f.v2ServerCert == "" && !f.v2ServerInsecure {
		return nil, nil
	}
	ti := transport.TLSInfo{CertFile: f.v2ServerCert, KeyFile: f.v2ServerKey, TrustedCAFile: f.v2ServerCACert,
		InsecureSkipVerify: f.v2ServerInsecure}
	c, err := ti.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("v2 server TLS: %w", err)
	}
	return c, nil
}

// setCommandUsage makes fs's usage intro, then the command's own flags
// under own, then the server flags it shares (backendFlagNames) under
// backend; the other server flags work but are not shown.
func setCommandUsage(fs *flag.FlagSet, intro, own, backend string) {
	shown := map[string]bool{}
	for _, n := range backendFlagNames {
		shown[n] = true
	}
	server := newFlagSet(&config{}, io.Discard)
	fs.Usage = func() {
		o := fs.Output()
		_, _ = fmt.Fprint(o, intro)
		_, _ = fmt.Fprintln(o, "\n"+own)
		fs.VisitAll(func(f *flag.Flag) {
			// --v2-server is the command's own, not the server's.
			if !shown[f.Name] && (server.Lookup(f.Name) == nil || f.Name == "v2-server") {
				printFlag(o, f)
			}
		})
		_, _ = fmt.Fprintln(o, "\n"+backend)
		fs.VisitAll(func(f *flag.Flag) {
			if shown[f.Name] {
				printFlag(o, f)
			}
		})
	}
}

// addBackendFlags registers every server flag on fs (so V2BRIDGE_* variables
// and --config-file work as for the server), bound to c with the server's
// defaults; the usage text shows only backendFlagNames.
func addBackendFlags(fs *flag.FlagSet, c *config) {
	srv := newFlagSet(c, io.Discard)
	srv.VisitAll(func(f *flag.Flag) {
		if fs.Lookup(f.Name) != nil { // the command's own (--v2-server)
			return
		}
		if a, ok := f.Value.(*aliasValue); ok && fs.Lookup(a.target.Name) != nil {
			// The server's old name of it: accepted and ignored, as before.
			fs.Var(&aliasValue{}, f.Name, f.Usage)
			return
		}
		usage := f.Usage
		if f.Name == "endpoints" {
			usage = "comma-separated etcd v3 endpoints of the cluster the bridges serve (required)"
		}
		fs.Var(f.Value, f.Name, usage)
	})
	// Progress and the summary are the output; the backend logs only
	// trouble, readably.
	for name, def := range map[string]string{"log-level": "warn", "log-format": "console"} {
		if f := fs.Lookup(name); f != nil && f.Value.Set(def) == nil {
			f.DefValue = def
		}
	}
}

func newMigrateFlagSet(cmd string, c *config, mf *migrateFlags, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(progName+" "+cmd, flag.ContinueOnError)
	fs.SetOutput(out)
	what := "to copy from"
	if cmd == "verify" {
		what = "to compare with"
	}
	mf.add(fs, what, "v2 directory to migrate; keys keep their v2 paths",
		"deadline of each read of the v2 server (the snapshot of a big tree is one answer)", 2*time.Minute)
	addBackendFlags(fs, c)
	fs.StringVar(&mf.hidden, "hidden", "", "comma-separated hidden nodes ('_' names) to include: v2 never lists them")
	fs.BoolVar(&mf.noDiscovery, "no-hidden-discovery", false, "do not search the v2 server's recent event history for hidden nodes")
	fs.DurationVar(&mf.ttlTolerance, "ttl-tolerance", 5*time.Second, "how far apart two expirations of the same TTL node may be and still agree")
	fs.StringVar(&mf.output, "output", "text", "summary on stdout: text, or json (one object, for scripts)")
	fs.StringVar(&mf.progress, "progress", "auto", "progress on stderr: auto (a live line on a terminal, else a line every 10s), tty, lines or none")
	if cmd == "migrate" {
		fs.BoolVar(&mf.dryRun, "dry-run", false, "report what would be written, write nothing")
		fs.BoolVar(&mf.follow, "follow", false, "after the copy, keep applying the v2 server's changes (a v2 watch) until interrupted")
		fs.BoolVar(&mf.overwrite, "overwrite", false, "replace conflicting nodes on the bridge with the v2 server's")
		fs.BoolVar(&mf.prune, "prune", false, "delete nodes under --v2-server-prefix that the bridge has and the v2 server does not")
		fs.IntVar(&mf.concurrency, "concurrency", 16, "writes in flight")
		fs.DurationVar(&mf.ttlResync, "ttl-resync", 30*time.Second, "with --follow: how often to carry over TTLs renewed with refresh=true (invisible to v2 watches); 0 disables")
	} else {
		fs.IntVar(&mf.maxDiffs, "max-differences", 100, "differences to print (all are counted)")
		fs.BoolVar(&mf.compareExpiration, "compare-expiration", false, "also report TTL nodes expiring more than --ttl-tolerance apart (by default TTL presence is compared: renewals made through the bridge move expirations)")
	}
	intro := `Usage: v2bridge verify --v2-server URLS --endpoints URLS [flags]

Compares an etcd v2 server's tree with the bridge's view of it, node by node
(kind, value, TTL), and its users, roles and auth flag (naming users whose
password the bridges have not learned), and exits non-zero on any
difference. Then it prints what
bridges in passthrough mode report of their shadow comparison (their answers
checked against etcd v3 as they serve), which does not change the exit status.
` + steps.OutputHelp(cmd)
	if cmd == "migrate" {
		intro = `Usage: v2bridge migrate --v2-server URLS --endpoints URLS [flags]

Copies a running etcd v2 server's tree (files, empty directories, hidden nodes,
TTLs as leases) into the bridge's etcd v3 layout, through the bridge's own
write path, then its users, roles and auth flag (v2 shows no password: the
--v2-server-user user's is the one given, the others are learned by dual-mode
bridges from requests the v2 server accepts). Running it again changes
nothing; nodes the bridge holds differently are reported as conflicts and
left alone unless --overwrite.
With --follow it keeps applying the v2 server's changes until interrupted.
` + steps.OutputHelp(cmd)
	}
	setCommandUsage(fs, intro, "The v2 server and behaviour:", "Target etcd v3 cluster and key layout (as for the server; V2BRIDGE_* variables and --config-file apply):")
	return fs
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// migrateMain runs `v2bridge migrate` or `v2bridge verify`.
func migrateMain(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer, tty bool) (err error) {
	var c config
	var mf migrateFlags
	fs, help, err := parseMigrateFlags(cmd, args, &c, &mf, stdout)
	if help || err != nil {
		return err
	}
	sum := steps.Failed(cmd)
	if mf.output == "json" {
		defer func() { steps.WriteJSON(stdout, sum, err) }()
	}
	if err := applySources(fs, getenv); err != nil {
		return err
	}
	if err := mf.defaultPrefix(&c); err != nil {
		return err
	}
	endpoints, layout, err := checkTarget(cmd, &mf, &c)
	if err != nil {
		return err
	}
	lg, err := newLogger(c.logLevel, c.logFormat)
	if err != nil {
		return usageError{err}
	}
	defer func() { _ = lg.Sync() }()
	mc := steps.Config{ServePrefix: c.servePrefix, Follow: mf.follow, MaxDiffs: mf.maxDiffs, Logger: lg, JSON: mf.output == "json", Stdout: stdout, Stderr: stderr}
	if mc.Options, err = v2ServerOptions(&mf); err != nil {
		return err
	}
	if mc.Progress, err = newProgressPrinter(mf.progress, stderr, tty); err != nil {
		return usageError{err}
	}
	if mc.Backend, err = backendConfig(&c, endpoints, layout); err != nil {
		return err
	}
	if cmd == "verify" {
		if mc.Served, err = cleanServePrefix(&c); err != nil {
			return err
		}
		sum, err = steps.Verify(ctx, mc)
		return err
	}
	sum, err = steps.Migrate(ctx, mc)
	return err
}

// parseMigrateFlags parses the command line; help reports that --help was
// asked for and answered on stdout.
func parseMigrateFlags(cmd string, args []string, c *config, mf *migrateFlags, stdout io.Writer) (fs *flag.FlagSet, help bool, err error) {
	fs = newMigrateFlagSet(cmd, c, mf, io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return fs, true, nil
		}
		return fs, false, usageErrorf("%s: %v (see %s %s --help)", cmd, err, progName, cmd)
	}
	if fs.NArg() > 0 {
		return fs, false, usageErrorf("%s: unexpected argument %q", cmd, fs.Arg(0))
	}
	if mf.output != "text" && mf.output != "json" {
		return fs, false, usageErrorf("%s: --output must be text or json, not %q", cmd, mf.output)
	}
	return fs, false, nil
}

// checkTarget checks the settings that must be given, and given right,
// before anything is connected to (command-line mistakes: exit status 2),
// and returns the v3 cluster's endpoints and the bridge's key layout.
func checkTarget(cmd string, mf *migrateFlags, c *config) ([]string, translate.Layout, error) {
	if len(splitList(mf.v2Server)) == 0 {
		return nil, translate.Layout{}, usageErrorf("%s: --v2-server is required: the client URL of the etcd v2 server, e.g. --v2-server http://old-etcd:2379", cmd)
	}
	for _, s := range splitList(mf.v2Server) {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, translate.Layout{}, usageErrorf("%s: bad --v2-server %q: want the etcd v2 server's client URL, e.g. --v2-server http://old-etcd:2379", cmd, s)
		}
	}
	if _, verr := translate.CleanPath(mf.v2ServerPrefix); verr != nil {
		return nil, translate.Layout{}, usageErrorf("%s: bad --v2-server-prefix %q: %s", cmd, mf.v2ServerPrefix, verr.Cause)
	}
	if mf.dryRun && mf.follow {
		return nil, translate.Layout{}, usageErrorf("migrate: --follow cannot be combined with --dry-run")
	}
	endpoints := splitList(c.endpoints)
	if len(endpoints) == 0 {
		return nil, translate.Layout{}, usageErrorf("%s: --endpoints is required: the etcd v3 cluster your bridges serve "+
			"(for a bridge running its embedded etcd, give that etcd's client URL, "+
			"e.g. --endpoints http://127.0.0.1:22379, while the bridge runs)", cmd)
	}
	layout, err := translate.NewLayout(c.dataPrefix, c.metaPrefix)
	if err != nil {
		return nil, translate.Layout{}, usageError{err}
	}
	return endpoints, layout, nil
}

// v2ServerOptions are the migrate options from the flags: the source, how to
// reach it, and what to do; the target and the output are set later.
func v2ServerOptions(mf *migrateFlags) (engine.Options, error) {
	o := engine.Options{
		V2Server: splitList(mf.v2Server), V2ServerPrefix: mf.v2ServerPrefix, V2ServerUser: mf.v2ServerUser, V2ServerTimeout: mf.v2ServerTimeout,
		Hidden: splitList(mf.hidden), NoHiddenDiscovery: mf.noDiscovery,
		DryRun: mf.dryRun, Overwrite: mf.overwrite, Prune: mf.prune, Concurrency: mf.concurrency,
		TTLTolerance: mf.ttlTolerance, TTLResync: mf.ttlResync, CompareExpiration: mf.compareExpiration,
	}
	if mf.ttlResync == 0 {
		o.TTLResync = -1 // the flag's 0 disables; the option's 0 is the default
	}
	var err error
	o.V2ServerTLS, err = mf.tls()
	return o, err
}

// newProgressPrinter is the progress output --progress asks for; nil for
// none.
func newProgressPrinter(mode string, stderr io.Writer, tty bool) (*engine.ProgressPrinter, error) {
	pp := &engine.ProgressPrinter{W: stderr, TTY: tty, Interval: 10 * time.Second}
	switch mode {
	case "auto":
	case "tty":
		pp.TTY = true
	case "lines":
		pp.TTY = false
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("--progress must be auto, tty, lines or none, not %q", mode)
	}
	return pp, nil
}

// cleanServePrefix is --serve-prefix as one clean v2 path.
func cleanServePrefix(c *config) (string, error) {
	if c.servePrefix == "" {
		return "/", nil
	}
	served, err := translate.ParseServed(c.servePrefix)
	if err != nil {
		return "", usageErrorf("--serve-prefix: %v", err)
	}
	if len(served) > 1 {
		return "", usageErrorf("--serve-prefix %s names several subtrees; a migration covers one: give --v2-server-prefix", c.servePrefix)
	}
	return served[0], nil
}
