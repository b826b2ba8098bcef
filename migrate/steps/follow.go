// SPDX-License-Identifier: Apache-2.0

package steps

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/v2bridge/v2bridge/bridge/modes"
	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/migrate/engine"
)

// authFollowInterval is how often `migrate --follow` reads the v2 server's
// auth data again: v2 has no watch on it.
const authFollowInterval = 5 * time.Second

// watchMode refuses to write once the mode record says etcd v3 is the
// authority, and with --follow prepares the progress record the cutover
// waits on.
func (r *run) watchMode(ctx context.Context) error {
	cli, err := modes.ControlClient(r.Backend, r.Logger)
	if err != nil {
		return err
	}
	src, err := r.v2Server()
	if err != nil {
		_ = cli.Close()
		return err
	}
	rep := &cutover.FollowReporter{Client: cli, Keys: cutover.KeysFor(r.Backend.Layout.MetaPrefix), V2Server: src,
		Prefix: r.Options.V2ServerPrefix, RequestTimeout: r.Backend.RequestTimeout, Log: r.Options.Log}
	if err := rep.Check(ctx); err != nil {
		_ = cli.Close()
		return fmt.Errorf("migrate: %w", err)
	}
	if !r.Follow {
		_ = cli.Close()
		return nil
	}
	r.reporter = rep
	r.Options.Applied = rep.Applied
	return nil
}

// follow applies the v2 server's changes after the copy sum until interrupted
// or until the cutover to etcd v3 is done; cerr is the copy's own error,
// reported once following ends.
func (r *run) follow(ctx context.Context, sum *engine.Summary, js *jsonMigrate, cerr error) error {
	_, _ = fmt.Fprintf(r.Stderr, "following %s from index %d; interrupt (Ctrl-C) to stop; `migrate cutover` stops it too\n", sum.V2Server, sum.Index+1)
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
				return fmt.Errorf("%w: %w", engine.ErrStopFollowing, err)
			}
			return err
		}
	}
	go func() { // the users and roles, which v2 does not watch
		defer close(authDone)
		err := engine.FollowAuth(fctx, r.Options, authFollowInterval, allowed,
			func(s *engine.AuthSummary) {
				r.Options.Log(fmt.Sprintf("copied the v2 server's changed users and roles (%d users, %d roles)", len(s.Users), len(s.Roles)))
			},
			func(err error) { r.Options.Log("reading or copying the v2 server's users and roles: " + err.Error()) })
		if err != nil && !errors.Is(err, cutover.ErrSwitched) {
			r.Options.Log("no longer following the v2 server's users and roles: " + err.Error())
		}
	}()
	fst, ferr := engine.Follow(fctx, r.Options, sum)
	fcancel()
	<-authDone
	if errors.Is(<-repDone, cutover.ErrSwitched) {
		_, _ = fmt.Fprintln(r.Stderr, "the cutover to etcd v3 is done: the v2 server is no longer followed")
	}
	r.finishProgress()
	if fst != nil && r.JSON {
		js.Follow = migrateJSON(sum, r.jt, fst).Follow
	} else if fst != nil {
		printFollowStats(r.Stdout, fst)
	}
	if ferr != nil {
		return fmt.Errorf("migrate --follow: %w", ferr)
	}
	if cerr != nil {
		return fmt.Errorf("migrate: %w", cerr)
	}
	if n := len(fst.Failures); n > 0 {
		return fmt.Errorf("migrate --follow: %d v2 server change(s) could not be applied", n)
	}
	return conflictError(len(sum.Conflicts)+len(fst.Conflicts), false)
}
