// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/v2bridge/v2bridge/assemble"
	"github.com/v2bridge/v2bridge/auth"
	"github.com/v2bridge/v2bridge/cutover"
	"github.com/v2bridge/v2bridge/migrate"
	"github.com/v2bridge/v2bridge/translate"
)

// cutoverFlags are the settings of `v2bridge migrate cutover` and `migrate
// rollback`.
type cutoverFlags struct {
	oldServerFlags
	ackTimeout, followTimeout time.Duration
	indexMargin               uint64
	force                     bool
	allowUnknownPasswords     bool
	output                    string
}

func newCutoverFlagSet(cmd string, c *config, cf *cutoverFlags, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(progName+" migrate "+cmd, flag.ContinueOnError)
	fs.SetOutput(out)
	addBackendFlags(fs, c)
	cf.add(fs, "the old server", "client URL(s) of the old etcd v2 server the bridges forward to (required), comma-separated",
		"the migrated v2 directory (a rollback writes a hidden pad key below it)",
		"deadline of each request to the old server", 5*time.Second)
	fs.DurationVar(&cf.ackTimeout, "ack-timeout", 30*time.Second, "how long to wait for every live bridge to acknowledge the fence (then the fence is lifted)")
	fs.Uint64Var(&cf.indexMargin, "index-margin", 1000, "how far the index of the side taking over must be ahead of the other side's (raised by writing a pad key when it is not)")
	if cmd == "cutover" {
		fs.DurationVar(&cf.followTimeout, "follow-timeout", time.Minute, "how long to wait for 'migrate --follow' to apply the old server's last changes (then the fence is lifted)")
		fs.BoolVar(&cf.allowUnknownPasswords, "allow-unknown-passwords", false, "cut over even though the old server has auth enabled and users whose password the bridges have not learned (they cannot log in afterwards)")
	} else {
		fs.BoolVar(&cf.force, "force", false, "roll back even though writes were made through etcd v3 since the cutover: they are lost (nothing copies them back to the old server); each node is listed once with its last value")
	}
	fs.StringVar(&cf.output, "output", "text", "result on stdout: text, or json (one object, for scripts; the steps go to stderr)")
	intro := `Usage: v2bridge migrate rollback --from URL --endpoints URLS [flags]

Switches every dual-mode bridge back to the old v2 server, which must be
intact. Writes made through etcd v3 since the cutover are not copied back:
it refuses when there are any, unless --force. Steps: fence writes and wait
for the bridges; raise the old server's index past etcd v3's; switch.
Already in passthrough mode: nothing to do.
`
	if cmd == "cutover" {
		intro = `Usage: v2bridge migrate cutover --from URL --endpoints URLS [flags]

Switches every dual-mode bridge (started with --v2-upstream and --endpoints)
from the old v2 server to etcd v3 at once, by rewriting the mode record in
etcd v3 that they all watch:
  1. fence: bridges refuse writes; wait until every live bridge acknowledges
  2. wait until "migrate --follow" has applied the old server's last change
  3. raise the v3 index past the old server's if needed, then switch to v3
Once fenced it copies the old server's users, roles and auth flag one last
time; it refuses while auth is enabled there and some user's password is
unknown to the bridges (see --allow-unknown-passwords).
A failure before step 3 lifts the fence. Already in v3 mode: nothing to do.
`
	}
	setCommandUsage(fs, intro, "The old server and the command:", "The etcd v3 cluster and key layout (as for the server; V2BRIDGE_* variables and --config-file apply):")
	return fs
}

// runCutoverCommand runs `v2bridge migrate cutover` or `migrate rollback`.
func runCutoverCommand(cmd string, args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cutoverMain(ctx, cmd, args, getenv, stdout, stderr)
}

// jsonSwitch is the --output json result of cutover and rollback.
type jsonSwitch struct {
	Command  string          `json:"command"`
	OK       bool            `json:"ok"`
	Error    string          `json:"error,omitempty"`
	Changed  bool            `json:"changed"`
	Record   *cutover.Record `json:"record,omitempty"`
	Bridges  int             `json:"bridges"`
	Padded   int             `json:"padded"`
	V3Writes int             `json:"v3Writes,omitempty"`
	// Discarded (rollback) is every node written through etcd v3 since the
	// cutover, as it is now: what --force loses.
	Discarded []cutover.Discarded `json:"discarded,omitempty"`
	// Auth (cutover) is the last copy of the users and roles.
	Auth    *cutover.AuthCopy `json:"auth,omitempty"`
	Seconds float64           `json:"durationSeconds"`
}

