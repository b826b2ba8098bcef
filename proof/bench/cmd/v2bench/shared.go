// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// The shared-cluster section: a node's bridge on an etcd that also holds a
// Kubernetes-like registry, whose API server keeps writing to it. What the
// bridge costs should follow what it serves (flannel's subtree), not the
// whole cluster. Each comparison runs the same bridge binary twice on the
// same etcd 3.5: unscoped (--serve-prefix /) and scoped (--serve-prefix
// /coreos.com/network).

// sharedConfig sizes the shared-cluster section.
type sharedConfig struct {
	keys       int           // registry keys under /registry
	valueSize  int           // bytes per registry value
	rate       int           // churn writes per second under /registry
	churn      time.Duration // the churn with one bridge (and the flannel watcher)
	subnetGap  time.Duration // a subnet lease changes this often during it
	away       time.Duration // the away watcher is away this long after each event
	settle     time.Duration // after /readyz, before RSS is read
	nodes      int           // bridges of the scale run
	scaleKeys  int           // registry keys of the scale run's etcd
	scaleChurn time.Duration // the churn of the scale run
	bridgeBin  string        // the bridge binary ("": built from ./cmd/bridge)
	bridgeRev  string        // the commit it was built from, when known
}

const (
	registryDir = "/registry"
	flannelDir  = "/coreos.com/network"
	subnetsDir  = flannelDir + "/subnets"
	// flannelSubnets is how many subnet leases the flannel subtree holds.
	flannelSubnets = 10
	// loadWorkers and loadBatch: the registry is loaded by loadWorkers
	// concurrent transactions of loadBatch puts each.
	loadWorkers = 32
	loadBatch   = 50
	// churnWorkers write the churn, paced to the rate.
	churnWorkers = 32
)

// The two settings compared, as table columns.
var sharedScopes = []struct{ col, title, prefix string }{
	{"unscoped", "unscoped (`--serve-prefix /`)", "/"},
	{"scoped", "scoped (`--serve-prefix " + flannelDir + "`)", flannelDir},
}

// runShared runs the shared-cluster section: one bridge at a time on one
// etcd 3.5, first without the registry, then with it and under churn; then
// the scale run, many bridges on another etcd.
func runShared(cfg *config, res *results) {
	sc := cfg.shared
	logf("shared-cluster section: %s registry keys of %d B, %d writes/s of churn, %d bridges in the scale run",
		commas(int64(sc.keys)), sc.valueSize, sc.rate, sc.nodes)
	bin := sc.bridgeBin
	if bin == "" {
		b, cleanup, err := buildBridgeBinary()
		if err != nil {
			res.note("shared cluster: cannot build the bridge: %s", fmtErr(err))
			return
		}
		defer cleanup()
		bin = b
		sc.bridgeRev = gitRevision()
	}
	one := &table{title: "Shared cluster", workload: "shared-cluster",
		ratio: [2]string{"scoped", "unscoped"}, ratioTitle: "scoped ÷ unscoped"}
	scale := &table{title: "Shared cluster: many node bridges on one etcd", workload: "shared-cluster-scale"}
	for _, s := range sharedScopes {
		one.cols = append(one.cols, s.col)
		one.colTitles = append(one.colTitles, s.title)
	}
	one.intro = sharedIntro(sc)
	if sc.bridgeRev != "" {
		one.intro += " The bridge was built from commit " + sc.bridgeRev + "."
	}
	res.addTable(one)
	sharedOne(sc, bin, one)
	if sc.nodes > 0 {
		scale.cols = []string{"none"}
		scale.colTitles = []string{"no bridge (the churn alone)"}
		for _, s := range sharedScopes {
			scale.cols = append(scale.cols, s.col)
			scale.colTitles = append(scale.colTitles, fmt.Sprintf("%d bridges, %s", sc.nodes, s.title))
		}
		scale.intro = scaleIntro(sc)
		res.addTable(scale)
		sharedScale(sc, bin, scale)
	}
}

