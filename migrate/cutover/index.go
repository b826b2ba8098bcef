// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
)

// countIndex is the v2 index the v3 side gives clients now: that of the
// revision a linearizable read sees (what a quorum GET through a bridge
// reports), read without a value, one key at most, within timeout.
func countIndex(kv clientv3.KV, layout translate.Layout, timeout time.Duration) func(context.Context) (uint64, error) {
	return func(ctx context.Context) (uint64, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := kv.Get(ctx, layout.MetaPrefix, clientv3.WithCountOnly(), clientv3.WithLimit(1))
		if err != nil {
			return 0, fmt.Errorf("reading the etcd v3 revision: %w", err)
		}
		return translate.Index(resp.Header.Revision), nil
	}
}
