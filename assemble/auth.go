// SPDX-License-Identifier: Apache-2.0

package assemble

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/auth"
	"github.com/v2bridge/v2bridge/v3backend"
)

// bridgeAuth is a bridge's v2 auth: the Store following its key space's
// users and roles in etcd v3, over the control client, and the Checker of
// requests.
type bridgeAuth struct {
	svc  *auth.Service
	halt func() // ends the Store's goroutine and waits for it (nil: not started)
}

// newAuth is the auth of a bridge serving its layout's key space over cli;
// its metrics go to reg.
func newAuth(c *Config, cli *clientv3.Client, reg prometheus.Registerer) *bridgeAuth {
	lg, layout := c.Logger.Named("auth"), c.Layout
	st := auth.NewStore(auth.StoreConfig{Client: cli, Keys: auth.KeysFor(layout.MetaPrefix, layout.DataPrefix),
		RequestTimeout: c.RequestTimeout, Logger: lg})
	ck := auth.NewChecker(auth.CheckerConfig{State: st.State, Await: st.Current, ClientCertAuth: c.ClientCertAuth, Logger: lg, Registry: reg})
	return &bridgeAuth{svc: &auth.Service{Store: st, Checker: ck}}
}

// start runs the Store until stop.
func (a *bridgeAuth) start() { a.halt = runStore(a.svc.Store) }

// stop ends the Store's goroutine and waits for it.
func (a *bridgeAuth) stop() {
	if a.halt != nil {
		a.halt()
	}
}

// runStore runs st, following the auth data, until halt, which waits for
// it.
func runStore(st *auth.Store) (halt func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// AuthStore is an auth.Store of the commands, its follower running on a
// control client of its own.
type AuthStore struct {
	*auth.Store
	cli  *clientv3.Client
	halt func() // ends the Store's goroutine and waits for it
}

// Close stops the follower, waits for it and closes the client.
func (s *AuthStore) Close() {
	s.halt()
	_ = s.cli.Close()
}

// OpenAuthStore starts an auth.Store for the key space of bcfg's layout
// (over a client of its own, as a bridge's) and waits until it has read the
// auth data, within timeout.
func OpenAuthStore(ctx context.Context, bcfg v3backend.Config, timeout time.Duration, lg *zap.Logger) (*AuthStore, error) {
	cli, err := ControlClient(bcfg, lg)
	if err != nil {
		return nil, err
	}
	layout := bcfg.Layout
	st := auth.NewStore(auth.StoreConfig{Client: cli, Keys: auth.KeysFor(layout.MetaPrefix, layout.DataPrefix),
		RequestTimeout: timeout, Logger: lg.Named("auth")})
	s := &AuthStore{Store: st, cli: cli, halt: runStore(st)}
	if _, ok := st.Current(ctx, timeout); !ok {
		s.Close()
		err := ctx.Err()
		if err == nil {
			err = context.DeadlineExceeded
		}
		return nil, fmt.Errorf("reading the bridges' users and roles from etcd v3: %w", err)
	}
	return s, nil
}