func sharedIntro(sc *sharedConfig) string {
	return fmt.Sprintf("One run. One etcd 3.5 (v2ref, its own process) shared by flannel and a Kubernetes-like registry; the bridge "+
		"binary (`cmd/bridge`, its own process) in front of it with `--endpoints`, as the DaemonSet example runs it, "+
		"once with each setting, one at a time. Empty cluster: only flannel's config and %d subnet leases (written "+
		"through a bridge). Registry: %s keys of %d B (random bytes, like Kubernetes' protobuf) under `%s`, loaded "+
		"before the bridge starts. Time to /readyz is from the exec to the first 200; RSS is the bridge's VmRSS %v "+
		"after that. Churn: %d writes/s (clientv3 Puts straight to etcd, %d writers, paced) overwriting random registry "+
		"keys for %v; CPU is utime+stime of each process over the churn, per second. v3 events sent to the bridge: "+
		"etcd's own count of events it sent on watch streams (`etcd_debugging_mvcc_events_total`; the bridge is "+
		"etcd's only watcher here); bytes: everything etcd sent the bridge, counted on the wire by a TCP forwarder "+
		"between them. During the churn a flannel-style watcher (`v2bridgetest.V2Watcher`: the Go v2 client, "+
		"recursive on `%s`, a new watch from modifiedIndex+1 after each event, a re-list after a 401) runs through "+
		"the bridge from the index before the churn, while one subnet lease changes every %v through the bridge "+
		"(a v2 PUT with a TTL, as flanneld renews); every change written must be seen. A second watcher (raw "+
		"one-shot HTTP watches, waitIndex = modifiedIndex+1) is away for %v after each event, as a node whose link "+
		"drops or whose flanneld restarts, before it watches again: about %s churn writes pass meanwhile, more than "+
		"the 1000 events of v2's history window. On a 401 it re-lists, as flanneld does; a change only that listing "+
		"shows is counted apart. Measured on a shared, busy machine: CPU and times are noisy, counts and bytes are not.",
		flannelSubnets, commas(int64(sc.keys)), sc.valueSize, registryDir, sc.settle, sc.rate, churnWorkers, sc.churn,
		subnetsDir, sc.subnetGap, sc.away, commas(int64(sc.away.Seconds()*float64(sc.rate))))
}

func scaleIntro(sc *sharedConfig) string {
	return fmt.Sprintf("Another etcd 3.5 with %s registry keys of %d B; %d bridge processes (one per node) start in "+
		"front of it, all with the same setting, and once all are ready and %v have passed, %d writes/s of churn "+
		"under `%s` run for %v. etcd's CPU per cluster write and the bytes it sent over gRPC per cluster write "+
		"(`etcd_network_client_grpc_sent_bytes_total`, every client), and \"to the bridges\" the same minus the "+
		"first column's, where no bridge runs (what the writer itself receives). On 2 cores shared with other "+
		"work, %d bridges and etcd compete for CPU: the write rate reached is shown; bytes and events per write "+
		"do not depend on it.", commas(int64(sc.scaleKeys)), sc.valueSize, sc.nodes, sc.settle, sc.rate, registryDir,
		sc.scaleChurn.Round(time.Second), sc.nodes)
}

// sharedOne measures one bridge at a time on one etcd, without and then
// with the registry.
func sharedOne(sc *sharedConfig, bin string, t *table) {
	etcd, err := startV2Ref(false)
	if err != nil {
		t.note("cannot start etcd 3.5: %s", fmtErr(err))
		return
	}
	defer etcd.Stop()
	if err := writeFlannelKeys(bin, etcd.etcdURL); err != nil {
		t.note("writing flannel's keys: %s", fmtErr(err))
		return
	}

	// The empty cluster: flannel's keys only.
	for _, s := range sharedScopes {
		br, err := startBridgeProc(bin, etcd.etcdURL, s.prefix, "node-empty-"+s.col)
		if err != nil {
			t.note("%s bridge on the empty cluster: %s", s.col, fmtErr(err))
			continue
		}
		t.add(s.col, "time to /readyz, empty cluster", "ms", true, ms(br.ready))
		time.Sleep(sc.settle)
		if v, err := rssKiB(br.pid); err == nil {
			t.add(s.col, "bridge RSS, empty cluster", "MiB", true, v/1024)
		}
		mirrorFigures(t, s.col, br.url, "empty cluster")
		_ = br.stop()
	}

	// The registry.
	t0 := time.Now()
	if err := loadRegistry(etcd.V3(), sc.keys, sc.valueSize); err != nil {
		t.note("loading the registry: %s", fmtErr(err))
		return
	}
	load := time.Since(t0)
	logf("  registry: %s keys in %v (%.0f keys/s)", commas(int64(sc.keys)), load.Round(100*time.Millisecond),
		float64(sc.keys)/load.Seconds())
	if db, err := scrapeGauge(etcd.etcdURL, "etcd_mvcc_db_total_size_in_bytes"); err == nil {
		t.fact("registry: %s keys of %d B loaded in %v (%d transactions of %d puts, %d at a time); etcd's database %.0f MB",
			commas(int64(sc.keys)), sc.valueSize, load.Round(100*time.Millisecond), (sc.keys+loadBatch-1)/loadBatch,
			loadBatch, loadWorkers, db/1e6)
	}

	for _, s := range sharedScopes {
		sharedLoaded(sc, bin, etcd, s.col, s.prefix, t)
	}
}

