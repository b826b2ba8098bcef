// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/btree"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
)

// mirror is the bridge's copy of its own key space — data keys, directory
// markers, in-order sequence keys and lease records — as of one revision. It
// is loaded when the shared feed starts and kept by that feed, which applies
// every revision before the hub sees its events. Reads and write decisions
// are taken from it, so a plain GET costs no backend round trip and a write
// costs one (its guarded transaction, whose compares reject a decision taken
// on a stale copy). v2 served its reads from the memory of the member that
// answered; the mirror is the same thing one hop closer.
type mirror struct {
	layout       translate.Layout
	ttlDirPrefix string // layout.TTLDirPrefix(), built once

	// mu guards everything below. Readers hold it shared while they read a
	// whole snapshot, so what they see is one revision.
	mu      sync.RWMutex
	kvs     *btree.BTreeG[*translate.KV]
	rev     int64         // the copy is the key space as of rev
	valid   bool          // loaded and kept by a live feed
	changed chan struct{} // closed (and replaced) whenever rev moves or valid changes
	bytes   int64         // of the keys and values in kvs
}

func newMirror(l translate.Layout) *mirror {
	return &mirror{layout: l, ttlDirPrefix: l.TTLDirPrefix(), kvs: newKVTree(), changed: make(chan struct{})}
}

func newKVTree() *btree.BTreeG[*translate.KV] {
	return btree.NewG(32, func(a, b *translate.KV) bool { return a.Key < b.Key })
}

// signalLocked wakes every waiter.
func (m *mirror) signalLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// invalidate stops serving from the mirror until the next load (the feed
// keeping it ended).
func (m *mirror) invalidate() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.valid {
		m.valid = false
		m.signalLocked()
	}
}

// resume reports whether the mirror is the key space as of from-1, so a
// feed starting at from keeps it exact; it becomes valid again.
func (m *mirror) resume(from int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rev == 0 || m.rev != from-1 {
		return false
	}
	m.valid = true
	m.signalLocked()
	return true
}

// mirrorPage is how many keys one read of the initial load fetches.
const mirrorPage = 2000

