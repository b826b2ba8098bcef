// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestTransport serves the v2 API over every transport a client may pick —
// HTTP/1.1 and HTTP/2 over TLS, with and without client-certificate auth —
// to Go's HTTP client and to the real curl, and checks every answer in full:
// keys reads and writes, long-poll and stream watches, /metrics and /health.
// It also checks that an HTTP/1.1 connection stays usable after a watch,
// over http:// and https://.
//
// Two bridges serve every case: one asks no client certificate, the other
// requires one (and refuses a client without, in the TLS handshake).
func TestTransport(t *testing.T) {
	p := newPKI(t)
	scert, skey := p.issue("server", "bridge", true)
	ccert, ckey := p.issue("client", "v2client", false)
	pair, err := tls.LoadX509KeyPair(ccert, ckey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	creds := clientCreds{ca: filepath.Join(p.dir, "ca.pem"), cert: ccert, key: ckey, pool: pool, pair: pair}

	open := startTransportBridge(t, creds, scert, skey, false)
	mtls := startTransportBridge(t, creds, scert, skey, true)
	_, curlErr := exec.LookPath("curl")

	for _, proto := range []string{"h1", "h2"} {
		t.Run(proto, func(t *testing.T) {
			for _, tool := range []string{"go", "curl"} {
				t.Run(tool, func(t *testing.T) {
					if tool == "curl" && curlErr != nil {
						missingClient(t, "curl is not on PATH")
					}
					for _, b := range []*transportBridge{open, mtls} {
						t.Run(b.name, func(t *testing.T) {
							c := newTransportClient(t, clientOpts{tool: tool, proto: proto, cert: b.certRequired}, creds)
							for _, op := range transportOps {
								t.Run(op.name, func(t *testing.T) {
									op.run(t, &transportCase{c: c, b: b, proto: wantProto[proto], key: transportKey(t)})
								})
							}
							if b.certRequired {
								t.Run("refused-without-cert", func(t *testing.T) {
									refusedWithoutCert(t, clientOpts{tool: tool, proto: proto}, creds, b)
								})
							}
						})
					}
				})
			}
		})
	}

	// Keep-alive after a watch, on HTTP/1.1 over http:// and https://.
	t.Run("keepalive", func(t *testing.T) {
		for _, tool := range []string{"go", "curl"} {
			t.Run(tool, func(t *testing.T) {
				if tool == "curl" && curlErr != nil {
					missingClient(t, "curl is not on PATH")
				}
				for _, base := range []struct{ name, url string }{{"http", open.plainURL}, {"https", open.url}} {
					t.Run(base.name, func(t *testing.T) {
						c := newTransportClient(t, clientOpts{tool: tool, proto: "h1"}, creds)
						keepAliveAfterWatch(t, &transportCase{c: c, b: open, base: base.url, proto: "1.1", key: transportKey(t)})
					})
				}
			})
		}
	})
}

// wantProto is the protocol version each case must be served with, as curl's
// %{http_version} writes it.
var wantProto = map[string]string{"h1": "1.1", "h2": "2"}

// transportOps are the requests every cell of the matrix makes.
var transportOps = []struct {
	name string
	run  func(t *testing.T, x *transportCase)
}{
	{"get", func(t *testing.T, x *transportCase) {
		i1 := x.write(t, "v1")
		a := x.call(t, transportReq{url: x.keyURL("")})
		x.expectKeys(t, a, 200, map[string]any{"action": "get", "node": x.node("v1", i1, i1)})
	}},
	{"put", func(t *testing.T, x *transportCase) {
		a := x.call(t, transportReq{method: "PUT", url: x.keyURL(""), form: form("value", "v1")})
		i1 := etcdIndex(t, a)
		x.expectKeys(t, a, 201, map[string]any{"action": "set", "node": x.node("v1", i1, i1)})
		// A set over an existing key.
		a = x.call(t, transportReq{method: "PUT", url: x.keyURL(""), form: form("value", "v2")})
		i2 := etcdIndex(t, a)
		x.expectKeys(t, a, 200, map[string]any{"action": "set", "node": x.node("v2", i2, i2),
			"prevNode": x.node("v1", i1, i1)})
	}},
	{"cas", func(t *testing.T, x *transportCase) {
		i1 := x.write(t, "v1")
		a := x.call(t, transportReq{method: "PUT", url: x.keyURL(""), form: form("prevValue", "v1", "value", "v2")})
		i2 := etcdIndex(t, a)
		x.expectKeys(t, a, 200, map[string]any{"action": "compareAndSwap", "node": x.node("v2", i2, i1),
			"prevNode": x.node("v1", i1, i1)})
	}},
	{"watch", func(t *testing.T, x *transportCase) {
		i1 := x.write(t, "v1")
		x.b.waitWatchers(t, 0, nil)
		answers := x.c.run(ctxT(t, 20*time.Second), transportReq{url: x.keyURL("?wait=true")})
		x.b.waitWatchers(t, 1, answers)
		i2 := x.write(t, "v2")
		x.expectKeys(t, receive(t, answers), 200, map[string]any{"action": "set", "node": x.node("v2", i2, i2),
			"prevNode": x.node("v1", i1, i1)})
	}},
	{"watch-from-history", func(t *testing.T, x *transportCase) {
		i1 := x.write(t, "v1")
		i2 := x.write(t, "v2")
		// No write follows: only the bridge's history can answer.
		a := x.call(t, transportReq{url: x.keyURL(fmt.Sprintf("?wait=true&waitIndex=%d", i2))})
		x.expectKeys(t, a, 200, map[string]any{"action": "set", "node": x.node("v2", i2, i2),
			"prevNode": x.node("v1", i1, i1)})
	}},
	{"stream", func(t *testing.T, x *transportCase) {
		x.b.waitWatchers(t, 0, nil)
		head, body := x.c.stream(ctxT(t, 20*time.Second), transportReq{url: x.keyURL("?wait=true&stream=true")})
		x.expectHead(t, head, 200, "application/json")
		x.b.waitWatchers(t, 1, nil)
		i1 := x.write(t, "v1")
		i2 := x.write(t, "v2")
		dec := json.NewDecoder(body)
		dec.UseNumber()
		for i, want := range []map[string]any{
			{"action": "set", "node": x.node("v1", i1, i1)},
			{"action": "set", "node": x.node("v2", i2, i2), "prevNode": x.node("v1", i1, i1)},
		} {
			var got map[string]any
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("stream event %d: %v", i+1, err)
			}
			expectJSON(t, fmt.Sprintf("stream event %d", i+1), got, want)
		}
	}},
	{"metrics", func(t *testing.T, x *transportCase) {
		x.expectMetrics(t, x.call(t, transportReq{url: x.b.metricsTLS + "/metrics"}))
	}},
	{"metrics-on-client-url", func(t *testing.T, x *transportCase) {
		x.expectMetrics(t, x.call(t, transportReq{url: x.b.url + "/metrics"}))
	}},
	{"health", func(t *testing.T, x *transportCase) {
		x.expectHealth(t, x.call(t, transportReq{url: x.b.url + "/health"}))
	}},
	{"health-on-metrics-listener", func(t *testing.T, x *transportCase) {
		x.expectHealth(t, x.call(t, transportReq{url: x.b.metricsTLS + "/health"}))
	}},
}

