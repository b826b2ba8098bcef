// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/v2bridge/v2bridge/translate"
)

// keysFixture serves one v2 API twice: on a Home whose reader serves key
// requests (home), and on a plain http.Server (plain), the answers of which
// are net/http's own. onReader counts the requests the Home's reader served.
type keysFixture struct {
	home, plain string
	h           *homeFixture
	onReader    atomic.Int64
}

// startKeys serves st as startHome does, with the reader serving key
// requests (bodies read within 5 s), unless opts say otherwise; keep keeps
// watches in net/http.
func startKeys(t *testing.T, st *fakeStore, opts ...func(*HomeConfig)) *keysFixture {
	t.Helper()
	f := &keysFixture{}
	hc := HomeConfig{ServeKeys: true, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
		BodyReadTimeout: 5 * time.Second}
	for _, o := range opts {
		o(&hc)
	}
	api := newTestServer(t, st, func(c *Config) { c.DetachWatches = !hc.KeepWatches })
	hc.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asDetached(w) != nil {
			f.onReader.Add(1)
		}
		api.ServeHTTP(w, r)
	})
	ln := listen(t)
	f.h, f.home = serveOnHome(t, ln, hc), ln.Addr().String()
	pln := listen(t)
	plain := &http.Server{Handler: api}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = plain.Serve(pln)
	}()
	t.Cleanup(func() {
		_ = plain.Close()
		<-done
	})
	f.plain = pln.Addr().String()
	return f
}