// load reads the key space (each of the layout's ranges) at one revision,
// page by page, and makes it the mirror's content; it returns that
// revision.
func (m *mirror) load(ctx context.Context, cli *clientv3.Client) (int64, error) {
	t := newKVTree()
	var rev int64
	for _, r := range m.layout.WatchRanges() {
		for key := r.Start; ; {
			opts := []clientv3.OpOption{clientv3.WithRange(r.End), clientv3.WithLimit(mirrorPage), clientv3.WithSerializable()}
			if rev > 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			resp, err := cli.Get(ctx, key, opts...)
			if err != nil {
				return 0, err
			}
			if rev == 0 {
				rev = resp.Header.Revision
			}
			for _, kv := range resp.Kvs {
				if m.layout.Mirrored(string(kv.Key)) {
					t.ReplaceOrInsert(toKV(kv))
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	m.install(t, rev)
	return rev, nil
}

// install makes t, the key space read at rev, the mirror's content.
func (m *mirror) install(t *btree.BTreeG[*translate.KV], rev int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keepIndexes(t)
	m.bytes = 0
	t.Ascend(func(kv *translate.KV) bool {
		m.bytes += kvBytes(kv)
		return true
	})
	m.kvs, m.rev, m.valid = t, rev, true
	m.signalLocked()
}

// keepIndexes gives the keys of t, a new copy read from the backend, the
// event indexes the mirror has for the same versions of them: a read knows
// only revisions, so a reload would otherwise show a key written in a
// revision of several events with the revision's index rather than the one
// its write answered and its watchers saw.
func (m *mirror) keepIndexes(t *btree.BTreeG[*translate.KV]) {
	t.Ascend(func(kv *translate.KV) bool {
		if mk, ok := m.kvs.Get(kv); ok {
			if mk.ModRevision == kv.ModRevision {
				kv.ModIndex = mk.ModIndex
			}
			if mk.CreateRevision == kv.CreateRevision {
				kv.CreateIndex = mk.CreateIndex
			}
		}
		return true
	})
}

// apply brings the mirror to revision rev with that revision's events;
// decoded are the v2 events they make, whose indexes the keys keep where
// the revision holds several (so a read shows a key's modifiedIndex as its
// event did, and as the write that made it answered).
func (m *mirror) apply(rev int64, evs []translate.V3Event, decoded []*translate.Event) {
	idx := m.eventIndexes(rev, decoded)
	m.mu.Lock()
	defer m.mu.Unlock()
	if rev <= m.rev {
		// Loaded after this revision (a feed resumed behind a reload): the
		// copy already has it.
		return
	}
	for i := range evs {
		e := &evs[i]
		if !m.layout.Mirrored(e.KV.Key) {
			continue
		}
		if e.Delete {
			if old, ok := m.kvs.Delete(&translate.KV{Key: e.KV.Key}); ok {
				m.bytes -= kvBytes(old)
			}
			continue
		}
		kv := e.KV
		if i, ok := idx[kv.Key]; ok {
			kv.ModIndex = i
			if kv.CreateRevision == rev {
				kv.CreateIndex = i
			}
		}
		m.bytes += kvBytes(&kv)
		old, ok := m.kvs.ReplaceOrInsert(&kv)
		if ok {
			m.bytes -= kvBytes(old)
		}
		if ok && old.CreateRevision == kv.CreateRevision && kv.CreateIndex == 0 {
			kv.CreateIndex = old.CreateIndex
		}
	}
	if rev > m.rev {
		m.rev = rev
		m.signalLocked()
	}
}

// eventIndexes maps the keys of the decoded events of revision rev that did
// not get the revision's own index to the index they got (nil when every
// event has the revision's index: a revision with one event).
func (m *mirror) eventIndexes(rev int64, decoded []*translate.Event) map[string]uint64 {
	var idx map[string]uint64
	for _, ev := range decoded {
		if ev.Node == nil || ev.Node.ModifiedIndex == translate.Index(rev) {
			continue
		}
		if idx == nil {
			idx = make(map[string]uint64, len(decoded))
		}
		i, p := ev.Node.ModifiedIndex, ev.Node.Key
		if ev.Node.Dir {
			idx[m.layout.MarkerKey(p)] = i
		} else {
			idx[m.layout.DataKey(p)] = i
		}
		// The directories a write creates above its node take its index,
		// as in v2 (apply uses only the keys the revision wrote). Two
		// writes of one revision never create the same directory: it is
		// one write's key, the other's guard.
		for j := len(p) - 1; j > 0; j-- {
			if p[j] == '/' {
				if k := m.layout.MarkerKey(p[:j]); idx[k] == 0 {
					idx[k] = i
				}
			}
		}
	}
	return idx
}

// fillIndexes sets on kvs, read from the backend, the event indexes the
// mirror keeps for the same versions of their keys (ModIndex where the
// ModRevision is the mirror's, CreateIndex where the CreateRevision is): a
// read of the backend knows only a key's revisions, and a key written in a
// revision of several events has an index of its own (apply), which the
// write that made it answered and its watchers saw. Where the mirror has
// another version of a key, or none, the revision's index stands.
func (m *mirror) fillIndexes(lists [][]*translate.KV) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, l := range lists {
		for _, kv := range l {
			mk, ok := m.kvs.Get(kv)
			if !ok {
				continue
			}
			if mk.ModRevision == kv.ModRevision {
				kv.ModIndex = mk.ModIndex
			}
			if mk.CreateRevision == kv.CreateRevision {
				kv.CreateIndex = mk.CreateIndex
			}
		}
	}
}

// fillPrev sets each event's previous value from the mirror, which holds the
// key space as of the revision before theirs (a watch without WithPrevKV
// leaves them out). Keys the mirror does not keep (the journal) get none.
func (m *mirror) fillPrev(evs []translate.V3Event) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for i := range evs {
		if evs[i].Prev != nil {
			continue
		}
		if kv, ok := m.kvs.Get(&translate.KV{Key: evs[i].KV.Key}); ok {
			evs[i].Prev = kv
		}
	}
}

// progress records that every revision up to rev has been applied.
func (m *mirror) progress(rev int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rev > m.rev {
		m.rev = rev
		m.signalLocked()
	}
}

// kvBytes is what a key-value counts toward the mirror's size.
func kvBytes(kv *translate.KV) int64 { return int64(len(kv.Key) + len(kv.Value)) }

// size is how many keys the mirror holds, and their bytes (keys and values).
func (m *mirror) size() (keys int, bytes int64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.kvs.Len(), m.bytes
}

// Rev is the revision the mirror is at, and whether it is valid.
func (m *mirror) Rev() (int64, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.rev, m.valid
}

// waitFor waits until the mirror is valid and at revision rev or later; it
// gives up (false) when ctx ends or after timeout. nudge is called, once, if
// the mirror has not got there after a moment (the feed may have nothing to
// deliver in the bridge's key space: a progress request moves it).
func (m *mirror) waitFor(ctx context.Context, rev int64, timeout time.Duration, nudge func()) bool {
	var deadline, nudgeAt <-chan time.Time
	for {
		m.mu.RLock()
		ok, ch := m.valid && m.rev >= rev, m.changed
		m.mu.RUnlock()
		if ok {
			return true
		}
		if deadline == nil {
			t := time.NewTimer(timeout)
			defer t.Stop()
			deadline = t.C
			n := time.NewTimer(2 * time.Millisecond)
			defer n.Stop()
			nudgeAt = n.C
		}
		select {
		case <-ch:
		case <-nudgeAt:
			nudgeAt = nil
			if nudge != nil {
				nudge()
			}
		case <-deadline:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// read answers reads as one v3 read-only transaction would, at the
// mirror's revision: a point read gives the key or nothing; a range read
// gives every key in it, or only the first when first is set. It reports
// false when the mirror is not valid.
func (m *mirror) read(reads []translate.Read, first bool) ([][]*translate.KV, int64, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.valid || !m.holds(reads) {
		return nil, 0, false
	}
	return m.readLocked(reads, first), m.rev, true
}

// readWithTTLDirs is read(append(reads, ttlDirs()...), false) at one
// revision, except that while the mirror holds no TTL directory record it
// neither builds nor answers ttlDirs' reads: the lists then stop at reads'
// (a GET's reads of the TTL directory records around its path cost more
// than the rest of it, and TTL directories are rare).
func (m *mirror) readWithTTLDirs(reads []translate.Read, ttlDirs func() []translate.Read) ([][]*translate.KV, int64, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.holdsTTLDirLocked() {
		reads = append(slices.Clip(reads), ttlDirs()...)
	}
	if !m.valid || !m.holds(reads) {
		return nil, 0, false
	}
	return m.readLocked(reads, false), m.rev, true
}

// holdsTTLDirLocked reports whether the mirror holds a TTL directory
// record (they sort together, under the layout's TTLDirPrefix).
func (m *mirror) holdsTTLDirLocked() bool {
	found := false
	m.kvs.AscendGreaterOrEqual(&translate.KV{Key: m.ttlDirPrefix}, func(kv *translate.KV) bool {
		found = strings.HasPrefix(kv.Key, m.ttlDirPrefix)
		return false
	})
	return found
}

// readLocked is read's work, with mu held.
func (m *mirror) readLocked(reads []translate.Read, first bool) [][]*translate.KV {
	out := make([][]*translate.KV, len(reads))
	for i, r := range reads {
		if r.End == "" {
			if kv, ok := m.kvs.Get(&translate.KV{Key: r.Key}); ok {
				out[i] = []*translate.KV{kv}
			}
			continue
		}
		m.kvs.AscendRange(&translate.KV{Key: r.Key}, &translate.KV{Key: r.End}, func(kv *translate.KV) bool {
			out[i] = append(out[i], kv)
			return !first
		})
	}
	return out
}

// firsts answers a write's snapshot reads (SnapshotReads) as read(reads,
// true) would, with only the first key of each: what a snapshot keeps.
func (m *mirror) firsts(reads []translate.Read) ([]*translate.KV, int64, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.valid || !m.holds(reads) {
		return nil, 0, false
	}
	out := make([]*translate.KV, len(reads))
	probe, end := &translate.KV{}, &translate.KV{}
	for i, r := range reads {
		probe.Key = r.Key
		if r.End == "" {
			out[i], _ = m.kvs.Get(probe)
			continue
		}
		end.Key = r.End
		m.kvs.AscendRange(probe, end, func(kv *translate.KV) bool {
			out[i] = kv
			return false
		})
	}
	return out, m.rev, true
}

// holds reports whether the mirror answers every one of reads (a bridge
// serving some subtrees mirrors only them: a read outside goes to the
// member).
func (m *mirror) holds(reads []translate.Read) bool {
	if !m.layout.Scoped() {
		return true
	}
	for _, r := range reads {
		if !m.layout.MirrorHolds(r) {
			return false
		}
	}
	return true
}
