// SPDX-License-Identifier: Apache-2.0

// Command v2bench measures v2bridge side by side with direct clientv3 on the
// same etcd member, a real etcd v2 server and etcd's own v2v3 emulation, and
// the bridge as deployed (its own process in front of an external etcd,
// beside that etcd's own v2 and v3 APIs), all started by the benchmark on
// loopback, and prints a markdown table (also written to proof/bench/RESULTS*.md)
// plus one JSON object per figure (proof/bench/results*.jsonl).
//
//	go run ./proof/bench/cmd/v2bench -mode full    # make bench        (< 10 min)
//	go run ./proof/bench/cmd/v2bench -mode quick   # make bench-quick  (< 2 min)
//	go run ./proof/bench/cmd/v2bench -mode watch   # make bench-watch
//
// The bridge and its embedded etcd member run in a child process (this
// binary re-executed), the etcd v2 and v2v3 servers in v2ref child
// processes; v2bridge-ext is this binary re-executed with -endpoints, in
// front of the etcd 3.5 of a v2ref child; v2bridge-passthrough is this
// binary re-executed with -v2-server, the bridge in passthrough mode in
// front of that etcd's v2 API (key-value section only); the history
// section runs the embedded member alone in a child (-etcd-only) and
// bridges in front of it (-endpoints), so that a bridge can start afresh
// over a long history. The server RSS per watcher and CPU per operation are
// read from /proc of those processes (summed over the bridge child and its
// etcd for v2bridge-ext and v2bridge-passthrough). The load generators run
// in this process.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

