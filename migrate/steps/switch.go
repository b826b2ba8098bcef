// SPDX-License-Identifier: Apache-2.0

package steps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/modes"
	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/migrate/engine"
	"github.com/v2bridge/v2bridge/v3backend"
)

// SwitchConfig is one run of `v2bridge migrate cutover` or `migrate
// rollback`.
type SwitchConfig struct {
	// Steps are the command's settings from the flags (the Source, the
	// timeouts, IndexMargin, Force, AllowUnknownPasswords); the clients,
	// keys, pad key, auth copy, operator and log are set here.
	Steps cutover.Options
	// Old reaches the v2 server for the cutover's copy of the users and
	// roles (V2ServerTLS, V2ServerUser, V2ServerTimeout), and names the migrated
	// directory (V2ServerPrefix), below which a rollback writes its pad key.
	Old engine.Options
	// URLs are the v2 server's client URLs, in the order they are tried.
	URLs []string
	// Backend reaches the etcd v3 cluster of the dual-mode bridges.
	Backend v3backend.Config
	// ServePrefix is the bridges' --serve-prefix ("": all), whose key space
	// the cutover copies the users and roles to.
	ServePrefix string
	Logger      *zap.Logger
	// JSON makes the result one JSON object (WriteJSON), and sends the
	// steps to Stderr; otherwise everything is text on Stdout.
	JSON           bool
	Stdout, Stderr io.Writer
}

// Switch runs the cutover (cmd "cutover") or the rollback (cmd
// "rollback"); the summary is the JSON one, for SwitchConfig.JSON.
func Switch(ctx context.Context, cmd string, cfg SwitchConfig) (Summary, error) {
	res, err := switchSides(ctx, cmd, cfg)
	return switchSummary(cmd, res), err
}

// switchSummary is the summary of cmd's result res (nil: none).
func switchSummary(cmd string, res *cutover.Result) *jsonSwitch {
	js := &jsonSwitch{result: result{Command: "migrate " + cmd}}
	if res != nil {
		js.Changed, js.Record, js.Bridges, js.Padded, js.V3Writes, js.Discarded, js.Auth, js.Seconds =
			res.Changed, res.Record, res.Bridges, res.Padded, res.V3Writes, res.Discarded, res.Auth, res.Duration.Seconds()
	}
	return js
}

func switchSides(ctx context.Context, cmd string, cfg SwitchConfig) (*cutover.Result, error) {
	steps := cfg.Stdout
	if cfg.JSON {
		steps = cfg.Stderr
	}
	cli, err := modes.ControlClient(cfg.Backend, cfg.Logger)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Close() }()
	layout, o := cfg.Backend.Layout, cfg.Steps
	keys, err := modes.AuthKeysServing(layout, cfg.ServePrefix)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: --serve-prefix: %w", cmd, err)
	}
	o.Client, o.Keys, o.Layout = cli, cutover.KeysFor(layout.MetaPrefix), layout
	o.V2ServerPadKey = path.Join("/", cfg.Old.V2ServerPrefix, "_v2bridge_rollback_pad")
	o.By, o.RequestTimeout, o.Auth = whoRuns(), cfg.Backend.RequestTimeout, keys
	o.Log = func(s string) { _, _ = fmt.Fprintln(steps, s) }
	if cmd == "cutover" {
		as, err := modes.OpenAuthStore(ctx, cfg.Backend, keys, cfg.Backend.RequestTimeout, cfg.Logger)
		if err != nil {
			return nil, fmt.Errorf("migrate %s: %w", cmd, err)
		}
		defer as.Close()
		o.CopyAuth = copyAuthFunc(engine.Options{V2ServerTLS: cfg.Old.V2ServerTLS, V2ServerUser: cfg.Old.V2ServerUser,
			V2ServerTimeout: cfg.Old.V2ServerTimeout, Auth: as}, cfg.URLs)
	}
	_, _ = fmt.Fprintf(steps, "%s: v2 server %s, etcd v3 %s, mode record %s\n", cmd, o.V2Server,
		strings.Join(cfg.Backend.Endpoints, ","), o.Keys.Mode)
	var res *cutover.Result
	if cmd == "cutover" {
		res, err = cutover.Cutover(ctx, o)
	} else {
		res, err = cutover.Rollback(ctx, o)
	}
	if err != nil {
		return res, fmt.Errorf("migrate %s: %w", cmd, err)
	}
	if res.Changed {
		_, _ = fmt.Fprintf(steps, "done in %s: %d bridge(s) serve in %s mode (generation %d)\n",
			res.Duration.Round(time.Millisecond), res.Bridges, res.Record.Mode, res.Record.Generation)
	}
	return res, nil
}

// copyAuthFunc copies the users and roles of the first of the v2 server's
// URLs that answers, for the cutover.
func copyAuthFunc(o engine.Options, urls []string) func(context.Context, bool) (cutover.AuthCopy, error) {
	return func(ctx context.Context, dryRun bool) (cutover.AuthCopy, error) {
		var err error
		for _, u := range urls {
			o.V2Server, o.DryRun = []string{u}, dryRun
			var sum *engine.AuthSummary
			if sum, err = engine.CopyAuth(ctx, o); err == nil {
				return cutover.AuthCopy{Enabled: sum.Enabled, Users: len(sum.Users), Roles: len(sum.Roles),
					UnknownPasswords: sum.UnknownPasswords}, nil
			}
			if !errors.Is(err, engine.ErrUnreachable) {
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
