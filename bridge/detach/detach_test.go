// SPDX-License-Identifier: Apache-2.0

package detach

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/big"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// ended is how a wait ended: the body written and whether the client had
// gone.
type ended struct {
	bytes int
	gone  bool
}

// waiter is a handler whose /wait requests wait for an answer on answers,
// parked when they can be (and park is set), in net/http otherwise (with
// Gone); any other path is answered at once.
type waiter struct {
	park    bool
	answers chan []byte
	ends    chan ended
	parked  chan bool // whether each /wait parked
}

func newWaiter(park bool) *waiter {
	return &waiter{park: park, answers: make(chan []byte, 8), ends: make(chan ended, 8), parked: make(chan bool, 8)}
}

func (h *waiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/wait" {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "next "+r.URL.Path)
		if r.TLS != nil {
			_, _ = io.WriteString(w, " over TLS")
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Etcd-Index", "7")
	if h.park && Park(w, r, func(gone <-chan struct{}) []byte {
		select {
		case b := <-h.answers:
			return b
		case <-gone:
			return nil
		}
	}, func(n int, gone bool) { h.ends <- ended{n, gone} }) {
		h.parked <- true
		return
	}
	h.parked <- false
	gone, stop := Gone(r)
	defer stop()
	w.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w).Flush()
	select {
	case b := <-h.answers:
		n, _ := w.Write(b)
		h.ends <- ended{n, false}
	case <-gone:
		h.ends <- ended{0, true}
	case <-r.Context().Done():
		h.ends <- ended{0, true}
	}
}

// serve serves h on a loopback Listener (at most maxConns connections, 0: no
// cap) until the test ends.
func serve(t *testing.T, h http.Handler, maxConns int, tlsCfg *tls.Config) *Listener {
	t.Helper()
	return serveWith(t, h, maxConns, tlsCfg, &http.Server{ReadHeaderTimeout: 5 * time.Second})
}

// serveWith is serve with srv's timeouts.
func serveWith(t *testing.T, h http.Handler, maxConns int, tlsCfg *tls.Config, srv *http.Server) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	l := NewListener(ln, maxConns)
	srv.Handler, srv.ConnContext, srv.ConnState = Handler(h), l.ConnContext, l.ConnState
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		if err := l.Wait(ctx); err != nil {
			t.Errorf("parked requests still running after the listener closed: %v", err)
		}
	})
	return l
}

func dial(t *testing.T, l *Listener) *conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // no test step waits longer
	return &conn{Conn: c, r: bufio.NewReader(c)}
}

type conn struct {
	net.Conn
	r *bufio.Reader
}

func (c *conn) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

// head reads an answer's head.
func (c *conn) head(t *testing.T) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("reading an answer: %v", err)
	}
	return resp
}

// answer reads a whole answer: its head and body.
func (c *conn) answer(t *testing.T) (*http.Response, string) {
	t.Helper()
	resp := c.head(t)
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading an answer's body: %v", err)
	}
	return resp, string(b)
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
		panic("unreachable")
	}
}

