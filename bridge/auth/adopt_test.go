// SPDX-License-Identifier: Apache-2.0

package auth_test

import (
	"maps"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestAdopt: a key space's first Adopt copies the users, roles and flag its
// data prefix's bridges shared before, and marks it; a later one copies
// nothing, so what changes at the old place stays there. A key space that
// is still where it was (data prefix "", serving all) adopts nothing.
func TestAdopt(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cl := v2bridgetest.StartCluster(t, 1)
	cli := cl.MemberClient(t, 0)
	ctx := ctxT(t)
	shared := auth.KeysFor("_v2bridge/", "", nil)
	flannel := auth.KeysFor("_v2bridge/", "", []string{"/coreos.com/network"})
	if flannel.Legacy != shared.Prefix {
		t.Fatalf("flannel's bridges' old place %q, want %q", flannel.Legacy, shared.Prefix)
	}
	root := `{"user":"root","password":"h","roles":["root"]}`
	guest := `{"role":"guest","permissions":{"kv":{"read":["/coreos.com/*"],"write":[]}}}`
	for k, v := range map[string]string{shared.User("root"): root, shared.Role("guest"): guest, shared.Enabled(): "true",
		shared.Prefix + "x/u/eve": "{}", // data prefix "/x"'s of before: not flannel's
	} {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := auth.Adopt(ctx, cli, shared, time.Second); n != 0 || err != nil {
		t.Fatalf("Adopt of the key space of before: %d, %v", n, err)
	}
	if n, err := auth.Adopt(ctx, cli, flannel, time.Second); n != 2 || err != nil {
		t.Fatalf("first Adopt: %d, %v; want 2 copied", n, err)
	}
	want := map[string]string{flannel.User("root"): root, flannel.Role("guest"): guest, flannel.Enabled(): "true"}
	expectKeys(t, cli, flannel.Prefix, want)
	// Changes at the old place (another tenant's bridge of before, or the
	// bridges serving all) do not reach the adopted key space.
	if _, err := cli.Put(ctx, shared.Enabled(), "false"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, shared.User("mallory"), `{"user":"mallory","password":"h","roles":["root"]}`); err != nil {
		t.Fatal(err)
	}
	if n, err := auth.Adopt(ctx, cli, flannel, time.Second); n != 0 || err != nil {
		t.Fatalf("second Adopt: %d, %v", n, err)
	}
	expectKeys(t, cli, flannel.Prefix, want)
	// Data prefix "/x" serving all: its keys moved; it adopts its own of
	// before (under "" 's), not "" 's.
	x := auth.KeysFor("_v2bridge/", "/x", nil)
	if x.Legacy != shared.Prefix+"x/" {
		t.Fatalf("data prefix /x's old place %q", x.Legacy)
	}
	if n, err := auth.Adopt(ctx, cli, x, time.Second); n != 1 || err != nil {
		t.Fatalf("Adopt of data prefix /x: %d, %v; want 1 copied", n, err)
	}
	expectKeys(t, cli, x.Prefix, map[string]string{x.User("eve"): "{}", x.Enabled(): "false"})
	// A key space with nothing to adopt is marked too, with auth off.
	other := auth.KeysFor("_v2bridge/", "/d", nil)
	if n, err := auth.Adopt(ctx, cli, other, time.Second); n != 0 || err != nil {
		t.Fatalf("Adopt with nothing to copy: %d, %v", n, err)
	}
	expectKeys(t, cli, other.Prefix, map[string]string{other.Enabled(): "false"})
}

// expectKeys asserts the keys under prefix and their values, in full.
func expectKeys(t *testing.T, cli *clientv3.Client, prefix string, want map[string]string) {
	t.Helper()
	resp, err := cli.Get(ctxT(t), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	if !maps.Equal(got, want) {
		t.Errorf("under %q: %v, want %v", prefix, got, want)
	}
}
