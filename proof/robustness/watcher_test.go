// SPDX-License-Identifier: Apache-2.0

package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/translate"
)

// watchEvent is one event a watcher got.
type watchEvent struct {
	Out       output // action, node, prevNode
	At        int64  // when it arrived (run time)
	WaitIndex uint64 // the waitIndex of the request that got it
}

func (e watchEvent) index() uint64 { return e.Out.Node.Mod }

// segment is a stretch of a watcher's history that must hold every event:
// from its first waitIndex to the last index it covered. A 401 (history
// compacted or overrun) ends one and starts the next.
type segment struct {
	From, To uint64
}

// watcher is a v2 client watching the whole key space recursively through
// one bridge, one long poll at a time, as client/v2 does: each next request
// waits from the last event's modifiedIndex + 1, an empty answer re-issues
// the same wait, and a 401 starts again from the error's index + 1.
type watcher struct {
	b    *bridgeSlot
	root string
	ck   clock
	hc   *http.Client

	mu       sync.Mutex // guards every field below
	events   []watchEvent
	segs     []segment
	next     uint64 // the waitIndex of the next request
	requests int
	empty    int      // empty answers (the bridge ended the watch)
	errs     int      // errors other than 401 (the bridge restarting)
	bad      []string // answers that are neither an event, a v2 error nor empty
}

func newWatcher(b *bridgeSlot, root string, ck clock, from uint64) *watcher {
	return &watcher{b: b, root: root, ck: ck, hc: newHTTPClient(0), next: from, segs: []segment{{From: from, To: from - 1}}}
}

// run watches until ctx ends.
func (w *watcher) run(ctx context.Context) {
	for ctx.Err() == nil {
		w.mu.Lock()
		wait := w.next
		w.requests++
		w.mu.Unlock()
		ev, e401, err := w.poll(ctx, wait)
		w.mu.Lock()
		switch {
		case ev != nil:
			we := watchEvent{Out: toOutput(ev), At: w.ck.now(), WaitIndex: wait}
			w.events = append(w.events, we)
			if ev.Node != nil && ev.Node.ModifiedIndex >= w.next {
				w.next = ev.Node.ModifiedIndex + 1
				w.segs[len(w.segs)-1].To = ev.Node.ModifiedIndex
			}
		case e401 != nil:
			w.next = e401.Index + 1
			w.segs = append(w.segs, segment{From: w.next, To: w.next - 1})
		case errors.As(err, new(badAnswer)):
			w.bad = append(w.bad, err.Error())
		case err != nil:
			w.errs++
		default:
			w.empty++
		}
		w.mu.Unlock()
		if err != nil {
			ctxsleep.Sleep(ctx, 200*time.Millisecond)
		}
	}
}

// poll is one watch request: an event, a 401, an error, or none of them
// (an empty answer).
func (w *watcher) poll(ctx context.Context, wait uint64) (*translate.Event, *v2Error, error) {
	q := url.Values{"wait": {"true"}, "recursive": {"true"}, "waitIndex": {strconv.FormatUint(wait, 10)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.b.URL()+"/v2/keys"+w.root+"?"+q.Encode(), nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		if resp.StatusCode == http.StatusOK && err.Error() == "EOF" {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e v2Error
		if json.Unmarshal(raw, &e) == nil && e.Code == 401 {
			return nil, &e, nil
		}
		return nil, nil, errStatus(resp.Status)
	}
	var ev translate.Event
	if err := json.Unmarshal(raw, &ev); err != nil || ev.Action == "" || ev.Node == nil {
		return nil, nil, badAnswer("watch answer 200 is not an event: " + string(raw))
	}
	return &ev, nil, nil
}

type errStatus string

func (e errStatus) Error() string { return string(e) }

type badAnswer string

func (e badAnswer) Error() string { return string(e) }

// reached reports whether the watcher has covered index i.
func (w *watcher) reached(i uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next > i
}

// result is the watcher's events, segments and malformed answers.
func (w *watcher) result() ([]watchEvent, []segment, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]watchEvent(nil), w.events...), append([]segment(nil), w.segs...), append([]string(nil), w.bad...)
}
