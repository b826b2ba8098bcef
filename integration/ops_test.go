// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
)

// pki is a throwaway CA issuing server and client certificates.
type pki struct {
	t      *testing.T
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{t: t, dir: t.TempDir(), ca: ca, caKey: key, serial: 1}
	p.write("ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(name, typ string, der []byte) string {
	path := filepath.Join(p.dir, name)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // atomic, as a rotation tool would do
		p.t.Fatal(err)
	}
	return path
}

// issue writes <name>.pem and <name>-key.pem and returns their paths.
func (p *pki) issue(name, cn string, server bool) (cert, key string) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &k.PublicKey, p.caKey)
	if err != nil {
		p.t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(k)
	// Key first: a reader between the two renames sees a new key with an old
	// certificate only for an instant, and the bridge re-reads both per handshake.
	key = p.write(name+"-key.pem", "EC PRIVATE KEY", kder)
	cert = p.write(name+".pem", "CERTIFICATE", der)
	return cert, key
}

func TestServedTLS(t *testing.T) {
	p := newPKI(t)
	scert, skey := p.issue("server", "bridge-1", true)
	ccert, ckey := p.issue("client", "flannel", false)
	var url, metrics string
	startHealthyBridge(t, func() (string, []string, []string) {
		url = "https://" + strings.TrimPrefix(v2bridgetest.FreeURL(t), "http://")
		metrics = v2bridgetest.FreeURL(t)
		_, args := embeddedArgs(t)
		return metrics, nil, append(args, "--listen-client-urls", url, "--cert-file", scert, "--key-file", skey,
			"--trusted-ca-file", filepath.Join(p.dir, "ca.pem"), "--client-cert-auth", "--listen-metrics-urls", metrics)
	})

	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	clientPair, err := tls.LoadX509KeyPair(ccert, ckey)
	if err != nil {
		t.Fatal(err)
	}
	get := func(certs []tls.Certificate) (*http.Response, *x509.Certificate, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12}}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		r, err := c.Get(url + "/v2/keys/")
		if err != nil {
			return nil, nil, err
		}
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
		return r, r.TLS.PeerCertificates[0], nil
	}
	r, served, err := get([]tls.Certificate{clientPair})
	if err != nil || r.StatusCode != 200 || served.Subject.CommonName != "bridge-1" {
		t.Fatalf("https with a client certificate: %v %v", r, err)
	}
	if _, _, err := get(nil); err == nil {
		t.Fatal("a client without a certificate was let in")
	}
	// A certificate from another CA is rejected.
	other := newPKI(t)
	oc, ok := other.issue("client", "intruder", false)
	otherPair, _ := tls.LoadX509KeyPair(oc, ok)
	if _, _, err := get([]tls.Certificate{otherPair}); err == nil {
		t.Fatal("a client certificate from an unknown CA was accepted")
	}
	// A watch that waits over TLS leaves net/http (a detached connection),
	// and the same connection serves the client's re-watch.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientPair}, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	wc := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	for i := range 2 {
		type answer struct {
			body   string
			reused bool
			err    error
		}
		got := make(chan answer, 1)
		go func() {
			var a answer
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				GotConn: func(ci httptrace.GotConnInfo) { a.reused = ci.Reused }})
			req, _ := http.NewRequestWithContext(ctx, "GET", url+"/v2/keys/tlswatch?wait=true", nil)
			r, err := wc.Do(req)
			if err != nil {
				a.err = err
				got <- a
				return
			}
			b, err := io.ReadAll(r.Body)
			_ = r.Body.Close()
			a.body, a.err = string(b), err
			got <- a
		}()
		waitFor(t, 10*time.Second, "the TLS watch to wait detached", func() bool {
			return strings.Contains(do(t, "GET", metrics, "/metrics", nil).body, "\nv2bridge_watches_detached 1\n")
		})
		preq, _ := http.NewRequest("PUT", url+"/v2/keys/tlswatch", strings.NewReader(fmt.Sprintf("value=v%d", i)))
		preq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		put, err := wc.Do(preq)
		if err != nil || put.StatusCode >= 300 {
			t.Fatalf("PUT: %v %v", put, err)
		}
		_, _ = io.Copy(io.Discard, put.Body)
		_ = put.Body.Close()
		a := <-got
		if a.err != nil || !strings.Contains(a.body, fmt.Sprintf(`"value":"v%d"`, i)) || (i == 1 && !a.reused) {
			t.Fatalf("TLS watch %d: %q, reused connection %v, %v", i, a.body, a.reused, a.err)
		}
	}
	// Rotation: new files, no restart, new connections get the new certificate.
	p.issue("server", "bridge-2", true)
	waitFor(t, 10*time.Second, "the rotated certificate to be served", func() bool {
		_, served, err := get([]tls.Certificate{clientPair})
		return err == nil && served.Subject.CommonName == "bridge-2"
	})
}