// sharedLoaded measures one bridge on the loaded cluster: start, memory,
// and the churn with the flannel watcher.
func sharedLoaded(sc *sharedConfig, bin string, etcd *instance, col, prefix string, t *table) {
	fwd, err := newByteForwarder(etcd.etcdURL)
	if err != nil {
		t.note("%s: forwarder: %s", col, fmtErr(err))
		return
	}
	defer fwd.close()
	br, err := startBridgeProc(bin, fwd.url(), prefix, "node-"+col)
	if err != nil {
		t.note("%s bridge on the loaded cluster: %s", col, fmtErr(err))
		return
	}
	defer func() { _ = br.stop() }()
	t.add(col, "time to /readyz, registry loaded", "ms", true, ms(br.ready))
	t.add(col, "bytes etcd sent the bridge until /readyz", "MB", true, float64(fwd.down.Load())/1e6)
	time.Sleep(sc.settle)
	if v, err := rssKiB(br.pid); err == nil {
		t.add(col, "bridge RSS, registry loaded", "MiB", true, v/1024)
		if e := t.median(col, "bridge RSS, empty cluster"); e > 0 {
			t.addGoal(col, "bridge RSS ÷ its RSS on the empty cluster", "×", "≤ 1.2", true, v/1024/e)
		}
	}
	mirrorFigures(t, col, br.url, "registry loaded")

	// The flannel watcher starts from the index before the churn.
	idx, err := v2Index(br.url, subnetsDir)
	if err != nil {
		t.note("%s: reading %s: %s", col, subnetsDir, fmtErr(err))
		return
	}
	w, err := v2bridgetest.StartV2Watcher([]string{br.url}, subnetsDir, idx)
	if err != nil {
		t.note("%s: flannel watcher: %s", col, fmtErr(err))
		return
	}
	aw := startAwayWatcher(br.url, subnetsDir, idx, sc.away)
	k := newV2KV(br.url)
	defer closeIdle(k)

	ev0, _ := scrapeGauge(etcd.etcdURL, "etcd_debugging_mvcc_events_total")
	recv0, recvErr := scrapeGauge(br.url, "v2bridge_v3_events_received_total")
	down0 := fwd.down.Load()
	cpu := newCPUMeter(br.pid, etcd.pid)
	ch := startChurn(etcd.V3(), sc.keys, sc.valueSize, sc.rate)
	written := subnetChanges(k, sc.churn, sc.subnetGap)
	writes, churnErrs := ch.stop()
	cores := cpu.cores()
	elapsed := time.Since(cpu.t0)
	down := fwd.down.Load() - down0
	ev1, _ := scrapeGauge(etcd.etcdURL, "etcd_debugging_mvcc_events_total")

	t.add(col, "cluster writes during the churn", "writes/s", false, float64(writes)/elapsed.Seconds())
	if churnErrs > 0 {
		t.note("%s: %d churn writes failed", col, churnErrs)
	}
	t.add(col, "bridge CPU during the churn", "cores", true, cores[0])
	t.add(col, "etcd CPU during the churn", "cores", true, cores[1])
	if writes > 0 {
		t.add(col, "bridge CPU per cluster write", "µs", true, cores[0]*elapsed.Seconds()*1e6/float64(writes))
	}
	if cores[1] > 0 {
		t.addGoal(col, "bridge CPU ÷ etcd CPU during the churn", "×", "≤ 0.03", true, cores[0]/cores[1])
	}
	t.add(col, "v3 events etcd sent the bridge during the churn", "events", true, ev1-ev0)
	if writes > 0 {
		t.addGoal(col, "v3 events sent to the bridge per cluster write", "events", "0 (flannel's only)", true,
			(ev1-ev0)/float64(writes))
		t.add(col, "bytes etcd sent the bridge per cluster write", "B", true, float64(down)/float64(writes))
	}
	if recvErr == nil {
		recv1, _ := scrapeGauge(br.url, "v2bridge_v3_events_received_total")
		t.add(col, "v3 events the bridge received during the churn (its own count)", "events", true, recv1-recv0)
	}
	if v, err := rssKiB(br.pid); err == nil {
		t.add(col, "bridge RSS after the churn", "MiB", true, v/1024)
	}

	// Every subnet change written must reach the watchers.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	w.WaitFor(ctx, func(evs []v2bridgetest.WatchedEvent) bool { return len(missing(written, evs)) == 0 })
	cancel()
	w.Stop()
	for end := time.Now().Add(sc.away + 10*time.Second); !aw.caughtUp(written) && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
	}
	aw.stop()
	var e401, other int
	for _, e := range w.Errors() {
		if e.Code == 401 {
			e401++
		} else {
			other++
		}
	}
	miss := missing(written, w.Events())
	t.add(col, "flannel watcher: subnet changes written", "changes", false, float64(len(written)))
	t.add(col, "flannel watcher: changes seen", "changes", false, float64(len(written)-len(miss)))
	t.addGoal(col, "flannel watcher: changes missed", "changes", "0", true, float64(len(miss)))
	t.addGoal(col, "flannel watcher: 401s (history cleared)", "errors", "0", true, float64(e401))
	t.add(col, "flannel watcher: other watch errors", "errors", true, float64(other))
	t.add(col, "flannel watcher: watch requests sent", "requests", true, float64(len(w.Requests())))
	watched, listed, missed, a401, aerrs, areqs := aw.outcome(written)
	away := fmt.Sprintf("watcher away %v after each event: ", sc.away)
	t.add(col, away+"changes seen by a watch", "changes", false, float64(watched))
	t.add(col, away+"changes seen only in a re-list", "changes", true, float64(listed))
	t.addGoal(col, away+"changes missed", "changes", "0", true, float64(missed))
	t.addGoal(col, away+"401s (history cleared)", "errors", "0", true, float64(a401))
	t.add(col, away+"other errors", "errors", true, float64(aerrs))
	t.add(col, away+"watch requests sent", "requests", true, float64(areqs))
}

