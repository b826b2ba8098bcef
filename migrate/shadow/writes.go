// SPDX-License-Identifier: Apache-2.0

package shadow

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// written is a forwarded write as Observe hands it over.
type written struct {
	method, query string
	ans           []byte
	status        int
	at            time.Time
}

// state is a v2 node as the comparison of writes sees it.
type state struct {
	exists bool
	dir    bool
	sum    [32]byte  // the value's SHA-256 (files)
	ttl    bool      // on a TTL
	exp    time.Time // its expiration, when ttl and known
}

// pending is a forwarded write awaiting the follower.
type pending struct {
	key, method string
	index       uint64 // the v2 server's index of the write
	want        state
	// unchanged: the write left the node as it was (its prevNode), so the
	// follower had nothing to apply; refresh: a refresh=true write, which
	// v2 reports to no watcher (the follower carries its TTL over later).
	unchanged, refresh bool
	// seen: a change of the v3 side matched want; moved: the key changed
	// on the v3 side after that, or, unseen, to a later write's node.
	seen, moved bool
	listed      bool // in byKey and order, counted in live
	at          time.Time
	done        bool
}

// writes is the comparison of every forwarded write; only the shadow's
// matcher goroutine uses it.
type writes struct {
	byKey      map[string][]*pending
	order      []*pending // arrival order; done ones are trimmed from the head
	live       int        // not done
	applied    uint64     // the follower's applied v2 server index
	appliedRev int64      // the v3 revision that said so
	// recent are the changes of the last recentFor by key, oldest first,
	// for writes whose answer comes after the follower made them;
	// recentOrder is every one of them, oldest first.
	recent      map[string][]recentChange
	recentOrder []recentChange
}

type recentChange struct {
	c  Change
	at time.Time
}

// recentFor is how long a change is kept for a write whose answer comes
// after it: the v2 server's answer can take that long to reach the bridge
// while its watchers, the follower among them, already have the change.
const recentFor = 5 * time.Second

func newWrites() *writes {
	return &writes{byKey: map[string][]*pending{}, recent: map[string][]recentChange{}}
}

// matcher owns the comparison of writes: it takes forwarded writes and the
// feed's updates, and decides each write.
func (s *Shadow) matcher() {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			for _, p := range s.w.order {
				if !p.done {
					s.finishDropped(p, reasonClosing)
				}
			}
			return
		case wr := <-s.writeq:
			s.addWrite(wr)
		case u := <-s.updates:
			s.applyUpdate(u)
		case now := <-tick.C:
			s.decide(now)
			s.expire(now)
			s.gauges()
		}
	}
}

// addWrite parses a forwarded write's answer into a pending write.
func (s *Shadow) addWrite(wr written) {
	var ev translate.Event
	if wr.status >= 300 || json.Unmarshal(wr.ans, &ev) != nil || ev.Node == nil || ev.Node.Key == "" ||
		!s.under(ev.Node.Key) || ev.Node.ModifiedIndex == 0 {
		s.drop(reasonNotComparable)
		return
	}
	p := &pending{key: ev.Node.Key, method: wr.method, index: ev.Node.ModifiedIndex, at: wr.at}
	switch ev.Action {
	case translate.ActionSet, translate.ActionCreate, translate.ActionUpdate, translate.ActionCompareAndSwap:
		p.want = stateOf(ev.Node)
		if ev.PrevNode != nil {
			p.unchanged = s.agrees(p.want, stateOf(ev.PrevNode), true)
		}
	case translate.ActionDelete, translate.ActionCompareAndDelete:
		p.want = state{dir: ev.Node.Dir}
	default:
		s.drop(reasonNotComparable)
		return
	}
	if q, err := url.ParseQuery(wr.query); err == nil {
		p.refresh, _ = strconv.ParseBool(q.Get("refresh"))
	}
	if s.w.live >= s.cfg.MaxPending {
		s.drop(reasonPendingFull)
		return
	}
	// The follower may have been quicker than the answer.
	if rs := s.w.recent[p.key]; len(rs) > 0 {
		if i := slices.IndexFunc(rs, func(r recentChange) bool { return s.matches(p, r.c) }); i >= 0 {
			p.seen, p.moved = true, i < len(rs)-1
			if !p.want.ttl {
				s.finish(p, "", "")
				return
			}
		}
	}
	p.listed = true
	s.w.byKey[p.key] = append(s.w.byKey[p.key], p)
	s.w.order = append(s.w.order, p)
	s.w.live++
}

