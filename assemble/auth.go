// SPDX-License-Identifier: Apache-2.0

package assemble

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/auth"
)

// bridgeAuth is a bridge's v2 auth: the Store following its key space's
// users and roles in etcd v3, over the control client, and the Checker of
// requests.
type bridgeAuth struct {
	svc    *auth.Service
	cancel context.CancelFunc
	done   chan struct{} // closed when the Store's goroutine ends
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
func (a *bridgeAuth) start() {
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done = cancel, make(chan struct{})
	go func() {
		defer close(a.done)
		a.svc.Run(ctx)
	}()
}

// stop ends the Store's goroutine and waits for it.
func (a *bridgeAuth) stop() {
	if a.cancel == nil {
		return
	}
	a.cancel()
	<-a.done
}
