// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestKeepaliveRespectsTheServersPolicy: etcd's default keepalive policy
// (every version) answers a client's pings on a connection without a
// stream with GOAWAY too_many_pings, from the third ping (10 s apart, the
// least grpc-go allows): about 30 s after a connection went idle. gRPC logs
// each at ERROR on the bridge's stderr. A bridge over three members, left
// idle for 45 s, gets none. --advertise-only-self leaves the bridge nothing
// to follow but the auth data: any other connection it held would be idle.
// In parallel with the other tests that mostly wait (45 s idle here).
func TestKeepaliveRespectsTheServersPolicy(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("45 s")
	}
	c := v2bridgetest.StartProcessCluster(t, 3)
	u := v2bridgetest.FreeURL(t)
	p, err := v2bridgetest.StartBridgeProcess(buildBridge(t), u, "--endpoints", strings.Join(c.Endpoints(), ","),
		"--advertise-only-self")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(syscall.SIGTERM) })
	time.Sleep(45 * time.Second)
	if r := do(t, "PUT", u, "/v2/keys/k", form("value", "v")); r.status != 201 {
		t.Errorf("a write after 45 s: %d %s", r.status, r.body)
	}
	if log := p.Log(); strings.Contains(log, "too_many_pings") {
		t.Errorf("etcd refused the bridge's keepalive pings:\n%s", log)
	}
}