// median is the median of a cell so far (0 when it has none).
func (t *table) median(col, metric string) float64 {
	for _, r := range t.rows {
		if r.metric == metric && len(r.vals[col]) > 0 {
			return median(r.vals[col])
		}
	}
	return 0
}

// mirrorFigures records the bridge's mirror size, when it exports it.
func mirrorFigures(t *table, col, bridgeURL, when string) {
	if v, err := scrapeGauge(bridgeURL, "v2bridge_mirror_keys"); err == nil {
		t.add(col, "mirror keys, "+when, "keys", true, v)
	}
	if v, err := scrapeGauge(bridgeURL, "v2bridge_mirror_bytes"); err == nil {
		t.add(col, "mirror bytes, "+when, "MB", true, v/1e6)
	}
}

// writeFlannelKeys writes flannel's network config and its subnet leases
// through a bridge of their own (serving /), which then stops.
func writeFlannelKeys(bin, etcdURL string) error {
	br, err := startBridgeProc(bin, etcdURL, "/", "setup")
	if err != nil {
		return err
	}
	defer func() { _ = br.stop() }()
	k := newV2KV(br.url)
	defer closeIdle(k)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := k.put(ctx, flannelDir+"/config", `{"Network":"10.5.0.0/16","Backend":{"Type":"vxlan"}}`); err != nil {
		return err
	}
	for i := 0; i < flannelSubnets; i++ {
		if _, err := putLease(ctx, k, i, 0); err != nil {
			return err
		}
	}
	return nil
}

// putLease writes subnet lease i (generation gen) as flanneld does: a
// value naming the node, with a TTL. It returns the modifiedIndex.
func putLease(ctx context.Context, k *v2kv, i, gen int) (uint64, error) {
	var idx uint64
	key := fmt.Sprintf("%s/10.5.%d.0-24", subnetsDir, i)
	val := fmt.Sprintf(`{"PublicIP":"192.0.2.%d","BackendType":"vxlan","BackendData":{"VtepMAC":"02:00:00:00:%02x:%02x"}}`,
		i+1, gen&0xff, i)
	err := k.do(ctx, "PUT", key, "", url.Values{"value": {val}, "ttl": {"86400"}}, decodeIndex(&idx))
	return idx, err
}

// change is one subnet change written: its key and modifiedIndex.
type change struct {
	key string
	idx uint64
}

