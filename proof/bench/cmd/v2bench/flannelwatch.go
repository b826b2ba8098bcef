// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// awayWatcher is a flannel-style watcher whose node keeps losing its
// connection: one-shot recursive watches on a subtree, each from the last
// event's modifiedIndex+1, but after every event it is away for a while
// (a flaky link, a restarted flanneld or bridge) before it watches again.
// On 401 it re-lists, as flanneld does, and watches from the listing's
// index+1. A v2 server whose index counts only v2 writes keeps such a
// waitIndex within its history; a bridge whose history window counts
// every tenant's writes may not.
type awayWatcher struct {
	base, dir string
	away      time.Duration

	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	mu       sync.Mutex // guards what follows
	watched  map[change]bool
	listed   map[change]bool
	e401     int
	errs     int
	requests int
}

func startAwayWatcher(base, dir string, after uint64, away time.Duration) *awayWatcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &awayWatcher{base: base, dir: dir, away: away, cancel: cancel, done: make(chan struct{}),
		watched: map[change]bool{}, listed: map[change]bool{}}
	go func() {
		defer close(w.done)
		w.run(ctx, after+1)
	}()
	return w
}

func (w *awayWatcher) stop() {
	w.cancel()
	<-w.done
}

func (w *awayWatcher) run(ctx context.Context, next uint64) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	pause := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for ctx.Err() == nil {
		w.mu.Lock()
		w.requests++
		w.mu.Unlock()
		code, body, _, err := get(ctx, hc, w.base+"/v2/keys"+w.dir+"?wait=true&recursive=true&waitIndex="+
			strconv.FormatUint(next, 10))
		if ctx.Err() != nil {
			return
		}
		var ev struct {
			ErrorCode int `json:"errorCode"`
			Node      *struct {
				Key           string `json:"key"`
				ModifiedIndex uint64 `json:"modifiedIndex"`
			} `json:"node"`
		}
		if err == nil {
			err = json.Unmarshal(body, &ev)
		}
		switch {
		case err == nil && code == http.StatusOK && ev.Node != nil:
			w.mu.Lock()
			w.watched[change{ev.Node.Key, ev.Node.ModifiedIndex}] = true
			w.mu.Unlock()
			next = ev.Node.ModifiedIndex + 1
			// The node loses its connection and comes back after away.
			if !pause(w.away) {
				return
			}
		case err == nil && ev.ErrorCode == 401:
			w.mu.Lock()
			w.e401++
			w.mu.Unlock()
			idx, ok := w.relist(ctx, hc)
			if ok {
				next = idx + 1
			} else if !pause(time.Second) {
				return
			}
		default:
			w.mu.Lock()
			w.errs++
			w.mu.Unlock()
			if !pause(time.Second) {
				return
			}
		}
	}
}

// relist reads the subtree as flanneld does after a 401, records every
// lease it finds, and returns the listing's X-Etcd-Index.
func (w *awayWatcher) relist(ctx context.Context, hc *http.Client) (uint64, bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	code, body, hdr, err := get(ctx, hc, w.base+"/v2/keys"+w.dir+"?recursive=true")
	if err != nil || code != http.StatusOK {
		return 0, false
	}
	var r v2Resp
	if json.Unmarshal(body, &r) != nil || r.Node == nil {
		return 0, false
	}
	idx, err := strconv.ParseUint(hdr.Get("X-Etcd-Index"), 10, 64)
	if err != nil {
		return 0, false
	}
	w.mu.Lock()
	for _, n := range r.Node.Nodes {
		w.listed[change{n.Key, n.ModifiedIndex}] = true
	}
	w.mu.Unlock()
	return idx, true
}

// outcome sorts the changes written into those a watch delivered, those
// only a re-list showed, and those missed; and the errors seen.
func (w *awayWatcher) outcome(written []change) (watched, listed, missed, e401, errs, reqs int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range written {
		switch {
		case w.watched[c]:
			watched++
		case w.listed[c]:
			listed++
		default:
			missed++
		}
	}
	return watched, listed, missed, w.e401, w.errs, w.requests
}

// caughtUp reports whether every change written has been watched or listed.
func (w *awayWatcher) caughtUp(written []change) bool {
	_, _, missed, _, _, _ := w.outcome(written)
	return missed == 0
}

// get sends a GET and returns the status, the body and the headers.
func get(ctx context.Context, hc *http.Client, u string) (int, []byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, b, resp.Header, err
}
