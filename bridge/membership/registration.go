// SPDX-License-Identifier: Apache-2.0

// Package membership is every bridge's entry in etcd v3 and the list of
// them that /v2/members serves, in every mode. Each bridge writes a
// Registration under Bridges(meta prefix), on a lease it renews: a bridge
// serving etcd v3 alone through a Registrar, a dual-mode bridge through its
// agent (package cutover), which also acknowledges there the mode record it
// applied. A MemberList follows the registrations of a key space.
package membership

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Registration is a bridge's entry under Bridges, on a lease: what
// /v2/members lists (MemberList) and, in dual mode, the bridge's
// acknowledgement of the mode record it applied. It vanishes with the lease
// when the bridge dies or loses etcd v3 for the lease's TTL.
type Registration struct {
	Name       string    `json:"name"`
	Host       string    `json:"host"`
	PID        int       `json:"pid"`
	Advertise  []string  `json:"advertise,omitempty"`
	Started    time.Time `json:"started"`
	Mode       string    `json:"mode"`       // of the record applied
	Generation uint64    `json:"generation"` // of the record applied
	Since      time.Time `json:"since"`      // when the bridge entered that side
	// DataPrefix is the bridge's --data-prefix: bridges list only those
	// serving the same key space.
	DataPrefix string `json:"dataPrefix,omitempty"`
	// OnlySelf: the bridge advertises only itself (node-local), and no
	// other bridge lists it.
	OnlySelf bool `json:"onlySelf,omitempty"`
	// Static: a bridge without --v2-server, serving etcd v3 whatever the
	// mode record says; the cutover and rollback do not wait for it.
	Static bool `json:"static,omitempty"`
	// Prefix is the v2 subtree the bridge serves (--serve-prefix); empty
	// (a bridge that does not say) is the whole tree.
	Prefix string `json:"prefix,omitempty"`
}

// Self is the registration of this process, named name, advertising
// advertise.
func Self(name string, advertise []string) Registration {
	host, _ := os.Hostname()
	return Registration{Name: name, Host: host, PID: os.Getpid(), Advertise: advertise, Started: time.Now().UTC()}
}

// Served is the v2 subtree the bridge serves.
func (g Registration) Served() string {
	if g.Prefix == "" {
		return "/"
	}
	return g.Prefix
}

// Acked reports whether a bridge registered as g has applied generation gen.
func (g Registration) Acked(gen uint64) bool { return g.Generation >= gen }

// Bridges is the prefix of the registrations' keys under metaPrefix, one
// key per bridge (Key). It starts with no tag of the bridge's bookkeeping
// (markers, sequences, leases, journal, TTL records).
func Bridges(metaPrefix string) string { return metaPrefix + "bridges/" }

// Key is the key of the registration on lease under the prefix bridges:
// the lease's ID in hex, which is also the bridge's ID in Read.
func Key(bridges string, lease clientv3.LeaseID) string {
	return bridges + strconv.FormatInt(int64(lease), 16)
}

// Grant grants a registration's lease of ttl, in whole seconds rounded up.
func Grant(ctx context.Context, cli clientv3.Lease, ttl time.Duration) (*clientv3.LeaseGrantResponse, error) {
	return cli.Grant(ctx, int64((ttl+time.Second-1)/time.Second))
}

// Put writes g under bridges on lease, if every guard holds (none: always),
// and reports whether it did.
func Put(ctx context.Context, kv clientv3.KV, bridges string, lease clientv3.LeaseID, g Registration,
	guards ...clientv3.Cmp) (bool, error) {
	b, _ := json.Marshal(g)
	key, val := Key(bridges, lease), string(b)
	if len(guards) == 0 {
		_, err := kv.Put(ctx, key, val, clientv3.WithLease(lease))
		return err == nil, err
	}
	resp, err := kv.Txn(ctx).If(guards...).Then(clientv3.OpPut(key, val, clientv3.WithLease(lease))).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// Read lists the registrations under bridges by ID (Key), with the store
// revision read; one that does not decode is left out.
func Read(ctx context.Context, kv clientv3.KV, bridges string) (map[string]Registration, int64, error) {
	resp, err := kv.Get(ctx, bridges, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	out := map[string]Registration{}
	for _, e := range resp.Kvs {
		var g Registration
		if json.Unmarshal(e.Value, &g) == nil {
			out[strings.TrimPrefix(string(e.Key), bridges)] = g
		}
	}
	return out, resp.Header.Revision, nil
}
