// SPDX-License-Identifier: Apache-2.0

// Package v2bridgetest starts a v2bridge over an in-process etcd on loopback
// for tests: real servers, real sockets, free ports asked of the OS.
//
// A project with an etcd v2 client can test it against the bridge with:
//
//	cl := v2bridgetest.StartCluster(t, 1)
//	br := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{})
//	// point the v2 client at br.URL
//
// Liveness tests put the bridge behind the members' fault-injecting proxies
// and break the members in the ways machines break (faults.go):
//
//	cl := v2bridgetest.StartProcessCluster(t, 3) // or StartCluster: no Freeze
//	br := v2bridgetest.StartBridge(t, cl.ProxiedEndpoints(), v2bridgetest.Options{})
//	i := cl.Index(br.Backend.Endpoint())
//	cl.Blackhole(i) // powered off: silence, no FIN, no RST
//	cl.Heal(i)
//	cl.Freeze(i)    // SIGSTOP; Thaw(i) is SIGCONT
//	cl.Isolate(i)   // cut off from its peers: it loses quorum
//
// A server that binds ports of its own (a child process given FreeURL
// ports) is started under RetryPortTaken, since such a port is not held
// until the server binds it.
//
// The members are the etcd this module builds in (etcd 3.6), unless the
// environment variable V2BRIDGE_TEST_ETCD names an etcd binary: then every
// member, of StartCluster as of StartProcessCluster, is a child process
// running that binary (etcd 3.4 or later), behind the same proxies, so
// that the same tests check the bridge against another etcd version. Such
// members have no Member.Etcd; what needs one (StallStorage) skips the test.
// Every cluster logs the version its first member reports.
package v2bridgetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/bridge/core"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2api"
	"github.com/v2bridge/v2bridge/v3backend"
)

// TB is what the fixture needs of a test: *testing.T and *testing.B satisfy
// it, and so can a program's own type (see the package example).
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
	Cleanup(func())
	TempDir() string
}

// Cluster is an etcd v3 cluster on loopback, its members in this process
// (StartCluster) or in child processes (StartProcessCluster). Each member's
// client URL and peer URL sit behind a fault-injecting proxy of its own (see
// faults.go): Endpoints are the members' own URLs, ProxiedEndpoints go
// through the proxies, and the members reach each other only through them.
type Cluster struct {
	t       TB
	Members []*Member

	version string // as member 0 reported it at start

	mu  sync.RWMutex
	ids map[string]int // hex member id -> index
}

// Member is one etcd member of a Cluster.
type Member struct {
	Name string
	// ClientURL is the member's own client URL; ProxyURL reaches it through
	// the member's fault-injecting proxy.
	ClientURL string
	ProxyURL  string
	// PeerURL is the member's peer listener; the other members reach it
	// through its peer proxy.
	PeerURL string
	// ID is the etcd member id.
	ID uint64
	// Etcd is the member when it runs in this process (nil when it runs in
	// a child process, as every member does under V2BRIDGE_TEST_ETCD).
	Etcd *embed.Etcd

	stopOnce   sync.Once
	client     *faultProxy
	peer       *faultProxy
	proc       *memberProcess
	blackholed atomic.Bool
	isolated   atomic.Bool
}

// FreeURL returns http://127.0.0.1:<port> with a port the OS just handed out.
// The port is free when FreeURL returns, but not held: another process (an
// outgoing connection's local port, say) can take it before whatever is
// given it binds it. Where the test can listen itself, it should hand the
// listener over instead; where a server binds its own ports (etcd, a child
// process), start it with RetryPortTaken.
func FreeURL(t TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer func() { _ = ln.Close() }()
	return "http://" + ln.Addr().String()
}

// maxPortAttempts bounds RetryPortTaken: five ports taken in a row is no
// longer bad luck.
const maxPortAttempts = 5

// PortTaken reports whether err says that an address to listen on was
// already in use.
func PortTaken(err error) bool {
	return err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use"))
}

// RetryPortTaken calls start, which asks FreeURL for the ports it binds,
// until it succeeds, or fails for another reason than a port taken (see
// FreeURL), or has failed five times: then the test fails with its error.
// start must take fresh ports on each call and undo what it did when it
// fails.
func RetryPortTaken(t TB, what string, start func() error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		err := start()
		if err == nil {
			return
		}
		if attempt == maxPortAttempts || !PortTaken(err) {
			t.Fatalf("%s (attempt %d): %v", what, attempt, err)
		}
	}
}

