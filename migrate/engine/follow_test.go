// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

func TestPipeline(t *testing.T) {
	p := newPipeline(3)
	a := p.start("/a/1", 10)
	if !p.blocked("/a/1") || !p.blocked("/a") || !p.blocked("/a/1/x") || p.blocked("/a/2") || p.blocked("/a/10") {
		t.Fatal("an event waits for one in flight on its key, above or below it, only")
	}
	b := p.start("/a/2", 11)
	c := p.start("/b", 12)
	if !p.blocked("/z") {
		t.Fatal("no more than the limit in flight")
	}
	if idx, ok := p.finish(b); ok {
		t.Fatalf("finishing the second event moved the applied index to %d past the first, still in flight", idx)
	}
	if p.blocked("/z") {
		t.Fatal("a finished event frees its slot")
	}
	if idx, ok := p.finish(a); !ok || idx != 11 {
		t.Fatalf("finishing the first = %d %v, want 11 (both done)", idx, ok)
	}
	if !p.busy() {
		t.Fatal("the third is still in flight")
	}
	if idx, ok := p.finish(c); !ok || idx != 12 || p.busy() {
		t.Fatalf("finishing the last = %d %v, busy %v", idx, ok, p.busy())
	}
	if p.blocked("/a/1") {
		t.Fatal("nothing in flight blocks nothing")
	}
	// Events done behind one still in flight are bounded too.
	slow := p.start("/slow", 13)
	for i := range eventBuffer - 1 {
		if p.blocked("/k") {
			t.Fatalf("blocked with %d events waiting behind the slow one", i)
		}
		if _, ok := p.finish(p.start("/k", uint64(14+i))); ok {
			t.Fatal("the applied index moved past an event in flight")
		}
	}
	if !p.blocked("/k") {
		t.Fatalf("not blocked with %d events waiting behind the slow one", eventBuffer-1)
	}
	if idx, ok := p.finish(slow); !ok || idx != uint64(13+eventBuffer-1) || p.blocked("/k") {
		t.Fatalf("finishing the slow one = %d %v, want %d", idx, ok, 13+eventBuffer-1)
	}
}

func TestOwnershipKnownFiles(t *testing.T) {
	o := newOwnership()
	f := file("/d/k", "v")
	f.ModifiedIndex = 7
	o.setFile(f)
	if got := o.known("/d/k"); got != f || !o.owns(f) {
		t.Fatalf("known = %+v, want the file written", got)
	}
	o.set("/d/k", 9) // recorded otherwise since (a copy found it at 9)
	if got := o.known("/d/k"); got != nil {
		t.Fatalf("known after set = %+v, want nil", got)
	}
	o.setFile(f)
	o.dropTree("/d")
	if got := o.known("/d/k"); got != nil || o.owns(f) {
		t.Fatalf("known after dropTree = %+v", got)
	}
}

// fakeV2 serves recursive stream watches of "/" as etcd v2 does: the store
// is at index head; a waitIndex at or below it gets that one event from the
// history and nothing more on the stream; a waitIndex past it gets every
// later event, live, as the test appends them; one below floor gets 401.
type fakeV2 struct {
	mu     sync.Mutex // guards head and live
	head   uint64
	floor  uint64
	live   []chan uint64
	opened chan uint64 // the waitIndex of each stream watch
}

func event(i uint64) *translate.Event {
	v := "v" + strconv.FormatUint(i, 10)
	return &translate.Event{Action: "set", Node: &translate.Node{Key: fmt.Sprintf("/k%d", i%3), Value: &v, ModifiedIndex: i, CreatedIndex: i}}
}