func waitParked(t *testing.T, l *Listener, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Parked() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests parked, want %d", l.Parked(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

const waitReq = "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n"

// checkHead checks every field of a parked answer's head.
func checkHead(t *testing.T, resp *http.Response, closing bool) {
	t.Helper()
	if resp.StatusCode != 200 || resp.Proto != "HTTP/1.1" || resp.Header.Get("Content-Type") != "application/json" ||
		resp.Header.Get("X-Etcd-Index") != "7" || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" ||
		resp.Close != closing {
		t.Fatalf("head: %d %s %v te=%v close=%v; want 200 HTTP/1.1, the handler's headers, chunked, close=%v",
			resp.StatusCode, resp.Proto, resp.Header, resp.TransferEncoding, resp.Close, closing)
	}
	if d, err := http.ParseTime(resp.Header.Get("Date")); err != nil || time.Since(d) > time.Minute {
		t.Fatalf("Date %q: %v", resp.Header.Get("Date"), err)
	}
}

// A parked request's head goes out at once; its answer ends the chunked
// body; the connection then serves the client's next requests through
// net/http, parked or not.
func TestParkedRequestAnswersAndItsConnectionServesTheNext(t *testing.T) {
	h := newWaiter(true)
	l := serve(t, h, 0, nil)
	c := dial(t, l)
	for i, answer := range []string{`{"a":1}` + "\n", ""} {
		c.send(t, waitReq)
		if !recv(t, h.parked, "park") {
			t.Fatal("an HTTP/1.1 GET was not parked")
		}
		resp := c.head(t) // before any answer: the head is not held back
		checkHead(t, resp, false)
		waitParked(t, l, 1)
		h.answers <- []byte(answer)
		b, err := io.ReadAll(resp.Body)
		if err != nil || string(b) != answer {
			t.Fatalf("wait %d: body %q %v, want %q", i, b, err, answer)
		}
		if e := recv(t, h.ends, "end"); e != (ended{len(answer), false}) {
			t.Fatalf("wait %d ended %+v", i, e)
		}
		waitParked(t, l, 0)
		c.send(t, "GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, body := c.answer(t)
		if resp.StatusCode != 200 || body != "next /after" || resp.Header.Get("Content-Type") != "text/plain" {
			t.Fatalf("the next request on the connection: %d %q", resp.StatusCode, body)
		}
	}
}

// A client that leaves, half-closes, or sends a byte or a whole request and
// then leaves, is noticed at once, parked or waiting inside net/http; its
// place under the connection cap is freed.
func TestWaitNoticesAClientThatLeaves(t *testing.T) {
	leave := map[string]func(c *conn){
		"close":                     func(c *conn) { _ = c.Close() },
		"one more byte, then close": func(c *conn) { _, _ = c.Write([]byte("G")); time.Sleep(50 * time.Millisecond); _ = c.Close() },
		"a pipelined request, then close": func(c *conn) {
			_, _ = io.WriteString(c, "GET /piped HTTP/1.1\r\nHost: x\r\n\r\n")
			time.Sleep(50 * time.Millisecond)
			_ = c.Close()
		},
		"half-close": func(c *conn) { _ = c.Conn.(*net.TCPConn).CloseWrite() },
	}
	reqs := map[string]string{
		"parked":                         waitReq,
		"in net/http, Connection: close": "GET /wait HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		"in net/http, HTTP/1.0":          "GET /wait HTTP/1.0\r\n\r\n",
	}
	for rname, req := range reqs {
		for lname, leaveFn := range leave {
			t.Run(rname+"/"+lname, func(t *testing.T) {
				h := newWaiter(true)
				l := serve(t, h, 1, nil)
				c := dial(t, l)
				c.send(t, req)
				parked := recv(t, h.parked, "the request")
				if parked != (rname == "parked") {
					t.Fatalf("parked=%v", parked)
				}
				resp := c.head(t)
				if resp.StatusCode != 200 {
					t.Fatalf("head %d", resp.StatusCode)
				}
				leaveFn(c)
				if e := recv(t, h.ends, "the wait to end"); e != (ended{0, true}) {
					t.Fatalf("ended %+v, want gone", e)
				}
				if lname == "half-close" {
					// The client still reads: the answer is whole.
					b, err := io.ReadAll(resp.Body)
					if err != nil || len(b) != 0 {
						t.Fatalf("after a half-close: body %q %v, want an empty, complete body", b, err)
					}
				}
				waitParked(t, l, 0)
				// The only place under the cap is free again.
				c2 := dial(t, l)
				c2.send(t, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
				if _, body := c2.answer(t); body != "next /x" {
					t.Fatalf("a new connection after the client left: %q", body)
				}
			})
		}
	}
}

// A request pipelined behind a parked one, whether net/http read it along
// with the parked request or it came while parked, does not end the wait:
// it is answered after the wait's answer, on the same connection, over TLS
// too (its requests keep their TLS state).
func TestPipelinedRequestIsAnsweredAfterTheWait(t *testing.T) {
	const piped = "GET /piped HTTP/1.1\r\nHost: x\r\n\r\n"
	cert := selfSigned(t)
	for _, overTLS := range []bool{false, true} {
		for _, along := range []bool{true, false} {
			name := map[bool]string{true: "read along with it", false: "sent while parked"}[along]
			t.Run(map[bool]string{false: "TCP/", true: "TLS/"}[overTLS]+name, func(t *testing.T) {
				h := newWaiter(true)
				var tlsCfg *tls.Config
				if overTLS {
					tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
				}
				l := serve(t, h, 0, tlsCfg)
				c := dial(t, l)
				if overTLS {
					pool := x509.NewCertPool()
					pool.AddCert(cert.Leaf)
					tc := tls.Client(c.Conn, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
					c = &conn{Conn: tc, r: bufio.NewReader(tc)}
				}
				if along {
					c.send(t, waitReq+piped)
				} else {
					c.send(t, waitReq)
				}
				if !recv(t, h.parked, "park") {
					t.Fatal("not parked")
				}
				resp := c.head(t)
				checkHead(t, resp, false)
				waitParked(t, l, 1)
				if !along {
					c.send(t, piped)
				}
				// The wait goes on: nothing ends it but its answer.
				select {
				case e := <-h.ends:
					t.Fatalf("the wait ended %+v before its answer", e)
				case <-time.After(100 * time.Millisecond):
				}
				h.answers <- []byte("event")
				if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "event" {
					t.Fatalf("the wait's body %q %v, want %q", b, err, "event")
				}
				if e := recv(t, h.ends, "end"); e != (ended{5, false}) {
					t.Fatalf("ended %+v", e)
				}
				want := "next /piped"
				if overTLS {
					want += " over TLS"
				}
				resp, body := c.answer(t)
				if resp.StatusCode != 200 || body != want || resp.Close {
					t.Fatalf("the pipelined request: %d %q close=%v, want 200 %q", resp.StatusCode, body, resp.Close, want)
				}
				// The connection goes on serving, parked requests too.
				c.send(t, waitReq)
				if !recv(t, h.parked, "park") {
					t.Fatal("the next wait was not parked")
				}
				resp = c.head(t)
				checkHead(t, resp, false)
				h.answers <- []byte("again")
				if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "again" {
					t.Fatalf("the next wait's body %q %v", b, err)
				}
				recv(t, h.ends, "end")
			})
		}
	}
}

// A connection handed back after a parked answer waits for its next request
// as long as the server's idle timeout (not only its header timeout), and is
// closed once that runs out.
func TestHandedBackConnectionKeepsTheIdleTimeout(t *testing.T) {
	h := newWaiter(true)
	l := serveWith(t, h, 0, nil, &http.Server{ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: 3 * time.Second})
	c := dial(t, l)
	park := func() {
		t.Helper()
		c.send(t, waitReq)
		resp := c.head(t)
		h.answers <- []byte("event")
		if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "event" {
			t.Fatalf("the wait's body %q %v", b, err)
		}
		recv(t, h.ends, "end")
	}
	park()
	time.Sleep(500 * time.Millisecond) // five header timeouts
	c.send(t, "GET /later HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := c.answer(t); resp.StatusCode != 200 || body != "next /later" {
		t.Fatalf("a request after 0.5 s idle: %d %q", resp.StatusCode, body)
	}
	park()
	start := time.Now()
	if _, err := c.r.ReadByte(); err != io.EOF {
		t.Fatalf("an idle handed-back connection: %v, want it closed", err)
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Fatalf("closed after %v idle, before the idle timeout (3 s)", d)
	}
}

// Closing the listener ends every parked wait with the empty answer and
// closes its connection.
func TestClosingTheListenerEndsParkedWaits(t *testing.T) {
	h := newWaiter(true)
	l := serve(t, h, 0, nil)
	c := dial(t, l)
	c.send(t, waitReq)
	resp := c.head(t)
	waitParked(t, l, 1)
	_ = l.Close()
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 0 {
		t.Fatalf("body %q %v, want empty", b, err)
	}
	if _, err := c.r.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want the connection closed", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// Only an HTTP/1.1 GET that keeps its connection is parked.
func TestOnlyKeepAliveHTTP11GetsPark(t *testing.T) {
	h := newWaiter(true)
	l := serve(t, h, 0, nil)
	for _, req := range []string{
		"GET /wait HTTP/1.0\r\n\r\n",
		"GET /wait HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		"HEAD /wait HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		c := dial(t, l)
		c.send(t, req)
		if recv(t, h.parked, "the request") {
			t.Fatalf("%q was parked", req)
		}
		h.answers <- []byte("x")
		recv(t, h.ends, "end")
	}
}

// Connections beyond the cap wait to be accepted; a parked connection keeps
// its place until it closes.
func TestConnectionCapCountsParkedConnections(t *testing.T) {
	h := newWaiter(true)
	l := serve(t, h, 1, nil)
	c := dial(t, l)
	c.send(t, waitReq)
	c.head(t)
	waitParked(t, l, 1)
	second := dial(t, l)
	second.send(t, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = second.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := second.r.ReadByte(); err == nil {
		t.Fatal("a connection beyond the cap was served")
	}
	_ = second.SetReadDeadline(time.Now().Add(10 * time.Second))
	_ = c.Close()
	if e := recv(t, h.ends, "end"); !e.gone {
		t.Fatalf("ended %+v", e)
	}
	if _, body := second.answer(t); body != "next /x" {
		t.Fatalf("the waiting connection: %q", body)
	}
}

// Over TLS, HTTP/2 reaches net/http (ALPN h2) and waits there; HTTP/1.1 is
// parked, and its connection goes back to net/http as TLS.
func TestTLSConnectionsServeHTTP2AndPark(t *testing.T) {
	cert := selfSigned(t)
	h := newWaiter(true)
	l := serve(t, h, 0, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"},
		MinVersion: tls.VersionTLS12})
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	for _, h2 := range []bool{true, false} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		for i := range 2 {
			h.answers <- []byte("event")
			resp, err := cl.Get("https://" + l.Addr().String() + "/wait")
			if err != nil {
				t.Fatalf("h2=%v: %v", h2, err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if string(b) != "event" || resp.ProtoMajor != map[bool]int{true: 2, false: 1}[h2] {
				t.Fatalf("h2=%v #%d: %s %q", h2, i, resp.Proto, b)
			}
			if parked := recv(t, h.parked, "park"); parked == h2 {
				t.Fatalf("h2=%v: parked=%v", h2, parked)
			}
			recv(t, h.ends, "end")
			resp, err = cl.Get("https://" + l.Addr().String() + "/next")
			if err != nil {
				t.Fatal(err)
			}
			b, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if string(b) != "next /next over TLS" || resp.TLS == nil {
				t.Fatalf("h2=%v: the next request %q tls=%v", h2, b, resp.TLS != nil)
			}
		}
		tr.CloseIdleConnections()
	}
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// cpuTime is the CPU the process has used (client and server both).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWaitCycle is one long-poll cycle on a keep-alive connection whose
// answer is ready as soon as the request waits: parked (and handed back), or
// inside net/http. Its CPU per cycle is what a delivery costs the serving
// layer.
func BenchmarkWaitCycle(b *testing.B) {
	for _, park := range []bool{true, false} {
		b.Run(map[bool]string{true: "parked", false: "in net/http"}[park], func(b *testing.B) {
			h := newWaiter(park)
			h.ends = make(chan ended, 1<<20)
			h.parked = make(chan bool, 1<<20)
			h.answers = make(chan []byte, 1<<20)
			l := serve(&testing.T{}, h, 0, nil)
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			br := bufio.NewReader(c)
			answer := []byte(`{"action":"set","node":{"key":"/a","value":"1","modifiedIndex":5,"createdIndex":5}}` + "\n")
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			defer func() { b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op") }()
			for range b.N {
				h.answers <- answer
				if _, err := io.WriteString(c, waitReq); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				_ = resp.Body.Close()
			}
		})
	}
}