// keepAliveAfterWatch: over one HTTP/1.1 connection, a watch answered by a
// write, then a GET and a second watch.
func keepAliveAfterWatch(t *testing.T, x *transportCase) {
	x.b.waitWatchers(t, 0, nil)
	answers := x.c.run(ctxT(t, 20*time.Second),
		transportReq{url: x.keyURL("?wait=true")}, transportReq{url: x.keyURL("")}, transportReq{url: x.keyURL("?wait=true")})
	x.b.waitWatchers(t, 1, answers)
	i1 := x.write(t, "v1")
	first := receive(t, answers)
	x.expectKeys(t, first, 200, map[string]any{"action": "set", "node": x.node("v1", i1, i1)})
	get := receive(t, answers)
	x.expectKeys(t, get, 200, map[string]any{"action": "get", "node": x.node("v1", i1, i1)})
	x.b.waitWatchers(t, 1, answers)
	i2 := x.write(t, "v2")
	second := receive(t, answers)
	x.expectKeys(t, second, 200, map[string]any{"action": "set", "node": x.node("v2", i2, i2),
		"prevNode": x.node("v1", i1, i1)})
	for _, a := range []struct {
		what string
		a    transportAnswer
	}{{"the GET after the watch", get}, {"the second watch", second}} {
		if !a.a.reused {
			t.Errorf("%s opened a new connection instead of reusing the watch's", a.what)
		}
		if a.a.conn != first.conn {
			t.Errorf("%s went over %s, the watch over %s", a.what, a.a.conn, first.conn)
		}
	}
}