// exchange sends req on a new connection to addr and returns what comes
// back, as it is on the wire but the Date line: every answer (a 100
// Continue included) until the connection closes or stays quiet for quiet.
func exchange(t *testing.T, addr, req string, quiet time.Duration) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for {
		_ = c.SetReadDeadline(time.Now().Add(quiet))
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var out []string
	for _, line := range strings.SplitAfter(got.String(), "\r\n") {
		if !strings.HasPrefix(line, "Date: ") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// compareWithNetHTTP sends req to the Home and to the plain server, and
// fails t unless the reader served it (onReader) and the two answers are
// alike but for the order of their header lines, or the reader did not
// (!onReader) and they are the same bytes (net/http answered both). It
// returns the Home's answer.
func (f *keysFixture) compareWithNetHTTP(t *testing.T, req string, onReader bool) string {
	t.Helper()
	before := f.onReader.Load()
	got := exchange(t, f.home, req, 200*time.Millisecond)
	want := exchange(t, f.plain, req, 200*time.Millisecond)
	served := f.onReader.Load() - before
	switch {
	case onReader && served != 1:
		t.Fatalf("%d served by the reader, want 1", served)
	case !onReader && served != 0:
		t.Fatalf("%d served by the reader, want none", served)
	case onReader && sortedHead(got) != sortedHead(want), !onReader && got != want:
		t.Fatalf("answered\n%.400q\nnet/http answers\n%.400q", got, want)
	}
	return got
}

// sortedHead is an answer with its header lines sorted (the reader writes
// them in the map's order, as HTTP allows).
func sortedHead(answer string) string {
	head, body, _ := strings.Cut(answer, "\r\n\r\n")
	lines := strings.Split(head, "\r\n")
	slices.Sort(lines[1:])
	return strings.Join(lines, "\r\n") + "\r\n\r\n" + body
}

// form is the end of a head with a form body.
func form(body string) string {
	return "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// What v2 clients send on a keep-alive connection is served by the reader,
// and answered with the bytes net/http answers it with: the same status
// line, the same headers, the same body.
func TestKeyRequestsOnTheReaderAnswerAsNetHTTP(t *testing.T) {
	f := startKeys(t, fuzzStore())
	const host = "Host: 127.0.0.1:2379\r\n"
	for _, tc := range []struct{ name, req string }{
		{"GET", "GET /v2/keys/a/b HTTP/1.1\r\n" + host + "User-Agent: Go-http-client/1.1\r\n\r\n"},
		{"quorum GET", "GET /v2/keys/a?quorum=true&recursive=true HTTP/1.1\r\n" + host + "\r\n"},
		{"PUT", "PUT /v2/keys/a HTTP/1.1\r\n" + host + "User-Agent: Go-http-client/1.1\r\n" + form("value=v&ttl=5")},
		{"PUT with escapes", "PUT /v2/keys/a HTTP/1.1\r\n" + host + form("value=%7B%22a%22%3A+1%7D")},
		{"PUT with a query and a body", "PUT /v2/keys/a?prevExist=false&value=q HTTP/1.1\r\n" + host + form("value=b")},
		{"PUT without a body", "PUT /v2/keys/d?dir=true HTTP/1.1\r\n" + host + "Content-Length: 0\r\n\r\n"},
		{"a v2 error", "PUT /v2/keys/a HTTP/1.1\r\n" + host + form("value=errx")},
		{"a backend error", "PUT /v2/keys/a HTTP/1.1\r\n" + host + form("value=fail")},
		{"a bad form field", "PUT /v2/keys/a?ttl=x HTTP/1.1\r\n" + host + form("value=v")},
		{"POST", "POST /v2/keys/queue HTTP/1.1\r\n" + host + form("value=job")},
		{"DELETE", "DELETE /v2/keys/a?prevIndex=4 HTTP/1.1\r\n" + host + "\r\n"},
		{"noValueOnSuccess", "PUT /v2/keys/a?noValueOnSuccess=true HTTP/1.1\r\n" + host + form("value=v")},
		{"an unclean path (redirected)", "GET /v2/keys/a/../b HTTP/1.1\r\n" + host + "\r\n"},
		{"a ready watch", "GET /v2/keys/w?wait=true HTTP/1.1\r\n" + host + "\r\n"},
		{"Connection: keep-alive", "GET /v2/keys/a HTTP/1.1\r\n" + host + "Connection: keep-alive\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) { f.compareWithNetHTTP(t, tc.req, true) })
	}
}

// An answer larger than the reader gathers goes out chunked as the handler
// writes it, with the bytes net/http sends.
func TestALargeAnswerOnTheReaderIsChunkedAsNetHTTPs(t *testing.T) {
	st := fuzzStore()
	small := st.answer
	st.answer = func(op string, r *translate.Request) (*translate.Event, error) {
		if r.Path != "/big" {
			return small(op, r)
		}
		dir := &translate.Node{Key: "/big", Dir: true, ModifiedIndex: 3, CreatedIndex: 3}
		for i := range 2000 {
			dir.Nodes = append(dir.Nodes, &translate.Node{Key: fmt.Sprintf("/big/k%04d", i), Value: strp("some value"),
				ModifiedIndex: 9, CreatedIndex: 9})
		}
		return &translate.Event{Action: "get", Node: dir, EtcdIndex: 9}, nil
	}
	f := startKeys(t, st)
	req := "GET /v2/keys/big?recursive=true HTTP/1.1\r\nHost: 127.0.0.1:2379\r\n\r\n"
	if got := f.compareWithNetHTTP(t, req, true); !strings.Contains(got, "Transfer-Encoding: chunked") || len(got) < largeAnswer {
		t.Fatalf("a large answer not chunked: %.300q", got)
	}
	// The connection serves on after it.
	c, err := net.Dial("tcp", f.home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for _, r := range []string{req, "GET /v2/keys/a HTTP/1.1\r\nHost: x\r\n\r\n"} {
		_, _ = io.WriteString(c, r)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%q on one connection: %v %v", r, resp, err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatalf("%q: %v", r, err)
		}
	}
	if n := f.onReader.Load(); n != 3 {
		t.Fatalf("%d served by the reader, want 3", n)
	}
}

// Anything the reader does not take goes to net/http, which answers it
// exactly as it answers on a connection of its own.
func TestRequestsTheReaderLeavesGetNetHTTPsAnswer(t *testing.T) {
	f := startKeys(t, fuzzStore(), func(hc *HomeConfig) { hc.MaxBodyBytes = 1 << 20 })
	const host = "Host: x\r\n"
	large := "value=" + strings.Repeat("v", keysBodyMax)
	for _, tc := range []struct{ name, req string }{
		{"HTTP/1.0", "GET /v2/keys/a HTTP/1.0\r\n" + host + "\r\n"},
		{"Connection: close", "PUT /v2/keys/a HTTP/1.1\r\n" + host + "Connection: close\r\n" + form("value=v")},
		{"Expect: 100-continue", "PUT /v2/keys/a HTTP/1.1\r\n" + host + "Expect: 100-continue\r\n" + form("value=v")},
		{"a chunked body", "PUT /v2/keys/a HTTP/1.1\r\n" + host + "Content-Type: application/x-www-form-urlencoded\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n7\r\nvalue=v\r\n0\r\n\r\n"},
		{"a body that is not a form", "PUT /v2/keys/a HTTP/1.1\r\n" + host + "Content-Type: text/plain\r\nContent-Length: 7\r\n\r\nvalue=v"},
		{"a body with no type", "PUT /v2/keys/a HTTP/1.1\r\n" + host + "Content-Length: 7\r\n\r\nvalue=v"},
		{"a body larger than the reader takes", "PUT /v2/keys/a HTTP/1.1\r\n" + host + form(large)},
		{"a bad form body", "PUT /v2/keys/a HTTP/1.1\r\n" + host + form("value=%zz")},
		{"a GET with a body", "GET /v2/keys/a HTTP/1.1\r\n" + host + form("value=v")},
		{"HEAD", "HEAD /v2/keys/a HTTP/1.1\r\n" + host + "\r\n"},
		{"PATCH", "PATCH /v2/keys/a HTTP/1.1\r\n" + host + form("value=v")},
		{"another path", "GET /v2/members HTTP/1.1\r\n" + host + "\r\n"},
		{"an escaped path", "GET /v2/keys/a%2Fb HTTP/1.1\r\n" + host + "\r\n"},
		{"a stream", "GET /v2/keys/w?wait=true&stream=1 HTTP/1.1\r\n" + host + "\r\n"},
		{"two Hosts", "GET /v2/keys/a HTTP/1.1\r\n" + host + host + "\r\n"},
		{"no Host", "GET /v2/keys/a HTTP/1.1\r\n\r\n"},
		{"a bad header", "GET /v2/keys/a HTTP/1.1\r\n" + host + "X-A: a\x00b\r\n\r\n"},
		{"two lengths", "PUT /v2/keys/a HTTP/1.1\r\n" + host + "Content-Length: 7\r\n" + form("value=v")},
		{"a bare LF", "GET /v2/keys/a HTTP/1.1\n" + host[:len(host)-2] + "\n\n"},
		{"garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) { f.compareWithNetHTTP(t, tc.req, false) })
	}
}

// keysConn opens a connection to the fixture's Home.
func keysConn(t *testing.T, f *keysFixture) (net.Conn, *bufio.Reader) {
	t.Helper()
	return rawConn(t, "http://"+f.home)
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

// Requests pipelined on a connection are answered in order, whether the
// reader or net/http reads them.
func TestPipelinedKeyRequestsAreAnsweredInOrder(t *testing.T) {
	f := startKeys(t, fuzzStore())
	c, br := keysConn(t, f)
	put := "PUT /v2/keys/a HTTP/1.1\r\nHost: x\r\n" + form("value=one")
	send(t, c, put) // served by the reader
	if code, _, body := readAnswer(t, br); code != 200 || !strings.Contains(body, `"value":"one"`) {
		t.Fatalf("first: %d %q", code, body)
	}
	send(t, c, "PUT /v2/keys/b HTTP/1.1\r\nHost: x\r\n"+form("value=two")+
		"GET /v2/keys/c HTTP/1.1\r\nHost: x\r\n\r\n"+
		"DELETE /v2/keys/d HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []string{`"action":"set","node":{"key":"/b","value":"two"`, `"action":"get","node":{"key":"/c"`,
		`"action":"delete","node":{"key":"/d"`} {
		if code, _, body := readAnswer(t, br); code/100 != 2 || !strings.Contains(body, want) {
			t.Fatalf("pipelined: %d %q, want %s", code, body, want)
		}
	}
	if n := f.onReader.Load(); n != 1 {
		t.Fatalf("%d served by the reader, want the first alone", n)
	}
}

// A request whose head or body comes in pieces is read whole by the reader.
func TestKeyRequestInPiecesIsServedByTheReader(t *testing.T) {
	req := "PUT /v2/keys/a HTTP/1.1\r\nHost: x\r\n" + form("value="+strings.Repeat("v", 3000))
	head := strings.Index(req, "\r\n\r\n") + 4
	for _, tc := range []struct {
		name string
		cuts []int
	}{
		{"the body after the head", []int{head}},
		{"the body in two", []int{head + 5}},
		{"the head in two", []int{10}},
		{"byte by byte at the seams", []int{head - 1, head, head + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := fuzzStore()
			f := startKeys(t, st)
			c, br := keysConn(t, f)
			prev := 0
			for _, cut := range append(tc.cuts, len(req)) {
				send(t, c, req[prev:cut])
				prev = cut
				time.Sleep(20 * time.Millisecond) // the reader sees each piece alone
			}
			if code, _, body := readAnswer(t, br); code != 200 || !strings.Contains(body, `"value":"vvv`) {
				t.Fatalf("%d %q", code, body)
			}
			if n := f.onReader.Load(); n != 1 {
				t.Fatalf("%d served by the reader, want 1", n)
			}
			if calls := st.recorded(); len(calls) != 1 || len(calls[0].req.Value) != 3000 {
				t.Fatalf("the store got %d calls", len(calls))
			}
		})
	}
}

// A client that leaves in the middle of a body has nothing written, and
// its connection is done with (the fixture's end checks that the Home's
// goroutines are).
func TestClientLeavingMidBodyWritesNothing(t *testing.T) {
	for _, half := range []bool{false, true} {
		st := fuzzStore()
		f := startKeys(t, st)
		c, br := keysConn(t, f)
		send(t, c, "PUT /v2/keys/a HTTP/1.1\r\nHost: x\r\n"+form("value=vvvvvvvvvv")[:80])
		time.Sleep(20 * time.Millisecond)
		if half { // it still reads: net/http tells it the body was cut short
			_ = c.(*net.TCPConn).CloseWrite()
			if code, _, _ := readAnswer(t, br); code/100 != 4 {
				t.Fatalf("a body cut short: %d, want net/http's 4xx", code)
			}
		} else {
			c.Close()
		}
		time.Sleep(50 * time.Millisecond)
		if n := len(st.recorded()); n != 0 {
			t.Fatalf("the store got %d calls", n)
		}
	}
}

// blockingStore answers writes only once release is closed, and tells
// each write's arrival on arrived.
func blockingStore() (*fakeStore, chan struct{}, chan struct{}) {
	st := fuzzStore()
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	answer := st.answer
	st.answer = func(op string, r *translate.Request) (*translate.Event, error) {
		if op == "write" {
			arrived <- struct{}{}
			<-release
		}
		return answer(op, r)
	}
	return st, arrived, release
}

// A request in flight on the reader when the server shuts down is answered
// (saying the connection closes), and the shutdown waits for it; an idle
// connection closes at once.
func TestShutdownLetsAKeyRequestInFlightFinish(t *testing.T) {
	st, arrived, release := blockingStore()
	f := startKeys(t, st)
	idle, idleBr := keysConn(t, f)
	send(t, idle, "GET /v2/keys/a HTTP/1.1\r\nHost: x\r\n\r\n")
	if code, _, _ := readAnswer(t, idleBr); code != 200 {
		t.Fatalf("GET: %d", code)
	}
	c, br := keysConn(t, f)
	send(t, c, "PUT /v2/keys/a HTTP/1.1\r\nHost: x\r\n"+form("value=v"))
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the write did not reach the store")
	}
	shut := make(chan error, 1)
	go func() { shut <- f.h.shutdown() }()
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idleBr.ReadByte(); err == nil {
		t.Fatal("the idle connection got bytes, want it closed")
	}
	select {
	case err := <-shut:
		t.Fatalf("shutdown ended with a request in flight: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !resp.Close || !strings.Contains(string(body), `"value":"v"`) {
		t.Fatalf("in flight: %d close %v %q, want its answer, closing", resp.StatusCode, resp.Close, body)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the connection stayed open after the answer")
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// A connection on the reader is closed once idle for the idle timeout after
// an answer, and a new one that sends nothing at the header timeout.
func TestIdleKeyConnectionsAreClosed(t *testing.T) {
	const idle, header = 150 * time.Millisecond, 100 * time.Millisecond
	f := startKeys(t, fuzzStore(), func(hc *HomeConfig) { hc.IdleTimeout, hc.ReadHeaderTimeout = idle, header })
	c, br := keysConn(t, f)
	for range 3 { // requests within the idle timeout keep it
		send(t, c, "GET /v2/keys/a HTTP/1.1\r\nHost: x\r\n\r\n")
		if code, _, _ := readAnswer(t, br); code != 200 {
			t.Fatalf("GET: %d", code)
		}
		time.Sleep(idle / 2)
	}
	start := time.Now()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle connection: %v, want it closed", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("closed after %v", d)
	}
	if f.onReader.Load() != 3 {
		t.Fatalf("%d served by the reader, want 3", f.onReader.Load())
	}
	quiet, qbr := keysConn(t, f)
	_ = quiet
	start = time.Now()
	if _, err := qbr.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("a silent new connection: %v, want it closed", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("closed after %v", d)
	}
}

// A watch that comes first on a new connection detaches from the reader,
// and the reader hands watches back when they are to stay in net/http.
func TestWatchOnTheReaderWaitsDetachedOrStaysInNetHTTP(t *testing.T) {
	for _, keep := range []bool{false, true} {
		w := newFakeWatch(5, 1)
		st := &fakeStore{watch: w}
		f := startKeys(t, st, func(hc *HomeConfig) { hc.KeepWatches = keep })
		c, br := keysConn(t, f)
		send(t, c, "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n")
		want := 1
		if keep {
			want = 0
			deadline := time.Now().Add(3 * time.Second)
			for len(st.recorded()) == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
		waitDetached(t, f.h.home, want)
		w.events <- encoded(watchEvent("set", "/dir/a", "1", 7))
		if code, _, body := readAnswer(t, br); code != 200 || !strings.Contains(body, `"modifiedIndex":7`) {
			t.Fatalf("keep %v: %d %q", keep, code, body)
		}
	}
}

// BenchmarkKeyRequests measures a PUT and a GET on keep-alive connections
// served by the reader, against net/http serving them (CPU per request,
// client included).
func BenchmarkKeyRequests(b *testing.B) {
	for _, onReader := range []bool{false, true} {
		name := "net-http"
		if onReader {
			name = "reader"
		}
		b.Run(name, func(b *testing.B) {
			st := fuzzStore()
			f := startHome(b, listen(b), st, func(hc *HomeConfig, _ *Config) { hc.ServeKeys = onReader })
			c, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			reqs := []string{"PUT /v2/keys/a HTTP/1.1\r\nHost: x\r\n" + form("value=0123456789abcdef"),
				"GET /v2/keys/a HTTP/1.1\r\nHost: x\r\n\r\n"}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := io.WriteString(c, reqs[i%2]); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// netHTTPKeys is what net/http makes of raw, one request's head and body:
// the request http.ReadRequest parses, its form parsed, as net/http's
// server hands it to a handler (Host out of the header), and its body; ok
// is false when net/http's server would refuse it or read it otherwise
// (not HTTP/1.1 keep-alive, a transfer coding, Expect, an invalid field),
// or when raw is not exactly one request.
func netHTTPKeys(raw []byte) (r *http.Request, body []byte, ok bool) {
	rd := bytes.NewReader(raw)
	br := bufio.NewReader(rd)
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil, false
	}
	if body, err = io.ReadAll(r.Body); err != nil || br.Buffered() > 0 || rd.Len() > 0 {
		return nil, nil, false
	}
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.Close || r.Host == "" || len(r.TransferEncoding) > 0 ||
		r.Header.Get("Expect") != "" || r.URL.Host != "" || !httpguts.ValidHostHeader(r.Host) {
		return nil, nil, false
	}
	for k, vs := range r.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, nil, false
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, nil, false
			}
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if r.ParseForm() != nil {
		return nil, nil, false
	}
	delete(r.Header, "Host")
	return r, body, true
}

// FuzzParseHead holds the reader's parser to net/http's: a request it takes
// (its head, then as much body as the head says) is one net/http would
// serve, parsed the same, form and body included; and it is one the reader
// may serve: a method of the keys handler, never a stream, and a watch only
// as v2 clients send it.
func FuzzParseHead(f *testing.F) {
	for _, s := range []struct{ head, body string }{
		{"GET /v2/keys/a/b HTTP/1.1\r\nHost: x\r\nUser-Agent: Go-http-client/1.1\r\n\r\n", ""},
		{"GET /v2/keys/a?quorum=true&wait=true HTTP/1.1\r\nHost: x\r\n\r\n", ""},
		{"GET /v2/keys/dir?wait=true&waitIndex=7 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", ""},
		{"PUT /v2/keys/a HTTP/1.1\r\nHost: 127.0.0.1:2379\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: 13\r\n" +
			"Content-Type: application/x-www-form-urlencoded\r\n\r\n", "value=v&ttl=5"},
		{"PUT /v2/keys/a?value=q&prevExist=false HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n" +
			"Content-Length: 24\r\n\r\n", "value=%7B%22a%22%3A+1%7D"},
		{"POST /v2/keys/q HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", ""},
		{"DELETE /v2/keys/a?recursive=true HTTP/1.1\r\nhost: h\r\nconnection: Keep-Alive\r\n\r\n", ""},
		{"PUT /v2/keys/a HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 9\r\n\r\n", "a=1&&=v&a"},
	} {
		f.Add([]byte(s.head), []byte(s.body))
	}
	rules := headRules{watches: true, keys: true, maxBody: keysBodyMax}
	f.Fuzz(func(t *testing.T, head, body []byte) {
		got, n := parseHead(head, rules)
		if got == nil {
			return
		}
		// The body, padded or cut to n, in memory of its own: the fuzzer's
		// inputs may share theirs.
		b := bytes.Repeat([]byte("x"), n)
		copy(b, body)
		body = b
		raw := append(slices.Clip(head), body...)
		if n > 0 && !got.setBody(body) {
			return // handed back
		}
		want, wantBody, ok := netHTTPKeys(raw)
		if !ok {
			t.Fatalf("%q: taken by parseHead, not a request net/http would serve", raw)
		}
		gotBody, _ := io.ReadAll(got.req.Body)
		r := &got.req
		if name, g, w, same := sameRequest(r, want); !same {
			t.Fatalf("%q: %s %#v, net/http's %#v", raw, name, g, w)
		}
		if !bytes.Equal(gotBody, wantBody) {
			t.Fatalf("%q: body %q, net/http's %q", raw, gotBody, wantBody)
		}
		switch r.Method {
		case http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete:
		default:
			t.Fatalf("%q: method %s taken", raw, r.Method)
		}
		if translate.FlagSet(r.Form, "stream") {
			t.Fatalf("%q: a stream taken", raw)
		}
		if r.Method == http.MethodGet && translate.FlagSet(r.Form, "wait") && !translate.FlagSet(r.Form, "quorum") && r.Form.Get("wait") != "true" {
			t.Fatalf("%q: a watch taken as v2 clients do not send it", raw)
		}
	})
}

// A client that half-closes in the middle of a head gets what net/http
// answers what came (its 400), not a silent close.
func TestHeadCutShortByAHalfCloseGetsNetHTTPsAnswer(t *testing.T) {
	f := startKeys(t, fuzzStore())
	req := "PUT /v2/keys/a HTTP/1.1\r\nHost: x\r\n" + form("value=v")
	for _, cut := range []int{5, 20, strings.Index(req, "\r\n\r\n") + 2} {
		t.Run(strconv.Itoa(cut), func(t *testing.T) {
			got := halfClosedExchange(t, f.home, req[:cut])
			want := halfClosedExchange(t, f.plain, req[:cut])
			if got != want {
				t.Fatalf("answered %q, net/http answers %q", got, want)
			}
			if n := f.onReader.Load(); n != 0 {
				t.Fatalf("%d served by the reader", n)
			}
		})
	}
}

// halfClosedExchange sends part on a new connection to addr, the first
// byte alone (as a trickling client would), half-closes it and returns what
// comes back until the server closes it.
func halfClosedExchange(t *testing.T, addr, part string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send(t, c, part[:1])
	time.Sleep(20 * time.Millisecond) // the reader reads the first byte alone
	send(t, c, part[1:])
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(c)
	var out []string
	for _, line := range strings.SplitAfter(string(got), "\r\n") {
		if !strings.HasPrefix(line, "Date: ") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// The first request's head is due within the header timeout of the
// connection's start, as in net/http, however late its first byte comes:
// a client that waits, then trickles its head, is cut off at the timeout.
func TestFirstHeadIsDueWithinTheHeaderTimeoutOfTheConnection(t *testing.T) {
	const header = 500 * time.Millisecond
	f := startKeys(t, fuzzStore(), func(hc *HomeConfig) { hc.ReadHeaderTimeout = header })
	c, err := net.Dial("tcp", f.home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	time.Sleep(header * 9 / 10)
	closed := make(chan time.Duration, 1)
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.Copy(io.Discard, c)
		closed <- time.Since(start)
	}()
	head := "GET /v2/keys/a HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", 200)
	for i := 0; i < len(head); i++ {
		select {
		case d := <-closed:
			if d > header*3/2 {
				t.Fatalf("cut off %v after the connection began, want about the header timeout (%v)", d, header)
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
		if _, err := io.WriteString(c, head[i:i+1]); err != nil {
			break
		}
	}
	if d := <-closed; d > header*3/2 {
		t.Fatalf("cut off %v after the connection began, want about the header timeout (%v)", d, header)
	}
}

// An answer larger than net/http buffers before it chunks (2 KiB) goes out
// chunked, as net/http sends it, and one of up to 2 KiB with its length.
func TestAnswerOver2KiBOnTheReaderIsChunkedAsNetHTTPs(t *testing.T) {
	f := startKeys(t, fuzzStore())
	post := func(value string) string {
		return "POST /v2/keys/q HTTP/1.1\r\nHost: x\r\n" + form("value="+value)
	}
	// A POST's answer holds its value once: its length is the value's and
	// that of the rest.
	_, rest, _ := strings.Cut(exchange(t, f.plain, post(""), 200*time.Millisecond), "\r\n\r\n")
	for _, size := range []int{2047, 2048, 2049, 6000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			f.compareWithNetHTTP(t, post(strings.Repeat("v", size-len(rest))), true)
		})
	}
}

// A large answer to a client that reads it slowly but steadily is written
// whole, however long that takes in all, as net/http (which has no write
// timeout here) writes it; only a client that takes nothing for the write
// timeout loses its connection.
func TestLargeAnswerToASteadySlowClientIsWrittenWhole(t *testing.T) {
	saved := detachWriteTimeout
	detachWriteTimeout = time.Second
	t.Cleanup(func() { detachWriteTimeout = saved }) // after the fixture's end
	big := strings.Repeat("v", 8<<20)
	st := fuzzStore()
	st.answer = func(op string, r *translate.Request) (*translate.Event, error) {
		return &translate.Event{Action: "get", Node: &translate.Node{Key: r.Path, Value: strp(big)}, EtcdIndex: 9}, nil
	}
	f := startKeys(t, st)
	for _, steady := range []bool{true, false} {
		t.Run(fmt.Sprintf("steady %v", steady), func(t *testing.T) {
			d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
				return rc.Control(func(fd uintptr) { // a small window: the socket holds little of the answer
					_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10)
				})
			}}
			c, err := d.Dial("tcp", f.home)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			send(t, c, "GET /v2/keys/big HTTP/1.1\r\nHost: x\r\n\r\n")
			if !steady {
				time.Sleep(3 * detachWriteTimeout) // takes nothing: the write times out
			}
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			// A few MB/s: seconds in all, never a second without progress.
			slow := bufio.NewReaderSize(&slowReader{r: c, pause: 10 * time.Millisecond}, 64<<10)
			var got int
			if resp, err := http.ReadResponse(slow, nil); err == nil {
				body, _ := io.ReadAll(resp.Body)
				got = len(body)
			}
			if whole := got > len(big); whole != steady {
				t.Fatalf("read %d bytes of an answer of over %d, want it whole %v", got, len(big), steady)
			}
		})
	}
}

// slowReader reads from r after a pause each time.
type slowReader struct {
	r     io.Reader
	pause time.Duration
}

func (s *slowReader) Read(b []byte) (int, error) {
	time.Sleep(s.pause)
	return s.r.Read(b)
}
