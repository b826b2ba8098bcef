// SPDX-License-Identifier: Apache-2.0

// Package steps runs the migration's commands, `v2bridge migrate`,
// `verify`, `migrate cutover` and `migrate rollback`: the steps each takes
// over the packages that own them (engine, cutover, shadow, and modes'
// clients of etcd v3), and what each reports, as text or as one JSON
// summary. The binary parses their flags and calls one function per command.
package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/modes"
	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/migrate/engine"
	"github.com/v2bridge/v2bridge/migrate/shadow"
	"github.com/v2bridge/v2bridge/v3backend"
)

// Config is one run of `v2bridge migrate` or `v2bridge verify`.
type Config struct {
	// Options are the v2 server and what to do, from the flags; the target,
	// the auth store, the log and the progress are set here.
	Options engine.Options
	// Backend reaches the etcd v3 cluster the bridges serve, with their
	// key layout.
	Backend v3backend.Config
	// ServePrefix is the bridges' --serve-prefix ("": all), whose key space
	// the users and roles go to.
	ServePrefix string
	Logger      *zap.Logger
	// Follow (migrate) keeps applying the v2 server's changes after the copy
	// until interrupted or until the cutover to etcd v3 is done.
	Follow bool
	// MaxDiffs (verify) is how many differences are printed (all are
	// counted); negative: all.
	MaxDiffs int
	// Served (verify) is the v2 subtree the bridges serve (--serve-prefix).
	Served string
	// Progress shows progress on stderr; nil: none.
	Progress *engine.ProgressPrinter
	// JSON makes the summary one JSON object (WriteJSON), not text on
	// Stdout; notes go to Stderr either way.
	JSON           bool
	Stdout, Stderr io.Writer
}

// run is one run of migrate or verify.
type run struct {
	Config
	cmd    string
	jt     jsonTarget
	target string // the target as the text summary names it
	// summary is the JSON summary once there is one.
	summary Summary
	// reporter records the follower's progress in etcd v3 for `migrate
	// cutover` (with --follow; nil otherwise).
	reporter *cutover.FollowReporter
}

// Migrate copies the v2 server's tree and its users and roles into etcd v3
// and, with Follow, keeps applying its changes; the summary is the JSON
// one, for Config.JSON.
func Migrate(ctx context.Context, cfg Config) (Summary, error) {
	r := &run{Config: cfg, cmd: "migrate", summary: Failed("migrate")}
	err := r.run(ctx, r.migrate)
	return r.summary, err
}

// Verify compares the v2 server's tree and its users and roles with the
// bridge's, and reports the bridges' shadow comparison.
func Verify(ctx context.Context, cfg Config) (Summary, error) {
	r := &run{Config: cfg, cmd: "verify", summary: Failed("verify")}
	err := r.run(ctx, r.verify)
	return r.summary, err
}

// run connects to etcd v3 as the bridges do, then runs the command.
func (r *run) run(ctx context.Context, command func(context.Context) error) error {
	r.Options.Log = func(msg string) { _, _ = fmt.Fprintln(r.Stderr, msg) }
	if r.Progress != nil {
		r.Options.Progress = r.Progress.Update
		r.Options.Log = r.Progress.Println
		defer r.Progress.Finish()
	}
	be, err := r.newBackend(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = be.Close() }()
	r.Options.Target = be
	keys, err := modes.AuthKeysServing(r.Backend.Layout, r.ServePrefix)
	if err != nil {
		return fmt.Errorf("%s: --serve-prefix: %w", r.cmd, err)
	}
	as, err := modes.OpenAuthStore(ctx, r.Backend, keys, r.Backend.RequestTimeout, r.Logger)
	if err != nil {
		return fmt.Errorf("%s: %w", r.cmd, err)
	}
	defer as.Close()
	r.Options.Auth = as
	if r.cmd == "migrate" && !r.Options.DryRun {
		if err := r.watchMode(ctx); err != nil {
			return err
		}
		if r.reporter != nil {
			defer func() { _ = r.reporter.Client.Close() }()
		}
	}
	eps, l := r.Backend.Endpoints, r.Backend.Layout
	r.jt = jsonTarget{Endpoints: eps, DataPrefix: l.DataPrefix, MetaPrefix: l.MetaPrefix}
	r.target = fmt.Sprintf("etcd v3 %s (data prefix %q, meta prefix %q)", strings.Join(eps, ","), l.DataPrefix, l.MetaPrefix)
	return command(ctx)
}

// newBackend connects to the v3 cluster the way the server does (same TLS,
// auth and timeouts), without metrics.
func (r *run) newBackend(ctx context.Context) (*v3backend.Backend, error) {
	bcfg := r.Backend
	bcfg.AutoSyncInterval = 0
	bcfg.Logger = r.Logger.Named("backend")
	dctx, cancel := context.WithTimeout(ctx, bcfg.DialTimeout*time.Duration(len(bcfg.Endpoints))+time.Second)
	defer cancel()
	be, err := v3backend.New(dctx, bcfg)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the etcd v3 cluster at %s: %w", strings.Join(bcfg.Endpoints, ","), err)
	}
	return be, nil
}

// finishProgress ends the live progress line before a summary is printed.
func (r *run) finishProgress() {
	if r.Progress != nil {
		r.Progress.Finish()
	}
}

