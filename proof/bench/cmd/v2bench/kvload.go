// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// loadResult is what a closed-loop load measured inside its window.
type loadResult struct {
	ops, oks, errs int
	all            int     // operations over the whole run, warm-up included
	cpu            float64 // server CPU seconds over the whole run
	lat            lat
	dur            time.Duration
	firstErr       error
}

func (r loadResult) perSec(n int) float64 { return float64(n) / r.dur.Seconds() }

// runLoad runs clients closed loops of op for warm+dur; only operations
// started after the warm-up and finished before the end count. The server
// CPU is that of all in's processes (for v2bridge-ext the bridge and its
// etcd).
func runLoad(in *instance, clients int, warm, dur time.Duration, op func(ctx context.Context, worker, i int) (bool, error)) loadResult {
	cpu0 := in.cpu()
	start := time.Now()
	measureFrom, end := start.Add(warm), start.Add(warm+dur)
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(30*time.Second))
	defer cancel()
	var mu sync.Mutex
	res := loadResult{dur: dur}
	var wg sync.WaitGroup
	var errCount atomic.Int64
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var l lat
			ops, oks, errs, all := 0, 0, 0, 0
			var firstErr error
			for i := 0; ; i++ {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				ok, err := op(ctx, w, i)
				t1 := time.Now()
				all++
				if err != nil {
					// Bound a failing system's error loop.
					if errCount.Add(1) > 10000 {
						break
					}
					time.Sleep(time.Millisecond)
				}
				if t0.Before(measureFrom) || t1.After(end) {
					continue
				}
				ops++
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				if ok {
					oks++
				}
				l = append(l, t1.Sub(t0))
			}
			mu.Lock()
			res.ops += ops
			res.all += all
			res.oks += oks
			res.errs += errs
			res.lat = append(res.lat, l...)
			if res.firstErr == nil {
				res.firstErr = firstErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.cpu = in.cpu() - cpu0
	return res
}

// cpuPerOp is the server's CPU time per operation in µs.
func (r loadResult) cpuPerOp() float64 {
	if r.all == 0 {
		return 0
	}
	return r.cpu / float64(r.all) * 1e6
}

// kvBench runs the key-value workloads against one system.
type kvBench struct {
	in       *instance
	cfg      *config
	res      *results
	sys      string
	k        kv
	noTTL    string
	profiled map[string]bool
	plain    map[string]loadResult // this run's put-64 and get-64, for the -auth rows' ratios
	auth     *benchAuth            // the -auth rows' users, once made
}

const value64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// parallelPut writes n keys under dir with 32 writers.
func parallelPut(k kv, dir string, n int) error {
	var wg sync.WaitGroup
	var first atomic.Value
	var next atomic.Int64
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := k.put(ctx, fmt.Sprintf("%s/k%04d", dir, i), value64)
				cancel()
				if err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return e.(error)
	}
	return nil
}

// prof CPU-profiles the bridge during workload when -profile names it.
func (b *kvBench) prof(workload string) func() {
	if b.in.kind != sysBridge || !b.cfg.profiles(workload) || b.profiled[workload] {
		return func() {}
	}
	b.profiled[workload] = true
	return profileBridge(b.cfg, b.in, workload+"-"+b.sys, int((b.cfg.warm + b.cfg.dur).Seconds()))
}

func (b *kvBench) report(workload string, r loadResult) {
	if r.errs > 0 {
		b.res.note("%s on %s: %d of %d operations failed (first: %s)", workload, b.sys, r.errs, r.ops, fmtErr(r.firstErr))
	}
}

