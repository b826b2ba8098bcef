// SPDX-License-Identifier: Apache-2.0

package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/translate"
)

const (
	// retryDelay is the pause after a failed watch or listing, as flanneld's.
	retryDelay = time.Second
	// watchDeadline bounds one watch request, so that nothing waits forever;
	// the stuck-watch monitor flags a watch long before it.
	watchDeadline = 5 * time.Minute
)

// watcher watches a directory the way flanneld watches its subnets: a
// recursive one-shot watch, re-issued from modifiedIndex + 1 after every
// event and at once after an empty 200 (the server ended it); after an
// error, the same watch again after retryDelay; after a 401 (history
// cleared), a listing of the directory and a watch from its
// X-Etcd-Index + 1.
type watcher struct {
	name, scope string
	tgt         *target
	hc          *http.Client
	tr          *http.Transport
	listed      chan struct{} // closed once the first listing is answered

	mu       sync.Mutex // guards every field below
	started  time.Time
	events   []delivered
	resyncs  []resync
	stats    watchStats
	inflight time.Time // when the watch request in flight was sent; zero when none
	progress time.Time // when it last delivered an event (or started)
}

// watchStats counts a watcher's requests by how they ended.
type watchStats struct {
	requests, events, empty, errors, cleared, listings int
}

func newWatcher(name, scope string, tgt *target) *watcher {
	hc, tr := newHTTPClient()
	return &watcher{name: name, scope: scope, tgt: tgt, hc: hc, tr: tr, listed: make(chan struct{})}
}

// run watches until ctx ends.
func (w *watcher) run(ctx context.Context) {
	defer w.tr.CloseIdleConnections()
	after, ok := w.list(ctx)
	if !ok {
		return
	}
	w.mu.Lock()
	w.started, w.progress = time.Now(), time.Now()
	w.mu.Unlock()
	close(w.listed)
	for ctx.Err() == nil {
		ev, a, err := w.watchOnce(ctx, after+1)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && ev != nil:
			w.deliver(ev)
			after = ev.Node.ModifiedIndex
		case err == nil && a.status == http.StatusOK:
			w.count(func(s *watchStats) { s.empty++ })
		case err == nil && a.err != nil && a.err.Code == 401:
			w.count(func(s *watchStats) { s.cleared++ })
			last := w.lastDelivered()
			if after, ok = w.list(ctx); !ok {
				return
			}
			w.mu.Lock()
			w.resyncs = append(w.resyncs, resync{after: last, listedAt: time.Now()})
			w.mu.Unlock()
		default:
			w.count(func(s *watchStats) { s.errors++ })
			if !ctxsleep.Sleep(ctx, retryDelay) {
				return
			}
		}
	}
}

// list reads the scope recursively, as flanneld re-lists its subnets, and
// returns the index to watch after; it retries until ctx ends (ok false).
func (w *watcher) list(ctx context.Context) (index uint64, ok bool) {
	for {
		w.count(func(s *watchStats) { s.listings++ })
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		a, err := v2Do(rctx, w.hc, w.tgt.get(), http.MethodGet, w.scope, url.Values{"recursive": {"true"}})
		cancel()
		switch {
		case err == nil && a.ev != nil && a.index > 0:
			return a.index, true
		case err == nil && a.err != nil && a.err.Code == 100 && a.err.Index > 0: // the scope does not exist yet
			return a.err.Index, true
		}
		if !ctxsleep.Sleep(ctx, retryDelay) {
			return 0, false
		}
	}
}

// watchOnce sends one watch: it returns the event, or the answer when it
// carried none (an empty 200, a v2 error), or the error.
func (w *watcher) watchOnce(ctx context.Context, waitIndex uint64) (*translate.Event, v2Answer, error) {
	rctx, cancel := context.WithTimeout(ctx, watchDeadline)
	defer cancel()
	q := url.Values{"wait": {"true"}, "recursive": {"true"}, "waitIndex": {strconv.FormatUint(waitIndex, 10)}}
	u := w.tgt.get() + "/v2/keys" + w.scope + "?" + q.Encode()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, v2Answer{}, err
	}
	w.mu.Lock()
	w.stats.requests++
	w.inflight = time.Now()
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.inflight = time.Time{}
		w.mu.Unlock()
	}()
	resp, err := w.hc.Do(req)
	if err != nil {
		return nil, v2Answer{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, v2Answer{}, fmt.Errorf("watch body: %w", err)
	}
	a := decodeAnswer(resp, b)
	if a.ev != nil && a.ev.Node == nil {
		return nil, a, errors.New("watch event without a node")
	}
	if a.status == http.StatusOK && a.ev == nil && a.body != "" {
		return nil, a, fmt.Errorf("watch answered %q", a.body)
	}
	return a.ev, a, nil
}

func (w *watcher) deliver(ev *translate.Event) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.events++
	w.progress = now
	w.events = append(w.events, delivered{id: eventIdentity(ev), action: ev.Action, index: ev.Node.ModifiedIndex, at: now})
}

func (w *watcher) lastDelivered() *identity {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.events) == 0 {
		return nil
	}
	id := w.events[len(w.events)-1].id
	return &id
}

func (w *watcher) count(f func(*watchStats)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.stats)
}

// has reports whether the watcher delivered the event.
func (w *watcher) has(id identity) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.events) - 1; i >= 0; i-- {
		if w.events[i].id == id {
			return true
		}
	}
	return false
}

// state is what the stuck-watch monitor reads.
func (w *watcher) state() (inflight, progress time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inflight, w.progress
}

func (w *watcher) record() (watchRecord, watchStats) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return watchRecord{name: w.name, scope: w.scope, started: w.started,
		events: append([]delivered(nil), w.events...), resyncs: append([]resync(nil), w.resyncs...)}, w.stats
}