func cutoverMain(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) (err error) {
	var c config
	var cf cutoverFlags
	fs := newCutoverFlagSet(cmd, &c, &cf, io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return nil
		}
		return usageErrorf("migrate %s: %v (see %s migrate %s --help)", cmd, err, progName, cmd)
	}
	if fs.NArg() > 0 {
		return usageErrorf("migrate %s: unexpected argument %q", cmd, fs.Arg(0))
	}
	if cf.output != "text" && cf.output != "json" {
		return usageErrorf("migrate %s: --output must be text or json, not %q", cmd, cf.output)
	}
	js := &jsonSwitch{Command: "migrate " + cmd}
	steps := stdout
	if cf.output == "json" {
		steps = stderr
		defer func() {
			js.OK = err == nil
			if err != nil {
				js.Error = err.Error()
			}
			writeJSON(stdout, js)
		}()
	}
	if err := applySources(fs, getenv); err != nil {
		return err
	}
	if err := cf.defaultPrefix(&c); err != nil {
		return err
	}
	// Settings missing or malformed are command-line mistakes (exit status
	// 2), found before anything is connected to.
	if cf.from == "" {
		return usageErrorf("migrate %s: --from is required: the old etcd v2 server's client URL, e.g. --from http://old-etcd:2379", cmd)
	}
	endpoints := splitList(c.endpoints)
	if len(endpoints) == 0 {
		return usageErrorf("migrate %s: --endpoints is required: the etcd v3 cluster the dual-mode bridges use", cmd)
	}
	layout, err := translate.NewLayout(c.dataPrefix, c.metaPrefix)
	if err != nil {
		return usageError{err}
	}
	lg, err := newLogger(c.logLevel, c.logFormat)
	if err != nil {
		return usageError{err}
	}
	defer func() { _ = lg.Sync() }()
	srcTLS, err := cf.tls()
	if err != nil {
		return err
	}
	src, err := cutover.NewSource(splitList(cf.from), srcTLS, cf.fromUser, cf.fromTimeout)
	if err != nil { // only for a malformed URL or user
		return usageError{fmt.Errorf("migrate %s: --from: %w", cmd, err)}
	}
	defer src.Close()
	bcfg, err := backendConfig(&c, endpoints, layout)
	if err != nil {
		return err
	}
	cli, err := assemble.ControlClient(bcfg, lg)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	o := cutover.Options{Client: cli, Keys: cutover.KeysFor(layout.MetaPrefix), Layout: layout, Source: src,
		SourcePadKey: path.Join("/", cf.fromPrefix, "_v2bridge_rollback_pad"),
		AckTimeout:   cf.ackTimeout, FollowTimeout: cf.followTimeout, IndexMargin: cf.indexMargin, Force: cf.force,
		By: whoRuns(), RequestTimeout: c.requestTimeout, Auth: auth.KeysFor(layout.MetaPrefix, layout.DataPrefix),
		AllowUnknownPasswords: cf.allowUnknownPasswords,
		Log:                   func(s string) { _, _ = fmt.Fprintln(steps, s) }}
	if cmd == "cutover" {
		as, err := assemble.OpenAuthStore(ctx, bcfg, c.requestTimeout, lg)
		if err != nil {
			return fmt.Errorf("migrate %s: %w", cmd, err)
		}
		defer as.Close()
		o.CopyAuth = copyAuthFunc(migrate.Options{SourceTLS: srcTLS, SourceUser: cf.fromUser, SourceTimeout: cf.fromTimeout,
			Auth: as}, splitList(cf.from))
	}
	_, _ = fmt.Fprintf(steps, "%s: old server %s, etcd v3 %s, mode record %s\n", cmd, src, strings.Join(endpoints, ","), o.Keys.Mode)
	var res *cutover.Result
	if cmd == "cutover" {
		res, err = cutover.Cutover(ctx, o)
	} else {
		res, err = cutover.Rollback(ctx, o)
	}
	if res != nil {
		js.Changed, js.Record, js.Bridges, js.Padded, js.V3Writes, js.Discarded, js.Auth, js.Seconds =
			res.Changed, res.Record, res.Bridges, res.Padded, res.V3Writes, res.Discarded, res.Auth, res.Duration.Seconds()
	}
	if err != nil {
		return fmt.Errorf("migrate %s: %w", cmd, err)
	}
	if res.Changed {
		_, _ = fmt.Fprintf(steps, "done in %s: %d bridge(s) serve in %s mode (generation %d)\n",
			res.Duration.Round(time.Millisecond), res.Bridges, res.Record.Mode, res.Record.Generation)
	}
	return nil
}

// copyAuthFunc copies the users and roles of the first of the old server's
// URLs that answers, for the cutover.
func copyAuthFunc(o migrate.Options, urls []string) func(context.Context, bool) (cutover.AuthCopy, error) {
	return func(ctx context.Context, dryRun bool) (cutover.AuthCopy, error) {
		var err error
		for _, u := range urls {
			o.From, o.DryRun = u, dryRun
			var sum *migrate.AuthSummary
			if sum, err = migrate.CopyAuth(ctx, o); err == nil {
				return cutover.AuthCopy{Enabled: sum.Enabled, Users: len(sum.Users), Roles: len(sum.Roles),
					UnknownPasswords: sum.UnknownPasswords}, nil
			}
			if !errors.Is(err, migrate.ErrUnreachable) {
				break
			}
		}
		return cutover.AuthCopy{}, err
	}
}

// whoRuns names the operator for the mode record: user@host.
func whoRuns() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s (pid %d)", name, host, os.Getpid())
}