// kvWorkloads in table order; each runs once per system per run, and the
// systems take turns workload by workload, so noise on a shared machine
// hits them alike.
var kvWorkloads = []struct {
	name string
	fn   func(b *kvBench, ns string)
}{
	{"put-seq", (*kvBench).putSeq},
	{"put-seq-bridge-txn", (*kvBench).putSeqBridgeTxn},
	{"put-seq-one-compare", (*kvBench).putSeqOneCompare},
	{"put-64", (*kvBench).put64},
	{"put-64-auth", (*kvBench).put64Auth},
	{"put-64-bridge-txn", (*kvBench).put64BridgeTxn},
	{"cas-16", (*kvBench).cas16},
	{"get-64", func(b *kvBench, ns string) { b.get64(false) }},
	{"get-64-auth", (*kvBench).get64Auth},
	{"get-64-quorum", func(b *kvBench, ns string) { b.get64(true) }},
	{"get-recursive-1000", (*kvBench).getRecursive},
	{"ttl-cycle-64", (*kvBench).ttlCycle},
	{"ttl-cycle-64-bridge-txn", (*kvBench).ttlCycleBridgeTxn},
}

// runWorkload runs workload i once; run numbers the keys.
func (b *kvBench) runWorkload(i, run int) {
	w := kvWorkloads[i]
	done := b.prof(w.name)
	defer done()
	w.fn(b, fmt.Sprintf("/bench/r%d", run))
}

// PUT sequential: latency.
func (b *kvBench) putSeq(ns string) {
	c := b.cfg
	r := runLoad(b.in, 1, c.warm, c.dur, func(ctx context.Context, _, i int) (bool, error) {
		_, err := b.k.put(ctx, fmt.Sprintf("%s/seq/k%d", ns, i%100), value64)
		return true, err
	})
	b.report("put-seq", r)
	b.res.add("put-seq", b.sys, "latency p50", "ms", true, ms(r.lat.pct(0.50)))
	b.res.add("put-seq", b.sys, "latency p99", "ms", true, ms(r.lat.pct(0.99)))
	b.res.add("put-seq", b.sys, "server CPU per op", "µs", true, r.cpuPerOp())
}

// put-seq-bridge-txn: put-seq's writes sent by clientv3 itself as the
// transaction a bridge sends for each (direct systems only): etcd's latency
// for the bridge's guarded put, with no bridge in the way.
func (b *kvBench) putSeqBridgeTxn(ns string) {
	b.seqBound("put-seq-bridge-txn", ns+"/seqtxn", bridgeTxner.bridgeTxn)
}

// put-seq-one-compare: put-seq's writes sent by clientv3 itself as a
// transaction with one compare, on the key's own revision (direct systems
// only): the least any write guarded against a concurrent change costs in
// etcd, below the bridge's guarded put (which also guards the ancestors).
func (b *kvBench) putSeqOneCompare(ns string) {
	b.seqBound("put-seq-one-compare", ns+"/seq1", bridgeTxner.oneCompareTxn)
}

// seqBound runs put-seq's load, under dir, with each write sent by send
// (direct systems only), as the row name.
func (b *kvBench) seqBound(name, dir string, send func(bridgeTxner, context.Context, string, string) error) {
	t, ok := b.k.(bridgeTxner)
	if !ok {
		return
	}
	c := b.cfg
	r := runLoad(b.in, 1, c.warm, c.dur, func(ctx context.Context, _, i int) (bool, error) {
		return true, send(t, ctx, fmt.Sprintf("%s/k%d", dir, i%100), value64)
	})
	b.report(name, r)
	b.res.add(name, b.sys, "latency p50", "ms", true, ms(r.lat.pct(0.50)))
	b.res.add(name, b.sys, "server CPU per op", "µs", true, r.cpuPerOp())
}

// PUT, 64 clients: throughput.
func (b *kvBench) put64(ns string) {
	c := b.cfg
	r := runLoad(b.in, 64, c.warm, c.dur, func(ctx context.Context, w, i int) (bool, error) {
		_, err := b.k.put(ctx, fmt.Sprintf("%s/put64/c%d/k%d", ns, w, i%16), value64)
		return true, err
	})
	b.report("put-64", r)
	b.plain["put-64"] = r
	b.res.add("put-64", b.sys, "throughput", "ops/s", false, r.perSec(r.ops-r.errs))
	b.res.add("put-64", b.sys, "latency p99", "ms", true, ms(r.lat.pct(0.99)))
	b.res.add("put-64", b.sys, "server CPU per op", "µs", true, r.cpuPerOp())
}