// refusedWithoutCert: a client without a certificate gets no answer from
// the client URL nor the https metrics listener. Over TLS 1.2 the server
// refuses the handshake itself, with an alert the client sees as the
// handshake's failure. Over TLS 1.3 (the default) the client's handshake
// ends before the server checks its certificate, and the alert comes
// instead of an answer: how it shows (an alert, a reset, a broken pipe)
// depends on the client's timing, so only "no answer" is checked there.
func refusedWithoutCert(t *testing.T, o clientOpts, creds clientCreds, b *transportBridge) {
	tls12 := o
	tls12.tls12 = true
	for _, u := range []string{b.url + "/v2/keys/", b.metricsTLS + "/metrics"} {
		a := receive(t, newTransportClient(t, tls12, creds).run(ctxT(t, 20*time.Second), transportReq{url: u}))
		if a.err == nil || !a.handshakeRefused {
			t.Errorf("GET %s over TLS 1.2 without a client certificate: %s, want the TLS handshake refused", u, a)
		}
		a = receive(t, newTransportClient(t, o, creds).run(ctxT(t, 20*time.Second), transportReq{url: u}))
		if a.err == nil || a.status != 0 {
			t.Errorf("GET %s over TLS 1.3 without a client certificate: %s, want no answer", u, a)
		}
	}
}

// transportBridge is a bridge binary serving https (and, without client
// certificates, http too).
type transportBridge struct {
	name         string
	certRequired bool
	url          string // https client URL
	plainURL     string // http client URL ("" with certRequired)
	metricsHTTP  string // metrics listener polled for health and the watcher count
	metricsTLS   string // https metrics listener
	writer       transportClient
}

func startTransportBridge(t *testing.T, creds clientCreds, scert, skey string, certRequired bool) *transportBridge {
	t.Helper()
	b := &transportBridge{name: "no-client-cert", certRequired: certRequired}
	if certRequired {
		b.name = "cert-required"
	}
	httpsURL := func() string { return "https://" + strings.TrimPrefix(v2bridgetest.FreeURL(t), "http://") }
	startHealthyBridge(t, func() (string, []string, []string) {
		_, args := embeddedArgs(t)
		b.url, b.metricsHTTP, b.metricsTLS = httpsURL(), v2bridgetest.FreeURL(t), httpsURL()
		clientURLs := b.url
		if !certRequired {
			b.plainURL = v2bridgetest.FreeURL(t)
			clientURLs += "," + b.plainURL
		}
		args = append(args, "--listen-client-urls", clientURLs, "--cert-file", scert, "--key-file", skey,
			"--listen-metrics-urls", b.metricsHTTP+","+b.metricsTLS)
		if certRequired {
			args = append(args, "--trusted-ca-file", creds.ca, "--client-cert-auth")
		}
		return b.metricsHTTP, nil, args
	})
	b.writer = newTransportClient(t, clientOpts{tool: "go", proto: "h1", cert: true}, creds)
	return b
}

// watchers is the bridge's count of v2 watches waiting.
func (b *transportBridge) watchers(t *testing.T) int {
	t.Helper()
	return int(scrapeMetric(t, b.metricsHTTP, "v2bridge_v2_watchers"))
}

