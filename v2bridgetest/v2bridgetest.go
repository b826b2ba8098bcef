// Package v2bridgetest starts a v2bridge over an in-process etcd on loopback
// for tests: real servers, real sockets, free ports asked of the OS.
//
// A project with an etcd v2 client can test it against the bridge with:
//
//	cl := v2bridgetest.StartCluster(t, 1)
//	br := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{})
//	// point the v2 client at br.URL
package v2bridgetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2api"
	"github.com/v2bridge/v2bridge/v3backend"
)

// Cluster is an in-process etcd v3 cluster.
type Cluster struct {
	t       testing.TB
	Members []*Member
}

// Member is one etcd member of a Cluster.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	Etcd      *embed.Etcd
	stopOnce  sync.Once
}

// FreeURL returns http://127.0.0.1:<port> with a port the OS just handed out.
func FreeURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return "http://" + ln.Addr().String()
}

// StartCluster starts n etcd members in this process and waits until they
// serve; they stop when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	var initial []string
	for i := 0; i < n; i++ {
		m := &Member{Name: fmt.Sprintf("m%d", i), ClientURL: FreeURL(t), PeerURL: FreeURL(t)}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	dir := t.TempDir()
	errc := make(chan error, n)
	for _, m := range c.Members {
		go func(m *Member) {
			cfg := embed.NewConfig()
			cfg.Name = m.Name
			cfg.Dir = filepath.Join(dir, m.Name)
			cu, _ := url.Parse(m.ClientURL)
			pu, _ := url.Parse(m.PeerURL)
			cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
			cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
			cfg.InitialCluster = strings.Join(initial, ",")
			cfg.InitialClusterToken = "v2bridgetest"
			cfg.LogLevel = "fatal" // etcd logs its own shutdown as errors
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				errc <- fmt.Errorf("start %s: %w", m.Name, err)
				return
			}
			m.Etcd = e
			select {
			case <-e.Server.ReadyNotify():
				errc <- nil
			case <-time.After(60 * time.Second):
				errc <- fmt.Errorf("%s not ready after 60s", m.Name)
			}
		}(m)
	}
	for i := 0; i < n; i++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.Stop)
	return c
}

// Endpoints are the members' v3 client URLs.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.ClientURL)
	}
	return out
}

// Stop stops every member.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		m.Stop()
	}
}

// Stop stops the member (once; later calls do nothing).
func (m *Member) Stop() {
	m.stopOnce.Do(func() {
		if m.Etcd != nil {
			m.Etcd.Close()
		}
	})
}

// Client is a clientv3 client of the cluster (a v3-native reader or writer),
// closed when the test ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("clientv3: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Options tune a bridge.
type Options struct {
	DataPrefix string
	MetaPrefix string // default "_v2bridge/"
	// Backend adjusts the backend config (heartbeat, timeouts...).
	Backend func(*v3backend.Config)
}

// Bridge is a running bridge.
type Bridge struct {
	URL      string
	Backend  *v3backend.Backend
	API      *v2api.Server
	Registry *prometheus.Registry
	srv      *http.Server
}

// StartBridge starts a bridge over the given v3 endpoints on a free port;
// it stops when the test ends.
func StartBridge(t testing.TB, endpoints []string, o Options) *Bridge {
	t.Helper()
	if o.MetaPrefix == "" {
		o.MetaPrefix = "_v2bridge/"
	}
	layout, err := translate.NewLayout(o.DataPrefix, o.MetaPrefix)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := v3backend.Config{Endpoints: endpoints, Layout: layout, Registry: reg,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))}
	if o.Backend != nil {
		o.Backend(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	be, err := v3backend.New(ctx, cfg)
	if err != nil {
		t.Fatalf("backend: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	api := v2api.New(v2api.Config{Store: be, AdvertiseURLs: []string{u}, Registry: reg, Gatherer: reg,
		Watchers: be.Hub().Watchers})
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	b := &Bridge{URL: u, Backend: be, API: api, Registry: reg, srv: srv}
	t.Cleanup(b.Stop)
	return b
}

// Stop ends the bridge's watches and closes it.
func (b *Bridge) Stop() {
	b.Backend.Hub().EndAll("test ending")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.srv.Shutdown(ctx)
	_ = b.Backend.Close()
}