// put-64-bridge-txn: the transaction a bridge sends for one v2 PUT of a
// file in put-64, sent by clientv3 itself (direct systems only): what etcd
// charges for the bridge's write protocol, with no bridge in the way, one
// transaction per write. The bridge, which sends concurrent writes in one
// transaction of nested ones, can pass it.
func (b *kvBench) put64BridgeTxn(ns string) {
	t, ok := b.k.(bridgeTxner)
	if !ok {
		return
	}
	c := b.cfg
	r := runLoad(b.in, 64, c.warm, c.dur, func(ctx context.Context, w, i int) (bool, error) {
		return true, t.bridgeTxn(ctx, fmt.Sprintf("%s/put64txn/c%d/k%d", ns, w, i%16), value64)
	})
	b.report("put-64-bridge-txn", r)
	b.res.add("put-64-bridge-txn", b.sys, "throughput", "ops/s", false, r.perSec(r.ops-r.errs))
	b.res.add("put-64-bridge-txn", b.sys, "server CPU per op", "µs", true, r.cpuPerOp())
}

// CAS, 16 clients contending on one key: read the index (v2 says nothing
// useful on a failed compare), compare-and-swap, repeat.
func (b *kvBench) cas16(ns string) {
	c := b.cfg
	casKey := ns + "/cas"
	if _, err := b.k.put(context.Background(), casKey, "0"); err != nil {
		b.res.note("cas-16 on %s: setup failed: %s", b.sys, fmtErr(err))
		return
	}
	idxs := make([]uint64, 16)
	r := runLoad(b.in, 16, c.warm, c.dur, func(ctx context.Context, w, i int) (bool, error) {
		if idxs[w] == 0 {
			x, err := b.k.getIndex(ctx, casKey)
			if err != nil {
				return false, err
			}
			idxs[w] = x
		}
		x, ok, err := b.k.cas(ctx, casKey, fmt.Sprintf("w%d-%d", w, i), idxs[w])
		if err != nil {
			idxs[w] = 0
			return false, err
		}
		idxs[w] = x // 0 when the system did not say: re-read next time
		return ok, nil
	})
	b.report("cas-16", r)
	b.res.add("cas-16", b.sys, "successful swaps", "ops/s", false, r.perSec(r.oks))
	b.res.add("cas-16", b.sys, "attempts", "ops/s", false, r.perSec(r.ops-r.errs))
	b.res.add("cas-16", b.sys, "server CPU per attempt", "µs", true, r.cpuPerOp())
}

// GET, 64 clients, plain or quorum.
func (b *kvBench) get64(quorum bool) {
	c := b.cfg
	name := "get-64"
	if quorum {
		name = "get-64-quorum"
	}
	r := runLoad(b.in, 64, c.warm, c.dur, func(ctx context.Context, w, i int) (bool, error) {
		return true, b.k.get(ctx, fmt.Sprintf("/bench/get/k%04d", (w*7+i)%100), quorum)
	})
	b.report(name, r)
	b.plain[name] = r
	b.res.add(name, b.sys, "throughput", "ops/s", false, r.perSec(r.ops-r.errs))
	b.res.add(name, b.sys, "server CPU per op", "µs", true, r.cpuPerOp())
}

// Recursive GET of a 1,000-key directory, 8 clients.
func (b *kvBench) getRecursive(string) {
	c := b.cfg
	n, err := b.k.list(context.Background(), "/bench/dir1000", true)
	if err != nil || n != 1000 {
		b.res.note("get-recursive-1000 on %s: the directory lists %d keys (err %s)", b.sys, n, fmtErr(err))
	}
	r := runLoad(b.in, 8, c.warm, c.dur, func(ctx context.Context, _, _ int) (bool, error) {
		_, err := b.k.list(ctx, "/bench/dir1000", false)
		return true, err
	})
	b.report("get-recursive-1000", r)
	b.res.add("get-recursive-1000", b.sys, "throughput", "ops/s", false, r.perSec(r.ops-r.errs))
	b.res.add("get-recursive-1000", b.sys, "latency p50", "ms", true, ms(r.lat.pct(0.50)))
	b.res.add("get-recursive-1000", b.sys, "server CPU per op", "µs", true, r.cpuPerOp())
}

