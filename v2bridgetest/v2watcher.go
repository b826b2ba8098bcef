// SPDX-License-Identifier: Apache-2.0

package v2bridgetest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v2"
)

// V2Watcher is an etcd v2 client that watches a subtree the way flanneld
// does, with the Go v2 client (go.etcd.io/etcd/client/v2): a recursive watch
// with AfterIndex, a new watch after each event, and after an error a pause
// of RetryDelay and a new watch from the last index seen; on 401 (history
// cleared) it re-lists and watches from the listing's index. It records
// every event, every error and every watch request it sent, with times, so
// a test or a benchmark can tell when the watches in flight ended and when
// events came again.
type V2Watcher struct {
	Key string

	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	events  []WatchedEvent
	errs    []WatchError
	reqs    []*WatchRequest
	changed chan struct{}
}

// WatchedEvent is one event a V2Watcher received.
type WatchedEvent struct {
	Action, Key, Value string
	Index              uint64 // the node's modifiedIndex
	At                 time.Time
}

// WatchError is an error a V2Watcher's watch returned.
type WatchError struct {
	At   time.Time
	Code int // the v2 error code (401: history cleared), 0 for other errors
	Err  error
}

// WatchRequest is one wait=true HTTP request a V2Watcher sent (the Go v2
// client sends a new one itself when a watch ends with an empty body).
type WatchRequest struct {
	WaitIndex  uint64    // 0 when the request had none
	Start, End time.Time // End is zero while the request is in flight
	// Answered is when the response's status and headers came (zero
	// until then): a watch the server had taken on.
	Answered time.Time
	Status   int   // 0 when no response came
	Bytes    int64 // body bytes: 0 for a watch ended without an event
	// ErrorBody is the start of the body of an answer other than 200 (v2's
	// error JSON).
	ErrorBody string
	// Err is what ended the request when it did not end with its body
	// read to the end: the round trip's error (no response, Status 0), the
	// body read's error (a reset mid-body), or errClosedEarly (the client
	// closed the body before its end). Nil while in flight and after a
	// complete response.
	Err error
}

// Clean reports whether the request ended with a complete response.
func (r WatchRequest) Clean() bool { return !r.End.IsZero() && r.Err == nil }

// errClosedEarly: the client closed a watch's body before reading it to
// its end (it gave up on the watch, or the watcher stopped).
var errClosedEarly = errors.New("body closed before its end")

// RetryDelay is the pause after a failed watch, as flanneld's.
const RetryDelay = time.Second

// StartV2Watcher starts watching key (recursively) through the v2 endpoints,
// for events after afterIndex, until Stop.
func StartV2Watcher(endpoints []string, key string, afterIndex uint64) (*V2Watcher, error) {
	w := &V2Watcher{Key: key, done: make(chan struct{}), changed: make(chan struct{})}
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}
	c, err := client.New(client.Config{Endpoints: endpoints, Transport: &tapTransport{base: tr, w: w},
		HeaderTimeoutPerRequest: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() {
		defer close(w.done)
		defer tr.CloseIdleConnections()
		w.run(ctx, client.NewKeysAPI(c), afterIndex)
	}()
	return w, nil
}

// Stop ends the watcher and waits for it.
func (w *V2Watcher) Stop() {
	w.cancel()
	<-w.done
}

func (w *V2Watcher) run(ctx context.Context, kapi client.KeysAPI, after uint64) {
	for ctx.Err() == nil {
		resp, err := kapi.Watcher(w.Key, &client.WatcherOptions{AfterIndex: after, Recursive: true}).Next(ctx)
		if err == nil {
			w.note(func() {
				w.events = append(w.events, WatchedEvent{Action: resp.Action, Key: resp.Node.Key, Value: resp.Node.Value,
					Index: resp.Node.ModifiedIndex, At: time.Now()})
			})
			after = resp.Node.ModifiedIndex
			continue
		}
		if ctx.Err() != nil {
			return
		}
		code := errorCode(err)
		w.note(func() { w.errs = append(w.errs, WatchError{At: time.Now(), Code: code, Err: err}) })
		if code == client.ErrorCodeEventIndexCleared {
			g, gerr := kapi.Get(ctx, w.Key, &client.GetOptions{Recursive: true})
			switch {
			case gerr == nil:
				after = g.Index
				continue
			case errorCode(gerr) == client.ErrorCodeKeyNotFound:
				var ce client.Error
				errors.As(gerr, &ce)
				after = ce.Index
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(RetryDelay):
		}
	}
}

func errorCode(err error) int {
	var ce client.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}

// note records something under the lock and wakes WaitFor.
func (w *V2Watcher) note(f func()) {
	w.mu.Lock()
	f()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// Events are the events received so far.
func (w *V2Watcher) Events() []WatchedEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]WatchedEvent(nil), w.events...)
}

