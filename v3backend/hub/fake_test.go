// SPDX-License-Identifier: Apache-2.0

package hub

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// fakeSource is an in-memory Source: a history of revisions (revision 1 is
// the empty one a fresh store starts at), the shared feeds open on it, and
// knobs to lose the session, compact history, fail or hold history feeds.
type fakeSource struct {
	mu        sync.Mutex
	revs      map[int64][]*translate.Event
	cur       int64
	compacted int64 // revisions below it are gone (0: none)
	down      bool  // Feed waits for up
	upCh      chan struct{}
	shared    map[*fakeFeed]struct{}
	hist      map[*fakeFeed]struct{}
	keptErr   error
	onKept    func() // called (without mu) on every Kept
	// numbered: events take translate's indexes (several per revision);
	// otherwise a revision's events all take the revision as their index,
	// as under oneIndexPerRevision.
	numbered bool

	// histGate, when set, holds every history batch until a token is
	// received from it: the test steps a replay batch by batch. With
	// gateOnly, only the feeds opened at that revision are held.
	histGate chan struct{}
	gateOnly int64

	feedsOpened int
	feedFroms   []int64
	histOpened  int        // full history feeds
	histFroms   []int64    // where they started
	skimOpened  int        // skimming history feeds
	skimKeys    [][]string // what they skimmed for
	keptCalls   int
}

type fakeFeed struct {
	src    *fakeSource
	shared bool
	wake   chan struct{} // 1-buffered: something changed
	queue  []Batch       // shared: batches not yet returned
	from   int64         // history: the revision it was opened at
	next   int64         // history: next revision to return
	sentAt int64         // history: last revision a Progress reported
	skim   []string      // history: the keys it skims for (nil: full)
	found  bool          // skimming: it sent its Unread batch
	err    error
	closed bool
}

// oneIndexPerRevision numbers v2 events by their revision alone, so the
// tests can name indexes by revisions.
type oneIndexPerRevision struct{}

func (oneIndexPerRevision) Index(rev int64) uint64      { return uint64(max(rev, 0)) }
func (oneIndexPerRevision) FirstIndex(rev int64) uint64 { return uint64(max(rev, 0)) }
func (oneIndexPerRevision) Revision(index uint64) int64 { return int64(index) }

func newFake() *fakeSource {
	return &fakeSource{revs: map[int64][]*translate.Event{1: nil}, cur: 1, upCh: make(chan struct{}),
		shared: map[*fakeFeed]struct{}{}, hist: map[*fakeFeed]struct{}{}}
}

// ev builds an event on key; write gives it its index.
func ev(action, key string) *translate.Event {
	return &translate.Event{Action: action, Node: &translate.Node{Key: key}}
}

// dirEv builds an event on directory key.
func dirEv(action, key string) *translate.Event {
	e := ev(action, key)
	e.Node.Dir = true
	e.PrevNode = &translate.Node{Key: key, Dir: true}
	return e
}

// write appends a revision holding evs and pushes it to every open shared
// feed; it returns the revision.
func (s *fakeSource) write(evs ...*translate.Event) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur++
	if s.numbered {
		translate.NumberEvents(s.cur, evs)
	} else {
		for _, e := range evs {
			e.Node.ModifiedIndex = uint64(s.cur)
		}
	}
	s.revs[s.cur] = evs
	for f := range s.shared {
		if f.err == nil {
			f.queue = append(f.queue, Batch{Rev: s.cur, Events: evs})
		}
		f.poke()
	}
	for f := range s.hist {
		f.poke()
	}
	return s.cur
}

// writeN writes n revisions each setting key, returning the last one.
func (s *fakeSource) writeN(n int, key string) int64 {
	var rev int64
	for range n {
		rev = s.write(ev(translate.ActionSet, key))
	}
	return rev
}

func (s *fakeSource) current() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// lose ends every open feed, shared and history, as a lost session does;
// batches not yet read are lost with it. Feed then waits for up.
func (s *fakeSource) lose() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down {
		s.down = true
		s.upCh = make(chan struct{})
	}
	for f := range s.shared {
		f.fail(errors.New("fake: session lost"))
	}
	for f := range s.hist {
		f.fail(errors.New("fake: session lost"))
	}
}

// hold makes Feed wait for up, leaving open feeds alone.
func (s *fakeSource) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down {
		s.down = true
		s.upCh = make(chan struct{})
	}
}

// gateHistory holds history feeds until step or releaseHistory.
func (s *fakeSource) gateHistory() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.histGate = make(chan struct{})
}

// step lets one history batch through; false if no history feed took it
// within timeout.
func (s *fakeSource) step(timeout time.Duration) bool {
	s.mu.Lock()
	g := s.histGate
	s.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case g <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

// releaseHistory lets every history batch through from now on.
func (s *fakeSource) releaseHistory() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.histGate)
}

// up lets Feed establish feeds again.
func (s *fakeSource) up() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		s.down = false
		close(s.upCh)
	}
}

// failShared ends the open shared feeds with err (the session stays up).
func (s *fakeSource) failShared(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for f := range s.shared {
		f.fail(err)
	}
}

