// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"encoding/json"
	"strconv"
	"time"
)

// v2 action names.
const (
	ActionGet              = "get"
	ActionSet              = "set"
	ActionCreate           = "create"
	ActionUpdate           = "update"
	ActionDelete           = "delete"
	ActionCompareAndSwap   = "compareAndSwap"
	ActionCompareAndDelete = "compareAndDelete"
	ActionExpire           = "expire"
)

// Node is v2's NodeExtern: field order and omitempty rules are v2's, so the
// JSON is byte-for-byte what a v2 client expects.
type Node struct {
	Key           string     `json:"key,omitempty"`
	Value         *string    `json:"value,omitempty"`
	Dir           bool       `json:"dir,omitempty"`
	Expiration    *time.Time `json:"expiration,omitempty"`
	TTL           int64      `json:"ttl,omitempty"`
	Nodes         []*Node    `json:"nodes,omitempty"`
	ModifiedIndex uint64     `json:"modifiedIndex,omitempty"`
	CreatedIndex  uint64     `json:"createdIndex,omitempty"`
}

// Event is a v2 response or watch event.
type Event struct {
	Action   string `json:"action"`
	Node     *Node  `json:"node,omitempty"`
	PrevNode *Node  `json:"prevNode,omitempty"`
	// EtcdIndex is sent as X-Etcd-Index, not in the body.
	EtcdIndex uint64 `json:"-"`
	// Removed lists, for the deletion of a directory, every path it
	// removed (itself included): v2 tells watchers on those paths, and only
	// those, of the deletion. Nil when unknown.
	Removed map[string]bool `json:"-"`
	// Encoded, when set, is the event's JSON and a newline, as
	// json.Encoder writes it: an event that reaches many watchers is
	// encoded once. Whoever sets it no longer changes the event.
	Encoded []byte `json:"-"`
}

// Encode sets Encoded from the event as it is now.
func (e *Event) Encode() { e.Encoded = e.marshal() }

// JSON is the event's JSON and a newline, as json.Encoder writes it:
// Encoded when it is set.
func (e *Event) JSON() []byte {
	if e.Encoded != nil {
		return e.Encoded
	}
	return e.marshal()
}

func (e *Event) marshal() []byte {
	b, err := json.Marshal(e)
	if err != nil {
		return nil // plain fields: cannot fail
	}
	return append(b, '\n')
}

// IsCreated reports whether v2 answers this event with 201.
func (e *Event) IsCreated() bool {
	return e.Action == ActionCreate || (e.Action == ActionSet && e.PrevNode == nil)
}

// Index is the v2 index of the event (its node's modifiedIndex).
func (e *Event) Index() uint64 {
	if e.Node == nil {
		return 0
	}
	return e.Node.ModifiedIndex
}

// LeaseWindow is how long after its grant a bridge's lease takes the keys
// of TTL writes: their expiration is the lease's, up to LeaseWindow after
// the write's own.
const LeaseWindow = 100 * time.Millisecond

// SetExpiration fills expiration and ttl as v2 shows them: ttl is the
// remaining time rounded up to whole seconds, at least 1 before the
// expiration and none (0) after it. The LeaseWindow a key may have been
// given beyond its TTL is left out, so a key shows the ttl it asked for right
// after its write.
func (n *Node) SetExpiration(exp time.Time, now time.Time) {
	t := exp.UTC()
	n.Expiration = &t
	d := exp.Sub(now)
	if d <= 0 {
		n.TTL = 0
		return
	}
	d -= LeaseWindow
	ttl := max(d/time.Second, 0)
	if d%time.Second > 0 {
		ttl++
	}
	n.TTL = max(int64(ttl), 1)
}

func strPtr(s string) *string { return &s }

// KV is a v3 key-value as the bridge reads it.
type KV struct {
	Key            string
	Value          []byte
	CreateRevision int64
	ModRevision    int64
	Lease          int64
	// ModIndex and CreateIndex, when set, are the v2 indexes the events
	// that last changed and that created the key had, where their revision
	// held several events (the mirror learns them from the decoded watch);
	// 0 means the revision's own index.
	ModIndex    uint64
	CreateIndex uint64
}

// Modified is the v2 modifiedIndex of the key.
func (kv *KV) Modified() uint64 {
	if kv.ModIndex != 0 {
		return kv.ModIndex
	}
	return Index(kv.ModRevision)
}

// Created is the v2 createdIndex of the key.
func (kv *KV) Created() uint64 {
	if kv.CreateIndex != 0 {
		return kv.CreateIndex
	}
	return Index(kv.CreateRevision)
}

// Leases resolves the expiration of v3 leases; a lease it does not know is
// shown as permanent.
type Leases map[int64]time.Time

func (ls Leases) apply(n *Node, lease int64, now time.Time) {
	if lease == 0 {
		return
	}
	if exp, ok := ls[lease]; ok {
		n.SetExpiration(exp, now)
	}
}

// FileNode is the v2 node of a file stored at kv.
func FileNode(p string, kv *KV, ls Leases, now time.Time) *Node {
	// The node and its value in one allocation: a listing makes one per
	// file.
	f := &struct {
		n Node
		v string
	}{v: string(kv.Value)}
	n := &f.n
	n.Key, n.Value, n.ModifiedIndex, n.CreatedIndex = p, &f.v, kv.Modified(), kv.Created()
	ls.apply(n, kv.Lease, now)
	return n
}

// DirNode is the v2 node of a directory; marker may be nil for a directory
// that exists only because keys exist below it (written by v3 clients).
func DirNode(p string, marker *KV, ls Leases, now time.Time) *Node {
	n := &Node{Key: p, Dir: true}
	if p == "/" {
		n.Key = ""
		return n
	}
	if marker != nil {
		n.ModifiedIndex, n.CreatedIndex = marker.Modified(), marker.Created()
		ls.apply(n, marker.Lease, now)
		if n.Expiration == nil && marker.Lease != 0 {
			if ns, err := strconv.ParseInt(string(marker.Value), 10, 64); err == nil {
				n.SetExpiration(time.Unix(0, ns), now)
			}
		}
	}
	return n
}