// StartCluster starts n etcd members in this process (in child processes
// under V2BRIDGE_TEST_ETCD, see ExternalEtcd) and waits until they serve;
// they stop when the test ends.
func StartCluster(t TB, n int) *Cluster {
	t.Helper()
	return startCluster(t, n, false, MemberLimits{}, "")
}

// MemberLimits are etcd's request limits for every member of a cluster
// (zero: etcd's defaults), for tests of what the bridge answers when etcd
// refuses a request.
type MemberLimits struct {
	MaxTxnOps       uint `json:"maxTxnOps,omitempty"`       // --max-txn-ops
	MaxRequestBytes uint `json:"maxRequestBytes,omitempty"` // --max-request-bytes
}

// StartClusterWithLimits is StartCluster with members that apply limits.
func StartClusterWithLimits(t TB, n int, limits MemberLimits) *Cluster {
	t.Helper()
	return startCluster(t, n, false, limits, "")
}

// memberSpec is what a member needs to start, in this process or (as JSON)
// in a child process.
type memberSpec struct {
	Name             string       `json:"name"`
	Dir              string       `json:"dir"`
	ClientURL        string       `json:"clientURL"`
	PeerURL          string       `json:"peerURL"`
	AdvertisePeerURL string       `json:"advertisePeerURL"`
	InitialCluster   string       `json:"initialCluster"`
	LogLevel         string       `json:"logLevel"`
	Limits           MemberLimits `json:"limits"`
}

func (s memberSpec) config() (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Name = s.Name
	cfg.Dir = s.Dir
	var us [3]*url.URL
	for i, raw := range []string{s.ClientURL, s.PeerURL, s.AdvertisePeerURL} {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", s.Name, err)
		}
		us[i] = u
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*us[0]}, []url.URL{*us[0]}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*us[1]}, []url.URL{*us[2]}
	cfg.InitialCluster = s.InitialCluster
	cfg.InitialClusterToken = "v2bridgetest"
	cfg.LogLevel = s.LogLevel
	if s.Limits.MaxTxnOps > 0 {
		cfg.MaxTxnOps = s.Limits.MaxTxnOps
	}
	if s.Limits.MaxRequestBytes > 0 {
		cfg.MaxRequestBytes = s.Limits.MaxRequestBytes
	}
	return cfg, nil
}

// etcdFlags are the command-line flags of etcd's own binary that start the
// member s describes, as config does in this process.
func (s memberSpec) etcdFlags() []string {
	f := []string{"--name=" + s.Name, "--data-dir=" + s.Dir,
		"--listen-client-urls=" + s.ClientURL, "--advertise-client-urls=" + s.ClientURL,
		"--listen-peer-urls=" + s.PeerURL, "--initial-advertise-peer-urls=" + s.AdvertisePeerURL,
		"--initial-cluster=" + s.InitialCluster, "--initial-cluster-state=new", "--initial-cluster-token=v2bridgetest",
		// etcd 3.4's default logger is capnslog, which ignores --log-level.
		"--logger=zap", "--log-outputs=stderr", "--log-level=" + s.LogLevel}
	if s.Limits.MaxTxnOps > 0 {
		f = append(f, fmt.Sprintf("--max-txn-ops=%d", s.Limits.MaxTxnOps))
	}
	if s.Limits.MaxRequestBytes > 0 {
		f = append(f, fmt.Sprintf("--max-request-bytes=%d", s.Limits.MaxRequestBytes))
	}
	return f
}

// EtcdEnv is the environment variable that names an etcd binary for the
// members of every cluster this package starts (see ExternalEtcd).
const EtcdEnv = "V2BRIDGE_TEST_ETCD"

// ExternalEtcd is the etcd binary that V2BRIDGE_TEST_ETCD names, or "" when
// it is unset or empty: then members run the etcd built into this module.
// A test that needs a member in this process (Member.Etcd) skips when it is
// set.
func ExternalEtcd() string { return os.Getenv(EtcdEnv) }

