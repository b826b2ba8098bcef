// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v3backend"
)

// bridgeAuth is a bridge's v2 auth: the Store following its key space's
// users and roles in etcd v3 (on the backend's checked session; in dual
// mode, a handover to it), and the Checker of requests.
type bridgeAuth struct {
	svc   *auth.Service
	adopt func(context.Context) error // before the Store runs: auth.Adopt
	halt  func()                      // ends the Store's goroutine and waits for it (nil: not started)
}

// newAuth is the auth of a bridge serving its layout's key space over cli,
// which live tells about (nil: a client of its own); its metrics go to
// reg.
func newAuth(c *Config, cli etcdClient, live func() (bool, <-chan struct{}), reg prometheus.Registerer) *bridgeAuth {
	lg := c.Logger.Named("auth")
	keys := AuthKeys(c.Layout)
	st := auth.NewStore(auth.StoreConfig{Client: cli, Live: live, Keys: keys, RequestTimeout: c.RequestTimeout, Logger: lg})
	ck := auth.NewChecker(auth.CheckerConfig{State: st.State, Await: st.Current, ClientCertAuth: c.ClientCertAuth, Logger: lg, Registry: reg})
	return &bridgeAuth{svc: &auth.Service{Store: st, Checker: ck}, adopt: adopter(cli, keys, c.RequestTimeout, lg)}
}

// AuthKeys are the keys of the users, roles and enabled flag of the bridges
// with layout's data prefix and served subtrees.
func AuthKeys(layout translate.Layout) auth.Keys {
	return auth.KeysFor(layout.MetaPrefix, layout.DataPrefix, layout.Served)
}

// AuthKeysServing are the AuthKeys of the bridges with layout serving
// servePrefix (--serve-prefix; "": all), for the commands that copy users
// and roles to them.
func AuthKeysServing(layout translate.Layout, servePrefix string) (auth.Keys, error) {
	var served []string
	if servePrefix != "" {
		var err error
		if served, err = translate.ParseServed(servePrefix); err != nil {
			return auth.Keys{}, err
		}
	}
	return AuthKeys(layout.WithServed(served)), nil
}

// start runs the Store until stop.
func (a *bridgeAuth) start() { a.halt = runStore(a.svc.Store, a.adopt) }

// adopter is auth.Adopt for keys over cli, logged.
func adopter(cli clientv3.KV, keys auth.Keys, timeout time.Duration, lg *zap.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		n, err := auth.Adopt(ctx, cli, keys, timeout)
		if err != nil && ctx.Err() == nil {
			lg.Warn("cannot read or copy the users and roles of before yet; not serving until then",
				zap.String("from", keys.Legacy), zap.String("to", keys.Prefix), zap.Error(err))
		}
		if err == nil && n > 0 {
			lg.Info("copied the users and roles of before, shared by every bridge of the data prefix; "+
				"they are now this key space's alone", zap.String("from", keys.Legacy), zap.String("to", keys.Prefix), zap.Int("copied", n))
		}
		return err
	}
}

// stop ends the Store's goroutine and waits for it.
func (a *bridgeAuth) stop() {
	if a.halt != nil {
		a.halt()
	}
}

// runStore runs st, following the auth data, until halt, which waits for
// it. adopt comes first, tried again every adoptRetry until it succeeds:
// until then st has no State, so nothing is served.
func runStore(st *auth.Store, adopt func(context.Context) error) (halt func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for err := adopt(ctx); err != nil; err = adopt(ctx) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(adoptRetry):
			}
		}
		st.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// adoptRetry is how long a bridge waits before it tries auth.Adopt again.
const adoptRetry = time.Second

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

// OpenAuthStore starts an auth.Store for the key space keys (AuthKeys of
// the bridges' layout) over a client of its own, as a bridge's, reaching
// bcfg's cluster, and waits until it has read the auth data, within timeout.
func OpenAuthStore(ctx context.Context, bcfg v3backend.Config, keys auth.Keys, timeout time.Duration, lg *zap.Logger) (*AuthStore, error) {
	cli, err := ControlClient(bcfg, lg)
	if err != nil {
		return nil, err
	}
	st := auth.NewStore(auth.StoreConfig{Client: cli, Keys: keys, RequestTimeout: timeout, Logger: lg.Named("auth")})
	s := &AuthStore{Store: st, cli: cli, halt: runStore(st, adopter(cli, keys, timeout, lg.Named("auth")))}
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