func (f *fakeV2) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("wait") != "true" || q.Get("stream") != "true" || q.Get("recursive") != "true" {
		http.Error(w, "not a recursive stream watch", http.StatusBadRequest)
		return
	}
	wait, _ := strconv.ParseUint(q.Get("waitIndex"), 10, 64)
	f.mu.Lock()
	head := f.head
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Etcd-Index", strconv.FormatUint(head, 10))
	if wait < f.floor {
		f.mu.Unlock()
		f.note(wait)
		ve := translate.NewError(translate.EcodeEventIndexCleared,
			fmt.Sprintf("the requested history has been cleared [%d/%d]", f.floor, wait), head)
		w.WriteHeader(ve.StatusCode())
		_ = json.NewEncoder(w).Encode(ve)
		return
	}
	ch := make(chan uint64, 100)
	if wait <= head {
		ch <- wait // from the history: one event, the watcher is not registered
	} else {
		f.live = append(f.live, ch)
	}
	f.mu.Unlock()
	f.note(wait) // once registered
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	enc := json.NewEncoder(w)
	for {
		select {
		case <-r.Context().Done():
			return
		case i := <-ch:
			if i >= wait {
				_ = enc.Encode(event(i))
				w.(http.Flusher).Flush()
			}
		}
	}
}

// note records a stream watch made at waitIndex wait; the test reads them.
func (f *fakeV2) note(wait uint64) {
	select {
	case f.opened <- wait:
	default: // the test has failed already
	}
}

// write makes the next event and tells the live streams.
func (f *fakeV2) write() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.head++
	for _, ch := range f.live {
		select {
		case ch <- f.head:
		default: // v2 drops a slow stream watcher without a word
		}
	}
}

func followSource(t *testing.T, f *fakeV2) *migrator {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	s, err := newV2Server(&Options{V2Server: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return &migrator{src: s, owned: newOwnership(), o: Options{Log: func(l string) { t.Log(l) }}}
}

// TestWatchLoopStream: a follower behind the v2 server takes the history's
// events one watch each, then reads one live stream for the rest, every
// event once, in order.
func TestWatchLoopStream(t *testing.T) {
	f := &fakeV2{head: 5, opened: make(chan uint64, 100)}
	m := followSource(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	evc := make(chan *translate.Event, eventBuffer)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.watchLoop(ctx, root{path: "/", index: 2}, true, evc, errc)
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()
	deadline := time.After(30 * time.Second)
	var opened []uint64
	for len(opened) < 4 { // waitIndex 3, 4, 5 from the history, then 6 live
		select {
		case w := <-f.opened:
			opened = append(opened, w)
		case <-deadline:
			t.Fatalf("stream watches opened: %v, want 3 4 5 6", opened)
		}
	}
	if want := []uint64{3, 4, 5, 6}; !reflect.DeepEqual(opened, want) {
		t.Fatalf("stream watches opened at %v, want %v", opened, want)
	}
	for range 20 {
		f.write()
	}
	for want := uint64(3); want <= 25; want++ {
		select {
		case ev := <-evc:
			if !reflect.DeepEqual(ev, event(want)) {
				t.Fatalf("event %+v %+v, want %+v %+v", ev, ev.Node, event(want), event(want).Node)
			}
		case err := <-errc:
			t.Fatalf("watch failed: %v", err)
		case <-deadline:
			t.Fatalf("no event %d", want)
		}
	}
	select {
	case w := <-f.opened:
		t.Fatalf("a live stream was made again (waitIndex %d) within its idle time", w)
	default:
	}
}

// TestWatchLoopResync: a waitIndex the v2 server's history no longer holds
// asks for a re-sync, naming it.
func TestWatchLoopResync(t *testing.T) {
	f := &fakeV2{head: 2000, floor: 1000, opened: make(chan uint64, 100)}
	m := followSource(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	m.watchLoop(ctx, root{path: "/", index: 10}, true, make(chan *translate.Event), errc)
	var rs *resyncNeeded
	select {
	case err := <-errc:
		if !errors.As(err, &rs) || rs.index != 11 || rs.root != "/" {
			t.Fatalf("watch error %v, want a re-sync from index 11 of /", err)
		}
	default:
		t.Fatalf("the watch ended without asking for a re-sync (ctx: %v)", ctx.Err())
	}
}
