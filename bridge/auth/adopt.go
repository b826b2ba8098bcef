// SPDX-License-Identifier: Apache-2.0

package auth

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Adopt gives the key space k, the first time one of its bridges starts,
// the auth data its data prefix's bridges shared before each set of served
// subtrees had its own (at k.Legacy): the same users, roles and flag, so
// that an upgrade changes nothing a client sees. It then writes k's flag,
// "false" if there was none, which marks k as adopted: later changes at
// k.Legacy (the bridges of data prefix "" serving all, or bridges of
// before) never reach k. Without a Legacy, or once k has its flag, it does
// nothing. Each call to etcd has timeout; copied counts the users and
// roles copied.
//
// Bridges of k must not serve before Adopt returns without an error (else
// they could serve with auth off while it was on).
func Adopt(ctx context.Context, cli clientv3.KV, k Keys, timeout time.Duration) (copied int, err error) {
	if k.Legacy == "" {
		return 0, nil
	}
	from := Keys{Prefix: k.Legacy}
	for range 20 {
		cctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), timeout)
		flag, err := cli.Get(cctx, k.Enabled(), clientv3.WithCountOnly())
		if err != nil {
			cancel()
			return 0, err
		}
		if flag.Count > 0 {
			cancel()
			return 0, nil
		}
		old, err := cli.Get(cctx, from.Prefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			return 0, err
		}
		ops, enabled := []clientv3.Op{}, "false"
		for _, kv := range old.Kvs {
			switch kind, name := from.parse(string(kv.Key)); kind {
			case 'e':
				if string(kv.Value) == "true" {
					enabled = "true"
				}
			case 'u':
				ops = append(ops, clientv3.OpPut(k.User(name), string(kv.Value)))
			case 'r':
				ops = append(ops, clientv3.OpPut(k.Role(name), string(kv.Value)))
			}
		}
		// The flag comes last, in the last transaction: until it is there,
		// the next Adopt copies everything again.
		copied = len(ops)
		ops = append(ops, clientv3.OpPut(k.Enabled(), enabled))
		ok, err := adoptTxns(ctx, cli, k, from, old.Header.Revision, ops, timeout)
		if err != nil {
			return 0, err
		}
		if ok {
			return copied, nil
		}
	}
	return 0, errConflict
}

// adoptTxns commits ops in transactions of at most maxTxnOps, each guarded
// on k having no flag and nothing under from having changed after rev; ok
// is false if one lost that race.
func adoptTxns(ctx context.Context, cli clientv3.KV, k, from Keys, rev int64, ops []clientv3.Op, timeout time.Duration) (ok bool, err error) {
	for len(ops) > 0 {
		n := min(len(ops), maxTxnOps)
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := cli.Txn(cctx).If(
			clientv3.Compare(clientv3.CreateRevision(k.Enabled()), "=", 0),
			clientv3.Compare(clientv3.ModRevision(from.Prefix), "<", rev+1).WithPrefix(),
		).Then(ops[:n]...).Commit()
		cancel()
		if err != nil {
			return false, err
		}
		if !resp.Succeeded {
			return false, nil
		}
		ops = ops[n:]
	}
	return true, nil
}