func startInProcess(s memberSpec) (*embed.Etcd, error) {
	cfg, err := s.config()
	if err != nil {
		return nil, err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("%s failed: %w", s.Name, err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("%s not ready after 60s", s.Name)
	}
}

func hostOf(u string) string { return strings.TrimPrefix(u, "http://") }

// startCluster starts the members' data directories under dir (empty: a
// temporary directory of the test's).
func startCluster(t TB, n int, inChildren bool, limits MemberLimits, dir string) *Cluster {
	t.Helper()
	// etcd binds its own ports (in a child process, the error is in the
	// output the start error carries).
	var c *Cluster
	RetryPortTaken(t, "start cluster", func() error {
		var err error
		if c, err = tryStartCluster(t, n, inChildren, limits, dir); err != nil {
			c.Stop()
		}
		return err
	})
	t.Cleanup(c.Stop)
	c.learnIDs(t)
	return c
}

func tryStartCluster(t TB, n int, inChildren bool, limits MemberLimits, base string) (*Cluster, error) {
	t.Helper()
	c := &Cluster{t: t, ids: map[string]int{}}
	for i := 0; i < n; i++ {
		c.Members = append(c.Members, &Member{Name: fmt.Sprintf("m%d", i), ClientURL: FreeURL(t), PeerURL: FreeURL(t)})
	}
	// Members is complete before the first proxy serves: the proxies read it.
	var initial []string
	for i, m := range c.Members {
		var err error
		m.client, err = newFaultProxy(hostOf(m.ClientURL), false, func(int) bool { return m.blackholed.Load() }, c.lookup)
		if err != nil {
			return c, fmt.Errorf("proxy: %w", err)
		}
		m.peer, err = newFaultProxy(hostOf(m.PeerURL), true, func(src int) bool { return c.peerCut(i, src) }, c.lookup)
		if err != nil {
			return c, fmt.Errorf("proxy: %w", err)
		}
		m.ProxyURL = m.client.url
		initial = append(initial, m.Name+"="+m.peer.url)
	}
	// Each attempt has a directory of its own: a failed one may leave data.
	dir := t.TempDir()
	if base != "" {
		var err error
		if dir, err = os.MkdirTemp(base, "cluster"); err != nil {
			return c, err
		}
	}
	errc := make(chan error, n)
	inChildren = inChildren || ExternalEtcd() != ""
	for _, m := range c.Members {
		spec := memberSpec{Name: m.Name, Dir: filepath.Join(dir, m.Name), ClientURL: m.ClientURL, PeerURL: m.PeerURL,
			AdvertisePeerURL: m.peer.url, InitialCluster: strings.Join(initial, ","),
			LogLevel: "fatal", // etcd logs its own shutdown as errors
			Limits:   limits}
		go func(m *Member) {
			var err error
			if inChildren {
				spec.LogLevel = "error"
				m.proc, err = startMemberProcess(spec)
			} else {
				m.Etcd, err = startInProcess(spec)
			}
			errc <- err
		}(m)
	}
	var errs []error
	for i := 0; i < n; i++ {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	return c, errors.Join(errs...)
}

// learnIDs reads the member ids, which the peer proxies need to tell who
// opened a connection.
func (c *Cluster) learnIDs(t TB) {
	t.Helper()
	cli := c.MemberClient(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list: %v", err)
	}
	st, err := cli.Status(ctx, c.Members[0].ClientURL)
	if err != nil {
		t.Fatalf("status of %s: %v", c.Members[0].Name, err)
	}
	c.version = st.Version
	how := "in this process"
	if bin := ExternalEtcd(); bin != "" {
		how = bin
	} else if c.Members[0].proc != nil {
		how = "in child processes"
	}
	if l, ok := t.(interface{ Logf(string, ...any) }); ok {
		l.Logf("v2bridgetest: %d member(s) of etcd %s (%s)", len(c.Members), c.version, how)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pm := range resp.Members {
		for i, m := range c.Members {
			if m.Name == pm.Name {
				m.ID = pm.ID
				c.ids[strconv.FormatUint(pm.ID, 16)] = i
			}
		}
	}
}

func (c *Cluster) lookup(hexID string) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if i, ok := c.ids[hexID]; ok {
		return i
	}
	return -1
}

// Version is the etcd version of the cluster's members, as the first one
// reported it (Maintenance Status) when the cluster started: "3.6.16" for
// the etcd built in, another under V2BRIDGE_TEST_ETCD.
func (c *Cluster) Version() string { return c.version }

// Endpoints are the members' own v3 client URLs.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.ClientURL)
	}
	return out
}

