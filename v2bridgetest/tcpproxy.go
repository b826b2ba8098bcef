// SPDX-License-Identifier: Apache-2.0

package v2bridgetest

import (
	"strings"
	"sync/atomic"
)

// TCPProxy is a fault proxy in front of one server of the test's own (an
// etcd v2 server for passthrough mode, say): the same dropping of bytes as a
// Cluster member's proxies, without a cluster.
type TCPProxy struct {
	// URL is the proxy's http://127.0.0.1:port.
	URL string

	p          *faultProxy
	blackholed atomic.Bool
}

// StartTCPProxy forwards a loopback port to target (http://host:port or
// host:port) until the test ends.
func StartTCPProxy(t TB, target string) *TCPProxy {
	t.Helper()
	x := &TCPProxy{}
	p, err := newFaultProxy(strings.TrimPrefix(target, "http://"), false,
		func(int) bool { return x.blackholed.Load() }, func(string) int { return -1 })
	if err != nil {
		t.Fatalf("tcp proxy to %s: %v", target, err)
	}
	x.p, x.URL = p, p.url
	t.Cleanup(p.close)
	return x
}

// Blackhole drops every byte in both directions without closing anything,
// and leaves new connections unanswered, as a machine that lost power.
func (x *TCPProxy) Blackhole() { x.blackholed.Store(true) }

// Heal lifts Blackhole and closes the connections that lost bytes (as the
// machine, back, answers them with a RST); their owners reconnect.
func (x *TCPProxy) Heal() {
	x.blackholed.Store(false)
	x.p.heal()
}