// failHistory ends the open history feeds with err.
func (s *fakeSource) failHistory(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for f := range s.hist {
		f.fail(err)
	}
}

// compact drops the revisions below rev.
func (s *fakeSource) compact(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compacted = rev
	for r := range s.revs {
		if r < rev {
			delete(s.revs, r)
		}
	}
}

func (s *fakeSource) counts() (feeds, hist int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.feedsOpened, s.histOpened
}

// skims is how many skimming history feeds were opened.
func (s *fakeSource) skims() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skimOpened
}

// openHistory is how many history feeds are open.
func (s *fakeSource) openHistory() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hist)
}

func (s *fakeSource) openShared() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.shared)
}

// Feed waits while the fake is down, then opens a shared feed: Created
// with the current revision, the stored revisions from from on, then the
// ones written later.
func (s *fakeSource) Feed(ctx context.Context, from int64) (Feed, error) {
	for {
		s.mu.Lock()
		if !s.down {
			break
		}
		up := s.upCh
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-up:
		}
	}
	defer s.mu.Unlock()
	s.feedsOpened++
	s.feedFroms = append(s.feedFroms, from)
	f := &fakeFeed{src: s, shared: true, wake: make(chan struct{}, 1)}
	if from > 0 && from < s.compacted {
		f.err = ErrCompacted
	} else {
		f.queue = append(f.queue, Batch{Created: true, Rev: s.cur})
		for r := from; from > 0 && r <= s.cur; r++ {
			f.queue = append(f.queue, Batch{Rev: r, Events: s.revs[r]})
		}
	}
	s.shared[f] = struct{}{}
	return f, nil
}

// History opens a history feed: Created, the stored revisions from from
// on, then Progress with the current revision once caught up. Skimming for
// keys, it sends a Progress for each revision none of whose events may
// concern them, and Unread for the first that may.
func (s *fakeSource) History(ctx context.Context, from int64, keys []string) (Feed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, errors.New("fake: no session")
	}
	if keys != nil {
		s.skimOpened++
		s.skimKeys = append(s.skimKeys, keys)
	} else {
		s.histOpened++
		s.histFroms = append(s.histFroms, from)
	}
	f := &fakeFeed{src: s, wake: make(chan struct{}, 1), from: from, next: from, skim: keys}
	if from < s.compacted {
		f.err = ErrCompacted
	} else {
		f.queue = []Batch{{Created: true, Rev: s.cur}} // as a v3 watch with created notify
	}
	s.hist[f] = struct{}{}
	return f, nil
}

// Kept reports whether rev has not been compacted.
func (s *fakeSource) Kept(ctx context.Context, rev int64) (bool, error) {
	s.mu.Lock()
	s.keptCalls++
	hook, err := s.onKept, s.keptErr
	ok := rev >= s.compacted
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	if err != nil {
		return false, err
	}
	return ok, nil
}

func (f *fakeFeed) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// fail ends the feed with err; f.src.mu is held.
func (f *fakeFeed) fail(err error) {
	if f.err == nil {
		f.err = err
	}
	f.queue = nil
	f.poke()
}

func (f *fakeFeed) Next(ctx context.Context) (Batch, error) {
	s := f.src
	if !f.shared {
		s.mu.Lock()
		if len(f.queue) > 0 && f.err == nil { // Created: not held
			b := f.queue[0]
			f.queue = f.queue[1:]
			s.mu.Unlock()
			return b, nil
		}
		s.mu.Unlock()
		if err := f.waitGate(ctx); err != nil {
			return Batch{}, err
		}
	}
	for {
		s.mu.Lock()
		if f.err != nil {
			err := f.err
			s.mu.Unlock()
			return Batch{}, err
		}
		if f.shared && len(f.queue) > 0 {
			b := f.queue[0]
			f.queue = f.queue[1:]
			s.mu.Unlock()
			return b, nil
		}
		if !f.shared && !f.found {
			if f.next <= s.cur {
				b := Batch{Rev: f.next, Events: s.revs[f.next]}
				if f.skim != nil {
					b = Batch{Rev: f.next, Progress: true}
					for _, e := range s.revs[f.next] {
						if eventConcerns(e, f.skim) {
							b, f.found = Batch{Rev: f.next, Unread: true}, true
						}
					}
				}
				f.next++
				s.mu.Unlock()
				return b, nil
			}
			if f.sentAt < s.cur {
				f.sentAt = s.cur
				b := Batch{Progress: true, Rev: s.cur}
				s.mu.Unlock()
				return b, nil
			}
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		case <-f.wake:
		}
	}
}

// waitGate holds a history batch until the test lets it through (when
// histGate is set), or the feed fails.
func (f *fakeFeed) waitGate(ctx context.Context) error {
	s := f.src
	for {
		s.mu.Lock()
		gate, err := s.histGate, f.err
		if s.gateOnly != 0 && f.from != s.gateOnly {
			gate = nil
		}
		s.mu.Unlock()
		if gate == nil || err != nil {
			return nil // Next reports err
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-f.wake:
		}
	}
}

func (f *fakeFeed) Close() {
	s := f.src
	s.mu.Lock()
	defer s.mu.Unlock()
	f.closed = true
	delete(s.shared, f)
	delete(s.hist, f)
}