// stateOf is the state of a node of a v2 answer.
func stateOf(n *translate.Node) state {
	st := state{exists: true, dir: n.Dir, ttl: n.TTL > 0 || n.Expiration != nil}
	if !n.Dir && n.Value != nil {
		st.sum = sha256.Sum256([]byte(*n.Value))
	}
	if n.Expiration != nil {
		st.exp = *n.Expiration
	}
	return st
}

// matches reports whether the v3 side's change c made the node p wants
// (its TTL only as present or not).
func (s *Shadow) matches(p *pending, c Change) bool {
	w := p.want
	if c.Key != p.key || c.Gone == w.exists {
		return false
	}
	if c.Gone {
		return true
	}
	return c.Dir == w.dir && c.TTL == w.ttl && (w.dir || c.Sum == w.sum)
}

// applyUpdate matches the changes of an update with the pending writes,
// then decides the writes the follower has applied.
func (s *Shadow) applyUpdate(u Update) {
	now := time.Now()
	for _, c := range u.Changes {
		rc := recentChange{c: c, at: now}
		s.w.recent[c.Key] = append(s.w.recent[c.Key], rc)
		s.w.recentOrder = append(s.w.recentOrder, rc)
		// The change makes the node of the oldest write awaiting it, if
		// any: the follower is then past every older write of the key it
		// has not made (a re-sync skips writes). Every write it had made
		// has moved on.
		list := s.w.byKey[c.Key]
		j := slices.IndexFunc(list, func(p *pending) bool { return !p.done && !p.seen && s.matches(p, c) })
		for i, p := range list {
			switch {
			case p.done:
			case i == j:
				p.seen = true
				if !p.want.ttl {
					s.finish(p, "", "") // its TTL is the only thing left to check
				}
			case p.seen || i < j:
				p.moved = true
			}
		}
		s.compact(c.Key)
	}
	if u.HasApplied && u.Applied >= s.w.applied {
		s.w.applied, s.w.appliedRev = u.Applied, u.Rev
		s.m.followerIndex.Set(float64(u.Applied))
		s.decide(now)
	}
}

// decide decides the pending writes the follower has applied by the v3
// node at their key. A write not decided here (the v3 side did not answer,
// or showed an older revision than the follower's record) waits for the
// next tick.
func (s *Shadow) decide(now time.Time) {
	read := map[string]*translate.Node{} // one read per key and pass
	for _, p := range s.w.order {
		if p.done || p.index > s.w.applied {
			continue
		}
		got, ok := read[p.key]
		if !ok {
			var err error
			got, err = s.readV3(p.key)
			if err != nil {
				if !errors.Is(err, errStale) {
					s.lg.Debug("shadow comparison: reading a written key from the v3 side", zap.String("key", p.key),
						zap.Error(err))
				}
				return // the next tick tries again; the age bound ends it
			}
			read[p.key] = got
		}
		kind, where := s.judge(p, got, now)
		if kind == superseded {
			s.finishDropped(p, reasonSuperseded)
			continue
		}
		s.finish(p, kind, where)
	}
	s.trim()
}

// errStale is a v3 read older than the follower's progress record.
var errStale = errors.New("the v3 side's read is older than the follower's progress")

// readV3 reads the v3 node at key (nil: none) as of at least the revision
// of the follower's progress.
func (s *Shadow) readV3(key string) (*translate.Node, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	ev, _, err := s.cfg.Store.Get(ctx, &translate.Request{Method: http.MethodGet, Path: key})
	var idx uint64
	var node *translate.Node
	var ve *translate.Error
	switch {
	case err == nil:
		idx, node = ev.EtcdIndex, ev.Node
	case errors.As(err, &ve) && ve.Code == translate.EcodeKeyNotFound:
		idx = ve.Index
	default:
		return nil, err
	}
	if idx < uint64(max(s.w.appliedRev, 0))*translate.IndexesPerRevision {
		return nil, errStale
	}
	return node, nil
}

// judge classifies a write the follower has applied, given the v3 node
// got at its key now: "" (matched) or a kind of divergence, and where.
func (s *Shadow) judge(p *pending, got *translate.Node, now time.Time) (kind, where string) {
	have := state{}
	if got != nil {
		have = stateOf(got)
	}
	k, w := s.differ(p.want, have, !p.refresh)
	switch {
	case k == "":
	case p.moved && (p.seen || p.unchanged):
		// Applied (or nothing to apply), and the key changed since: what
		// the v3 side holds now is a later write's.
		k, w = "", ""
	case !have.exists && p.want.ttl && !p.want.exp.IsZero() && p.want.exp.Before(now.Add(s.cfg.TTLTolerance)):
		k, w = "", "" // expired since
	case p.moved:
		// The follower never made this node, and the key has changed
		// since: a re-sync (a full copy after the follower fell out of
		// the v2 server's history) skips writes. Nothing is left to compare
		// it with; the later writes are compared.
		k, w = superseded, ""
	}
	return k, w
}

