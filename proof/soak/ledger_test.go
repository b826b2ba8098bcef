// SPDX-License-Identifier: Apache-2.0

package soak

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// identity names one v2 event without its index: every write carries a
// value no other write uses (writer id and sequence), so the key, whether
// the event puts or removes, and the value put (or the value removed, from
// prevNode) tell events apart. Directories have no value, but every
// directory the soak creates has a name of its own.
type identity struct {
	key   string
	del   bool // delete, compareAndDelete or expire: value is the value removed
	value string
}

func (id identity) String() string {
	op := "put"
	if id.del {
		op = "del"
	}
	return op + " " + id.key + "=" + id.value
}

// eventIdentity is the identity of an event as a watcher received it.
func eventIdentity(ev *translate.Event) identity {
	id := identity{}
	if ev.Node != nil {
		id.key = ev.Node.Key
	}
	switch ev.Action {
	case "delete", "compareAndDelete", "expire":
		id.del = true
		if ev.PrevNode != nil && ev.PrevNode.Value != nil {
			id.value = *ev.PrevNode.Value
		}
	default:
		if ev.Node != nil && ev.Node.Value != nil {
			id.value = *ev.Node.Value
		}
	}
	return id
}

// origin is where an expected event came from, for the loss breakdown.
type origin int

const (
	fromV2      origin = iota // a v2 write through the bridge
	fromExpire                // the expiry of a TTL key written through the bridge
	fromV3First               // the first event of a v3 multi-key transaction's revision
	fromV3Rest                // a later event of the same revision
	numOrigins
)

var originNames = [numOrigins]string{"v2 write", "v2 TTL expiry", "v3 txn, first key of its revision",
	"v3 txn, other keys of its revision"}

// expected is an event every watcher whose scope covers its key must
// deliver, once, in its key's order.
type expected struct {
	id     identity
	action string
	origin origin
	// The event was committed after sent and before acked; acked is zero
	// when unknown (an expiry happens after its key's TTL, by etcd).
	sent, acked time.Time
	pos         int // its place among its key's expected events
}

// ack is one expected event with a known commit window, for the stuck-watch
// monitor; acks are kept in the order they were recorded (acked ascending).
type ack struct {
	key         string
	sent, acked time.Time
}

// ledger records what the writers know about the events they caused:
// expected (acknowledged) events, and events that may or may not exist
// (a write whose answer was lost: a timeout, a reset, a 5xx).
type ledger struct {
	mu       sync.Mutex // guards every field below
	events   map[identity]*expected
	maybe    map[identity]bool
	maybeDel map[string]bool // keys with an unanswered delete or TTL: any removal of them is explained
	nextPos  map[string]int
	acks     []ack
}

func newLedger() *ledger {
	return &ledger{events: map[identity]*expected{}, maybe: map[identity]bool{}, maybeDel: map[string]bool{},
		nextPos: map[string]int{}}
}

// expect records an acknowledged event. Each key has one writer, which
// writes it one request at a time, so the order of acknowledgements is the
// key's commit order.
func (l *ledger) expect(e expected) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.pos = l.nextPos[e.id.key]
	l.nextPos[e.id.key]++
	l.events[e.id] = &e
	if !e.acked.IsZero() {
		l.acks = append(l.acks, ack{key: e.id.key, sent: e.sent, acked: e.acked})
	}
}

// uncertain records an event that may exist (its write's answer was lost).
func (l *ledger) uncertain(id identity) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maybe[id] = true
}

// uncertainDel records that some removal of key may exist.
func (l *ledger) uncertainDel(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maybeDel[key] = true
}

// owed reports whether an expected event in scope was written after since
// (sent later) and acknowledged by before: a watch open since then owes it.
func (l *ledger) owed(scope string, since, before time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.acks), func(i int) bool { return l.acks[i].acked.After(since) })
	for ; i < len(l.acks) && !l.acks[i].acked.After(before); i++ {
		if a := l.acks[i]; a.sent.After(since) && inScope(scope, a.key) {
			return true
		}
	}
	return false
}

// snapshot is a copy of the ledger for the analysis.
func (l *ledger) snapshot() ledgerView {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := ledgerView{events: make(map[identity]*expected, len(l.events)), maybe: map[identity]bool{},
		maybeDel: map[string]bool{}}
	for id, e := range l.events {
		c := *e
		v.events[id] = &c
	}
	for id := range l.maybe {
		v.maybe[id] = true
	}
	for k := range l.maybeDel {
		v.maybeDel[k] = true
	}
	return v
}

// ledgerView is what the analysis reads.
type ledgerView struct {
	events   map[identity]*expected
	maybe    map[identity]bool
	maybeDel map[string]bool
}

// explainsMaybe reports whether an event that nobody expected may still
// have happened (a write whose answer was lost).
func (v ledgerView) explainsMaybe(id identity) bool {
	return v.maybe[id] || (id.del && v.maybeDel[id.key])
}

// inScope reports whether a recursive watch on scope sees changes of key.
func inScope(scope, key string) bool {
	return key == scope || strings.HasPrefix(key, scope+"/")
}