// waitWatchers waits until n v2 watches wait on the bridge; an answer on
// ended (the watch being waited for) fails the test: it came too early.
func (b *transportBridge) waitWatchers(t *testing.T, n int, ended <-chan transportAnswer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.watchers(t) != n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d watches to wait on the bridge (now %d)", n, b.watchers(t))
		}
		select {
		case a := <-ended:
			t.Fatalf("the watch ended before the write it waits for: %s", a)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// transportCase is one cell of the matrix: a client, a bridge, the protocol
// the client must be served with, and a key of its own.
type transportCase struct {
	c     transportClient
	b     *transportBridge
	base  string // the bridge URL the client talks to; b.url if empty
	proto string // "1.1" or "2"
	key   string
}

// transportKey is a key of the test's own.
func transportKey(t *testing.T) string {
	return "/transport/" + strings.NewReplacer("/", "-", "#", "-").Replace(t.Name())
}

func (x *transportCase) keyURL(query string) string {
	base := x.base
	if base == "" {
		base = x.b.url
	}
	return base + "/v2/keys" + x.key + query
}

// call sends one request and returns its answer; no answer fails the test.
func (x *transportCase) call(t *testing.T, r transportReq) transportAnswer {
	t.Helper()
	a := receive(t, x.c.run(ctxT(t, 20*time.Second), r))
	if a.err != nil {
		t.Fatalf("%s %s: %s", r.methodOrGET(), r.url, a)
	}
	return a
}

// write sets the key to value through another client (HTTP/1.1) and returns
// the write's index.
func (x *transportCase) write(t *testing.T, value string) uint64 {
	t.Helper()
	a := receive(t, x.b.writer.run(ctxT(t, 20*time.Second),
		transportReq{method: "PUT", url: x.b.url + "/v2/keys" + x.key, form: form("value", value)}))
	if a.err != nil || (a.status != 200 && a.status != 201) {
		t.Fatalf("write %s=%s by another client: %s", x.key, value, a)
	}
	return etcdIndex(t, a)
}

// node is the JSON of the case's key holding value.
func (x *transportCase) node(value string, modified, created uint64) map[string]any {
	return map[string]any{"key": x.key, "value": value,
		"modifiedIndex": json.Number(strconv.FormatUint(modified, 10)),
		"createdIndex":  json.Number(strconv.FormatUint(created, 10))}
}

// expectHead checks that a is an answer with status, served over the
// case's protocol, with a Content-Type starting with contentType.
func (x *transportCase) expectHead(t *testing.T, a transportAnswer, status int, contentType string) {
	t.Helper()
	if a.err != nil {
		t.Fatalf("%s", a)
	}
	if a.proto != x.proto {
		t.Errorf("served over HTTP/%s, want HTTP/%s", a.proto, x.proto)
	}
	if a.status != status {
		t.Errorf("status %d, want %d (%s)", a.status, status, a)
	}
	if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, contentType) {
		t.Errorf("Content-Type %q, want %s", ct, contentType)
	}
}

// expectKeys checks a keys (or watch) answer in full: status, protocol,
// the v2 headers, and the JSON body, every field of it.
func (x *transportCase) expectKeys(t *testing.T, a transportAnswer, status int, want map[string]any) {
	t.Helper()
	x.expectHead(t, a, status, "application/json")
	for _, h := range []string{"X-Etcd-Index", "X-Etcd-Cluster-Id"} {
		if a.header.Get(h) == "" {
			t.Errorf("no %s header", h)
		}
	}
	dec := json.NewDecoder(strings.NewReader(a.body))
	dec.UseNumber()
	var got map[string]any
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("body %q: %v", a.body, err)
	}
	expectJSON(t, "body", got, want)
}

func (x *transportCase) expectMetrics(t *testing.T, a transportAnswer) {
	t.Helper()
	x.expectHead(t, a, 200, "text/plain")
	if !strings.HasPrefix(a.body, "v2bridge_") && !strings.Contains(a.body, "\nv2bridge_") {
		t.Errorf("no v2bridge_ metric in /metrics:\n%.500s", a.body)
	}
}

func (x *transportCase) expectHealth(t *testing.T, a transportAnswer) {
	t.Helper()
	x.expectHead(t, a, 200, "application/json")
	if a.body != "{\"health\":\"true\"}\n" {
		t.Errorf("/health body %q, want {\"health\":\"true\"} and a newline", a.body)
	}
}