type config struct {
	mode       string
	runs       int
	warm, dur  time.Duration
	kv, watch  bool
	idleN      []int
	idleRate   map[int]float64
	idleSteady map[int]time.Duration
	sustainedN int
	herd       *herdConfig // nil: no herd section
	sustained  time.Duration
	window     int
	stallAfter time.Duration
	drain      time.Duration
	systems    []string
	out        string
	mdName     string
	jsonlName  string
	profile    string
	profileDir string
	hist       *histConfig     // nil: no history section
	shadow     *shadowConfig   // nil: no shadow section
	shared     *sharedConfig   // nil: no shared-cluster section
	expiry     bool            // the TTL expiry section
	workloads  map[string]bool // nil: every key-value workload
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childCommand {
		if err := serveBridge(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bridge child:", err)
			os.Exit(1)
		}
		return
	}
	cfg := &config{}
	fs := flag.NewFlagSet("v2bench", flag.ExitOnError)
	fs.StringVar(&cfg.mode, "mode", "full", "full (make bench), quick (make bench-quick), watch (make bench-watch) or shared (make bench-shared)")
	runs := fs.Int("runs", 0, "runs per figure (default: 3; quick: 1)")
	systems := fs.String("systems", strings.Join(allSystems, ","), "systems to run, comma-separated")
	fs.StringVar(&cfg.out, "out", "bench", "directory for RESULTS*.md and results*.jsonl")
	fs.StringVar(&cfg.profile, "profile", "", "CPU-profile the bridge during this workload (put-64, get-64, ttl-cycle-64, watch-idle-10000, watch-sustained-1000, ...) into -profile-dir")
	fs.StringVar(&cfg.profileDir, "profile-dir", "bench/profiles", "where -profile writes")
	dur := fs.Duration("dur", 0, "override the measured time of each key-value load")
	fs.DurationVar(&bridgeHeartbeatTimeout, "bridge-heartbeat-timeout", 0, "run the bridge with this --heartbeat-timeout (0: its default)")
	fs.BoolVar(&bridgeWatchDetach, "bridge-watch-detach", true, "run the bridge with this --watch-detach (false: every watch waits inside net/http)")
	fs.StringVar(&bridgeLog, "bridge-log", "", "append the log of each bridge child (v2bridge, v2bridge-ext) to this file, at debug level (empty: none)")
	only := fs.String("only", "", "run only these sections: kv, idle, sustained, herd, history, shadow, shared, expiry (comma-separated)")
	shadowRate := fs.Int("shadow-rate", 0, "override the write rate of the shadow section (writes/s)")
	herdRate := fs.Float64("herd-rate", 0, "watch-idle-10000: the steady writer's rate (writes/s; 0.5: flannel's herd, a write every 2 s)")
	herdFor := fs.Duration("herd-for", 0, "watch-idle-10000: how long the steady writer runs (5m: the herd's false-loss check)")
	workloads := fs.String("workloads", "", "run only these key-value workloads: put-seq, put-64, cas-16, ttl-cycle-64, ... (comma-separated)")
	bridgeBin := fs.String("bridge-bin", "", "shared section: the bridge binary to run (default: built from ./cmd/bridge)")
	sharedNodes := fs.Int("shared-nodes", 0, "shared section: bridges of the scale run (default 50; 0 keeps it)")
	sharedKeys := fs.Int("shared-keys", 0, "shared section: registry keys (default 100,000)")
	sharedChurn := fs.Duration("shared-churn", 0, "shared section: how long the churn runs with one bridge (default 60s; the scale run's churn is a third of it)")
	_ = fs.Parse(os.Args[1:])

	switch cfg.mode {
	case "full":
		cfg.runs, cfg.warm, cfg.dur = 3, 200*time.Millisecond, 700*time.Millisecond
		cfg.kv, cfg.watch, cfg.expiry = true, true, true
		cfg.idleN = []int{1000, 10000}
		cfg.sustained, cfg.drain = 3*time.Second, 6*time.Second
		cfg.hist = &histConfig{revisions: 200000, stale: 50, getClients: 8, baseline: time.Second,
			minBurst: time.Second, settle: 10 * time.Second, walkEvents: 2000, walkFor: 10 * time.Second}
		cfg.shadow = &shadowConfig{rate: 500, dur: 10 * time.Second, keys: 50, clients: 64, settle: 40 * time.Second}
		cfg.shared = fullShared()
		cfg.herd = &herdConfig{watchers: 10000, rate: 0.5, dur: 5 * time.Minute}
		cfg.mdName, cfg.jsonlName = "RESULTS.md", "results.jsonl"
	case "quick":
		cfg.runs, cfg.warm, cfg.dur = 1, 200*time.Millisecond, 600*time.Millisecond
		cfg.kv, cfg.watch, cfg.expiry = true, true, true
		cfg.idleN = []int{1000}
		cfg.sustained, cfg.drain = 3*time.Second, 3*time.Second
		// Just past the replay's reach of 100,000 revisions.
		cfg.hist = &histConfig{revisions: 120000, stale: 50, getClients: 8, baseline: time.Second,
			minBurst: time.Second, settle: 10 * time.Second, walkEvents: 2000, walkFor: 10 * time.Second}
		cfg.shadow = &shadowConfig{rate: 500, dur: 5 * time.Second, keys: 50, clients: 64, settle: 40 * time.Second}
		cfg.mdName, cfg.jsonlName = "RESULTS-quick.md", "results-quick.jsonl"
	case "watch":
		cfg.runs = 3
		cfg.watch = true
		cfg.idleN = []int{1000, 10000}
		cfg.sustained, cfg.drain = 3*time.Second, 6*time.Second
		cfg.mdName, cfg.jsonlName = "RESULTS-watch.md", "results-watch.jsonl"
	case "shared":
		cfg.runs = 1
		cfg.shared = fullShared()
		cfg.mdName, cfg.jsonlName = "RESULTS-shared.md", "results-shared.jsonl"
	default:
		fatalf("unknown -mode %q", cfg.mode)
	}
	if *dur > 0 {
		cfg.dur = *dur
	}
	if *runs > 0 {
		cfg.runs = *runs
	}
	if *shadowRate > 0 && cfg.shadow != nil {
		cfg.shadow.rate = *shadowRate
	}
	if cfg.shared != nil {
		cfg.shared.bridgeBin = *bridgeBin
		if *sharedNodes > 0 {
			cfg.shared.nodes = *sharedNodes
		}
		if *sharedKeys > 0 {
			cfg.shared.keys = *sharedKeys
		}
		if *sharedChurn > 0 {
			cfg.shared.churn, cfg.shared.scaleChurn = *sharedChurn, *sharedChurn/3
		}
	}
	if *workloads != "" {
		cfg.workloads = map[string]bool{}
		for _, w := range strings.Split(*workloads, ",") {
			cfg.workloads[strings.TrimSpace(w)] = true
		}
	}
	if *only != "" {
		sec := map[string]bool{}
		for _, s := range strings.Split(*only, ",") {
			sec[strings.TrimSpace(s)] = true
		}
		cfg.kv = cfg.kv && sec["kv"]
		cfg.expiry = cfg.expiry && sec["expiry"]
		if !sec["idle"] {
			cfg.idleN = nil
		}
		if !sec["sustained"] {
			cfg.sustainedN = -1
		}
		if !sec["history"] {
			cfg.hist = nil
		}
		if !sec["shadow"] {
			cfg.shadow = nil
		}
		if !sec["shared"] {
			cfg.shared = nil
		}
		if !sec["herd"] {
			cfg.herd = nil
		}
		cfg.watch = cfg.watch && (sec["idle"] || sec["sustained"] || sec["herd"])
	}
	if cfg.sustainedN == 0 {
		cfg.sustainedN = 1000
	}
	cfg.idleRate = map[int]float64{1000: 20, 10000: 2}
	cfg.idleSteady = map[int]time.Duration{1000: 2 * time.Second, 10000: 2 * time.Second}
	if *herdRate > 0 {
		cfg.idleRate[10000] = *herdRate
	}
	if *herdFor > 0 {
		cfg.idleSteady[10000] = *herdFor
	}
	cfg.window, cfg.stallAfter = 64, 500*time.Millisecond
	for _, s := range strings.Split(*systems, ",") {
		cfg.systems = append(cfg.systems, strings.TrimSpace(s))
	}

	nofile := raiseNofile()
	started := time.Now()
	res := newResults()
	logf("v2bench -mode %s: %d run(s) per figure, systems %v, RLIMIT_NOFILE %d", cfg.mode, cfg.runs, cfg.systems, nofile)
	if cfg.kv {
		runKV(cfg, res)
	}
	if cfg.watch {
		runWatch(cfg, res)
	}
	if cfg.expiry {
		runExpiry(cfg, res)
	}
	if cfg.hist != nil {
		runHistory(cfg, res)
	}
	if cfg.shadow != nil {
		runShadow(cfg, res)
	}
	if cfg.shared != nil {
		runShared(cfg, res)
	}
	elapsed := time.Since(started)

	md := res.markdown(header(cfg, elapsed))
	fmt.Print(md)
	if err := res.writeFiles(cfg.out, cfg.mdName, cfg.jsonlName, md); err != nil {
		fatalf("writing results: %v", err)
	}
	logf("done in %v; wrote %s and %s", elapsed.Round(time.Second),
		filepath.Join(cfg.out, cfg.mdName), filepath.Join(cfg.out, cfg.jsonlName))
}

