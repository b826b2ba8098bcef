// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A watcher behaves like a v2 client: one long-poll at a time, re-issued
// with waitIndex = modifiedIndex+1 after each event (direct-v3 watchers are
// v3 streams instead). Every receipt is recorded and judged afterwards.
type watcher struct {
	f     *fleet
	last  atomic.Uint64 // highest index received so far
	start uint64        // X-Etcd-Index (v3: revision) when it was registered
	recs  []rec         // receipts, written only by the watcher's goroutine
	// Answers that were not an event.
	cleared, errs, empty int
	firstErr             string
}

type rec struct {
	idx uint64
	t   time.Duration // since clock
}

// clock is the time base of receipts and writes.
var clock = time.Now()

func now() time.Duration { return time.Since(clock) }

// fleet is a set of watchers on one system: dir watchers first (recursive
// on the shared directory), then key watchers (one each on distinct keys
// that are never written while measuring).
type fleet struct {
	ws         []*watcher
	nDir       int
	receipts   atomic.Int64 // events received by any watcher
	registered atomic.Int64
	failed     atomic.Int64
	stop       func()
	wg         sync.WaitGroup
}

// minLast is the lowest index every dir watcher has reached.
func (f *fleet) minLast() uint64 {
	m := ^uint64(0)
	for _, w := range f.ws[:f.nDir] {
		if l := w.last.Load(); l < m {
			m = l
		}
	}
	return m
}