// verify compares the v2 server with the bridge and reports every difference.
func (r *run) verify(ctx context.Context) error {
	rep, err := engine.Verify(ctx, r.Options)
	r.finishProgress()
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	arep, err := engine.VerifyAuth(ctx, r.Options)
	if err != nil {
		return fmt.Errorf("verify: the users and roles: %w", err)
	}
	notCompared, ncerr := r.notCompared(ctx)
	recs, followed, serr := r.readShadow(ctx)
	if r.JSON {
		js := verifyJSON(rep, r.jt)
		js.NotCompared = notCompared
		js.Shadow = shadowJSON(recs, followed, serr)
		js.Auth = authReportJSON(arep)
		r.summary = js
	} else {
		printReport(r.Stdout, rep, r.target, r.MaxDiffs)
		printAuthReport(r.Stdout, arep)
		switch {
		case ncerr != nil:
			_, _ = fmt.Fprintf(r.Stdout, "not compared what the bridges serve outside %s (%s): listing it failed: %v\n",
				rep.Prefix, r.Served, ncerr)
		case len(notCompared) > 0:
			_, _ = fmt.Fprintf(r.Stdout, "not compared %s (outside --v2-server-prefix %s; the bridges serve %s)\n",
				strings.Join(notCompared, ", "), rep.Prefix, r.Served)
		}
		printShadow(r.Stdout, recs, followed, serr)
	}
	if ncerr != nil {
		return fmt.Errorf("verify: listing what the bridges serve outside %s: %w", rep.Prefix, ncerr)
	}
	if n := len(rep.Differences) + len(arep.Differences); n > 0 {
		return fmt.Errorf("verify: %d difference(s) between %s and the bridge", n, rep.V2Server)
	}
	return nil
}

// v2Server is a client of the v2 server for the cutover package's reads.
func (r *run) v2Server() (*cutover.V2Server, error) {
	o := &r.Options
	return cutover.NewV2Server(o.V2Server, o.V2ServerTLS, o.V2ServerUser, o.V2ServerTimeout)
}

// notCompared lists the v2 server's nodes the bridges serve that verify's
// --v2-server-prefix left out.
func (r *run) notCompared(ctx context.Context) ([]string, error) {
	if cutover.Covers(r.Options.V2ServerPrefix, r.Served) {
		return nil, nil
	}
	src, err := r.v2Server()
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return cutover.Outside(ctx, src, r.Served, path.Clean(r.Options.V2ServerPrefix), nil)
}

// readShadow reads the bridges' shadow records, and the prefix `migrate
// --follow` copies ("" without its record).
func (r *run) readShadow(ctx context.Context) ([]shadow.Record, string, error) {
	cli, err := modes.ControlClient(r.Backend, r.Logger)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = cli.Close() }()
	rctx, cancel := context.WithTimeout(ctx, max(r.Backend.RequestTimeout, time.Second))
	defer cancel()
	layout := r.Backend.Layout
	recs, err := shadow.ReadRecords(rctx, cli, layout)
	if err != nil {
		return nil, "", err
	}
	resp, err := cli.Get(rctx, cutover.KeysFor(layout.MetaPrefix).Follow)
	if err != nil {
		return recs, "", fmt.Errorf("reading the follower's record: %w", err)
	}
	var fr cutover.FollowRecord
	if len(resp.Kvs) == 0 || json.Unmarshal(resp.Kvs[0].Value, &fr) != nil {
		return recs, "", nil
	}
	return recs, fr.Prefix, nil
}

// migrate copies the v2 server's tree and, with Follow, keeps applying its
// changes until interrupted.
func (r *run) migrate(ctx context.Context) error {
	sum, cerr := engine.Copy(ctx, r.Options)
	r.finishProgress()
	if sum == nil {
		return fmt.Errorf("migrate: %w", cerr)
	}
	js := migrateJSON(sum, r.jt, nil)
	if r.JSON {
		r.summary = js
	} else {
		printSummary(r.Stdout, sum, r.target)
	}
	if cerr == nil || r.Follow {
		asum, aerr := engine.CopyAuth(ctx, r.Options)
		if aerr != nil {
			return fmt.Errorf("migrate: the users and roles: %w", aerr)
		}
		js.Auth = authJSON(asum)
		if !r.JSON {
			printAuthSummary(r.Stdout, asum)
		}
	}
	var ie *engine.IncompleteError
	if cerr != nil && (!r.Follow || (errors.As(cerr, &ie) && ie.Stopped) || ctx.Err() != nil) {
		return fmt.Errorf("migrate: %w", cerr)
	}
	if cerr != nil {
		_, _ = fmt.Fprintf(r.Stderr, "migrate: %v\nfollowing anyway; the exit status will say so\n", cerr)
	}
	if !r.Follow {
		return conflictError(len(sum.Conflicts), r.Options.DryRun)
	}
	return r.follow(ctx, sum, js, cerr)
}

func conflictError(n int, dryRun bool) error {
	if n == 0 {
		return nil
	}
	if dryRun {
		return fmt.Errorf("migrate --dry-run: %d conflicting node(s) would be left unchanged (--overwrite would replace them)", n)
	}
	return fmt.Errorf("migrate: %d conflicting node(s) left unchanged; run again with --overwrite to replace them with the v2 server's", n)
}
