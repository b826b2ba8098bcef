// SPDX-License-Identifier: Apache-2.0

// Command v2bridge (built from cmd/bridge) serves the etcd v2 keys and watch
// API from etcd v3.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// progName is the installed binary's name, in help, errors and logs.
const progName = "v2bridge"

// commands are the subcommands; anything else after the flags is a mistake.
var commands = []string{"migrate", "verify", "version", "help"}

func main() {
	if err := run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, progName+":", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a command-line mistake (exit status 2).
type usageError struct{ error }

func usageErrorf(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// run dispatches: flags given before a subcommand are global, so they are
// handed to it (`v2bridge --log-level debug migrate ...`).
func run(args, environ []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "help" {
		return helpFor(stdout, args[1:])
	}
	fs := newFlagSet(&config{}, io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return nil
		}
		return usageErrorf("%v (see %s --help)", err, progName)
	}
	if err := checkEnv(environ); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) > 0 {
		global := args[:len(args)-len(rest)]
		if n := len(global); n > 0 && global[n-1] == "--" {
			global = global[:n-1]
		}
		switch rest[0] {
		case "migrate", "verify":
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if rest[0] == "migrate" && len(rest) > 1 && (rest[1] == "cutover" || rest[1] == "rollback") {
				return cutoverMain(ctx, rest[1], append(append([]string{}, global...), rest[2:]...), getenv, stdout, stderr)
			}
			return migrateMain(ctx, rest[0], append(append([]string{}, global...), rest[1:]...), getenv, stdout, stderr, isTerminal(os.Stderr))
		case "version":
			if len(rest) > 1 {
				return usageErrorf("version: unexpected argument %q", rest[1])
			}
			printVersion(stdout)
			return nil
		case "help":
			return helpFor(stdout, rest[1:])
		}
		return usageErrorf("unknown command %q (did you mean %s? commands: %s)", rest[0],
			closest(rest[0], commands), strings.Join(commands, ", "))
	}
	c, err := parseConfig(args, getenv, io.Discard)
	if err != nil {
		return err
	}
	for _, w := range c.deprecated {
		_, _ = fmt.Fprintln(stderr, progName+": "+w)
	}
	if c.showVersion {
		printVersion(stdout)
		return nil
	}
	lg, err := newLogger(c.logLevel, c.logFormat)
	if err != nil {
		return err
	}
	defer func() { _ = lg.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, c, lg)
}