func expectJSON(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// etcdIndex is a's X-Etcd-Index.
func etcdIndex(t *testing.T, a transportAnswer) uint64 {
	t.Helper()
	i, err := strconv.ParseUint(a.header.Get("X-Etcd-Index"), 10, 64)
	if err != nil {
		t.Fatalf("X-Etcd-Index of %s: %v", a, err)
	}
	return i
}

// receive takes the next answer of a run, waiting 10 s at most.
func receive(t *testing.T, answers <-chan transportAnswer) transportAnswer {
	t.Helper()
	select {
	case a, ok := <-answers:
		if !ok {
			return transportAnswer{err: errors.New("no answer: the client ended first")}
		}
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10s")
		return transportAnswer{}
	}
}

// transportReq is a request; form is sent as the body.
type transportReq struct {
	method string // GET if empty
	url    string
	form   url.Values
}

func (r transportReq) methodOrGET() string {
	if r.method == "" {
		return "GET"
	}
	return r.method
}

// transportAnswer is a whole answer, or why there is none.
type transportAnswer struct {
	status int
	proto  string // "1.1" or "2"
	header http.Header
	body   string
	reused bool   // sent over a connection opened for an earlier request
	conn   string // the connection (Go: its local address; curl: empty)
	err    error
	// handshakeRefused: err is the TLS handshake's failure on the server's
	// alert.
	handshakeRefused bool
}

func (a transportAnswer) String() string {
	if a.err != nil {
		return "error: " + a.err.Error()
	}
	return fmt.Sprintf("%d over HTTP/%s: %.300q", a.status, a.proto, a.body)
}

// transportClient sends requests over one connection as a real client does.
type transportClient interface {
	// run sends reqs one after another (over one connection when it can be
	// kept) and delivers each answer as it arrives; it closes the channel
	// after the last, or after the first that failed.
	run(ctx context.Context, reqs ...transportReq) <-chan transportAnswer
	// stream sends req and returns the head of its answer and its body as
	// it arrives, until ctx ends.
	stream(ctx context.Context, req transportReq) (transportAnswer, io.Reader)
}

// clientCreds are the client's CA and certificate, as files (curl) and
// loaded (Go).
type clientCreds struct {
	ca, cert, key string
	pool          *x509.CertPool
	pair          tls.Certificate
}

// clientOpts choose a client.
type clientOpts struct {
	tool  string // "go" or "curl"
	proto string // "h1" (HTTP/1.1 only) or "h2" (HTTP/2 if the server offers it)
	cert  bool   // present the client certificate
	tls12 bool   // TLS 1.2 at most
}

func newTransportClient(t *testing.T, o clientOpts, creds clientCreds) transportClient {
	if o.tool == "curl" {
		args := []string{"--cacert", creds.ca}
		if o.cert {
			args = append(args, "--cert", creds.cert, "--key", creds.key)
		}
		if o.tls12 {
			args = append(args, "--tls-max", "1.2")
		}
		if o.proto == "h1" {
			args = append(args, "--http1.1")
		} // else curl's default: h2 if the server offers it in ALPN
		return curlClient{args: args}
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: creds.pool, MinVersion: tls.VersionTLS12}}
	if o.cert {
		tr.TLSClientConfig.Certificates = []tls.Certificate{creds.pair}
	}
	if o.tls12 {
		tr.TLSClientConfig.MaxVersion = tls.VersionTLS12
	}
	if o.proto == "h2" {
		tr.ForceAttemptHTTP2 = true
	} else {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1 only
	}
	t.Cleanup(tr.CloseIdleConnections)
	return goClient{c: &http.Client{Transport: tr}}
}

// goClient is Go's HTTP client.
type goClient struct{ c *http.Client }

