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
	"os/signal"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/assemble"
	"github.com/v2bridge/v2bridge/cutover"
	"github.com/v2bridge/v2bridge/migrate"
	"github.com/v2bridge/v2bridge/shadow"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v3backend"
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
`
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
`
	}
	setCommandUsage(fs, intro, "The v2 server and behaviour:", "Target etcd v3 cluster and key layout (as for the server; V2BRIDGE_* variables and --config-file apply):")
	return fs
}

// runMigrateCommand runs `v2bridge migrate` or `v2bridge verify`.
func runMigrateCommand(cmd string, args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return migrateMain(ctx, cmd, args, getenv, stdout, stderr, isTerminal(os.Stderr))
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// migrateRun is one run of `v2bridge migrate` or `v2bridge verify`.
type migrateRun struct {
	cmd            string
	mf             migrateFlags
	o              migrate.Options
	pp             *migrate.ProgressPrinter // nil with --progress none
	jt             jsonTarget
	target         string // the target as the text summary names it
	stdout, stderr io.Writer
	// summary is the JSON summary (--output json) once there is one: it
	// is written however the command ends.
	summary interface{ setResult(error) }
	// reporter records the follower's progress in etcd v3 for `migrate
	// cutover` (with --follow; nil otherwise).
	reporter *cutover.FollowReporter
	// shadow reads the bridges' shadow comparison records (verify), and
	// the followed prefix ("" with no follower record).
	shadow func(context.Context) ([]shadow.Record, string, error)
	// served is the v2 subtree the bridges serve (--serve-prefix).
	served string
}

func migrateMain(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer, tty bool) (err error) {
	var c config
	r := &migrateRun{cmd: cmd, stdout: stdout, stderr: stderr}
	fs, help, err := parseMigrateFlags(cmd, args, &c, &r.mf, stdout)
	if help || err != nil {
		return err
	}
	if r.jsonOut() {
		defer func() { r.writeJSONSummary(err) }()
	}
	if err := applySources(fs, getenv); err != nil {
		return err
	}
	printDeprecated(stderr, fs)
	if err := r.mf.defaultPrefix(&c); err != nil {
		return err
	}
	endpoints, layout, err := r.checkTarget(&c)
	if err != nil {
		return err
	}
	lg, err := newLogger(c.logLevel, c.logFormat)
	if err != nil {
		return usageError{err}
	}
	defer func() { _ = lg.Sync() }()
	if r.o, err = sourceOptions(&r.mf); err != nil {
		return err
	}
	if r.pp, err = newProgressPrinter(r.mf.progress, stderr, tty); err != nil {
		return usageError{err}
	}
	r.o.Log = func(msg string) { _, _ = fmt.Fprintln(stderr, msg) }
	if r.pp != nil {
		r.o.Progress = r.pp.Update
		r.o.Log = r.pp.Println
		defer r.pp.Finish()
	}
	be, err := newMigrateBackend(ctx, &c, endpoints, layout, lg)
	if err != nil {
		return err
	}
	defer func() { _ = be.Close() }()
	r.o.Target = be
	bcfg, err := backendConfig(&c, endpoints, layout)
	if err != nil {
		return err
	}
	as, err := assemble.OpenAuthStore(ctx, bcfg, c.requestTimeout, lg)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	defer as.Close()
	r.o.Auth = as
	if cmd == "migrate" && !r.mf.dryRun {
		if err := r.watchMode(ctx, &c, endpoints, layout, lg); err != nil {
			return err
		}
		if r.reporter != nil {
			defer func() { _ = r.reporter.Client.Close() }()
		}
	}
	r.jt = newJSONTarget(endpoints, layout)
	r.target = fmt.Sprintf("etcd v3 %s (data prefix %q, meta prefix %q)", strings.Join(endpoints, ","), layout.DataPrefix, layout.MetaPrefix)
	if cmd == "verify" {
		r.shadow = func(ctx context.Context) ([]shadow.Record, string, error) {
			return readShadowAndFollowed(ctx, &c, endpoints, layout)
		}
		if r.served, err = cleanServePrefix(&c); err != nil {
			return err
		}
		return r.verify(ctx)
	}
	return r.migrate(ctx)
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

func (r *migrateRun) jsonOut() bool { return r.mf.output == "json" }

// writeJSONSummary writes the JSON summary with the command's result.
func (r *migrateRun) writeJSONSummary(err error) {
	if r.summary == nil { // it failed before there was anything to count
		r.summary = &jsonFailure{Command: r.cmd}
	}
	r.summary.setResult(err)
	writeJSON(r.stdout, r.summary)
}

// checkTarget checks the settings that must be given, and given right,
// before anything is connected to (command-line mistakes: exit status 2),
// and returns the v3 cluster's endpoints and the bridge's key layout.
func (r *migrateRun) checkTarget(c *config) ([]string, translate.Layout, error) {
	if len(splitList(r.mf.v2Server)) == 0 {
		return nil, translate.Layout{}, usageErrorf("%s: --v2-server is required: the client URL of the etcd v2 server, e.g. --v2-server http://old-etcd:2379", r.cmd)
	}
	for _, s := range splitList(r.mf.v2Server) {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, translate.Layout{}, usageErrorf("%s: bad --v2-server %q: want the etcd v2 server's client URL, e.g. --v2-server http://old-etcd:2379", r.cmd, s)
		}
	}
	if _, verr := translate.CleanPath(r.mf.v2ServerPrefix); verr != nil {
		return nil, translate.Layout{}, usageErrorf("%s: bad --v2-server-prefix %q: %s", r.cmd, r.mf.v2ServerPrefix, verr.Cause)
	}
	if r.mf.dryRun && r.mf.follow {
		return nil, translate.Layout{}, usageErrorf("migrate: --follow cannot be combined with --dry-run")
	}
	endpoints := splitList(c.endpoints)
	if len(endpoints) == 0 {
		return nil, translate.Layout{}, usageErrorf("%s: --endpoints is required: the etcd v3 cluster your bridges serve "+
			"(for a bridge running its embedded etcd, give that etcd's client URL, "+
			"e.g. --endpoints http://127.0.0.1:22379, while the bridge runs)", r.cmd)
	}
	layout, err := translate.NewLayout(c.dataPrefix, c.metaPrefix)
	if err != nil {
		return nil, translate.Layout{}, usageError{err}
	}
	return endpoints, layout, nil
}

// sourceOptions are the migrate options from the flags: the source, how to
// reach it, and what to do; the target and the output are set later.
func sourceOptions(mf *migrateFlags) (migrate.Options, error) {
	o := migrate.Options{
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
func newProgressPrinter(mode string, stderr io.Writer, tty bool) (*migrate.ProgressPrinter, error) {
	pp := &migrate.ProgressPrinter{W: stderr, TTY: tty, Interval: 10 * time.Second}
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

// finishProgress ends the live progress line before a summary is printed.
func (r *migrateRun) finishProgress() {
	if r.pp != nil {
		r.pp.Finish()
	}
}

// verify compares the source with the bridge and reports every difference.
func (r *migrateRun) verify(ctx context.Context) error {
	rep, err := migrate.Verify(ctx, r.o)
	r.finishProgress()
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	arep, err := migrate.VerifyAuth(ctx, r.o)
	if err != nil {
		return fmt.Errorf("verify: the users and roles: %w", err)
	}
	notCompared, ncerr := r.notCompared(ctx)
	recs, followed, serr := r.shadow(ctx)
	if r.jsonOut() {
		js := verifyJSON(rep, r.jt)
		js.NotCompared = notCompared
		js.Shadow = shadowJSON(recs, followed, serr)
		js.Auth = authReportJSON(arep)
		r.summary = js
	} else {
		printReport(r.stdout, rep, r.target, r.mf.maxDiffs)
		printAuthReport(r.stdout, arep)
		switch {
		case ncerr != nil:
			_, _ = fmt.Fprintf(r.stdout, "not compared what the bridges serve outside %s (%s): listing it failed: %v\n",
				rep.Prefix, r.served, ncerr)
		case len(notCompared) > 0:
			_, _ = fmt.Fprintf(r.stdout, "not compared %s (outside --v2-server-prefix %s; the bridges serve %s)\n",
				strings.Join(notCompared, ", "), rep.Prefix, r.served)
		}
		printShadow(r.stdout, recs, followed, serr)
	}
	if ncerr != nil {
		return fmt.Errorf("verify: listing what the bridges serve outside %s: %w", rep.Prefix, ncerr)
	}
	if n := len(rep.Differences) + len(arep.Differences); n > 0 {
		return fmt.Errorf("verify: %d difference(s) between %s and the bridge", n, rep.V2Server)
	}
	return nil
}

// notCompared lists the source's nodes the bridges serve that verify's
// --v2-server-prefix left out.
func (r *migrateRun) notCompared(ctx context.Context) ([]string, error) {
	if cutover.Covers(r.o.V2ServerPrefix, r.served) {
		return nil, nil
	}
	src, err := cutover.NewV2Server(r.o.V2Server, r.o.V2ServerTLS, r.o.V2ServerUser, r.mf.v2ServerTimeout)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return cutover.Outside(ctx, src, r.served, path.Clean(r.o.V2ServerPrefix), nil)
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

// migrate copies the source's tree and, with --follow, keeps applying its
// changes until interrupted.
func (r *migrateRun) migrate(ctx context.Context) error {
	sum, cerr := migrate.Copy(ctx, r.o)
	r.finishProgress()
	if sum == nil {
		return fmt.Errorf("migrate: %w", cerr)
	}
	js := migrateJSON(sum, r.jt, nil)
	if r.jsonOut() {
		r.summary = js
	} else {
		printSummary(r.stdout, sum, r.target)
	}
	if cerr == nil || r.mf.follow {
		asum, aerr := migrate.CopyAuth(ctx, r.o)
		if aerr != nil {
			return fmt.Errorf("migrate: the users and roles: %w", aerr)
		}
		js.Auth = authJSON(asum)
		if !r.jsonOut() {
			printAuthSummary(r.stdout, asum)
		}
	}
	var ie *migrate.IncompleteError
	if cerr != nil && (!r.mf.follow || (errors.As(cerr, &ie) && ie.Stopped) || ctx.Err() != nil) {
		return fmt.Errorf("migrate: %w", cerr)
	}
	if cerr != nil {
		_, _ = fmt.Fprintf(r.stderr, "migrate: %v\nfollowing anyway; the exit status will say so\n", cerr)
	}
	if !r.mf.follow {
		return conflictError(len(sum.Conflicts), r.mf.dryRun)
	}
	return r.follow(ctx, sum, js, cerr)
}

// watchMode refuses to write once the mode record says etcd v3 is the
// authority, and with --follow prepares the progress record the cutover
// waits on.
func (r *migrateRun) watchMode(ctx context.Context, c *config, endpoints []string, layout translate.Layout, lg *zap.Logger) error {
	bcfg, err := backendConfig(c, endpoints, layout)
	if err != nil {
		return err
	}
	cli, err := assemble.ControlClient(bcfg, lg)
	if err != nil {
		return err
	}
	src, err := cutover.NewV2Server(r.o.V2Server, r.o.V2ServerTLS, r.o.V2ServerUser, r.mf.v2ServerTimeout)
	if err != nil {
		_ = cli.Close()
		return err
	}
	rep := &cutover.FollowReporter{Client: cli, Keys: cutover.KeysFor(layout.MetaPrefix), V2Server: src,
		Prefix: r.o.V2ServerPrefix, RequestTimeout: c.requestTimeout, Log: r.o.Log}
	if err := rep.Check(ctx); err != nil {
		_ = cli.Close()
		return fmt.Errorf("migrate: %w", err)
	}
	if !r.mf.follow {
		_ = cli.Close()
		return nil
	}
	r.reporter = rep
	r.o.Applied = rep.Applied
	return nil
}

// follow applies the source's changes after the copy sum until interrupted
// or until the cutover to etcd v3 is done; cerr is the copy's own error,
// reported once following ends.
func (r *migrateRun) follow(ctx context.Context, sum *migrate.Summary, js *jsonMigrate, cerr error) error {
	_, _ = fmt.Fprintf(r.stderr, "following %s from index %d; interrupt (Ctrl-C) to stop; `migrate cutover` stops it too\n", sum.V2Server, sum.Index+1)
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	repDone := make(chan error, 1)
	if r.reporter != nil {
		r.reporter.Applied(sum.Index)
		go func() {
			err := r.reporter.Run(fctx)
			if errors.Is(err, cutover.ErrSwitched) {
				fcancel()
			}
			repDone <- err
		}()
	} else {
		repDone <- nil
	}
	authDone := make(chan struct{})
	var allowed func(context.Context) error
	if r.reporter != nil {
		allowed = func(ctx context.Context) error { // no copy once etcd v3 is the authority
			err := r.reporter.Check(ctx)
			if errors.Is(err, cutover.ErrSwitched) {
				return fmt.Errorf("%w: %w", migrate.ErrStopFollowing, err)
			}
			return err
		}
	}
	go func() { // the users and roles, which v2 does not watch
		defer close(authDone)
		err := migrate.FollowAuth(fctx, r.o, authFollowInterval, allowed,
			func(s *migrate.AuthSummary) {
				r.o.Log(fmt.Sprintf("copied the source's changed users and roles (%d users, %d roles)", len(s.Users), len(s.Roles)))
			},
			func(err error) { r.o.Log("reading or copying the source's users and roles: " + err.Error()) })
		if err != nil && !errors.Is(err, cutover.ErrSwitched) {
			r.o.Log("no longer following the source's users and roles: " + err.Error())
		}
	}()
	fst, ferr := migrate.Follow(fctx, r.o, sum)
	fcancel()
	<-authDone
	if errors.Is(<-repDone, cutover.ErrSwitched) {
		_, _ = fmt.Fprintln(r.stderr, "the cutover to etcd v3 is done: the old server is no longer followed")
	}
	r.finishProgress()
	if fst != nil && r.jsonOut() {
		js.Follow = migrateJSON(sum, r.jt, fst).Follow
	} else if fst != nil {
		printFollowStats(r.stdout, fst)
	}
	if ferr != nil {
		return fmt.Errorf("migrate --follow: %w", ferr)
	}
	if cerr != nil {
		return fmt.Errorf("migrate: %w", cerr)
	}
	if n := len(fst.Failures); n > 0 {
		return fmt.Errorf("migrate --follow: %d source change(s) could not be applied", n)
	}
	return conflictError(len(sum.Conflicts)+len(fst.Conflicts), false)
}

func printFollowStats(w io.Writer, fst *migrate.FollowStats) {
	_, _ = fmt.Fprintf(w, "followed     %s events up to source index %d: %s applied, %s already there, %d TTLs carried over, %d re-syncs, %d conflicts, %d failures\n",
		migrate.Count(fst.Events), fst.Index, migrate.Count(fst.Applied), migrate.Count(fst.Unchanged),
		fst.TTLRefreshed, fst.Resyncs, len(fst.Conflicts), len(fst.Failures))
	for _, c := range fst.Conflicts {
		_, _ = fmt.Fprintln(w, "  conflict:", c)
	}
	for _, f := range fst.Failures {
		_, _ = fmt.Fprintln(w, "  failed:", f)
	}
}

func conflictError(n int, dryRun bool) error {
	if n == 0 {
		return nil
	}
	if dryRun {
		return fmt.Errorf("migrate --dry-run: %d conflicting node(s) would be left unchanged (--overwrite would replace them)", n)
	}
	return fmt.Errorf("migrate: %d conflicting node(s) left unchanged; run again with --overwrite to replace them with the source's", n)
}

// newMigrateBackend connects to the v3 cluster the way the server does (same
// TLS, auth and timeouts), without metrics.
func newMigrateBackend(ctx context.Context, c *config, endpoints []string, layout translate.Layout, lg *zap.Logger) (*v3backend.Backend, error) {
	bcfg, err := backendConfig(c, endpoints, layout)
	if err != nil {
		return nil, err
	}
	bcfg.AutoSyncInterval = 0
	bcfg.Logger = lg.Named("backend")
	dctx, cancel := context.WithTimeout(ctx, c.dialTimeout*time.Duration(len(endpoints))+time.Second)
	defer cancel()
	be, err := v3backend.New(dctx, bcfg)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the etcd v3 cluster at %s: %w", strings.Join(endpoints, ","), err)
	}
	return be, nil
}

func printSummary(w io.Writer, s *migrate.Summary, target string) {
	would := func(done, will string) string {
		if s.DryRun {
			return will
		}
		return done
	}
	if s.DryRun {
		_, _ = fmt.Fprintln(w, "dry run: nothing was written")
	}
	_, _ = fmt.Fprintf(w, "source       %s %s (index %d)\n", s.V2Server, s.Prefix, s.Index)
	_, _ = fmt.Fprintf(w, "target       %s\n", target)
	_, _ = fmt.Fprintf(w, "tree         %s keys, %s directories (%s empty), %s TTL nodes, %s hidden nodes, %s",
		migrate.Count(s.Keys), migrate.Count(s.Dirs), migrate.Count(s.EmptyDirs), migrate.Count(s.TTLKeys),
		migrate.Count(s.Hidden), migrate.Bytes(s.Bytes))
	if s.LargestKey != "" {
		_, _ = fmt.Fprintf(w, " (largest value %s at %s)", migrate.Bytes(int64(s.LargestValue)), s.LargestKey)
	}
	_, _ = fmt.Fprintln(w)
	if len(s.HiddenNamed)+len(s.HiddenFound) > 0 {
		_, _ = fmt.Fprintf(w, "hidden       named: %s; found in the source's event history: %s\n", orNone(s.HiddenNamed), orNone(s.HiddenFound))
	}
	_, _ = fmt.Fprintf(w, "%s %s created, %s updated, %s already there, %s expired on the source first\n",
		would("written     ", "would write "), migrate.Count(s.Created), migrate.Count(s.Updated),
		migrate.Count(s.Unchanged), migrate.Count(s.Expired))
	if s.Extra > 0 {
		_, _ = fmt.Fprintf(w, "extra        %s nodes on the bridge are not on the source; %s %s (--prune deletes the rest)\n",
			migrate.Count(s.Extra), migrate.Count(s.Deleted), would("deleted", "would be deleted"))
	}
	_, _ = fmt.Fprintf(w, "conflicts    %d\n", len(s.Conflicts))
	for _, c := range s.Conflicts {
		_, _ = fmt.Fprintln(w, "  "+c.String())
	}
	if len(s.Failures) > 0 {
		_, _ = fmt.Fprintf(w, "failed       %d\n", len(s.Failures))
		for _, f := range s.Failures {
			_, _ = fmt.Fprintln(w, "  "+f.String())
		}
	}
	_, _ = fmt.Fprintf(w, "duration     %s (%s nodes/s)\n", s.Duration.Round(time.Millisecond), migrate.Count(int(s.Rate()+0.5)))
}

func printReport(w io.Writer, r *migrate.Report, target string, maxDiffs int) {
	_, _ = fmt.Fprintf(w, "source       %s %s: %s nodes\n", r.V2Server, r.Prefix, migrate.Count(r.V2ServerNodes))
	_, _ = fmt.Fprintf(w, "bridge       %s: %s nodes\n", target, migrate.Count(r.BridgeNodes))
	if len(r.HiddenNamed)+len(r.HiddenFound) > 0 {
		_, _ = fmt.Fprintf(w, "hidden       named: %s; found in the source's event history: %s\n", orNone(r.HiddenNamed), orNone(r.HiddenFound))
	}
	kinds := map[string]int{}
	for _, d := range r.Differences {
		kinds[d.Kind]++
	}
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(parts)
	_, _ = fmt.Fprintf(w, "differences  %d", len(r.Differences))
	if len(parts) > 0 {
		_, _ = fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	_, _ = fmt.Fprintln(w)
	for i, d := range r.Differences {
		if maxDiffs >= 0 && i >= maxDiffs {
			_, _ = fmt.Fprintf(w, "  ... and %d more\n", len(r.Differences)-i)
			break
		}
		_, _ = fmt.Fprintln(w, "  "+d.String())
	}
	_, _ = fmt.Fprintf(w, "duration     %s\n", r.Duration.Round(time.Millisecond))
}

func orNone(ps []string) string {
	if len(ps) == 0 {
		return "none"
	}
	return strings.Join(ps, ", ")
}

func (j *jsonMigrate) setResult(err error) {
	j.OK = err == nil
	if err != nil {
		j.Error = err.Error()
	}
}

func (j *jsonVerify) setResult(err error) {
	j.OK = err == nil
	if err != nil {
		j.Error = err.Error()
	}
}

// jsonFailure is the summary of a command that failed before it counted
// anything (the source or the cluster unreachable, a bad setting).
type jsonFailure struct {
	Command string `json:"command"`
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
}

func (j *jsonFailure) setResult(err error) {
	j.OK = err == nil
	if err != nil {
		j.Error = err.Error()
	}
}