// subnetChanges changes one subnet lease every gap for d, through the
// bridge, and returns the changes it wrote.
func subnetChanges(k *v2kv, d, gap time.Duration) []change {
	var out []change
	end := time.Now().Add(d)
	tk := time.NewTicker(gap)
	defer tk.Stop()
	for gen := 1; ; gen++ {
		select {
		case <-tk.C:
		case <-time.After(time.Until(end)):
			return out
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		i := gen % flannelSubnets
		idx, err := putLease(ctx, k, i, gen)
		cancel()
		if err != nil {
			warnf("subnet change: %v", err)
			continue
		}
		out = append(out, change{fmt.Sprintf("%s/10.5.%d.0-24", subnetsDir, i), idx})
	}
}

// missing are the changes no event matches (key and modifiedIndex).
func missing(written []change, evs []v2bridgetest.WatchedEvent) []change {
	seen := map[change]bool{}
	for _, e := range evs {
		seen[change{e.Key, e.Index}] = true
	}
	var out []change
	for _, c := range written {
		if !seen[c] {
			out = append(out, c)
		}
	}
	return out
}

// v2Index is the X-Etcd-Index of a GET of dir.
func v2Index(base, dir string) (uint64, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + "/v2/keys" + dir)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: HTTP %d", dir, resp.StatusCode)
	}
	return strconv.ParseUint(resp.Header.Get("X-Etcd-Index"), 10, 64)
}

// registryKey is the i-th key of the registry: /registry/<resource>/<namespace>/<name>.
func registryKey(i int) string {
	res := [...]string{"pods", "events", "leases", "configmaps", "secrets", "endpointslices"}
	return fmt.Sprintf("%s/%s/ns%02d/obj-%06d", registryDir, res[i%len(res)], (i/len(res))%20, i)
}

// registryValue is size random bytes (Kubernetes stores protobuf: not
// text, and not compressible).
func registryValue(r *rand.Rand, size int) string {
	b := make([]byte, size)
	for i := 0; i < size; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < size; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return string(b)
}

// loadRegistry writes n registry keys of size bytes, loadWorkers
// transactions of loadBatch puts at a time.
func loadRegistry(cli *clientv3.Client, n, size int) error {
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex // guards firstErr
	var wg sync.WaitGroup
	for g := 0; g < loadWorkers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for {
				from := int(next.Add(loadBatch)) - loadBatch
				if from >= n {
					return
				}
				ops := make([]clientv3.Op, 0, loadBatch)
				for i := from; i < min(from+loadBatch, n); i++ {
					ops = append(ops, clientv3.OpPut(registryKey(i), registryValue(r, size)))
				}
				var err error
				for attempt := 0; attempt < 3; attempt++ {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					_, err = cli.Txn(ctx).Then(ops...).Commit()
					cancel()
					if err == nil {
						break
					}
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// churn overwrites random registry keys at a steady rate, as an API server
// updating objects does.
type churn struct {
	stopc  chan struct{}
	wg     sync.WaitGroup // the pacer and the writers
	writes atomic.Int64
	errs   atomic.Int64
}

func startChurn(cli *clientv3.Client, keys, size, rate int) *churn {
	c := &churn{stopc: make(chan struct{})}
	tokens := make(chan struct{}, rate)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(tokens)
		start := time.Now()
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		sent := 0
		for {
			select {
			case <-c.stopc:
				return
			case <-tk.C:
			}
			due := int(time.Since(start).Seconds() * float64(rate))
			for ; sent < due; sent++ {
				select {
				case tokens <- struct{}{}:
				default: // the writers are behind: this write is not made
				}
			}
		}
	}()
	for g := 0; g < churnWorkers; g++ {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 2))
			for range tokens {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := cli.Put(ctx, registryKey(r.IntN(keys)), registryValue(r, size))
				cancel()
				if err != nil {
					c.errs.Add(1)
					continue
				}
				c.writes.Add(1)
			}
		}()
	}
	return c
}

// stop ends the churn and returns the writes made and failed.
func (c *churn) stop() (writes, errs int64) {
	close(c.stopc)
	c.wg.Wait()
	return c.writes.Load(), c.errs.Load()
}

