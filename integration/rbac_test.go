// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
)

// TestBridgeRunsAsARestrictedUser sets up the etcd RBAC that docs/operations.md
// recommends — the meta prefix writable by the bridge's user only — and runs
// the bridge as that user: v2 clients work, a v3 application user shares the
// data but is refused writes to the meta prefix, so it cannot forge the
// journal.
func TestBridgeRunsAsARestrictedUser(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	ctx := ctxT(t, time.Minute)
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := layout.WatchRange()
	admin := cl.Client(t)
	steps := []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		// The bridge: its data and its bookkeeping read-write, and read on
		// the one range its watch and its copy of the key space cover.
		func() error { _, err := admin.RoleAdd(ctx, "v2bridge"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "v2bridge", "/", clientv3.GetPrefixRangeEnd("/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "v2bridge", "_v2bridge/", clientv3.GetPrefixRangeEnd("_v2bridge/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "v2bridge", lo, hi, clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "bridge", "bridgepw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "bridge", "v2bridge"); return err },
		// A v3 application sharing the data: the data prefix only.
		func() error { _, err := admin.RoleAdd(ctx, "app"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "app", "/", clientv3.GetPrefixRangeEnd("/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "app", "apppw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "app", "app"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("RBAC setup step %d: %v", i, err)
		}
	}
	br := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{Backend: func(c *v3backend.Config) {
		c.Username, c.Password = "bridge", "bridgepw"
	}})

	// v2 clients work through the restricted bridge: writes, TTLs, reads, watches.
	if r := do(t, "PUT", br.URL, "/v2/keys/net/config", form("value", "cfg")); r.status != 201 {
		t.Fatalf("write as the bridge user: %d %s", r.status, r.body)
	}
	if r := do(t, "PUT", br.URL, "/v2/keys/net/lease", form("value", "x", "ttl", "30")); r.status != 201 {
		t.Fatalf("TTL write as the bridge user: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", br.URL, "/v2/keys/net", form("recursive", "true", "quorum", "true")); r.status != 200 {
		t.Fatalf("read as the bridge user: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", br.URL, "/health", nil); r.status != 200 {
		t.Errorf("/health as the bridge user: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", br.URL, "/version", nil); r.status != 200 || !strings.Contains(r.body, `"etcdserver":"3.`) {
		t.Errorf("/version as the bridge user: %d %s", r.status, r.body)
	}
	w := startWatch(t, br.URL, "/net/app")

	// The client authenticates as it connects: a bcrypt check, slow under
	// the race detector on a busy machine.
	app, err := clientv3.New(clientv3.Config{Endpoints: cl.Endpoints(), Username: "app", Password: "apppw",
		DialTimeout: 30 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = app.Close() }()
	for _, k := range []string{layout.JournalKey(), layout.MarkerKey("/net/app")} {
		if _, err := app.Put(ctx, k, `{"a":"delete","n":{"key":"/net/config"}}`); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("the application user's write to %s: %v, want permission denied", k, err)
		}
	}
	// The data itself is shared: the application's write reaches v2 watchers.
	if _, err := app.Put(ctx, "/net/app", "v3"); err != nil {
		t.Fatalf("the application user's write to the data: %v", err)
	}
	expectEvent(t, w, "create", "/net/app")
}

// TestScopedBridgeRunsWithFlannelsKeysAlone: a bridge serving flannel's
// subtree needs no permission on the rest of a shared cluster: operations.md's
// roles for it grant its subtree, the key of the directory above it and the
// bookkeeping, and nothing of the registry beside it, which it cannot read
// even with its own credentials.
func TestScopedBridgeRunsWithFlannelsKeysAlone(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	ctx := ctxT(t, time.Minute)
	admin := cl.Client(t)
	if _, err := admin.Put(ctx, "/registry/secrets/kube-system/admin-token", "secret"); err != nil {
		t.Fatal(err)
	}
	grant := func(role, key, end string, perm clientv3.PermissionType) func() error {
		return func() error { _, err := admin.RoleGrantPermission(ctx, role, key, end, perm); return err }
	}
	rw, ro := clientv3.PermissionType(clientv3.PermReadWrite), clientv3.PermissionType(clientv3.PermRead)
	steps := []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "flannel-bridge"); return err },
		grant("flannel-bridge", "/coreos.com/network", clientv3.GetPrefixRangeEnd("/coreos.com/network"), rw),
		grant("flannel-bridge", "/coreos.com", "", ro),
		grant("flannel-bridge", "_v2bridge/", clientv3.GetPrefixRangeEnd("_v2bridge/"), rw),
		func() error { _, err := admin.UserAdd(ctx, "bridge", "bridgepw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "bridge", "flannel-bridge"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("RBAC setup step %d: %v", i, err)
		}
	}
	br := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{Served: []string{"/coreos.com/network"},
		Backend: func(c *v3backend.Config) { c.Username, c.Password = "bridge", "bridgepw" }})

	w := startWatch(t, br.URL, "/coreos.com/network/subnets/10.5.1.0-24")
	for _, c := range []struct {
		method, path string
		f            url.Values
		status       int
	}{
		{"PUT", "/coreos.com/network/config", form("value", "cfg"), 201},
		{"PUT", "/coreos.com/network/subnets/10.5.1.0-24", form("value", "x", "ttl", "30", "prevExist", "false"), 201},
		{"POST", "/coreos.com/network/queue", form("value", "q"), 201},
		{"GET", "/coreos.com/network", form("recursive", "true", "quorum", "true"), 200},
		{"DELETE", "/coreos.com/network/queue", form("recursive", "true"), 200},
	} {
		if r := do(t, c.method, br.URL, "/v2/keys"+c.path, c.f); r.status != c.status {
			t.Errorf("%s %s as the flannel bridge's user: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	expectEvent(t, w, "create", "/coreos.com/network/subnets/10.5.1.0-24")
	for _, p := range []string{"/health", "/readyz", "/version"} {
		if r := do(t, "GET", br.URL, p, nil); r.status != 200 {
			t.Errorf("%s as the flannel bridge's user: %d %s", p, r.status, r.body)
		}
	}
	bridgeUser, err := clientv3.New(clientv3.Config{Endpoints: cl.Endpoints(), Username: "bridge", Password: "bridgepw",
		DialTimeout: 30 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bridgeUser.Close() }()
	if _, err := bridgeUser.Get(ctx, "/registry/secrets/kube-system/admin-token"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("the bridge's credentials read the registry: %v, want permission denied", err)
	}
}
