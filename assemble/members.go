// SPDX-License-Identifier: Apache-2.0

package assemble

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/cutover"
	"github.com/v2bridge/v2bridge/v2api"
)

// membership is a bridge's part in the member list of its key space: the
// list of the registered bridges /v2/members serves, and, for a bridge
// without --v2-upstream, its own registration (a dual-mode bridge's agent
// registers it). With --advertise-only-self there is none: the bridge
// advertises itself alone, as a node-local bridge must.
type membership struct {
	list      *cutover.MemberList
	registrar *cutover.Registrar // nil in dual mode
	cancel    context.CancelFunc
	wg        sync.WaitGroup // the list's and the registrar's goroutines
}

// newMembership is the membership of a bridge over cli, or nil with
// --advertise-only-self; register says whether it registers itself.
func newMembership(c *Config, cli *clientv3.Client, lg *zap.Logger, register bool) *membership {
	layout := c.Layout
	if c.AdvertiseOnlySelf {
		return nil
	}
	keys := cutover.KeysFor(layout.MetaPrefix)
	m := &membership{list: cutover.NewMemberList(cutover.MemberListConfig{Client: cli, Keys: keys,
		DataPrefix: layout.DataPrefix, Prefix: c.ServePrefix, RequestTimeout: c.RequestTimeout,
		Logger: lg.Named("members")})}
	if register {
		m.registrar = cutover.NewRegistrar(cutover.RegistrarConfig{Client: cli, KV: cli, Keys: keys,
			TTL: c.ModeLeaseTTL, RequestTimeout: c.RequestTimeout, Name: c.Name,
			Advertise: c.AdvertiseURLs, DataPrefix: layout.DataPrefix, Prefix: c.ServePrefix,
			Logger: lg.Named("members")})
	}
	return m
}

// members is what /v2/members lists besides the bridge (nil: nothing).
func (m *membership) members() v2api.Members {
	if m == nil {
		return nil
	}
	return m.list
}

// start runs the list and the registration until stop.
func (m *membership) start() {
	if m == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.list.Run(ctx)
	}()
	if m.registrar != nil {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.registrar.Run(ctx)
		}()
	}
}

// stop revokes the registration (the bridge leaves every list at once) and
// waits for the goroutines.
func (m *membership) stop() {
	if m == nil || m.cancel == nil {
		return
	}
	m.cancel()
	m.wg.Wait()
}