func TestUnixSocketListener(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "v2bridge.sock")
	startHealthyBridge(t, func() (string, []string, []string) {
		metrics := v2bridgetest.FreeURL(t)
		_, args := embeddedArgs(t)
		return metrics, nil, append(args, "--listen-client-urls", "unix://"+sock, "--advertise-client-urls",
			"http://127.0.0.1:2379", "--listen-metrics-urls", metrics)
	})
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	r, err := c.Post("http://bridge/v2/keys/sock", "application/x-www-form-urlencoded", strings.NewReader("value=1"))
	if err != nil || r.StatusCode != 201 {
		t.Fatalf("PUT over a unix socket: %v %v", r, err)
	}
	_ = r.Body.Close()
}

// TestMetrics: the metrics exist, are named v2bridge_*, and move; the gRPC
// client's exist when the bridge reaches its embedded member over gRPC, and
// not when it calls it in-process.
func TestMetrics(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		grpc bool
	}{
		{"in-process", nil, false},
		{"over gRPC", []string{"--embedded-in-process=false"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) { checkMetrics(t, tc.args, tc.grpc) })
	}
}

func checkMetrics(t *testing.T, args []string, grpcMetrics bool) {
	url := startHealthyBridge(t, embedded(t, append([]string{"--enable-pprof"}, args...)...)).url
	scrape := func() string { return do(t, "GET", url, "/metrics", nil).body }
	value := func(body, series string) string {
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, series+" ") {
				return strings.TrimPrefix(line, series+" ")
			}
		}
		return ""
	}
	// The shared watch opens once the key space is loaded, just after the
	// bridge answers /health: /readyz says when.
	waitFor(t, 10*time.Second, "the bridge to be ready", func() bool { return do(t, "GET", url, "/readyz", nil).status == 200 })
	before := scrape()
	for _, m := range []string{"v2bridge_backend_up 1", "v2bridge_v3_watches 1", "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(before, m) {
			t.Errorf("metric %q missing", m)
		}
	}
	if got := strings.Contains(before, "v2bridge_grpc_client_started_total"); got != grpcMetrics {
		t.Errorf("gRPC client metrics present: %v, want %v", got, grpcMetrics)
	}
	do(t, "PUT", url, "/v2/keys/m", form("value", "1"))
	do(t, "GET", url, "/v2/keys/m", nil)
	do(t, "GET", url, "/v2/keys/missing", nil)
	ch := startWatch(t, url, "/m")
	do(t, "PUT", url, "/v2/keys/m", form("value", "2"))
	<-ch
	after := scrape()
	for _, series := range []string{
		`v2bridge_http_requests_total{action="set",code="201",method="PUT"}`,
		`v2bridge_http_requests_total{action="get",code="200",method="GET"}`,
		`v2bridge_http_requests_total{action="error",code="404",method="GET"}`,
		`v2bridge_watch_events_delivered_total`,
	} {
		if value(before, series) == value(after, series) {
			t.Errorf("%s did not move (%q)", series, value(after, series))
		}
	}
	if !strings.Contains(after, `v2bridge_http_request_duration_seconds_bucket{action="set",method="PUT"`) {
		t.Error("no latency histogram")
	}
	if r := do(t, "GET", url, "/debug/pprof/", nil); r.status != 200 {
		t.Errorf("pprof %d", r.status)
	}
	if r := do(t, "GET", url, "/readyz", nil); r.status != 200 {
		t.Errorf("readyz %d", r.status)
	}
	if r := do(t, "GET", url, "/livez", nil); r.status != 200 {
		t.Errorf("livez %d", r.status)
	}
}