// fullShared sizes the shared-cluster section of make bench and make
// bench-shared.
func fullShared() *sharedConfig {
	return &sharedConfig{keys: 100000, valueSize: 2048, rate: 500, churn: 60 * time.Second, subnetGap: 6 * time.Second, away: 4 * time.Second,
		settle: 3 * time.Second, nodes: 50, scaleKeys: 10000, scaleChurn: 20 * time.Second}
}

// profiles reports whether -profile names workload.
func (c *config) profiles(workload string) bool {
	for _, p := range strings.Split(c.profile, ",") {
		if strings.TrimSpace(p) == workload {
			return true
		}
	}
	return false
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// runKV runs the key-value workloads on as few server processes as the
// comparisons allow, all running for the whole section: one bridge child
// over its embedded member (v2bridge and direct-v3), one etcd 3.5 (etcd-v2
// on its v2 store; direct-v3-ext on its v3 API; v2bridge-ext, a bridge child
// of its own, in front of that v3 API; v2bridge-passthrough, a passthrough
// child of its own, in front of its v2 API), one v2v3. Systems sharing a
// process use disjoint key spaces (the v2 store is apart from v3; direct
// clientv3 keys sit under v3bench/, outside the bridge's range;
// v2bridge-passthrough's v2 keys sit under /passthrough, apart from
// etcd-v2's), and each run uses fresh keys.
func runKV(cfg *config, res *results) {
	logf("key-value workloads")
	benches := map[string]*kvBench{}
	procs := map[string]*instance{} // by server process: embedded, etcd35, ext-bridge, v2v3
	proc := func(name string, start func() (*instance, error)) *instance {
		if in := procs[name]; in != nil {
			return in
		}
		in, err := start()
		if err != nil {
			fatalf("starting %s: %v", name, err)
		}
		procs[name] = in
		return in
	}
	etcd35 := func() (*instance, error) { return startV2Ref(false) }
	var order []*instance
	for _, sys := range cfg.systems {
		var in *instance
		n := len(procs)
		switch sys {
		case sysBridge, sysV3:
			in = proc("embedded", func() (*instance, error) { return startBridgeChild("") })
		case sysV2, sysV3Ext:
			in = proc("etcd35", etcd35)
		case sysBridgeExt, sysPassthrough, sysV3Hop:
			// A child in front of the shared etcd 3.5, which starts first
			// (and so stops last) if no system has started it yet.
			etcd := proc("etcd35", etcd35)
			if len(procs) > n {
				order = append(order, etcd)
				n++
			}
			name, start := "ext-bridge", startExtBridge
			switch sys {
			case sysPassthrough:
				name, start = "passthrough", startPassthroughBridge
			case sysV3Hop:
				name, start = "grpc-hop", startGRPCHop
			}
			in = proc(name, func() (*instance, error) { return start(etcd) })
		case sysV2V3:
			in = proc("v2v3", func() (*instance, error) { return startV2Ref(true) })
		default:
			fatalf("unknown system %q", sys)
		}
		if len(procs) > n {
			order = append(order, in)
		}
		b := &kvBench{in: in, cfg: cfg, res: res, sys: sys, profiled: map[string]bool{}, plain: map[string]loadResult{}}
		if isV3(sys) {
			b.k = v3kv{cli: in.V3(), prefix: v3PrefixOf(sys)}
		} else {
			k := newV2KV(in.v2URL)
			if sys == sysPassthrough {
				k.root = passthroughRoot
			}
			b.k = k
		}
		if err := b.prepare(); err != nil {
			fatalf("preparing %s: %v", sys, err)
		}
		benches[sys] = b
	}
	// Stop in reverse start order: a bridge before the etcd behind it.
	defer func() {
		for i := len(order) - 1; i >= 0; i-- {
			order[i].Stop()
		}
	}()
	defer func() {
		for _, b := range benches {
			closeIdle(b.k)
		}
	}()
	for run := 1; run <= cfg.runs; run++ {
		logf("  kv run %d", run)
		for wi := range kvWorkloads {
			if cfg.workloads != nil && !cfg.workloads[kvWorkloads[wi].name] {
				continue
			}
			for i := range cfg.systems {
				// Rotate the order so no system always runs first.
				sys := cfg.systems[(i+run-1+wi)%len(cfg.systems)]
				benches[sys].runWorkload(wi, run)
			}
		}
	}
}

// runWatch runs the watch workloads, each run on a fresh server process (a
// system's leftovers from one workload must not weigh on the next).
func runWatch(cfg *config, res *results) {
	logf("watch workloads")
	var systems []string
	for _, sys := range cfg.systems {
		if kvOnly(sys) {
			logf("  %s: key-value section only, skipped here", sys)
			continue
		}
		systems = append(systems, sys)
	}
	if len(systems) == 0 {
		return
	}
	// A finished server stops while the next one boots; measuring starts
	// only once the old one is gone.
	var stopping sync.WaitGroup
	start := func(sys, what string) *watchTarget {
		t, err := newWatchTarget(sys)
		stopping.Wait()
		if err != nil {
			res.note("%s on %s: cannot start: %s", what, sys, fmtErr(err))
			return nil
		}
		return t
	}
	stop := func(t *watchTarget) {
		stopping.Add(1)
		go func() {
			defer stopping.Done()
			t.stop()
		}()
	}
	defer stopping.Wait()
	for _, n := range cfg.idleN {
		for run := 1; run <= cfg.runs; run++ {
			for i := range systems {
				sys := systems[(i+run-1)%len(systems)]
				t := start(sys, fmt.Sprintf("watch-idle-%d", n))
				if t == nil {
					continue
				}
				watchIdle(cfg, res, t, fmt.Sprintf("watch-idle-%d", n), n, cfg.idleRate[n], cfg.idleSteady[n], run)
				stop(t)
			}
		}
	}
	if cfg.sustainedN > 0 {
		for run := 1; run <= cfg.runs; run++ {
			for i := range systems {
				sys := systems[(i+run-1)%len(systems)]
				t := start(sys, fmt.Sprintf("watch-sustained-%d", cfg.sustainedN))
				if t == nil {
					continue
				}
				watchSustained(cfg, res, t, cfg.sustainedN, run)
				stop(t)
			}
		}
	}
	if h := cfg.herd; h != nil {
		wl := fmt.Sprintf("watch-herd-%d", h.watchers)
		for _, sys := range systems {
			if sys != sysBridgeExt {
				continue // the bridge as deployed only: one run, five minutes
			}
			if t := start(sys, wl); t != nil {
				watchIdle(cfg, res, t, wl, h.watchers, h.rate, h.dur, 1)
				stop(t)
			}
		}
	}
}

// herdConfig is the herd section: flannel's herd of watchers on one
// bridge, each re-arming on every event, with a write every 2 s for five
// minutes, once, on the bridge as deployed. The bridge must declare no
// loss of the member meanwhile.
type herdConfig struct {
	watchers int
	rate     float64 // writes/s
	dur      time.Duration
}

// profileBridge fetches a CPU profile and an allocation profile (what was
// allocated during the window: a delta) of the bridge child over secs
// seconds into the profile directory; the returned func waits for both.
func profileBridge(cfg *config, in *instance, name string, secs int) func() {
	var wg sync.WaitGroup
	for _, p := range []struct{ path, file, what string }{
		{"/debug/pprof/profile", name + ".pprof", "CPU"},
		{"/debug/pprof/allocs", name + ".allocs.pprof", "allocation"},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: time.Duration(secs+30) * time.Second}
			resp, err := c.Get(fmt.Sprintf("%s%s?seconds=%d", in.v2URL, p.path, secs))
			if err != nil {
				warnf("profile: %v", err)
				return
			}
			defer func() { _ = resp.Body.Close() }()
			f := filepath.Join(cfg.profileDir, p.file)
			if err := saveBody(f, resp.Body); err != nil {
				warnf("profile: %v", err)
				return
			}
			logf("  wrote %s profile of the bridge to %s", p.what, f)
		}()
	}
	return wg.Wait
}

