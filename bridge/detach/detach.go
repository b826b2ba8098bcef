// SPDX-License-Identifier: Apache-2.0

// Package detach serves the connections of one http.Server and lets a
// long-poll with nothing to send yet wait outside net/http.
//
// A one-shot v2 watch spends nearly all its life waiting. Inside net/http a
// waiting request holds its connection's goroutine (grown deep by the
// handler), the connection's buffers and a background-read goroutine. Park
// takes such a request's HTTP/1.1 connection over (Hijack), lets it wait with
// two small goroutines — one waiting for the answer, one for the client to
// leave — writes the one answer, waits for the client's next request within
// the server's idle timeout, and hands the connection back to the same
// http.Server, which parses that request as any other. Requests are only
// ever read by net/http.
//
// A Listener is what the http.Server serves: it caps the connections open at
// once, and accepts the handed-back ones. Its ConnContext and ConnState must
// be the server's.
//
// Gone serves the waits that stay in net/http (HTTP/1.0, Connection: close,
// streams, parking turned off): net/http stops watching a connection once its
// client sends a byte behind the request, so a client that then leaves would
// go unnoticed until the wait ended.
//
// Both tell a client that left from one that pipelined a request through
// the socket's POLLRDHUP: on Linux only; elsewhere nothing is parked.
package detach

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// WriteTimeout bounds writing a parked request's answer: a client that does
// not read it loses its connection.
const WriteTimeout = 10 * time.Second

// Listener is the listener of one http.Server.
type Listener struct {
	inner    net.Listener
	sem      chan struct{} // one value per connection counted; nil: no cap
	accepted chan accepted // from the accept goroutine
	back     chan net.Conn // connections handed back by parked requests
	done     chan struct{} // closed by Close
	once     sync.Once
	wg       sync.WaitGroup // the accept goroutine, and both goroutines of every parked request

	mu      sync.Mutex            // guards counted, parked, idle and closed
	counted map[net.Conn]struct{} // connections holding a place in sem
	parked  map[*parked]struct{}  // requests waiting outside net/http
	idle    map[*parked]struct{}  // their connections, answered, waiting for the next request
	closed  bool
}

type accepted struct {
	c   net.Conn
	err error
}

// NewListener serves the connections of l, at most maxConns at once (0: no
// cap; further ones wait in the accept queue). A connection counts from its
// Accept until it is closed, parked or not.
func NewListener(l net.Listener, maxConns int) *Listener {
	dl := &Listener{inner: l, accepted: make(chan accepted), back: make(chan net.Conn), done: make(chan struct{}),
		counted: map[net.Conn]struct{}{}, parked: map[*parked]struct{}{}, idle: map[*parked]struct{}{}}
	if maxConns > 0 {
		dl.sem = make(chan struct{}, maxConns)
	}
	dl.wg.Add(1)
	go dl.acceptLoop()
	return dl
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		if l.sem != nil {
			select {
			case l.sem <- struct{}{}:
			case <-l.done:
				return
			}
		}
		c, err := l.inner.Accept()
		if err != nil {
			if l.sem != nil {
				<-l.sem
			}
		} else {
			l.mu.Lock()
			l.counted[c] = struct{}{}
			l.mu.Unlock()
		}
		select {
		case l.accepted <- accepted{c, err}:
		case <-l.done:
			if c != nil {
				l.closeConn(c)
			}
			return
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// Accept returns the next new or handed-back connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.back:
		// The connection's next request waits behind every goroutine
		// already runnable: after one event reaches many parked watches,
		// their answers go out before net/http parses their clients'
		// re-watches, which would otherwise run first (a new connection's
		// goroutine is scheduled next).
		runtime.Gosched()
		return c, nil
	case a := <-l.accepted:
		return a.c, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Addr is the inner listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Close stops accepting and ends every parked wait: the request gets the
// empty answer wait gives it and its connection is closed after it, as is
// every connection waiting here for its next request.
func (l *Listener) Close() error {
	err := l.inner.Close()
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		close(l.done)
		for p := range l.parked {
			p.wake()
		}
		for p := range l.idle {
			p.wake()
		}
		l.mu.Unlock()
	})
	return err
}

// Wait waits, after Close, for the accept goroutine and every parked request
// to end, or for ctx.
func (l *Listener) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Parked is the number of requests waiting outside net/http.
func (l *Listener) Parked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.parked)
}

// ConnState is the http.Server's ConnState: a connection net/http closes
// frees its place.
func (l *Listener) ConnState(c net.Conn, s http.ConnState) {
	if s == http.StateClosed {
		l.release(c)
	}
}

type connKey struct{}

type connInfo struct {
	l *Listener
	c net.Conn
}

// ConnContext is the http.Server's ConnContext: it tells Park and Gone which
// listener and connection a request came on.
func (l *Listener) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &connInfo{l, c})
}

