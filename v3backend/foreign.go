// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
)

// ForeignDir is a v2 path holding keys no v2 client wrote through a bridge:
// another tenant's data, such as a Kubernetes registry, or a v3 client's. It
// is a directory without a marker that vouches for it, or a file (Keys 1)
// without its own record (translate.Layout.OwnFileKey).
type ForeignDir struct {
	Path string // e.g. /registry
	Keys int64  // the keys below it
}

// foreignPage is how many keys one read of FindForeign fetches.
const foreignPage = 500

// FindForeign lists what of l's data space no v2 client wrote: what a bridge
// serving / would reach beyond v2 data. A directory's marker vouches for its
// subtree unless it is a translate.AboveMarker, below which the search goes
// on; a file directly in the root or in such a directory needs its own
// record. It reads (linearizably) one marker per directory it meets and the
// files of the directories it enters, and skips the subtrees it judged, so
// it costs round trips per directory, not per key.
func FindForeign(ctx context.Context, kv clientv3.KV, l translate.Layout) ([]ForeignDir, error) {
	var out []ForeignDir
	return out, findForeignIn(ctx, kv, l, "/", &out)
}

// findForeignIn adds to out what of directory dir's contents no v2 client
// wrote, dir being one whose marker vouches for nothing.
func findForeignIn(ctx context.Context, kv clientv3.KV, l translate.Layout, dir string, out *[]ForeignDir) error {
	own, err := ownFiles(ctx, kv, l, dir)
	if err != nil {
		return err
	}
	child := l.DataChildPrefix(dir)
	end := translate.PrefixEnd(child)
	for from := child; ; {
		resp, err := kv.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(foreignPage), clientv3.WithKeysOnly())
		if err != nil {
			return err
		}
		jumped := false
		for _, k := range resp.Kvs {
			key := string(k.Key)
			from = key + "\x00"
			name, _, below := strings.Cut(key[len(child):], "/")
			if name == "" {
				continue // no v2 path names it
			}
			p := childOf(dir, name)
			if !below {
				if own[p] != k.ModRevision {
					*out = append(*out, ForeignDir{Path: p, Keys: 1})
				}
				continue
			}
			// A directory: judge it by its marker, then go past it.
			from, jumped = translate.PrefixEnd(l.DataChildPrefix(p)), true
			if err := judgeDir(ctx, kv, l, p, out); err != nil {
				return err
			}
			break
		}
		if !jumped && !resp.More {
			return nil
		}
	}
}

// judgeDir adds to out what of directory p no v2 client wrote: nothing if
// its marker vouches for it, all of it without a marker.
func judgeDir(ctx context.Context, kv clientv3.KV, l translate.Layout, p string, out *[]ForeignDir) error {
	m, err := kv.Get(ctx, l.MarkerKey(p))
	if err != nil {
		return err
	}
	switch {
	case len(m.Kvs) == 0:
		c := l.DataChildPrefix(p)
		n, err := kv.Get(ctx, c, clientv3.WithRange(translate.PrefixEnd(c)), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		*out = append(*out, ForeignDir{Path: p, Keys: n.Count})
		return nil
	case m.Kvs[0].Lease == 0 && string(m.Kvs[0].Value) == translate.AboveMarker:
		return findForeignIn(ctx, kv, l, p, out)
	}
	return nil
}

// ownFiles maps each file directly in dir that has its own record to that
// record's ModRevision.
func ownFiles(ctx context.Context, kv clientv3.KV, l translate.Layout, dir string) (map[string]int64, error) {
	pfx := l.OwnFileKey(childOf(dir, ""))
	own := map[string]int64{}
	for from, end := pfx, translate.PrefixEnd(pfx); ; {
		resp, err := kv.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(foreignPage), clientv3.WithKeysOnly())
		if err != nil {
			return nil, err
		}
		for _, k := range resp.Kvs {
			if name := string(k.Key[len(pfx):]); name != "" && !strings.Contains(name, "/") {
				own[childOf(dir, name)] = k.ModRevision
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return own, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// childOf is the v2 path of name in directory dir.
func childOf(dir, name string) string { return strings.TrimSuffix(dir, "/") + "/" + name }