// sharedScale runs the scale run: no bridge, then sc.nodes bridges of
// each setting, on one etcd under the churn.
func sharedScale(sc *sharedConfig, bin string, t *table) {
	etcd, err := startV2Ref(false)
	if err != nil {
		t.note("cannot start etcd 3.5: %s", fmtErr(err))
		return
	}
	defer etcd.Stop()
	if err := writeFlannelKeys(bin, etcd.etcdURL); err != nil {
		t.note("writing flannel's keys: %s", fmtErr(err))
		return
	}
	if err := loadRegistry(etcd.V3(), sc.scaleKeys, sc.valueSize); err != nil {
		t.note("loading the registry: %s", fmtErr(err))
		return
	}
	for _, r := range []struct {
		metric, unit string
		lower        bool
	}{
		{"bridges running", "processes", false},
		{"time until all are ready", "s", true},
		{"cluster writes during the churn", "writes/s", false},
	} {
		t.declare(r.metric, r.unit, r.lower)
	}
	var baseBytes, baseCPU float64
	for _, col := range t.cols {
		prefix := ""
		for _, s := range sharedScopes {
			if s.col == col {
				prefix = s.prefix
			}
		}
		var brs []*bridgeProc
		if prefix != "" {
			t0 := time.Now()
			brs, err = startBridges(bin, etcd.etcdURL, prefix, col, sc.nodes)
			if err != nil {
				t.note("%d %s bridges: %s", sc.nodes, col, fmtErr(err))
				stopBridges(brs)
				continue
			}
			t.add(col, "bridges running", "processes", false, float64(len(brs)))
			t.add(col, "time until all are ready", "s", true, time.Since(t0).Seconds())
			time.Sleep(sc.settle)
		}
		pids := []int{}
		for _, b := range brs {
			pids = append(pids, b.pid)
		}
		sent0, _ := scrapeGauge(etcd.etcdURL, "etcd_network_client_grpc_sent_bytes_total")
		ev0, _ := scrapeGauge(etcd.etcdURL, "etcd_debugging_mvcc_events_total")
		e0, b0, t0 := cpuSecondsOf(etcd.pid), cpuSeconds(pids...), time.Now()
		ch := startChurn(etcd.V3(), sc.scaleKeys, sc.valueSize, sc.rate)
		time.Sleep(sc.scaleChurn)
		writes, churnErrs := ch.stop()
		el := time.Since(t0).Seconds()
		e1, b1 := cpuSecondsOf(etcd.pid), cpuSeconds(pids...)
		sent1, _ := scrapeGauge(etcd.etcdURL, "etcd_network_client_grpc_sent_bytes_total")
		ev1, _ := scrapeGauge(etcd.etcdURL, "etcd_debugging_mvcc_events_total")
		var rss float64
		for _, p := range pids {
			v, _ := rssKiB(p)
			rss += v
		}
		stopBridges(brs)
		if churnErrs > 0 {
			t.note("%s: %d churn writes failed", col, churnErrs)
		}
		t.add(col, "cluster writes during the churn", "writes/s", false, float64(writes)/el)
		t.add(col, "etcd CPU during the churn", "cores", true, (e1-e0)/el)
		if writes == 0 {
			continue
		}
		w := float64(writes)
		t.add(col, "etcd CPU per cluster write", "ms", true, (e1-e0)*1000/w)
		t.add(col, "bytes etcd sent over gRPC per cluster write", "B", true, (sent1-sent0)/w)
		if col == "none" {
			baseBytes, baseCPU = (sent1-sent0)/w, (e1-e0)/w
		} else {
			t.add(col, "… of which to the bridges, per cluster write", "B", true, (sent1-sent0)/w-baseBytes)
			t.add(col, "… per bridge, per cluster write", "B", true, ((sent1-sent0)/w-baseBytes)/float64(len(brs)))
			t.add(col, "v3 events sent per cluster write", "events", true, (ev1-ev0)/w)
			t.add(col, "etcd CPU per cluster write, above the churn alone, per bridge", "µs", true,
				((e1-e0)/w-baseCPU)*1e6/float64(len(brs)))
			t.add(col, "bridges' CPU during the churn, summed", "cores", true, (b1-b0)/el)
			t.add(col, "bridges' RSS, summed", "MiB", true, rss/1024)
		}
	}
}

// startBridges starts n bridges in front of etcdURL, a few at a time.
func startBridges(bin, etcdURL, prefix, col string, n int) ([]*bridgeProc, error) {
	brs := make([]*bridgeProc, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			brs[i], errs[i] = startBridgeProc(bin, etcdURL, prefix, fmt.Sprintf("node-%s-%03d", col, i))
		}()
	}
	wg.Wait()
	var ok []*bridgeProc
	for _, b := range brs {
		if b != nil {
			ok = append(ok, b)
		}
	}
	return ok, errors.Join(errs...)
}

// stopBridges stops them all at once and waits.
func stopBridges(brs []*bridgeProc) {
	var wg sync.WaitGroup
	for _, b := range brs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = b.stop()
		}()
	}
	wg.Wait()
}