func (l *Listener) release(c net.Conn) {
	l.mu.Lock()
	_, ok := l.counted[c]
	delete(l.counted, c)
	l.mu.Unlock()
	if ok && l.sem != nil {
		<-l.sem
	}
}

// rekey moves old's place under the cap to c, the same connection.
func (l *Listener) rekey(old, c net.Conn) {
	l.mu.Lock()
	if _, ok := l.counted[old]; ok {
		delete(l.counted, old)
		l.counted[c] = struct{}{}
	}
	l.mu.Unlock()
}

func (l *Listener) closeConn(c net.Conn) {
	_ = c.Close()
	l.release(c)
}

// handBack gives c to the http.Server again, or closes it once the listener
// is closed.
func (l *Listener) handBack(c net.Conn) {
	select {
	case l.back <- c:
	case <-l.done:
		l.closeConn(c)
	}
}

// socket is the raw socket under c (and under its TLS, if any), or nil.
func socket(c net.Conn) syscall.RawConn {
	if pc, ok := c.(*prefixConn); ok {
		c = pc.Conn
	}
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// readiness is what a wait for a readable socket saw.
type readiness int32

const (
	woken readiness = iota // its deadline went off (woken on purpose) or the socket closed
	sent                   // the client sent something (left unread)
	left                   // the client closed its side, or the connection failed
)

// parked is a request waiting outside net/http, then its connection waiting
// for the client's next request.
type parked struct {
	l        *Listener
	c        net.Conn
	rc       syscall.RawConn
	idle     time.Duration // the http.Server's idle timeout (0: none)
	pending  []byte        // the client's next request(s), read by net/http along with this one
	headLost bool          // the head could not be written: the client is gone
	gone     chan struct{} // closed by the reader when the client leaves or it is woken
	saw      readiness     // what the reader saw; read after gone is closed
	done     func(bytes int, gone bool)
}

// Park takes r's connection from net/http, before anything is written, and
// waits for the answer outside it. The head goes out at once (w's headers, a
// chunked body), flushed through w; wait runs on a goroutine
// of its own, with a channel closed when the client leaves or the listener
// closes, and returns the body (nil: an empty one). A request the client
// pipelined behind r does not end the wait: it is answered after r, as
// HTTP/1.1 orders answers. Park then ends the answer and hands the
// connection back to the http.Server for the client's next request (once
// it comes, within the server's idle timeout), or closes it when the client
// left. done, when not nil, is called at the end with the body's size and
// whether the client had gone. Park reports false, having taken nothing,
// for a request it cannot park: not an HTTP/1.1 GET that keeps its
// connection, or not from a Listener's socket.
func Park(w http.ResponseWriter, r *http.Request, wait func(gone <-chan struct{}) []byte, done func(bytes int, gone bool)) bool {
	ci, _ := r.Context().Value(connKey{}).(*connInfo)
	if ci == nil || r.Method != http.MethodGet || r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.Close ||
		w.Header().Get("Connection") != "" || !canPeek {
		return false
	}
	rc := socket(ci.c)
	if rc == nil {
		return false
	}
	// The head goes out through net/http, as a flushed head does, and
	// through every wrapper of w on the way (one may rewrite a header as
	// it is written); then the connection is taken.
	ctl := http.NewResponseController(w)
	headErr := ctl.Flush()
	c, rw, err := ctl.Hijack()
	if err != nil {
		return false
	}
	// Lift net/http's deadlines first: Close wakes a parked reader with
	// a deadline of its own from the moment the wait is registered.
	_ = c.SetReadDeadline(time.Time{})
	_ = c.SetWriteDeadline(time.Now().Add(WriteTimeout))
	l := ci.l
	p := &parked{l: l, c: c, rc: rc, idle: idleTimeout(r), gone: make(chan struct{}), done: done}
	// What net/http read past r is the client's next request: it is
	// given back to net/http with the connection, ahead of the socket.
	if n := rw.Reader.Buffered(); n > 0 {
		b, _ := rw.Peek(n)
		p.pending = append(p.pending, b...)
	}
	if pc, ok := c.(*prefixConn); ok {
		p.pending = append(p.pending, pc.buf...)
		p.c = pc.Conn
		l.rekey(pc, p.c)
	}
	l.mu.Lock()
	l.parked[p] = struct{}{}
	if l.closed {
		p.wake()
	}
	l.wg.Add(2)
	l.mu.Unlock()
	if headErr != nil {
		p.headLost = true
		_ = p.c.Close() // the reader wakes; the waiter ends the wait at once
	}
	go p.read()
	go p.wait(wait)
	return true
}

// idleTimeout is that of r's http.Server, as net/http reckons it.
func idleTimeout(r *http.Request) time.Duration {
	srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	if srv == nil {
		return 0
	}
	if srv.IdleTimeout != 0 {
		return srv.IdleTimeout
	}
	return srv.ReadTimeout
}

// read waits until the client leaves (or the waiter wakes it), without
// reading the socket.
func (p *parked) read() {
	defer p.l.wg.Done()
	p.saw = peek(p.rc, true)
	close(p.gone)
}

// wake ends the reader's wait.
func (p *parked) wake() { _ = p.c.SetReadDeadline(aLongTimeAgo) }

var aLongTimeAgo = time.Unix(1, 0)

func (p *parked) wait(wait func(<-chan struct{}) []byte) {
	defer p.l.wg.Done()
	body := wait(p.gone)
	// The end of the chunked body goes out first, while the reader still
	// waits (it only peeks), so the client has its answer without waiting
	// for the reader to be woken. A client that closed its side may still
	// read: it gets the end, as net/http would write it, then the close.
	var out []byte
	if len(body) > 0 {
		out = strconv.AppendInt(out, int64(len(body)), 16)
		out = append(out, "\r\n"...)
		out = append(out, body...)
		out = append(out, "\r\n"...)
	}
	out = append(out, "0\r\n\r\n"...)
	var err error
	if !p.headLost {
		_ = p.c.SetWriteDeadline(time.Now().Add(WriteTimeout))
		_, err = p.c.Write(out)
	}
	p.wake()
	<-p.gone
	l := p.l
	gone := p.headLost || p.saw == left || err != nil
	l.mu.Lock()
	delete(l.parked, p)
	closed := l.closed
	if !gone && !closed && len(p.pending) == 0 {
		// The connection waits for the client's next request here, as
		// net/http would between requests: within the idle timeout
		// (net/http would give a connection it is handed only the header
		// timeout).
		l.idle[p] = struct{}{}
		_ = p.c.SetReadDeadline(idleDeadline(p.idle))
	}
	l.mu.Unlock()
	p.end(len(body), gone)
	if gone || closed {
		l.closeConn(p.c)
		return
	}
	if len(p.pending) > 0 {
		_ = p.c.SetDeadline(time.Time{})
		c := &prefixConn{Conn: p.c, buf: p.pending}
		l.rekey(p.c, c)
		l.handBack(c)
		return
	}
	saw := peek(p.rc, false)
	l.mu.Lock()
	delete(l.idle, p)
	l.mu.Unlock()
	if saw != sent {
		l.closeConn(p.c) // the client left, stayed idle too long, or the listener closed
		return
	}
	_ = p.c.SetDeadline(time.Time{})
	l.handBack(p.c)
}

// idleDeadline is the read deadline of an idle timeout d (0: none).
func idleDeadline(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

func (p *parked) end(bytes int, gone bool) {
	if p.done != nil {
		p.done(bytes, gone)
	}
}

// prefixConn is a handed-back connection whose client's next request
// net/http had read already: its reads return buf first. Only one
// goroutine reads it at a time (net/http's, or Park's after a hijack).
type prefixConn struct {
	net.Conn
	buf []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(b, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// Handler is h for an http.Server serving a Listener: it gives r.TLS to the
// requests of a handed-back TLS connection whose next request had been read
// already (net/http, which knows TLS only as a *tls.Conn, sets none).
func Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			if ci, _ := r.Context().Value(connKey{}).(*connInfo); ci != nil {
				if pc, ok := ci.c.(*prefixConn); ok {
					if tc, ok := pc.Conn.(*tls.Conn); ok {
						st := tc.ConnectionState()
						r = r.WithContext(r.Context())
						r.TLS = &st
					}
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Gone returns a channel closed when r's client closes its side of the
// connection (or it fails) while r is served inside net/http, whatever the
// client pipelined behind r, and stop, which releases
// it (call it before the handler returns). For HTTP/2, whose client's leaving
// cancels r's context, and for a request not from a Listener's socket, the
// channel is nil.
//
// It waits on a duplicate of the socket's descriptor, which has a deadline of
// its own: net/http's background read of the same connection is not
// disturbed.
func Gone(r *http.Request) (gone <-chan struct{}, stop func()) {
	ci, _ := r.Context().Value(connKey{}).(*connInfo)
	if ci == nil || r.ProtoMajor != 1 || !canPeek {
		return nil, func() {}
	}
	rc := socket(ci.c)
	if rc == nil {
		return nil, func() {}
	}
	f, err := dupFile(rc)
	if err != nil {
		return nil, func() {}
	}
	frc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, func() {}
	}
	ch := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if peek(frc, true) != woken {
			close(ch)
		}
	}()
	return ch, func() {
		_ = f.SetReadDeadline(aLongTimeAgo)
		<-ended
		_ = f.Close()
	}
}