func (g goClient) send(ctx context.Context, r transportReq) (*http.Response, transportAnswer) {
	var a transportAnswer
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
		a.reused, a.conn = ci.Reused, ci.Conn.LocalAddr().String()
	}})
	var body io.Reader
	if r.form != nil {
		body = strings.NewReader(r.form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, r.methodOrGET(), r.url, body)
	if err != nil {
		a.err = err
		return nil, a
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := g.c.Do(req)
	if err != nil {
		a.err = err
		// The server's TLS alert, as crypto/tls reports it.
		var op *net.OpError
		a.handshakeRefused = errors.As(err, &op) && op.Op == "remote error"
		return nil, a
	}
	a.status, a.header = resp.StatusCode, resp.Header
	a.proto = fmt.Sprintf("%d.%d", resp.ProtoMajor, resp.ProtoMinor)
	if resp.ProtoMajor == 2 {
		a.proto = "2"
	}
	return resp, a
}

func (g goClient) run(ctx context.Context, reqs ...transportReq) <-chan transportAnswer {
	out := make(chan transportAnswer, len(reqs))
	go func() {
		defer close(out)
		for _, r := range reqs {
			resp, a := g.send(ctx, r)
			if resp != nil {
				b, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				a.body, a.err = string(b), err
			}
			out <- a
			if a.err != nil {
				return
			}
		}
	}()
	return out
}

func (g goClient) stream(ctx context.Context, r transportReq) (transportAnswer, io.Reader) {
	resp, a := g.send(ctx, r)
	if resp == nil {
		return a, nil
	}
	context.AfterFunc(ctx, func() { _ = resp.Body.Close() })
	return a, resp.Body
}

// curlClient is the curl binary; args choose its TLS and protocol.
type curlClient struct{ args []string }

// curlMark starts the line --write-out adds after each transfer.
const curlMark = "@@curl "

// start runs curl with one transfer per request, each writing its head
// (--dump-header -), its body, and a curlMark line to stdout.
func (c curlClient) start(ctx context.Context, reqs []transportReq) (*exec.Cmd, *bufio.Reader, *bytes.Buffer, error) {
	var args []string
	for i, r := range reqs {
		if i > 0 {
			args = append(args, "--next") // a new transfer, on the same connection if it was kept
		}
		args = append(args, "--silent", "--show-error", "--no-buffer", "--max-time", "15", "--dump-header", "-",
			"--write-out", "\n"+curlMark+"%{http_code} %{http_version} %{num_connects}\n")
		args = append(args, c.args...)
		if r.method != "" {
			args = append(args, "--request", r.method)
		}
		if r.form != nil {
			args = append(args, "--data-raw", r.form.Encode())
		}
		args = append(args, r.url)
	}
	cmd := exec.CommandContext(ctx, "curl", args...)
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	return cmd, bufio.NewReader(stdout), stderr, nil
}

func (c curlClient) run(ctx context.Context, reqs ...transportReq) <-chan transportAnswer {
	out := make(chan transportAnswer, len(reqs))
	cmd, stdout, stderr, err := c.start(ctx, reqs)
	if err != nil {
		out <- transportAnswer{err: err}
		close(out)
		return out
	}
	go func() {
		defer close(out)
		for range reqs {
			a := readCurlHead(stdout)
			if a.err == nil {
				a.err = readCurlBody(stdout, &a)
			}
			if a.err != nil {
				out <- curlFailed(cmd, stdout, stderr, a.err)
				return
			}
			out <- a
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()
	return out
}

func (c curlClient) stream(ctx context.Context, r transportReq) (transportAnswer, io.Reader) {
	cmd, stdout, stderr, err := c.start(ctx, []transportReq{r})
	if err != nil {
		return transportAnswer{err: err}, nil
	}
	a := readCurlHead(stdout)
	if a.err != nil {
		return curlFailed(cmd, stdout, stderr, a.err), nil
	}
	go func() { // reaps curl once ctx ends it
		<-ctx.Done()
		_ = cmd.Wait()
	}()
	return a, stdout
}

// curlFailed waits for a curl that failed and says why, with its stderr.
func curlFailed(cmd *exec.Cmd, stdout io.Reader, stderr *bytes.Buffer, why error) transportAnswer {
	_, _ = io.Copy(io.Discard, stdout)
	err := cmd.Wait()
	msg := strings.TrimSpace(stderr.String())
	var exit *exec.ExitError
	a := transportAnswer{err: fmt.Errorf("curl: %v (%v): %s", why, err, msg)}
	// 35: the TLS handshake failed, here on the server's alert.
	a.handshakeRefused = errors.As(err, &exit) && exit.ExitCode() == 35 && strings.Contains(msg, "alert")
	return a
}

// readCurlHead reads a transfer's status line and header fields. A transfer
// that got no answer has only its curlMark line.
func readCurlHead(r *bufio.Reader) transportAnswer {
	var a transportAnswer
	line, err := r.ReadString('\n')
	for err == nil && strings.TrimSpace(line) == "" { // the blank line --write-out starts with
		line, err = r.ReadString('\n')
	}
	if err != nil {
		return transportAnswer{err: fmt.Errorf("no answer: %w", err)}
	}
	if strings.HasPrefix(line, curlMark) {
		return transportAnswer{err: fmt.Errorf("no answer (%s)", strings.TrimSpace(line))}
	}
	fields := strings.Fields(line) // "HTTP/1.1 200 OK", "HTTP/2 200"
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "HTTP/") {
		return transportAnswer{err: fmt.Errorf("not a status line: %q", line)}
	}
	a.proto = strings.TrimPrefix(fields[0], "HTTP/")
	if a.status, err = strconv.Atoi(fields[1]); err != nil {
		return transportAnswer{err: fmt.Errorf("status line %q: %v", line, err)}
	}
	h, err := textproto.NewReader(r).ReadMIMEHeader()
	if err != nil {
		return transportAnswer{err: fmt.Errorf("header: %w", err)}
	}
	a.header = http.Header(h)
	return a
}

// readCurlBody reads a transfer's body up to its curlMark line, and the
// facts that line gives.
func readCurlBody(r *bufio.Reader, a *transportAnswer) error {
	var body strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("body: %w", err)
		}
		if mark, ok := strings.CutPrefix(line, curlMark); ok {
			// "<http_code> <http_version> <num_connects>"; the body got the
			// newline --write-out starts with.
			var code, connects int
			if _, err := fmt.Sscan(mark, &code, &a.proto, &connects); err != nil {
				return fmt.Errorf("--write-out line %q: %v", line, err)
			}
			a.body, a.reused = strings.TrimSuffix(body.String(), "\n"), connects == 0
			return nil
		}
		body.WriteString(line)
	}
}
