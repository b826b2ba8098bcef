// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// curRev shares the read of the current revision that every v2 watch
// request makes (for its X-Etcd-Index and its start) among the requests that
// ask while another read is in flight. Each caller gets the answer of a read
// that was sent after it asked — what a read of its own would have returned
// had it been sent a moment later — so the answer means exactly what it did.
// One event answers every watcher of a directory and they all come back at
// once: with 10,000 watchers that was 10,000 backend round trips per event
// (enough to starve the liveness heartbeat); now it is one or two. The gRPC
// call also runs off the HTTP handler's goroutine, whose stack then stays
// small for the whole long-poll.
//
// A linearizable curRev does the same for quorum GETs: each caller gets the
// header of a linearizable read sent after it asked, so the revision covers
// every write committed before its request began, and 64 concurrent quorum
// reads cost one or two round trips instead of 64.
type curRev struct {
	linearizable bool // set at construction, never changed

	// mu guards pending and busy.
	mu      sync.Mutex
	pending *curRevCall // asked for, not sent yet
	busy    bool        // a sender goroutine is running
}

type curRevCall struct {
	s    *session
	done chan struct{}
	resp *clientv3.GetResponse
	err  error
}

// get returns a count-only read of the journal key on s (its header carries
// the revision; serializable unless c.linearizable), sent after get was
// called.
func (c *curRev) get(ctx context.Context, b *Backend, s *session) (*clientv3.GetResponse, error) {
	c.mu.Lock()
	call := c.pending
	if call != nil && call.s != s { // a session change is under way: no sharing
		c.mu.Unlock()
		return b.readCurrent(s, c.linearizable)
	}
	if call == nil {
		call = &curRevCall{s: s, done: make(chan struct{})}
		c.pending = call
		if !c.busy {
			c.busy = true
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				c.send(b)
			}()
		}
	}
	c.mu.Unlock()
	select {
	case <-call.done:
		return call.resp, call.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// send sends the pending reads one after the other until none is left.
func (c *curRev) send(b *Backend) {
	for {
		c.mu.Lock()
		call := c.pending
		if call == nil {
			c.busy = false
			c.mu.Unlock()
			return
		}
		c.pending = nil
		c.mu.Unlock()
		call.resp, call.err = b.readCurrent(call.s, c.linearizable)
		close(call.done)
	}
}

func (b *Backend) readCurrent(s *session, linearizable bool) (*clientv3.GetResponse, error) {
	ctx, cancel := b.reqCtx(context.Background(), s)
	defer cancel()
	return s.cli.Get(ctx, b.layout.JournalKey(), getOpts(!linearizable, 0, clientv3.WithCountOnly())...)
}

// probe is the cheapest read that tells the revision (rev 0: the current
// one, in its header) or whether revision rev is still kept (ErrCompacted if
// not): a serializable count-only read of the journal key.
func (b *Backend) probe(ctx context.Context, s *session, rev int64) (*clientv3.GetResponse, error) {
	return s.cli.Get(ctx, b.layout.JournalKey(), getOpts(true, rev, clientv3.WithCountOnly())...)
}
