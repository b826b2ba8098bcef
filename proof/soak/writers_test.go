// SPDX-License-Identifier: Apache-2.0

package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
)

const (
	// writeTimeout bounds one write; the bridge's own backend deadline is 5 s.
	writeTimeout = 8 * time.Second
	// errorPause is a writer's pause after a failed write.
	errorPause = 200 * time.Millisecond
	poolKeys   = 8  // plain keys per v2 writer
	v3Keys     = 12 // keys per v3 writer
)

// writeStats counts a writer's writes by outcome.
type writeStats struct {
	acked, refused, uncertain atomic.Int64
	events                    atomic.Int64 // expected events its acknowledged writes caused
}

func (s *writeStats) note(o outcome) {
	switch o {
	case applied:
		s.acked.Add(1)
	case refused:
		s.refused.Add(1)
	default:
		s.uncertain.Add(1)
	}
}

// v2Writer writes through the bridge under its own directory (so each key
// has one writer and its order is known): sets over a pool of keys,
// compare-and-swap increments of a counter, deletes, keys with a TTL (each
// expires: an event too), directory creates and recursive directory
// deletes. Every value is unique: the writer's id and a sequence number.
type v2Writer struct {
	id, dir string
	tgt     *target
	hc      *http.Client
	led     *ledger
	rng     *rand.Rand
	pause   time.Duration
	stats   writeStats

	// Owned by run's goroutine.
	seq     int
	counter string // the counter's value, "" when unknown
	dirs    []string
}

func newV2Writer(id string, tgt *target, led *ledger, seed uint64, pause time.Duration) *v2Writer {
	hc, _ := newHTTPClient()
	return &v2Writer{id: id, dir: "/soak/v2/" + id, tgt: tgt, hc: hc, led: led,
		rng: rand.New(rand.NewPCG(seed, 2)), pause: pause}
}

func (w *v2Writer) run(ctx context.Context) {
	defer w.hc.CloseIdleConnections()
	ops := []struct {
		weight int
		do     func(context.Context) outcome
	}{{35, w.set}, {20, w.increment}, {10, w.del}, {10, w.ttl}, {12, w.mkdir}, {13, w.rmdir}}
	total := 0
	for _, op := range ops {
		total += op.weight
	}
	for ctx.Err() == nil {
		n := w.rng.IntN(total)
		var o outcome
		for _, op := range ops {
			if n < op.weight {
				o = op.do(ctx)
				break
			}
			n -= op.weight
		}
		pause := w.pause/2 + time.Duration(w.rng.Int64N(int64(w.pause)))
		if o != applied {
			pause = errorPause
		}
		if !ctxsleep.Sleep(ctx, pause) {
			return
		}
	}
}

func (w *v2Writer) value() string {
	w.seq++
	return w.id + "." + strconv.Itoa(w.seq)
}

// write sends one write and records its event (when acknowledged: expected;
// when its answer is lost: maybe). ev computes the expected identity from
// the answer (a delete learns the value it removed from prevNode).
func (w *v2Writer) write(ctx context.Context, method, key string, q url.Values, maybe func(),
	ev func(v2Answer) identity) (outcome, v2Answer) {
	if ctx.Err() != nil {
		return refused, v2Answer{}
	}
	wctx, cancel := context.WithTimeout(context.Background(), writeTimeout) // a write in flight finishes after ctx
	defer cancel()
	sent := time.Now()
	a, err := v2Do(wctx, w.hc, w.tgt.get(), method, key, q)
	o := classify(a, err)
	w.stats.note(o)
	switch o {
	case applied:
		// A watcher must see the action the writer was answered with.
		w.led.expect(expected{id: ev(a), action: a.ev.Action, origin: fromV2, sent: sent, acked: time.Now()})
		w.stats.events.Add(1)
	case uncertain:
		maybe()
	}
	return o, a
}

func putID(key, value string) func(v2Answer) identity {
	return func(v2Answer) identity { return identity{key: key, value: value} }
}

