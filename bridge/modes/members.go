// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/membership"
	"github.com/v2bridge/v2bridge/v2api"
)

// bridgeMembers is a bridge's part in the member list of its key space: the
// list of the registered bridges /v2/members serves, and, for a bridge
// without --v2-server, its own registration (a dual-mode bridge's agent
// registers it). With --advertise-only-self there is none: the bridge
// advertises itself alone, as a node-local bridge must.
type bridgeMembers struct {
	list      *membership.MemberList
	registrar *membership.Registrar // nil in dual mode
	cancel    context.CancelFunc
	wg        sync.WaitGroup // the list's and the registrar's goroutines
}

// etcdClient is what a bridge's members and auth follow etcd v3 with: the
// backend's checked session (v3backend.Conn) in v3 mode, a handover to it
// in dual mode.
type etcdClient interface {
	clientv3.KV
	clientv3.Watcher
	clientv3.Lease
}

// newBridgeMembers is the bridgeMembers of a bridge over cli, which live
// tells about (nil: a client of its own), or nil with
// --advertise-only-self; register says whether it registers itself.
func newBridgeMembers(c *Config, cli etcdClient, live func() (bool, <-chan struct{}), lg *zap.Logger, register bool) *bridgeMembers {
	layout := c.Layout
	if c.AdvertiseOnlySelf {
		return nil
	}
	bridges := membership.Bridges(layout.MetaPrefix)
	m := &bridgeMembers{list: membership.NewMemberList(membership.MemberListConfig{Client: cli, Live: live, Bridges: bridges,
		DataPrefix: layout.DataPrefix, Prefix: c.ServePrefix, RequestTimeout: c.RequestTimeout,
		Logger: lg.Named("members")})}
	if register {
		m.registrar = membership.NewRegistrar(membership.RegistrarConfig{Client: cli, KV: cli, Live: live, Bridges: bridges,
			TTL: c.ModeLeaseTTL, RequestTimeout: c.RequestTimeout, Name: c.Name,
			Advertise: c.AdvertiseURLs, DataPrefix: layout.DataPrefix, Prefix: c.ServePrefix,
			Logger: lg.Named("members")})
	}
	return m
}

// members is what /v2/members lists besides the bridge (nil: nothing).
func (m *bridgeMembers) members() v2api.Members {
	if m == nil {
		return nil
	}
	return m.list
}

// start runs the list and the registration until stop.
func (m *bridgeMembers) start() {
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
func (m *bridgeMembers) stop() {
	if m == nil || m.cancel == nil {
		return
	}
	m.cancel()
	m.wg.Wait()
}
