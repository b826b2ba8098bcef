// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/assemble"
	"github.com/v2bridge/v2bridge/auth"
	"github.com/v2bridge/v2bridge/migrate"
	"github.com/v2bridge/v2bridge/translate"
)

// authFollowInterval is how often `migrate --follow` reads the old server's
// auth data again: v2 has no watch on it.
const authFollowInterval = 5 * time.Second

// runningAuthStore is an auth.Store of the commands, its follower running.
type runningAuthStore struct {
	*auth.Store
	cli    *clientv3.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup // the store's Run
}

// close stops the follower, waits for it and closes the client.
func (s *runningAuthStore) close() {
	s.cancel()
	s.wg.Wait()
	_ = s.cli.Close()
}

// openAuthStore starts an auth.Store for layout's key space (a client of
// its own, as the server's) and waits until it has read the auth data
// (within the request timeout).
func openAuthStore(ctx context.Context, c *config, endpoints []string, layout translate.Layout, lg *zap.Logger) (*runningAuthStore, error) {
	bcfg, err := backendConfig(c, endpoints, layout)
	if err != nil {
		return nil, err
	}
	cli, err := assemble.ControlClient(bcfg, lg)
	if err != nil {
		return nil, err
	}
	st := auth.NewStore(auth.StoreConfig{Client: cli, Keys: auth.KeysFor(layout.MetaPrefix, layout.DataPrefix),
		RequestTimeout: c.requestTimeout, Logger: lg.Named("auth")})
	rctx, cancel := context.WithCancel(context.Background())
	s := &runningAuthStore{Store: st, cli: cli, cancel: cancel}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		st.Run(rctx)
	}()
	if err := waitAuthState(ctx, st, c.requestTimeout); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// waitAuthState waits until st has a current State.
func waitAuthState(ctx context.Context, st *auth.Store, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if _, ok := st.State(); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reading the bridges' users and roles from etcd v3: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// printAuthSummary is migrate's line about the auth data.
func printAuthSummary(w io.Writer, s *migrate.AuthSummary) {
	state := "disabled"
	if s.Enabled {
		state = "enabled"
	}
	what := "unchanged"
	switch {
	case s.Changed && s.DryRun:
		what = "would be written"
	case s.Changed:
		what = "written"
	}
	_, _ = fmt.Fprintf(w, "auth         %s on the source, %d users, %d roles: %s\n", state, len(s.Users), len(s.Roles), what)
	if len(s.UnknownPasswords) > 0 {
		_, _ = fmt.Fprintf(w, "passwords    unknown for %s: each is learned from its next request a dual-mode bridge forwards\n",
			strings.Join(s.UnknownPasswords, ", "))
	}
}

// printAuthReport is verify's lines about the auth data.
func printAuthReport(w io.Writer, r *migrate.AuthReport) {
	_, _ = fmt.Fprintf(w, "auth         %d differences\n", len(r.Differences))
	for _, d := range r.Differences {
		_, _ = fmt.Fprintln(w, "  "+d.String())
	}
	if len(r.UnknownPasswords) > 0 {
		_, _ = fmt.Fprintf(w, "passwords    unknown to the bridges for %s\n", strings.Join(r.UnknownPasswords, ", "))
	}
}

type jsonAuth struct {
	Enabled          bool     `json:"enabled"`
	Users            []string `json:"users"`
	Roles            []string `json:"roles"`
	UnknownPasswords []string `json:"unknownPasswords"`
	Changed          bool     `json:"changed"`
}

func authJSON(s *migrate.AuthSummary) *jsonAuth {
	return &jsonAuth{Enabled: s.Enabled, Users: orEmpty(s.Users), Roles: orEmpty(s.Roles),
		UnknownPasswords: orEmpty(s.UnknownPasswords), Changed: s.Changed}
}

type jsonAuthReport struct {
	Differences      []jsonIssue `json:"differences"`
	UnknownPasswords []string    `json:"unknownPasswords"`
}

func authReportJSON(r *migrate.AuthReport) *jsonAuthReport {
	j := &jsonAuthReport{Differences: []jsonIssue{}, UnknownPasswords: orEmpty(r.UnknownPasswords)}
	for _, d := range r.Differences {
		j.Differences = append(j.Differences, jsonIssue{Path: d.What, Kind: "auth", Detail: d.Detail})
	}
	return j
}
