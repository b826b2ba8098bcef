// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/bridge/membership"
)

// putRegistration writes g on lease (0: a new one), as an agent or a
// registrar would; it returns the lease.
func putRegistration(t *testing.T, f *fakeEtcd, lease clientv3.LeaseID, g membership.Registration) clientv3.LeaseID {
	t.Helper()
	if lease == 0 {
		l, err := f.Grant(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		lease = l.ID
	}
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	f.put(membership.Key(testKeys.Bridges, lease), string(b), int64(lease))
	return lease
}

// TestCutoverWaitsOnlyForDualModeBridges: a static registration (a bridge
// serving etcd v3 alone) is not a bridge the cutover waits for.
func TestCutoverWaitsOnlyForDualModeBridges(t *testing.T) {
	f := newFakeEtcd(testKeys)
	dual := putRegistration(t, f, 0, membership.Registration{Name: "dual", Advertise: []string{"http://d:2379"}, Mode: ModePassthrough})
	putRegistration(t, f, 0, membership.Registration{Name: "static", Advertise: []string{"http://s:2379"}, Mode: ModeV3, Static: true})
	o, _ := testOptions(t, f, nil)
	regs, err := o.registrations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]membership.Registration{strconv.FormatInt(int64(dual), 16): {Name: "dual", Advertise: []string{"http://d:2379"}, Mode: ModePassthrough}}
	if !reflect.DeepEqual(regs, want) {
		t.Fatalf("registrations %+v, want %+v", regs, want)
	}
}