// waitAll waits until every dir watcher has reached idx, at most timeout,
// and gives up sooner when no watcher has received anything for 2 s (a
// system that lost the event will not deliver it later).
func (f *fleet) waitAll(idx uint64, timeout time.Duration) bool {
	const stall = 2 * time.Second
	dl := time.Now().Add(timeout)
	seen, progress := f.receipts.Load(), time.Now()
	for time.Now().Before(dl) {
		if f.minLast() >= idx {
			return true
		}
		if n := f.receipts.Load(); n != seen {
			seen, progress = n, time.Now()
		} else if time.Since(progress) > stall {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return f.minLast() >= idx
}

// waitRegistered waits until every watcher's first watch is registered
// (its response headers arrived: v2 servers flush them once the watch is in
// place) or failed, at most timeout, and gives up sooner when no watcher
// registered for 5 s.
func (f *fleet) waitRegistered(timeout time.Duration) bool {
	const stall = 5 * time.Second
	dl := time.Now().Add(timeout)
	seen, progress := int64(-1), time.Now()
	for time.Now().Before(dl) {
		n := f.registered.Load() + f.failed.Load()
		if int(n) >= len(f.ws) {
			return f.failed.Load() == 0
		}
		if n != seen {
			seen, progress = n, time.Now()
		} else if time.Since(progress) > stall {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// ------------------------------------------------------------- v2 watchers

// startV2Fleet opens one connection per watcher (at most 512 opening at a
// time, so the servers' accept backlogs never overflow).
func startV2Fleet(base, dir string, nDir int, keys []string) *fleet {
	f := &fleet{nDir: nDir}
	host := base[len("http://"):]
	var mu sync.Mutex
	var conns []net.Conn
	stopped := false
	sem := make(chan struct{}, 512)
	total := nDir + len(keys)
	for i := 0; i < total; i++ {
		w := &watcher{f: f}
		f.ws = append(f.ws, w)
		path, recursive := dir, true
		if i >= nDir {
			path, recursive = keys[i-nDir], false
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			sem <- struct{}{}
			released := false
			release := func() {
				if !released {
					released = true
					<-sem
				}
			}
			defer release()
			var c net.Conn
			var err error
			for attempt := 0; attempt < 5; attempt++ {
				c, err = net.DialTimeout("tcp", host, 10*time.Second)
				if err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				f.failed.Add(1)
				return
			}
			mu.Lock()
			if stopped {
				mu.Unlock()
				_ = c.Close()
				f.failed.Add(1)
				return
			}
			conns = append(conns, c)
			mu.Unlock()
			w.runV2(c, host, path, recursive, func(ok bool) {
				if ok {
					f.registered.Add(1)
				} else {
					f.failed.Add(1)
				}
				release()
			})
		}()
	}
	f.stop = func() {
		mu.Lock()
		stopped = true
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		f.wg.Wait()
	}
	return f
}

type v2WatchBody struct {
	Action    string  `json:"action"`
	Node      *v2Node `json:"node"`
	ErrorCode int     `json:"errorCode"`
	Index     uint64  `json:"index"`
}

func (w *watcher) runV2(c net.Conn, host, path string, recursive bool, registered func(ok bool)) {
	br := bufio.NewReaderSize(c, 4096)
	var next uint64
	first := true
	q := "?wait=true"
	if recursive {
		q += "&recursive=true"
	}
	var reqBuf []byte
	for {
		reqBuf = append(reqBuf[:0], "GET /v2/keys"...)
		reqBuf = append(reqBuf, path...)
		reqBuf = append(reqBuf, q...)
		if next > 0 {
			reqBuf = append(reqBuf, "&waitIndex="...)
			reqBuf = strconv.AppendUint(reqBuf, next, 10)
		}
		reqBuf = append(reqBuf, " HTTP/1.1\r\nHost: "...)
		reqBuf = append(reqBuf, host...)
		reqBuf = append(reqBuf, "\r\n\r\n"...)
		if _, err := c.Write(reqBuf); err != nil {
			if first {
				registered(false)
			}
			return
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if first {
				registered(false)
			}
			return
		}
		if first {
			first = false
			w.start, _ = strconv.ParseUint(resp.Header.Get("X-Etcd-Index"), 10, 64)
			registered(resp.StatusCode == http.StatusOK)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return
		}
		t := now()
		var b v2WatchBody
		if len(body) == 0 {
			w.empty++ // the server ended the watch without an event: re-issue it
			continue
		}
		if err := json.Unmarshal(body, &b); err != nil {
			w.errs++
			if w.firstErr == "" {
				w.firstErr = fmt.Sprintf("HTTP %d %.200s", resp.StatusCode, body)
			}
			continue
		}
		switch {
		case b.ErrorCode == 401: // history cleared: v2 clients re-watch from the current index
			w.cleared++
			next = b.Index + 1
		case b.ErrorCode != 0 || b.Node == nil:
			w.errs++
			if w.firstErr == "" {
				w.firstErr = fmt.Sprintf("HTTP %d %.200s", resp.StatusCode, body)
			}
			time.Sleep(50 * time.Millisecond)
		default:
			idx := b.Node.ModifiedIndex
			w.recs = append(w.recs, rec{idx, t})
			w.f.receipts.Add(1)
			if idx > w.last.Load() {
				w.last.Store(idx)
			}
			next = idx + 1
		}
	}
}

// ------------------------------------------------------------- v3 watchers

// startV3Fleet opens one clientv3 watch per watcher (clientv3 multiplexes
// them on one gRPC stream; etcd keeps one watcher each).
func startV3Fleet(cli *clientv3.Client, dir string, nDir int, keys []string) *fleet {
	f := &fleet{nDir: nDir}
	ctx, cancel := context.WithCancel(context.Background())
	total := nDir + len(keys)
	sem := make(chan struct{}, 256)
	for i := 0; i < total; i++ {
		w := &watcher{f: f}
		f.ws = append(f.ws, w)
		key, opts := v3Prefix+dir+"/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
		if i >= nDir {
			key, opts = v3Prefix+keys[i-nDir], []clientv3.OpOption{clientv3.WithCreatedNotify()}
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			sem <- struct{}{}
			wch := cli.Watch(ctx, key, opts...)
			first := true
			for resp := range wch {
				t := now()
				if first {
					first = false
					<-sem
					if resp.Created && resp.Err() == nil {
						w.start = uint64(resp.Header.Revision)
						f.registered.Add(1)
					} else {
						f.failed.Add(1)
					}
				}
				if resp.Err() != nil {
					w.errs++
				}
				for _, ev := range resp.Events {
					idx := uint64(ev.Kv.ModRevision)
					w.recs = append(w.recs, rec{idx, t})
					w.f.receipts.Add(1)
					if idx > w.last.Load() {
						w.last.Store(idx)
					}
				}
			}
			if first {
				<-sem
				f.failed.Add(1)
			}
		}()
	}
	f.stop = func() {
		cancel()
		f.wg.Wait()
	}
	return f
}

// ------------------------------------------------------------- analysis

type write struct {
	idx   uint64
	sent  time.Duration
	group int
}

// verdict judges the dir watchers' receipts of one group of writes.
type verdict struct {
	delivered, lost, dups int
	lat                   lat
	lastRecv              time.Duration
}

// judge matches every dir watcher's receipts against the writes: each
// write a watcher should have seen (its index is above the watcher's start)
// is delivered once, or lost. It also returns receipts of indexes nobody
// wrote while measuring.
func judge(f *fleet, writes []write, groups int) (vs []verdict, unexpected int) {
	vs = make([]verdict, groups)
	pos := make(map[uint64]int, len(writes))
	for i, w := range writes {
		pos[w.idx] = i
	}
	seen := make([]bool, len(writes))
	for _, w := range f.ws[:f.nDir] {
		clear(seen)
		for _, r := range w.recs {
			p, ok := pos[r.idx]
			if !ok {
				if r.idx > w.start {
					unexpected++
				}
				continue
			}
			v := &vs[writes[p].group]
			if seen[p] {
				v.dups++
				continue
			}
			seen[p] = true
			v.delivered++
			v.lat = append(v.lat, r.t-writes[p].sent)
			if r.t > v.lastRecv {
				v.lastRecv = r.t
			}
		}
		for p, wr := range writes {
			if !seen[p] && wr.idx > w.start {
				vs[wr.group].lost++
			}
		}
	}
	return vs, unexpected
}

// keyWatcherEvents counts what the key watchers (whose keys are never
// written while measuring) received: it must be nothing.
func keyWatcherEvents(f *fleet) int {
	n := 0
	for _, w := range f.ws[f.nDir:] {
		n += len(w.recs)
	}
	return n
}

func answerCounts(f *fleet) (cleared, errs, empty int, firstErr string) {
	for _, w := range f.ws {
		if firstErr == "" {
			firstErr = w.firstErr
		}
		cleared += w.cleared
		errs += w.errs
		empty += w.empty
	}
	return
}

// ------------------------------------------------------------- writers

// putter writes one key of the shared directory and returns its index.
type putter func(ctx context.Context, i int) (uint64, error)

// steadyWriter writes at rate per second for dur, one write at a time;
// when a write takes longer than the interval the next one follows at once
// (the system slows the writer down), without bursts to catch up.
func steadyWriter(put putter, rate float64, dur time.Duration, firstI, group int) ([]write, int) {
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	next := start
	var ws []write
	errs := 0
	for i := 0; time.Since(start) < dur; i++ {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		sent := now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		idx, err := put(ctx, firstI+i)
		cancel()
		if err != nil {
			errs++
		} else {
			ws = append(ws, write{idx, sent, group})
		}
		next = next.Add(interval)
		if n := time.Now(); next.Before(n) {
			next = n
		}
	}
	return ws, errs
}

// gatedWriter writes as fast as the system delivers: never more than window
// writes ahead of the slowest dir watcher, for dur. A wait longer than
// stallAfter (a watcher that never gets an event) lets the writer go on and
// counts a stall.
func gatedWriter(f *fleet, put putter, window int, dur, stallAfter time.Duration) (ws []write, errs, stalls int, elapsed time.Duration) {
	const group = 0
	start := time.Now()
	end := start.Add(dur)
	for i := 0; time.Now().Before(end); i++ {
		if n := len(ws); n >= window {
			target := ws[n-window].idx
			wdl := time.Now().Add(stallAfter)
			for f.minLast() < target {
				if time.Now().After(wdl) {
					stalls++
					break
				}
				if time.Now().After(end) {
					return ws, errs, stalls, time.Since(start)
				}
				time.Sleep(200 * time.Microsecond)
			}
		}
		sent := now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		idx, err := put(ctx, i)
		cancel()
		if err != nil {
			errs++
			continue
		}
		ws = append(ws, write{idx, sent, group})
	}
	return ws, errs, stalls, time.Since(start)
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return fmt.Sprint(s)
}