func removedID(key string) func(v2Answer) identity {
	return func(a v2Answer) identity {
		id := identity{key: key, del: true}
		if a.ev.PrevNode != nil && a.ev.PrevNode.Value != nil {
			id.value = *a.ev.PrevNode.Value
		}
		return id
	}
}

func (w *v2Writer) set(ctx context.Context) outcome {
	key, v := fmt.Sprintf("%s/k%d", w.dir, w.rng.IntN(poolKeys)), w.value()
	o, _ := w.write(ctx, http.MethodPut, key, url.Values{"value": {v}},
		func() { w.led.uncertain(identity{key: key, value: v}) }, putID(key, v))
	return o
}

// increment compare-and-swaps the counter from the value it holds to the
// next one; when the value is not known (an answer was lost, or a swap
// failed), it reads it first, or sets it when there is none.
func (w *v2Writer) increment(ctx context.Context) outcome {
	key := w.dir + "/counter"
	if w.counter == "" {
		rctx, cancel := context.WithTimeout(ctx, writeTimeout)
		a, err := v2Do(rctx, w.hc, w.tgt.get(), http.MethodGet, key, url.Values{"quorum": {"true"}})
		cancel()
		switch {
		case err == nil && a.ev != nil && a.ev.Node != nil && a.ev.Node.Value != nil:
			w.counter = *a.ev.Node.Value
		case err == nil && a.err != nil && a.err.Code == 100:
			v := w.value()
			o, _ := w.write(ctx, http.MethodPut, key, url.Values{"value": {v}},
				func() { w.led.uncertain(identity{key: key, value: v}) }, putID(key, v))
			if o == applied {
				w.counter = v
			}
			return o
		default:
			return uncertain // nothing written; pause
		}
	}
	v := w.value()
	o, _ := w.write(ctx, http.MethodPut, key, url.Values{"value": {v}, "prevValue": {w.counter}},
		func() { w.led.uncertain(identity{key: key, value: v}) }, putID(key, v))
	w.counter = ""
	if o == applied {
		w.counter = v
	}
	return o
}

func (w *v2Writer) del(ctx context.Context) outcome {
	key := fmt.Sprintf("%s/k%d", w.dir, w.rng.IntN(poolKeys))
	o, _ := w.write(ctx, http.MethodDelete, key, nil, func() { w.led.uncertainDel(key) }, removedID(key))
	return o
}

// ttl creates a key of its own with a TTL of 2–4 s: its creation and, a
// few seconds later, its expiry are events.
func (w *v2Writer) ttl(ctx context.Context) outcome {
	v := w.value()
	key := fmt.Sprintf("%s/t%d", w.dir, w.seq)
	ttl := 2 + w.rng.IntN(3)
	sent := time.Now()
	o, _ := w.write(ctx, http.MethodPut, key,
		url.Values{"value": {v}, "ttl": {strconv.Itoa(ttl)}, "prevExist": {"false"}},
		func() {
			w.led.uncertain(identity{key: key, value: v})
			w.led.uncertainDel(key)
		}, putID(key, v))
	if o == applied {
		// Committed by etcd when the lease runs out, some time after sent.
		w.led.expect(expected{id: identity{key: key, del: true, value: v}, action: "expire", origin: fromExpire,
			sent: sent})
		w.stats.events.Add(1)
	}
	return o
}

// mkdir creates a directory of its own (no value: its name is unique) and,
// half the time, a file in it.
func (w *v2Writer) mkdir(ctx context.Context) outcome {
	w.seq++
	key := fmt.Sprintf("%s/d%d", w.dir, w.seq)
	o, _ := w.write(ctx, http.MethodPut, key, url.Values{"dir": {"true"}, "prevExist": {"false"}},
		func() { w.led.uncertain(identity{key: key}) }, putID(key, ""))
	if o == refused {
		return o
	}
	w.dirs = append(w.dirs, key)
	if o == applied && w.rng.IntN(2) == 0 {
		f, v := key+"/f", w.value()
		o, _ = w.write(ctx, http.MethodPut, f, url.Values{"value": {v}},
			func() { w.led.uncertain(identity{key: f, value: v}) }, putID(f, v))
	}
	return o
}

