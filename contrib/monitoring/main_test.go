// SPDX-License-Identifier: Apache-2.0

package monitoring

import (
	"os"
	"testing"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestMain lets v2bridgetest.StartProcessCluster run etcd members as child
// processes of this test binary (the fault test freezes one).
func TestMain(m *testing.M) {
	v2bridgetest.MemberMain()
	os.Exit(m.Run())
}