// create + TTL + refresh (flannel's lease): each client creates a key with
// prevExist=false&ttl, renews it 4 times with prevIndex&ttl, moves on to a
// new key.
func (b *kvBench) ttlCycle(ns string) {
	if b.noTTL != "" {
		b.res.unsupported("ttl-cycle-64", b.sys, b.noTTL, row{metric: "throughput", unit: "ops/s"},
			row{metric: "server CPU per op", unit: "µs", lowerBetter: true})
		return
	}
	b.runTTLCycles("ttl-cycle-64", ns+"/ttl", func(ctx context.Context, key string, step int, handle uint64) (uint64, error) {
		if step == 0 {
			return b.k.create(ctx, key, value64, 60)
		}
		return b.k.refresh(ctx, key, value64, 60, handle)
	})
}

// runTTLCycles runs 64 clients, each creating a key under dir, renewing it
// 4 times, then moving on to a new key (or at once after an error), and
// reports the workload's throughput and CPU per op. op does one step (0:
// the create) with the handle the step before returned.
func (b *kvBench) runTTLCycles(workload, dir string, op func(ctx context.Context, key string, step int, handle uint64) (uint64, error)) {
	c := b.cfg
	type cycle struct {
		key, step int
		handle    uint64
	}
	cycles := make([]cycle, 64)
	r := runLoad(b.in, 64, c.warm, c.dur, func(ctx context.Context, w, i int) (bool, error) {
		l := &cycles[w]
		var err error
		l.handle, err = op(ctx, fmt.Sprintf("%s/c%d/k%d", dir, w, l.key), l.step, l.handle)
		l.step++
		if err != nil || l.step == 5 {
			l.step, l.handle = 0, 0
			l.key++
		}
		return true, err
	})
	b.report(workload, r)
	b.res.add(workload, b.sys, "throughput", "ops/s", false, r.perSec(r.ops-r.errs))
	b.res.add(workload, b.sys, "server CPU per op", "µs", true, r.cpuPerOp())
}

// ttl-cycle-64-bridge-txn: the transactions a bridge sends for ttl-cycle-64
// (a create, then 4 renewals, each a guarded put with the shared lease and a
// journal record), sent by clientv3 itself (direct systems only): what etcd
// charges for the bridge's TTL protocol, one transaction per write (the
// bridge, sending concurrent writes together, can pass it).
func (b *kvBench) ttlCycleBridgeTxn(ns string) {
	v, ok := b.k.(v3kv)
	if !ok {
		return
	}
	g, err := v.cli.Grant(context.Background(), 61)
	if err != nil {
		b.res.note("ttl-cycle-64-bridge-txn on %s: grant: %s", b.sys, fmtErr(err))
		return
	}
	b.runTTLCycles("ttl-cycle-64-bridge-txn", ns+"/ttltxn", func(ctx context.Context, key string, _ int, prev uint64) (uint64, error) {
		rev, err := v.bridgeTTLTxn(ctx, key, value64, g.ID, int64(prev))
		return uint64(rev), err
	})
}

// prepare writes the data the read workloads read and probes TTL support.
func (b *kvBench) prepare() error {
	if err := parallelPut(b.k, "/bench/get", 100); err != nil {
		return fmt.Errorf("writing /bench/get: %w", err)
	}
	if err := parallelPut(b.k, "/bench/dir1000", 1000); err != nil {
		return fmt.Errorf("writing /bench/dir1000: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.k.create(ctx, "/bench/ttl-probe", "x", 60); err != nil {
		var ve *v2Error
		if errors.As(err, &ve) {
			b.noTTL = fmt.Sprintf("TTL PUT → HTTP %d, errorCode %d (%s)", ve.Status, ve.ErrorCode,
				strings.TrimSpace(ve.Message+" "+ve.Cause))
		} else {
			b.noTTL = "TTL PUT failed: " + fmtErr(err)
		}
	}
	return nil
}