// rmdir deletes the oldest of its directories, with what is in it: one
// event for the directory. It is a little more likely than mkdir, so the
// directories (and the bridge's copy of the key space) stay few over a long
// soak.
func (w *v2Writer) rmdir(ctx context.Context) outcome {
	if len(w.dirs) == 0 {
		return w.set(ctx)
	}
	key := w.dirs[0]
	o, _ := w.write(ctx, http.MethodDelete, key, url.Values{"dir": {"true"}, "recursive": {"true"}},
		func() { w.led.uncertainDel(key) }, removedID(key))
	if o != uncertain {
		w.dirs = w.dirs[1:]
	}
	if o == refused {
		return applied // it did not exist (its creation's answer was lost): nothing to pause for
	}
	return o
}

// v3Writer is a v3 client writing multi-key transactions under its own
// directory: each puts or deletes 2–5 of its keys in one revision. A v2
// watcher must see every key's event.
type v3Writer struct {
	id, dir string
	cli     *clientv3.Client
	led     *ledger
	rng     *rand.Rand
	pause   time.Duration
	stats   writeStats

	seq    int // owned by run's goroutine
	exists map[string]bool
}

func newV3Writer(id string, cli *clientv3.Client, led *ledger, seed uint64, pause time.Duration) *v3Writer {
	return &v3Writer{id: id, dir: "/soak/v3/" + id, cli: cli, led: led, rng: rand.New(rand.NewPCG(seed, 3)),
		pause: pause, exists: map[string]bool{}}
}

func (w *v3Writer) run(ctx context.Context) {
	for ctx.Err() == nil {
		pause := w.pause/2 + time.Duration(w.rng.Int64N(int64(w.pause)))
		if w.txn() != applied {
			pause = errorPause
		}
		if !ctxsleep.Sleep(ctx, pause) {
			return
		}
	}
}

// v3Op is one key of a transaction: a put of value, or a delete.
type v3Op struct {
	key, value string
	del        bool
}

func (w *v3Writer) plan() []v3Op {
	n := 2 + w.rng.IntN(4)
	var ops []v3Op
	for _, k := range w.rng.Perm(v3Keys)[:n] {
		key := fmt.Sprintf("%s/k%d", w.dir, k)
		if w.exists[key] && w.rng.IntN(10) < 3 {
			ops = append(ops, v3Op{key: key, del: true})
			continue
		}
		w.seq++
		ops = append(ops, v3Op{key: key, value: w.id + "." + strconv.Itoa(w.seq)})
	}
	return ops
}

func (w *v3Writer) txn() outcome {
	ops := w.plan()
	var cops []clientv3.Op
	for _, op := range ops {
		if op.del {
			cops = append(cops, clientv3.OpDelete(op.key, clientv3.WithPrevKV()))
		} else {
			cops = append(cops, clientv3.OpPut(op.key, op.value, clientv3.WithPrevKV()))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := w.cli.Txn(ctx).Then(cops...).Commit()
	if err != nil {
		w.stats.note(uncertain)
		for _, op := range ops {
			if op.del {
				w.led.uncertainDel(op.key)
			} else {
				w.led.uncertain(identity{key: op.key, value: op.value})
				w.exists[op.key] = true
			}
		}
		return uncertain
	}
	w.stats.note(applied)
	acked := time.Now()
	pos := 0
	for i, op := range ops {
		e := expected{sent: sent, acked: acked, origin: fromV3First}
		if pos > 0 {
			e.origin = fromV3Rest
		}
		r := resp.Responses[i]
		if op.del {
			d := r.GetResponseDeleteRange()
			w.exists[op.key] = false
			if d.Deleted == 0 || len(d.PrevKvs) == 0 {
				continue // nothing was there: no event
			}
			e.id, e.action = identity{key: op.key, del: true, value: string(d.PrevKvs[0].Value)}, "delete"
		} else {
			e.id, e.action = identity{key: op.key, value: op.value}, "create"
			if r.GetResponsePut().PrevKv != nil {
				e.action = "set"
			}
			w.exists[op.key] = true
		}
		w.led.expect(e)
		w.stats.events.Add(1)
		pos++
	}
	return applied
}
