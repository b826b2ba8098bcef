// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
)

// ForeignDir is a top-level v2 directory holding keys no v2 client wrote
// through a bridge (it has no directory marker): another tenant's data, such
// as a Kubernetes registry, or a v3 client's.
type ForeignDir struct {
	Path string // e.g. /registry
	Keys int64  // the keys below it
}

// maxForeignScan bounds how many top-level names FindForeign looks at.
const maxForeignScan = 1000

// FindForeign lists the top-level directories of l's data space that hold
// keys without a marker: what a bridge serving / would reach that no v2
// client wrote. It reads one key and one marker per top-level name, and
// counts the keys of the unmarked ones, so it costs round trips per
// top-level directory, not per key.
func FindForeign(ctx context.Context, kv clientv3.KV, l translate.Layout) ([]ForeignDir, error) {
	var out []ForeignDir
	end := translate.PrefixEnd(l.DataPrefix + "/")
	for from, n := l.DataPrefix+"/", 0; n < maxForeignScan; n++ {
		resp, err := kv.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(1), clientv3.WithKeysOnly(), clientv3.WithSerializable())
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) == 0 {
			return out, nil
		}
		p, _ := l.PathOfData(string(resp.Kvs[0].Key))
		top, below := p, false
		if i := strings.IndexByte(p[1:], '/'); i >= 0 {
			top, below = p[:i+1], true
		}
		if !below { // a file at the top: whatever it is, go on after it
			from = string(resp.Kvs[0].Key) + "\x00"
			continue
		}
		child := l.DataChildPrefix(top)
		from = translate.PrefixEnd(child) // past the directory and all below it
		m, err := kv.Get(ctx, l.MarkerKey(top), clientv3.WithCountOnly(), clientv3.WithSerializable())
		if err != nil {
			return nil, err
		}
		if m.Count > 0 {
			continue
		}
		c, err := kv.Get(ctx, child, clientv3.WithRange(translate.PrefixEnd(child)), clientv3.WithCountOnly(), clientv3.WithSerializable())
		if err != nil {
			return nil, err
		}
		out = append(out, ForeignDir{Path: top, Keys: c.Count})
	}
	return out, nil
}
