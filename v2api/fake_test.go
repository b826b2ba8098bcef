// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// fakeStore is a recorder Store: it keeps every request the handlers hand
// it and answers with whatever the test put in its fields.
type fakeStore struct {
	mu    sync.Mutex
	calls []call

	// Get and Write answer with these.
	getEv, writeEv   *translate.Event
	getErr, writeErr error
	// answer, when set, decides Get and Write instead of the fields above.
	answer func(op string, r *translate.Request) (*translate.Event, error)
	meta   Meta // returned by Get, Write and Watch
	// Watch answers with a new fakeWatch from newWatch (or watch), or watchErr.
	watch    *fakeWatch
	newWatch func() *fakeWatch
	watchErr error

	healthErr  error
	version    string
	versionErr error
	storeMeta  Meta // returned by Meta()
	notReady   bool
	wedged     bool
	watchers   int
}

// call is one recorded Store call.
type call struct {
	op  string // "get", "write" or "watch"
	req *translate.Request
}

var _ Store = (*fakeStore)(nil)

func (f *fakeStore) record(op string, r *translate.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{op, r})
}

// recorded returns the calls so far.
func (f *fakeStore) recorded() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// only returns the one call the store got, failing the test otherwise.
func (f *fakeStore) only(t *testing.T) call {
	t.Helper()
	cs := f.recorded()
	if len(cs) != 1 {
		t.Fatalf("store got %d calls %+v, want 1", len(cs), cs)
	}
	return cs[0]
}

func (f *fakeStore) Get(ctx context.Context, r *translate.Request) (*translate.Event, Meta, error) {
	f.record("get", r)
	if f.answer != nil {
		ev, err := f.answer("get", r)
		return ev, f.meta, err
	}
	return f.getEv, f.meta, f.getErr
}

func (f *fakeStore) Write(ctx context.Context, r *translate.Request) (*translate.Event, Meta, error) {
	f.record("write", r)
	if f.answer != nil {
		ev, err := f.answer("write", r)
		return ev, f.meta, err
	}
	return f.writeEv, f.meta, f.writeErr
}

func (f *fakeStore) Watch(ctx context.Context, r *translate.Request) (Watch, Meta, error) {
	f.record("watch", r)
	if f.watchErr != nil {
		return nil, f.meta, f.watchErr
	}
	if f.newWatch != nil {
		return f.newWatch(), f.meta, nil
	}
	return f.watch, f.meta, nil
}

func (f *fakeStore) Health(ctx context.Context) error { return f.healthErr }

func (f *fakeStore) Version(ctx context.Context) (string, error) { return f.version, f.versionErr }

func (f *fakeStore) Meta() Meta { return f.storeMeta }

func (f *fakeStore) Ready() bool { return !f.notReady }

func (f *fakeStore) Alive(d time.Duration) bool { return !f.wedged }

func (f *fakeStore) Watchers() int { return f.watchers }

// fakeWatch is a Watch the test drives: it sends on events, closes done
// with end, and waits on cancelled to see the handler release it.
type fakeWatch struct {
	start     uint64
	events    chan *translate.Event
	done      chan struct{}
	cancelled chan struct{}
	endOnce   sync.Once
	cancelOne sync.Once
}

var _ Watch = (*fakeWatch)(nil)

// newFakeWatch returns a watch whose events channel holds buf events, as
// the hub's buffered channel does.
func newFakeWatch(start uint64, buf int) *fakeWatch {
	return &fakeWatch{start: start, events: make(chan *translate.Event, buf),
		done: make(chan struct{}), cancelled: make(chan struct{})}
}

func (w *fakeWatch) StartIndex() uint64              { return w.start }
func (w *fakeWatch) Events() <-chan *translate.Event { return w.events }
func (w *fakeWatch) Done() <-chan struct{}           { return w.done }
func (w *fakeWatch) Reason() string                  { return "test ended it" }
func (w *fakeWatch) Cancel()                         { w.cancelOne.Do(func() { close(w.cancelled) }) }

// end closes Done, as a store does when the watch ends without more events.
func (w *fakeWatch) end() { w.endOnce.Do(func() { close(w.done) }) }

// waitCancelled fails the test unless the handler cancels the watch soon.
func (w *fakeWatch) waitCancelled(t *testing.T) {
	t.Helper()
	select {
	case <-w.cancelled:
	case <-time.After(3 * time.Second):
		t.Fatal("the handler did not cancel the watch")
	}
}

// isCancelled reports whether the handler has cancelled the watch.
func (w *fakeWatch) isCancelled() bool {
	select {
	case <-w.cancelled:
		return true
	default:
		return false
	}
}