// snapshotBridge saves a heap profile (after a GC) and the goroutine dump
// of the bridge child, for -profile heap-<workload>.
func snapshotBridge(cfg *config, in *instance, name string) {
	c := &http.Client{Timeout: time.Minute}
	for _, p := range []struct{ path, file string }{
		{"/debug/pprof/heap?gc=1", name + ".heap.pprof"},
		{"/debug/pprof/goroutine", name + ".goroutine.pprof"},
	} {
		resp, err := c.Get(in.v2URL + p.path)
		if err != nil {
			warnf("snapshot: %v", err)
			continue
		}
		fp := filepath.Join(cfg.profileDir, p.file)
		err = saveBody(fp, resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			warnf("snapshot: %v", err)
			continue
		}
		logf("  wrote %s", fp)
	}
}

// saveBody writes a profile the bridge child served to path, creating its
// directory.
func saveBody(path string, body io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(fh, body)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

func header(cfg *config, elapsed time.Duration) string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# v2bridge benchmark (`-mode %s`)\n\n", cfg.mode)
	fmt.Fprintf(&b, "%s · %d CPUs (%s) · %s · %s/%s · %d run(s) per figure, each cell the median (<sub>(n)</sub> = runs) · took %v\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), cpu, runtime.Version(), runtime.GOOS, runtime.GOARCH,
		cfg.runs, elapsed.Round(time.Second))
	if !cfg.kv && !cfg.watch && cfg.hist == nil && cfg.shadow == nil {
		// The shared-cluster section alone: its tables say what they compare.
		b.WriteString("↑ higher is better, ↓ lower is better.\n")
		return b.String()
	}
	b.WriteString("Systems, all on loopback, started by the benchmark: **v2bridge** over an embedded etcd 3.6 member " +
		"(bridge and member in one child process, the bridge calling the member in-process as `--embedded` does); " +
		"**direct clientv3** to that same member over gRPC; **etcd v2** = etcd 3.5 " +
		"with the v2 store (v2ref); **etcd v2v3** = etcd 3.5's experimental v2-over-v3 emulation (v2ref --v2v3); " +
		"**v2bridge-ext** = the bridge as deployed, in a child process of its own (`--endpoints`), in front of the " +
		"v3 API of an external etcd 3.5 (v2ref, v2 store enabled too); **direct-v3-ext** = clientv3 straight to that " +
		"same etcd 3.5. The -ext columns compare the bridge with the v3 and the v2 API of one and the same etcd. " +
		"**v2bridge-passthrough** = the bridge in passthrough mode (`--v2-server`), in a child process of its own, " +
		"forwarding every v2 request (one HTTP round trip each) to the v2 API of the etcd 3.5 that serves etcd v2; " +
		"its passthrough/etcd-v2 column is what the extra hop costs against talking to that v2 server directly. " +
		"**direct-v3-hop** = clientv3 through a child process of its own that forwards each gRPC call unchanged, " +
		"over one connection, to the v3 API of that same etcd 3.5: no translation, only a process in between " +
		"(a decode, an encode and a loopback round trip per call, a third process on the cores); its " +
		"v3-hop/direct-v3-ext column is the bound any separate process puts on the bridge as deployed, and its " +
		"-bridge-txn rows are the bridge's own transactions through that hop. " +
		"v2bridge-passthrough and direct-v3-hop run in the key-value section only (the watch sections skip them). " +
		"v2 traffic is raw HTTP/1.1 with keep-alive; v3 traffic is clientv3. Clients run in the benchmark process, " +
		"on the same 2 cores.\n\n")
	if cfg.kv {
		fmt.Fprintf(&b, "Key-value loads are closed loops for %v after a %v warm-up. direct-v3 equivalents: PUT = Put, "+
			"GET = Get (serializable; quorum = linearizable), CAS = Txn(mod revision) with Else(Get), recursive GET = "+
			"prefix Get, TTL create = Grant + create-if-absent Txn with the lease, refresh = KeepAliveOnce. "+
			"ttl-cycle: each client creates a key with prevExist=false&ttl=60, renews it 4 times with "+
			"prevIndex&ttl=60, then moves on to a new key. The -bridge-txn rows (direct systems only) are bounds "+
			"of a transaction per write: clientv3 itself sending, one transaction per write, the transactions a bridge "+
			"sends for put-seq and put-64 (the guarded put) and for ttl-cycle-64 (the guarded put with a shared lease and the "+
			"journal record), so etcd's cost of the bridge's protocol with no bridge in the way, had each write a "+
			"transaction of its own (the bridge sends concurrent writes together, each guarded on its own, and can pass them). "+
			"put-seq-one-compare (direct systems only) is clientv3 sending put-seq's writes as a transaction with a single "+
			"compare, on the key's own revision: the least a write guarded against a concurrent change costs in etcd. "+
			"put-64-auth and get-64-auth (v2bridge, etcd v2, v2bridge-ext) are put-64 and get-64 with v2 auth enabled for "+
			"that load only, every request with HTTP basic auth of a user whose role reads and writes /bench/*, after one "+
			"request that verified it (a cached credential where the server keeps one; etcd v2 keeps none and runs bcrypt "+
			"on every request); their ÷ unauthenticated rows divide by the same run's put-64 or get-64 on the same server. "+
			"One process per server for the whole section, shared where the "+
			"comparison needs it: v2bridge and direct-v3 use the one bridge child's embedded member; etcd v2, "+
			"direct-v3-ext, v2bridge-ext, v2bridge-passthrough and direct-v3-hop use one etcd 3.5 process (its v2 store, its v3 API "+
			"directly, its v3 API through the bridge child, its v2 store through the passthrough child, its v3 API "+
			"through the forwarder child), in disjoint "+
			"key spaces (v2 store apart from v3; direct clientv3 keys under v3bench/, outside the bridge's range, "+
			"direct-v3-hop's under v3hop/; "+
			"v2bridge-passthrough's v2 keys under /passthrough/, apart from etcd v2's); the loads run one at a time, "+
			"systems taking turns. "+
			"Server CPU per op = CPU time of the server processes over the whole load ÷ operations: bridge + its "+
			"embedded etcd (one process) for v2bridge; for v2bridge-ext and v2bridge-passthrough the bridge process "+
			"**plus** the etcd 3.5 process behind it, for direct-v3-hop the forwarder plus that etcd; that etcd alone for etcd v2, direct-v3-ext and the others. Throughputs depend on the "+
			"machine's other load; the CPU-per-op rows much less.\n\n", cfg.dur, cfg.warm)
	}
	if cfg.watch {
		fmt.Fprintf(&b, "Watch loads: every v2 watcher has its own connection and behaves like a v2 client (one-shot "+
			"long-poll, re-watch with waitIndex=modifiedIndex+1); direct-v3 watchers are clientv3 watch streams. "+
			"Each run starts fresh server processes, not shared between systems (v2bridge-ext: a new etcd 3.5 and a "+
			"bridge child in front of it; direct-v3-ext: a new etcd 3.5). watch-idle-N: N watchers recursive on one directory plus %d on "+
			"distinct other keys; RSS per watcher = (server VmRSS with watchers − before) / (N+%d), for v2bridge-ext "+
			"the bridge's plus its etcd's; then one write "+
			"(fan-out to all N) and a writer at a steady rate (20 w/s for %v at N=1,000; 2 w/s for %v at N=10,000). "+
			"watch-sustained-%d: the writer never runs more than %d writes ahead of the slowest watcher (waiting at most %v), for %v. "+
			"Latency is from the start of the write to the watcher's receipt of the event; lost = events a watcher "+
			"should have seen but did not within %v of the last write (or after 2 s without any receipt). Server CPU per delivery = CPU time of the "+
			"server processes (bridge + its etcd; for v2bridge-ext the bridge process plus the etcd process; etcd for "+
			"the others) over the phase ÷ events delivered.\n\n",
			keyWatches, keyWatches, cfg.idleSteady[1000], cfg.idleSteady[10000], max(cfg.sustainedN, 1000), cfg.window, cfg.stallAfter, cfg.sustained, cfg.drain)
		if h := cfg.herd; h != nil {
			fmt.Fprintf(&b, "watch-herd-%d (v2bridge-ext only, one run): flannel's herd on the bridge as deployed, "+
				"watch-idle-%[1]d's watchers with a write every %v for %v. The bridge must declare no loss of its member "+
				"meanwhile: backend losses declared and heartbeats missed (not excused) are the bridge's own counters; "+
				"the heartbeat p99 is that of the heartbeats answered in time (v2bridge_backend_heartbeat_seconds, "+
				"interpolated within its bucket); watch answers that were errors are those the watchers got (error 300 "+
				"after a loss).\n\n", h.watchers, time.Duration(float64(time.Second)/h.rate), h.dur)
		}
	}
	if hc := cfg.hist; hc != nil {
		fmt.Fprintf(&b, "History (%s, v2bridge only, one run): what stale waitIndexes cost a bridge just (re)started over a "+
			"long v3 history, its ring of recent events still empty. An etcd member, a child process of its own, gets %s "+
			"revisions under %s (clientv3 Puts straight to it, %d at a time: every other one to %s, the rest to "+
			"%s/k<i mod 1000>); then a bridge starts in front of it (`--endpoints`, its own process, default "+
			"`--watch-history-events` 1000 and `--watch-replay-max-revisions` 100,000). Baseline: plain GETs by %d "+
			"clients for %v. Burst: %d one-shot watches on never-written keys, %d with waitIndexes spread over current−%s … "+
			"current−%s (within the replay's reach) and %d with waitIndex %d (beyond it), opened all at once while the "+
			"GET clients run on; they stay until the replays' revision counts (read and skimmed) have not moved for 2 s "+
			"(at least %v), then leave. RSS is the bridge process's VmRSS before, the highest during the burst (sampled "+
			"every 20 ms) and %v after the watchers left; CPU is each process's utime+stime per second of wall time, and "+
			"CPU time the same over the burst; replays, revisions, v3 history watches and 401s are the bridge's own "+
			"counters. Then, on a bridge restarted again (a replay of the burst may have filled the ring of the first), "+
			"a client walks %s one-shot (waitIndex = modifiedIndex+1; a 401 ends the walk) from current−%s, then, once "+
			"no replay reads any more, from current−%d (within the 1000 events the ring can hold; the first walk's "+
			"replay, paced by its walker, does not fill it), each for at most %s events or %v. How it scales: a replay "+
			"reads each revision between the oldest stale waitIndex and the ring at most once, whatever the number of "+
			"watchers it serves, and never more than 100,000 revisions; a waitIndex beyond that, or older than a full "+
			"ring, is refused by O(1) checks before anything is read. So a burst's time and memory grow with the history "+
			"read (here at most %s revisions), not with the number of stale watchers; and after 1,000 revisions in a row "+
			"that concern none of its watchers a replay skims, asking etcd only for the keys that may concern them. Read "+
			"in full, its pace is etcd's: etcd catches up a watch that starts in the past 1,000 revisions per sync "+
			"round, a round every 100 ms, so a replay of R revisions takes at least R/10,000 s. A replay serving only "+
			"clients that walk history keeps at most 1000 events ahead of them, its v3 watch closed while it waits.\n\n",
			hc.workload(), commas(int64(hc.revisions)), histDir, histBuilders, histHot, histDir, hc.getClients, hc.baseline,
			2*hc.stale, hc.stale, commas(histWithin), commas(histWithinNewest), hc.stale, histBeyond, hc.minBurst,
			hc.settle, histHot, commas(histWithin), histRingWalk, commas(int64(hc.walkEvents)), hc.walkFor, commas(histWithin))
	}
	b.WriteString("↑ higher is better, ↓ lower is better; ratios are bridge ÷ other (bridge-ext ÷ other for the " +
		"v2bridge-ext ratios, passthrough ÷ etcd-v2 for v2bridge-passthrough, hop ÷ direct-v3-ext for direct-v3-hop, " +
		"all against the same etcd 3.5).\n")
	return b.String()
}