// Errors are the errors the watches returned so far.
func (w *V2Watcher) Errors() []WatchError {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]WatchError(nil), w.errs...)
}

// Requests are the watch requests sent so far.
func (w *V2Watcher) Requests() []WatchRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]WatchRequest, len(w.reqs))
	for i, r := range w.reqs {
		out[i] = *r
	}
	return out
}

// WaitFor waits until cond (called under no lock, with the events so far)
// holds, or ctx ends; it reports whether cond held.
func (w *V2Watcher) WaitFor(ctx context.Context, cond func([]WatchedEvent) bool) bool {
	for {
		w.mu.Lock()
		ch := w.changed
		evs := append([]WatchedEvent(nil), w.events...)
		w.mu.Unlock()
		if cond(evs) {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// EndedAfter is how long after t0 the watches ended that were in flight at
// t0 or sent within grace after it (a watch answered at t0 is re-issued at
// once, and that one must end too). ok is false while one is in flight, or
// when none was.
func (w *V2Watcher) EndedAfter(t0 time.Time, grace time.Duration) (d time.Duration, ok bool) {
	for _, r := range w.InFlight(t0, grace) {
		if r.End.IsZero() {
			return 0, false
		}
		ok = true
		if e := r.End.Sub(t0); e > d {
			d = e
		}
	}
	return d, ok
}

// InFlight are the watch requests that were in flight at t0 or sent within
// grace after it (the ones EndedAfter times), ended or not.
func (w *V2Watcher) InFlight(t0 time.Time, grace time.Duration) []WatchRequest {
	var out []WatchRequest
	for _, r := range w.Requests() {
		if r.Start.After(t0.Add(grace)) || (!r.End.IsZero() && r.End.Before(t0)) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// FirstEventAfter is how long after t0 the first event came that was
// received after t0; ok is false when none has come yet.
func (w *V2Watcher) FirstEventAfter(t0 time.Time) (time.Duration, bool) {
	for _, ev := range w.Events() {
		if ev.At.After(t0) {
			return ev.At.Sub(t0), true
		}
	}
	return 0, false
}

// tapTransport records the watch requests going through it.
type tapTransport struct {
	base *http.Transport
	w    *V2Watcher
}

func (t *tapTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Query().Get("wait") != "true" {
		return t.base.RoundTrip(r)
	}
	rec := &WatchRequest{Start: time.Now()}
	rec.WaitIndex, _ = strconv.ParseUint(r.URL.Query().Get("waitIndex"), 10, 64)
	t.w.mu.Lock()
	t.w.reqs = append(t.w.reqs, rec)
	t.w.mu.Unlock()
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		t.w.mu.Lock()
		rec.End, rec.Err = time.Now(), err
		t.w.mu.Unlock()
		return nil, err
	}
	t.w.mu.Lock()
	rec.Answered, rec.Status = time.Now(), resp.StatusCode
	t.w.mu.Unlock()
	resp.Body = &tapBody{ReadCloser: resp.Body, rec: rec, w: t.w}
	return resp, nil
}

// CancelRequest is there for client.CancelableTransport; the v2 client
// cancels through the request itself.
func (t *tapTransport) CancelRequest(*http.Request) {}

type tapBody struct {
	io.ReadCloser
	rec *WatchRequest
	w   *V2Watcher
}

func (b *tapBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.w.mu.Lock()
	b.rec.Bytes += int64(n)
	if b.rec.Status != http.StatusOK && len(b.rec.ErrorBody) < 512 {
		b.rec.ErrorBody += string(p[:min(n, 512-len(b.rec.ErrorBody))])
	}
	if err != nil && b.rec.End.IsZero() {
		b.rec.End = time.Now()
		if err != io.EOF {
			b.rec.Err = err
		}
	}
	b.w.mu.Unlock()
	return n, err
}

func (b *tapBody) Close() error {
	b.w.mu.Lock()
	if b.rec.End.IsZero() {
		b.rec.End, b.rec.Err = time.Now(), errClosedEarly
	}
	b.w.mu.Unlock()
	return b.ReadCloser.Close()
}
