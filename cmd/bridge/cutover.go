// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/migrate/engine"
	"github.com/v2bridge/v2bridge/migrate/steps"
	"github.com/v2bridge/v2bridge/translate"
)

// cutoverFlags are the settings of `v2bridge migrate cutover` and `migrate
// rollback`.
type cutoverFlags struct {
	v2ServerFlags
	ackTimeout, followTimeout time.Duration
	indexMargin               uint64
	force                     bool
	allowUnknownPasswords     bool
	output                    string
}

func newCutoverFlagSet(cmd string, c *config, cf *cutoverFlags, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(progName+" migrate "+cmd, flag.ContinueOnError)
	fs.SetOutput(out)
	cf.add(fs, "which the bridges forward to", "the migrated v2 directory (a rollback writes a hidden pad key below it)",
		"deadline of each request to the v2 server", 5*time.Second)
	addBackendFlags(fs, c)
	fs.DurationVar(&cf.ackTimeout, "ack-timeout", 30*time.Second, "how long to wait for every live bridge to acknowledge the fence (then the fence is lifted)")
	fs.Uint64Var(&cf.indexMargin, "index-margin", 1000, "how far the index of the side taking over must be ahead of the other side's (raised by writing a pad key when it is not)")
	if cmd == "cutover" {
		fs.DurationVar(&cf.followTimeout, "follow-timeout", time.Minute, "how long to wait for 'migrate --follow' to apply the v2 server's last changes (then the fence is lifted)")
		fs.BoolVar(&cf.allowUnknownPasswords, "allow-unknown-passwords", false, "cut over even though the v2 server has auth enabled and users whose password the bridges have not learned (they cannot log in afterwards)")
	} else {
		fs.BoolVar(&cf.force, "force", false, "roll back even though writes were made through etcd v3 since the cutover: they are lost (nothing copies them back to the v2 server); each node is listed once with its last value")
	}
	fs.StringVar(&cf.output, "output", "text", "result on stdout: text, or json (one object, for scripts; the steps go to stderr)")
	intro := `Usage: v2bridge migrate rollback --v2-server URLS --endpoints URLS [flags]

Switches every dual-mode bridge back to the v2 server, which must be
intact. Writes made through etcd v3 since the cutover are not copied back:
it refuses when there are any, unless --force. Steps: fence writes and wait
for the bridges; raise the v2 server's index past etcd v3's; switch.
Already in passthrough mode: nothing to do.
` + steps.OutputHelp("migrate "+cmd)
	if cmd == "cutover" {
		intro = `Usage: v2bridge migrate cutover --v2-server URLS --endpoints URLS [flags]

Switches every dual-mode bridge (started with --v2-server and --endpoints)
from the v2 server to etcd v3 at once, by rewriting the mode record in
etcd v3 that they all watch:
  1. fence: bridges refuse writes; wait until every live bridge acknowledges
  2. wait until "migrate --follow" has applied the v2 server's last change
  3. raise the v3 index past the v2 server's if needed, then switch to v3
Once fenced it copies the v2 server's users, roles and auth flag one last
time; it refuses while auth is enabled there and some user's password is
unknown to the bridges (see --allow-unknown-passwords).
A failure before step 3 lifts the fence. Already in v3 mode: nothing to do.
` + steps.OutputHelp("migrate "+cmd)
	}
	setCommandUsage(fs, intro, "The v2 server and the command:", "The etcd v3 cluster and key layout (as for the server; V2BRIDGE_* variables and --config-file apply):")
	return fs
}

// cutoverMain runs `v2bridge migrate cutover` or `migrate rollback`.
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
	sum := steps.Failed("migrate " + cmd)
	if cf.output == "json" {
		defer func() { steps.WriteJSON(stdout, sum, err) }()
	}
	if err := applySources(fs, getenv); err != nil {
		return err
	}
	printDeprecated(stderr, fs)
	if err := cf.defaultPrefix(&c); err != nil {
		return err
	}
	// Settings missing or malformed are command-line mistakes (exit status
	// 2), found before anything is connected to.
	if cf.v2Server == "" {
		return usageErrorf("migrate %s: --v2-server is required: the etcd v2 server's client URL, e.g. --v2-server http://old-etcd:2379", cmd)
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
	src, err := cutover.NewV2Server(splitList(cf.v2Server), srcTLS, cf.v2ServerUser, cf.v2ServerTimeout)
	if err != nil { // only for a malformed URL or user
		return usageError{fmt.Errorf("migrate %s: --v2-server: %w", cmd, err)}
	}
	defer src.Close()
	bcfg, err := backendConfig(&c, endpoints, layout)
	if err != nil {
		return err
	}
	sum, err = steps.Switch(ctx, cmd, steps.SwitchConfig{
		Steps: cutover.Options{V2Server: src, AckTimeout: cf.ackTimeout, FollowTimeout: cf.followTimeout,
			IndexMargin: cf.indexMargin, Force: cf.force, AllowUnknownPasswords: cf.allowUnknownPasswords},
		Old:  engine.Options{V2ServerPrefix: cf.v2ServerPrefix, V2ServerTLS: srcTLS, V2ServerUser: cf.v2ServerUser, V2ServerTimeout: cf.v2ServerTimeout},
		URLs: splitList(cf.v2Server), Backend: bcfg, ServePrefix: c.servePrefix, Logger: lg, JSON: cf.output == "json", Stdout: stdout, Stderr: stderr})
	return err
}
