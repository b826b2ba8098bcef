// SPDX-License-Identifier: Apache-2.0

package auth_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// sessionClient is a client over a connection the test loses and gets
// back, as a bridge's checked session: a loss ends every watch on it, and
// Live tells.
type sessionClient struct {
	*clientv3.Client

	mu      sync.Mutex         // guards the fields below
	up      bool               // the connection is live
	changed chan struct{}      // closed at the next change of up
	lost    context.Context    // ends at the next loss
	lose    context.CancelFunc // ends lost
	// holdWatch: the next Watch call waits until its context ends, as
	// clientv3's does while it has no stream to a silent member.
	holdWatch bool
	watches   atomic.Int64 // Watch calls
}

func newSessionClient(cli *clientv3.Client) *sessionClient {
	c := &sessionClient{Client: cli, up: true, changed: make(chan struct{})}
	c.lost, c.lose = context.WithCancel(context.Background())
	return c
}

func (c *sessionClient) Live() (bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up, c.changed
}

// set loses the connection (up false) or connects again.
func (c *sessionClient) set(up bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !up {
		c.lose()
	} else {
		c.lost, c.lose = context.WithCancel(context.Background())
	}
	c.up = up
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *sessionClient) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	c.watches.Add(1)
	c.mu.Lock()
	lost, hold := c.lost, c.holdWatch
	c.holdWatch = false
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	context.AfterFunc(lost, cancel)
	if hold {
		<-ctx.Done()
		ch := make(chan clientv3.WatchResponse)
		close(ch)
		return ch
	}
	return c.Client.Watch(ctx, key, opts...)
}

func runStoreOn(t *testing.T, c *sessionClient, timeout time.Duration) *auth.Store {
	t.Helper()
	s := auth.NewStore(auth.StoreConfig{Client: c, Live: c.Live, Keys: auth.KeysFor("_v2bridge/", "", nil), RequestTimeout: timeout})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// TestStoreOnALostSessionAnswersAtOnce: while the session the store
// follows on is lost, a request waits for no auth data; once it is back,
// the store is current again.
func TestStoreOnALostSessionAnswersAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	c := newSessionClient(v2bridgetest.StartCluster(t, 1).MemberClient(t, 0))
	s := runStoreOn(t, c, 10*time.Second)
	waitState(t, s, func(*auth.State) bool { return true })

	c.set(false)
	waitNotCurrent(t, s)
	// A wait of an hour returns, refused, before its context's 30 s end:
	// the backend is known lost, so there is nothing to wait for.
	ctx := ctxT(t)
	if st, ok := s.Current(ctx, time.Hour); ok {
		t.Fatalf("a State while the session is lost: %+v", st)
	}
	if ctx.Err() != nil {
		t.Fatal("a request waited for auth data until its context ended, with the session known lost")
	}
	c.set(true)
	waitState(t, s, func(*auth.State) bool { return true })
}

// TestStoreGivesUpAWatchNeverCreated: a Watch call that never returns (no
// stream to a silent member) ends within the store's bound for a watch to
// be created, and the store reads and watches again.
func TestStoreGivesUpAWatchNeverCreated(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	c := newSessionClient(v2bridgetest.StartCluster(t, 1).MemberClient(t, 0))
	c.holdWatch = true
	s := runStoreOn(t, c, 2*time.Second)
	waitState(t, s, func(*auth.State) bool { return true })
	if n := c.watches.Load(); n != 2 {
		t.Errorf("%d watches, want 2: the one held, then the one that followed", n)
	}
}

// waitNotCurrent waits (up to 30 s) until s has no current State.
func waitNotCurrent(t *testing.T, s *auth.Store) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := s.State(); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a State still current 30 s after the session was lost")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