// TestTLSEndToEnd: an HTTPS bridge with client-certificate auth in front of a
// TLS etcd that also requires client certificates (the README's production
// setup), checked from both ends.
func TestTLSEndToEnd(t *testing.T) {
	p := newPKI(t)
	ca := filepath.Join(p.dir, "ca.pem")
	ecert, ekey := p.issue("etcd", "etcd-1", true)
	bcert, bkey := p.issue("bridge-client", "v2bridge", false)
	scert, skey := p.issue("bridge-server", "bridge", true)
	ccert, ckey := p.issue("flannel", "flannel", false)

	var etcdURL string
	var e *embed.Etcd
	v2bridgetest.RetryPortTaken(t, "start the TLS etcd", func() error {
		etcdURL = "https://" + strings.TrimPrefix(v2bridgetest.FreeURL(t), "http://")
		cfg := embed.NewConfig()
		cfg.Dir = t.TempDir()
		cu, _ := url.Parse(etcdURL)
		pu, _ := url.Parse(v2bridgetest.FreeURL(t))
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: ecert, KeyFile: ekey, TrustedCAFile: ca, ClientCertAuth: true}
		cfg.LogLevel = "fatal"
		var err error
		e, err = embed.StartEtcd(cfg)
		return err
	})
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatal("TLS etcd not ready")
	}

	var bridgeURL string
	startHealthyBridge(t, func() (string, []string, []string) {
		bridgeURL = "https://" + strings.TrimPrefix(v2bridgetest.FreeURL(t), "http://")
		metrics := v2bridgetest.FreeURL(t)
		return metrics, nil, []string{"--endpoints", etcdURL, "--cacert", ca, "--cert", bcert, "--key", bkey,
			"--listen-client-urls", bridgeURL, "--cert-file", scert, "--key-file", skey,
			"--trusted-ca-file", ca, "--client-cert-auth", "--listen-metrics-urls", metrics, "--log-level", "warn"}
	})

	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	pair, err := tls.LoadX509KeyPair(ccert, ckey)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	k := v2clientWith(t, tr, bridgeURL)
	ctx := ctxT(t, time.Minute)
	if _, err := k.Set(ctx, "/coreos.com/network/config", `{"Network":"10.1.0.0/16"}`, nil); err != nil {
		t.Fatalf("v2 set through the HTTPS bridge: %v", err)
	}
	tlsCfg, err := (transport.TLSInfo{CertFile: bcert, KeyFile: bkey, TrustedCAFile: ca}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	v3, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, TLS: tlsCfg, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = v3.Close() }()
	r, err := v3.Get(ctx, "/coreos.com/network/config")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != `{"Network":"10.1.0.0/16"}` {
		t.Fatalf("the write did not reach the TLS etcd: %+v %v", r, err)
	}
}

// TestEndpointsAutoSync: given one member, the bridge learns the others from
// the member list and fails over to one of them when its member goes.
func TestEndpointsAutoSync(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 3)
	first := cl.Members[0].ClientURL
	br := v2bridgetest.StartBridge(t, []string{first}, v2bridgetest.Options{Backend: func(c *v3backend.Config) {
		c.AutoSyncInterval = 100 * time.Millisecond
	}})
	waitFor(t, 10*time.Second, "the member list to be synced", func() bool { return len(br.Backend.Endpoints()) == 3 })
	do(t, "PUT", br.URL, "/v2/keys/before", form("value", "1"))
	cl.Members[0].Stop()
	waitFor(t, 20*time.Second, "failover to a synced member", func() bool {
		ep := br.Backend.Endpoint()
		return ep != "" && ep != first
	})
	if r := do(t, "GET", br.URL, "/v2/keys/before", form("quorum", "true")); r.status != 200 {
		t.Fatalf("after failover: %d %s", r.status, r.body)
	}
}