// Stop lifts every fault and stops every member, then the proxies.
func (c *Cluster) Stop() {
	for i, m := range c.Members {
		if m.proc != nil {
			m.proc.thaw()
		}
		c.heal(i)
	}
	for _, m := range c.Members {
		m.Stop()
	}
	for _, m := range c.Members {
		if m.client != nil {
			m.client.close()
		}
		if m.peer != nil {
			m.peer.close()
		}
	}
}

// Stop stops the member (once; later calls do nothing): a member in this
// process is closed, a child process is killed.
func (m *Member) Stop() {
	m.stopOnce.Do(func() {
		if m.Etcd != nil {
			m.Etcd.Close()
		}
		if m.proc != nil {
			m.proc.kill()
		}
	})
}

// Client is a clientv3 client of the cluster (a v3-native reader or writer),
// closed when the test ends.
func (c *Cluster) Client(t TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("clientv3: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Options tune a bridge.
type Options struct {
	DataPrefix string
	MetaPrefix string // default "_v2bridge/"
	// Backend adjusts the backend config (heartbeat, timeouts...).
	Backend func(*v3backend.Config)
	// Auth runs etcd v2 auth as cmd/bridge does: a Store following the
	// key space's users and roles on the bridge's checked session, and its
	// Checker.
	Auth bool
	// Served are the v2 subtrees served (--serve-prefix); nil: all.
	Served []string
}

// Bridge is a running bridge.
type Bridge struct {
	URL      string
	Backend  *v3backend.Backend
	API      *v2api.Server
	Registry *prometheus.Registry
	bridge   *core.Bridge
}

// StartBridge starts a bridge over the given v3 endpoints on a free port;
// it stops when the test ends.
func StartBridge(t TB, endpoints []string, o Options) *Bridge {
	t.Helper()
	if o.MetaPrefix == "" {
		o.MetaPrefix = "_v2bridge/"
	}
	layout, err := translate.NewLayout(o.DataPrefix, o.MetaPrefix)
	if err != nil {
		t.Fatal(err)
	}
	layout = layout.WithServed(o.Served)
	cfg := core.Config{Backend: v3backend.Config{Endpoints: endpoints, Layout: layout}, Logger: zap.NewNop(),
		DetachWatches: true}
	if tt, ok := t.(zaptest.TestingT); ok { // a *testing.T: warnings go to the test log
		cfg.Logger = zaptest.NewLogger(tt, zaptest.Level(zap.WarnLevel))
	}
	if o.Backend != nil {
		o.Backend(&cfg.Backend)
	}
	var svc *auth.Service // once the backend is connected
	if o.Auth {
		cfg.Followers = func(be *v3backend.Backend) (v2api.Members, *auth.Service) {
			svc = startAuth(t, be.Conn(), layout, cfg.Logger)
			return nil, svc
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	cfg.AdvertiseURLs = []string{u}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	br, err := core.New(ctx, cfg)
	if err != nil {
		_ = ln.Close()
		t.Fatalf("bridge: %v", err)
	}
	var a v2api.Auth
	if svc != nil {
		a = svc
	}
	br.Serve(ln, v2api.ServedOnly(o.Served, a, br.API), nil)
	b := &Bridge{URL: u, Backend: br.Backend, API: br.API, Registry: br.Registry, bridge: br}
	t.Cleanup(b.Stop)
	// Watches are served once the hub's shared v3 watch is created, a few
	// milliseconds after New returns (until then they are refused).
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if err := br.WaitReady(rctx); err != nil {
		t.Fatal(err)
	}
	return b
}

// startAuth runs an auth Store over the key space of layout, on conn, until
// the test ends (after the bridge, which the test stops first), with its
// Checker.
func startAuth(t TB, conn v3backend.Conn, layout translate.Layout, lg *zap.Logger) *auth.Service {
	t.Helper()
	keys := auth.KeysFor(layout.MetaPrefix, layout.DataPrefix, layout.Served)
	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := auth.Adopt(actx, conn, keys, 5*time.Second)
	acancel()
	if err != nil {
		t.Fatalf("auth: %v", err)
	}
	st := auth.NewStore(auth.StoreConfig{Client: conn, Live: conn.Live, Keys: keys, RequestTimeout: 5 * time.Second, Logger: lg})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return &auth.Service{Store: st, Checker: auth.NewChecker(auth.CheckerConfig{State: st.State, Await: st.Current, Logger: lg})}
}

// Stop ends the bridge's watches and closes it.
func (b *Bridge) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.bridge.Close(ctx)
}