// superseded is judge's verdict on a write nothing can be compared with.
const superseded = "superseded"

// differ names what differs between the node a write made (want) and the
// v3 side's (have); ttl compares expirations, not only their presence.
func (s *Shadow) differ(want, have state, ttl bool) (kind, where string) {
	switch {
	case want.exists && !have.exists:
		return KindMissing, "node"
	case !want.exists && have.exists:
		return KindExtra, "node"
	case !want.exists:
		return "", ""
	case want.dir != have.dir:
		return KindDir, "node.dir"
	case !want.dir && want.sum != have.sum:
		return KindValue, "node.value"
	case want.ttl != have.ttl:
		return KindTTL, "node.ttl"
	case ttl && want.ttl && !want.exp.IsZero() && !have.exp.IsZero() && want.exp.Sub(have.exp).Abs() > s.cfg.TTLTolerance:
		return KindTTL, "node.expiration"
	}
	return "", ""
}

// agrees reports whether two states are the same node (a TTL within the
// tolerance).
func (s *Shadow) agrees(a, b state, ttl bool) bool {
	k, _ := s.differ(a, b, ttl)
	return k == ""
}

// expire ends the writes waiting longer than MaxAge: lagging if the
// follower has not applied them, else dropped (the v3 side could not be
// read), and forgets old recent changes.
func (s *Shadow) expire(now time.Time) {
	for _, p := range s.w.order {
		if p.done || now.Sub(p.at) < s.cfg.MaxAge {
			continue
		}
		if p.index > s.w.applied {
			s.finishLagging(p)
		} else {
			s.finishDropped(p, reasonV3Unavailable)
		}
	}
	s.trim()
	n := 0
	for _, rc := range s.w.recentOrder {
		if now.Sub(rc.at) < recentFor && len(s.w.recentOrder)-n <= s.cfg.MaxPending {
			break
		}
		// Both are oldest first: rc heads its key's list.
		if rs := s.w.recent[rc.c.Key]; len(rs) > 1 {
			s.w.recent[rc.c.Key] = rs[1:]
		} else {
			delete(s.w.recent, rc.c.Key)
		}
		n++
	}
	s.w.recentOrder = append(s.w.recentOrder[:0], s.w.recentOrder[n:]...)
}

// finish counts a compared write: matched (kind "") or a divergence.
func (s *Shadow) finish(p *pending, kind, where string) {
	if kind != "" {
		s.m.divergences.WithLabelValues(kind).Inc()
		s.reportWrite(p, kind, where)
	}
	s.done(p)
	s.m.compared.WithLabelValues("write").Inc()
	s.counts.writes.Add(1)
}

func (s *Shadow) finishLagging(p *pending) {
	s.reportWrite(p, lagging, "index")
	s.done(p)
	s.counts.lagging.Add(1)
	s.m.lagging.Inc()
}

func (s *Shadow) finishDropped(p *pending, reason int) {
	s.done(p)
	s.drop(reason)
}

func (s *Shadow) done(p *pending) {
	if !p.done {
		p.done = true
		if p.listed {
			s.w.live--
		}
	}
}

// compact forgets the decided writes of key.
func (s *Shadow) compact(key string) {
	l := s.w.byKey[key]
	n := 0
	for _, p := range l {
		if !p.done {
			l[n] = p
			n++
		}
	}
	clear(l[n:])
	if n == 0 {
		delete(s.w.byKey, key)
	} else {
		s.w.byKey[key] = l[:n]
	}
}

// trim drops decided writes from the head of the arrival order, and every
// decided write from its key's list.
func (s *Shadow) trim() {
	n := 0
	for n < len(s.w.order) && s.w.order[n].done {
		s.compact(s.w.order[n].key)
		n++
	}
	if n > 0 {
		clear(s.w.order[:n])
		s.w.order = s.w.order[n:]
	}
}

// gauges sets the gauges of the writes awaiting the follower.
func (s *Shadow) gauges() {
	s.m.pending.Set(float64(s.w.live))
	behind := 0
	for _, p := range s.w.order {
		if !p.done && p.index > s.w.applied {
			behind++
		}
	}
	s.m.behind.Set(float64(behind))
	s.pendingNow.Store(int64(s.w.live))
	s.behindNow.Store(int64(behind))
	s.appliedNow.Store(s.w.applied)
}

// reportWrite counts and logs a write's divergence or lagging.
func (s *Shadow) reportWrite(p *pending, kind, where string) {
	s.report(p.method, result{key: p.key}, kind, where)
}
