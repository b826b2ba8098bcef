// SPDX-License-Identifier: Apache-2.0

// Package detach serves the connections of one http.Server and lets a
// long-poll with nothing to send yet wait outside net/http.
//
// A one-shot v2 watch spends nearly all its life waiting. Inside net/http a
// waiting request holds its connection's goroutine (grown deep by the
// handler), the connection's buffers and a background-read goroutine. Park
// takes such a request's HTTP/1.1 connection over (Hijack), lets it wait with
// two small goroutines — one waiting for the answer, one for the socket to
// become readable, which tells that the client left or sent more — writes the
// one answer, and hands the connection back to the same http.Server, which
// parses the client's next request as any other. Requests are only ever read
// by net/http.
//
// A Listener is what the http.Server serves: it caps the connections open at
// once, and accepts the handed-back ones. Its ConnContext and ConnState must
// be the server's.
//
// Gone serves the waits that stay in net/http (HTTP/1.0, Connection: close,
// streams, parking turned off): net/http stops watching a connection once its
// client sends a byte behind the request, so a client that then leaves would
// go unnoticed until the wait ended.
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

	mu      sync.Mutex            // guards counted, parked and closed
	counted map[net.Conn]struct{} // connections holding a place in sem
	parked  map[*parked]struct{}  // requests waiting outside net/http
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
		counted: map[net.Conn]struct{}{}, parked: map[*parked]struct{}{}}
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
// empty answer wait gives it and its connection is closed after it.
func (l *Listener) Close() error {
	err := l.inner.Close()
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		close(l.done)
		for p := range l.parked {
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

// parked is a request waiting outside net/http.
type parked struct {
	l        *Listener
	c        net.Conn
	closing  bool          // the connection closes after the answer (said in its head)
	headLost bool          // the head could not be written: the client is gone
	gone     chan struct{} // closed by the reader when the socket becomes readable or it is woken
	saw      readiness     // what the reader saw; read after gone is closed
	done     func(bytes int, gone bool)
}

// Park takes r's connection from net/http, before anything is written, and
// waits for the answer outside it. The head goes out at once (w's headers, a
// chunked body), as net/http sends a flushed head; wait runs on a goroutine
// of its own, with a channel closed when the client leaves, sends more, or
// the listener closes, and returns the body (nil: an empty one). Park then
// ends the answer and hands the connection back to the http.Server for the
// client's next request, or closes it when it cannot serve that (the client
// left, or had sent bytes behind r that net/http read already). done, when
// not nil, is called at the end with the body's size and whether the client
// had gone. Park reports false, having taken nothing, for a request it cannot
// park: not an HTTP/1.1 GET that keeps its connection, or not from a
// Listener's socket.
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
	c, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	// Lift net/http's deadlines first: Close wakes a parked reader with
	// a deadline of its own from the moment the wait is registered.
	_ = c.SetReadDeadline(time.Time{})
	_ = c.SetWriteDeadline(time.Now().Add(WriteTimeout))
	l := ci.l
	p := &parked{l: l, c: c, gone: make(chan struct{}), done: done}
	l.mu.Lock()
	p.closing = l.closed || rw.Reader.Buffered() > 0
	if p.closing {
		// Nothing to wait for: the listener is closing, or the client sent
		// more already, which is lost with net/http's buffer. The answer
		// ends at once, empty, and the connection closes after it.
		close(p.gone)
		l.wg.Add(1)
	} else {
		l.parked[p] = struct{}{}
		l.wg.Add(2)
	}
	l.mu.Unlock()
	if _, err := c.Write(appendHead(w.Header(), p.closing)); err != nil {
		p.headLost = true
		_ = c.Close() // the reader wakes; the waiter ends the wait at once
	}
	if !p.closing {
		go p.read(rc)
	}
	go p.wait(wait)
	return true
}

// read waits until the socket is readable, without reading it.
func (p *parked) read(rc syscall.RawConn) {
	defer p.l.wg.Done()
	p.saw = peek(rc)
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
	l.mu.Lock()
	delete(l.parked, p)
	l.mu.Unlock()
	gone := p.headLost || p.saw == left || err != nil
	if gone || p.closing {
		l.closeConn(p.c)
		p.end(len(body), gone)
		return
	}
	_ = p.c.SetDeadline(time.Time{})
	p.end(len(body), false)
	l.handBack(p.c)
}

func (p *parked) end(bytes int, gone bool) {
	if p.done != nil {
		p.done(bytes, gone)
	}
}

// headExcluded are the headers a parked answer's head writes itself.
var headExcluded = map[string]bool{"Date": true, "Content-Length": true, "Connection": true, "Transfer-Encoding": true}

// appendHead is the head of a 200 with h and a chunked body.
func appendHead(h http.Header, closing bool) []byte {
	b := &headBuf{b: make([]byte, 0, 320)}
	b.b = append(b.b, "HTTP/1.1 200 OK\r\n"...)
	_ = h.WriteSubset(b, headExcluded)
	b.b = append(b.b, "Date: "...)
	b.b = time.Now().UTC().AppendFormat(b.b, http.TimeFormat)
	if closing {
		b.b = append(b.b, "\r\nConnection: close"...)
	}
	b.b = append(b.b, "\r\nTransfer-Encoding: chunked\r\n\r\n"...)
	return b.b
}

type headBuf struct{ b []byte }

func (h *headBuf) Write(p []byte) (int, error)       { h.b = append(h.b, p...); return len(p), nil }
func (h *headBuf) WriteString(s string) (int, error) { h.b = append(h.b, s...); return len(s), nil }

// Gone returns a channel closed when r's client sends anything more or closes
// its connection while r is served inside net/http, and stop, which releases
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
		if peek(frc) != woken {
			close(ch)
		}
	}()
	return ch, func() {
		_ = f.SetReadDeadline(aLongTimeAgo)
		<-ended
		_ = f.Close()
	}
}
