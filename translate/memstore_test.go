// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"
)

// memStore is a v3 key space in memory that serves v2 requests the way the
// backend does, with this package's functions for every decision: it parses
// the request, reads a snapshot, plans the write, evaluates the plan as etcd
// evaluates a transaction (every compare, then the ops, at the next
// revision), and decodes the revision's events as a watcher would. So a v2
// request is followed from its form to its answer, and on to the watch
// event and the reads after it, without an etcd member.
type memStore struct {
	t       *testing.T
	l       Layout
	now     time.Time
	rev     int64
	kvs     map[string]*KV
	leases  map[int64]time.Time // lease → expiration
	lastID  int64
	watched []*Event // every event decoded from the revisions, in order
	// parseErr is the v2 error of the last request parse refused.
	parseErr *Error
}

func newMemStore(t *testing.T) *memStore {
	return &memStore{t: t, l: planLayout, now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), rev: 1,
		kvs: map[string]*KV{}, leases: map[int64]time.Time{}}
}

// first is the first key in [key, end), or nil.
func (m *memStore) first(key, end string) *KV {
	var out *KV
	for k, kv := range m.kvs {
		if k >= key && k < end && (out == nil || k < out.Key) {
			out = kv
		}
	}
	return out
}

// rangeOf is every key in [key, end), in key order.
func (m *memStore) rangeOf(key, end string) []*KV {
	var out []*KV
	for k, kv := range m.kvs {
		if k >= key && k < end {
			c := *kv
			out = append(out, &c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func (m *memStore) read(r Read) *KV {
	if r.End != "" {
		return m.first(r.Key, r.End)
	}
	if kv, ok := m.kvs[r.Key]; ok {
		c := *kv
		return &c
	}
	return nil
}

func (m *memStore) snapshot(p string, withSeq bool) *Snapshot {
	reads := m.l.SnapshotReads(p, withSeq)
	kvs := make([]*KV, len(reads))
	for i, r := range reads {
		kvs[i] = m.read(r)
	}
	return m.l.NewSnapshot(p, m.rev, withSeq, kvs)
}

func (m *memStore) leaseMap() Leases {
	ls := Leases{}
	for id, exp := range m.leases {
		ls[id] = exp
	}
	return ls
}

// holds evaluates one compare as etcd does: a range compare holds when it
// holds for every key in the range; an absent key, or an empty range,
// compares as revision 0.
func (m *memStore) holds(c Cmp) bool {
	var kvs []*KV
	if c.End != "" {
		kvs = m.rangeOf(c.Key, c.End)
	} else if kv, ok := m.kvs[c.Key]; ok {
		kvs = []*KV{kv}
	}
	if len(kvs) == 0 {
		kvs = []*KV{{Key: c.Key}}
	}
	for _, kv := range kvs {
		v := kv.ModRevision
		if c.Target == CmpCreate {
			v = kv.CreateRevision
		}
		var ok bool
		switch c.Result {
		case "=":
			ok = v == c.Value
		case "<":
			ok = v < c.Value
		case ">":
			ok = v > c.Value
		default:
			m.t.Fatalf("compare %+v: unknown result", c)
		}
		if !ok {
			return false
		}
	}
	return true
}

// txn applies cmps and ops at the next revision as etcd does, refusing what
// etcd refuses (a key put twice, a put inside a deleted range), and returns
// the revision's watch events; ok is false when a compare failed.
func (m *memStore) txn(cmps []Cmp, ops []Op, lease int64) ([]V3Event, bool) {
	m.t.Helper()
	for _, c := range cmps {
		if !m.holds(c) {
			return nil, false
		}
	}
	put := map[string]bool{}
	for _, o := range ops {
		if o.Type != OpPut {
			continue
		}
		if put[o.Key] {
			m.t.Fatalf("a transaction puts %q twice: etcd refuses it", o.Key)
		}
		put[o.Key] = true
	}
	for _, o := range ops {
		if o.Type == OpDelete && o.End != "" {
			for k := range put {
				if k >= o.Key && k < o.End {
					m.t.Fatalf("a transaction puts %q inside a range it deletes: etcd refuses it", k)
				}
			}
		}
	}
	rev := m.rev + 1
	var evs []V3Event
	for _, o := range ops {
		switch {
		case o.Type == OpPut:
			kv := &KV{Key: o.Key, Value: o.Value, CreateRevision: rev, ModRevision: rev}
			if o.WithLease {
				if lease == 0 {
					m.t.Fatalf("op %+v asks for a lease the plan has none of", o)
				}
				kv.Lease = lease
			}
			var prev *KV
			if old, ok := m.kvs[o.Key]; ok {
				prev = old
				kv.CreateRevision = old.CreateRevision
			}
			m.kvs[o.Key] = kv
			evs = append(evs, V3Event{KV: *kv, Prev: prev})
		case o.End != "":
			for _, kv := range m.rangeOf(o.Key, o.End) {
				delete(m.kvs, kv.Key)
				evs = append(evs, V3Event{Delete: true, KV: KV{Key: kv.Key, ModRevision: rev}, Prev: kv})
			}
		default:
			if old, ok := m.kvs[o.Key]; ok {
				delete(m.kvs, o.Key)
				evs = append(evs, V3Event{Delete: true, KV: KV{Key: o.Key, ModRevision: rev}, Prev: old})
			}
		}
	}
	if len(evs) > 0 {
		m.rev = rev
	}
	return evs, true
}

// decode is what a watcher makes of revision m.rev's events.
func (m *memStore) decode(evs []V3Event) ([]*Event, []string) {
	m.t.Helper()
	out, sweeps, forged := m.l.DecodeRevision(m.rev, evs, m.leaseMap(), m.now)
	if forged {
		m.t.Fatalf("revision %d: a journal record of the bridge's own write was taken as forged", m.rev)
	}
	m.watched = append(m.watched, out...)
	return out, sweeps
}

// do serves one v2 request, form being its url-encoded parameters; it
// returns the answer or the v2 error.
func (m *memStore) do(method, path, form string) (*Event, *Error) {
	m.t.Helper()
	r := m.parse(method, path, form)
	if r == nil {
		return nil, m.parseErr
	}
	if method == "GET" {
		return m.get(r)
	}
	plan, verr := m.plan(r)
	if verr != nil {
		return nil, verr
	}
	res, ok := m.commit(plan)
	if !ok {
		m.t.Fatalf("%s %s: the plan's guards fail on the snapshot it was planned on", method, path)
	}
	return res, nil
}

// parse parses a request; on a v2 error it returns nil and keeps the error
// in parseErr.
func (m *memStore) parse(method, path, form string) *Request {
	m.t.Helper()
	vals, err := url.ParseQuery(form)
	if err != nil {
		m.t.Fatal(err)
	}
	r, verr := ParseRequest(method, path, vals)
	m.parseErr = verr
	return r
}

// plan decides a write on a snapshot of the store as it is now, and binds
// the lease its TTL asks for.
func (m *memStore) plan(r *Request) (*Plan, *Error) {
	plan, verr := m.l.PlanWrite(r, m.snapshot(r.Path, r.Method == "POST"), m.leaseMap(), m.now)
	if verr != nil {
		return nil, verr
	}
	if plan.TTL > 0 {
		m.lastID++
		exp := m.now.Add(time.Duration(plan.TTL) * time.Second)
		m.leases[m.lastID] = exp
		plan.Bind(m.lastID, exp, m.now, false)
	} else {
		plan.Bind(0, time.Time{}, m.now, false)
	}
	return plan, nil
}

// commit sends a plan's transaction: false when its guards fail (nothing
// is applied), else its answer, which must be what watchers decode from its
// revision.
func (m *memStore) commit(plan *Plan) (*Event, bool) {
	m.t.Helper()
	evs, ok := m.txn(plan.Cmps, plan.Ops, plan.Lease())
	if !ok {
		return nil, false
	}
	res := plan.Result(m.rev)
	decoded, sweeps := m.decode(evs)
	if len(sweeps) > 0 {
		m.t.Fatalf("%s: a client's write decoded as an expiry of %v", res.JSON(), sweeps)
	}
	switch {
	case plan.Refresh && len(decoded) != 0:
		m.t.Fatalf("a refresh woke watchers with %s", decoded[0].JSON())
	case !plan.Refresh && (len(decoded) != 1 || string(decoded[0].JSON()) != string(res.JSON())):
		m.t.Fatalf("answered\n%s but watchers decode %d events: %v", res.JSON(), len(decoded), decoded)
	}
	return res, true
}

func (m *memStore) get(r *Request) (*Event, *Error) {
	reads := m.l.GetReads(r.Path)
	file, marker := m.read(reads[0]), m.read(reads[1])
	data, markers := m.rangeOf(reads[2].Key, reads[2].End), m.rangeOf(reads[3].Key, reads[3].End)
	node := m.l.BuildGet(r.Path, file, marker, data, markers, r.Recursive, m.leaseMap(), m.now)
	if node == nil {
		return nil, m.snapshot(r.Path, false).MissError()
	}
	return &Event{Action: ActionGet, Node: node, EtcdIndex: Index(m.rev)}, nil
}

// advance moves the clock by d and expires the leases that ran out, each in
// a revision of its own as etcd revokes them; a directory whose TTL ran out
// is then swept as the backend sweeps it.
func (m *memStore) advance(d time.Duration) {
	m.t.Helper()
	m.now = m.now.Add(d)
	var due []int64
	for id, exp := range m.leases {
		if !exp.After(m.now) {
			due = append(due, id)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i] < due[j] })
	for _, id := range due {
		var ops []Op
		for _, kv := range m.rangeOf("", "\xff") {
			if kv.Lease == id {
				ops = append(ops, Op{Type: OpDelete, Key: kv.Key})
			}
		}
		delete(m.leases, id)
		evs, _ := m.txn(nil, ops, 0)
		if len(evs) == 0 {
			continue
		}
		_, sweeps := m.decode(evs)
		for _, dir := range sweeps {
			cmps, ops := m.l.SweepTxn(dir, 0)
			evs, ok := m.txn(cmps, ops, 0)
			if !ok {
				m.t.Fatalf("the sweep of %s: its guard fails after the directory expired", dir)
			}
			if out, _ := m.decode(evs); len(out) != 0 {
				m.t.Fatalf("the sweep of %s woke watchers: %v", dir, out)
			}
		}
	}
}

// step is one request and the answer it must get: want is the JSON body v2
// sends (an event, or an error) and index its X-Etcd-Index (an error
// carries its own).
type step struct {
	method, path, form string
	want               string
	index              uint64
}

// run serves the steps in order; each answer must be exactly want.
func (m *memStore) run(steps []step) {
	m.t.Helper()
	for i, s := range steps {
		ev, verr := m.do(s.method, s.path, s.form)
		var got string
		var idx uint64
		if verr != nil {
			got, idx = string(verr.JSON()), s.index
		} else {
			got, idx = string(ev.JSON()), ev.EtcdIndex
		}
		if got = strings.TrimSuffix(got, "\n"); got != s.want || idx != s.index {
			m.t.Fatalf("step %d, %s %s?%s:\n got %s (X-Etcd-Index %d)\nwant %s (X-Etcd-Index %d)",
				i, s.method, s.path, s.form, got, idx, s.want, s.index)
		}
	}
}
