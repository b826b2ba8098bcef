// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// A one-shot v2 watch spends nearly all its life waiting. Waiting inside
// net/http it holds the connection's goroutine, grown deep by the request it
// serves, plus the connection's read and write buffers and a background-read
// goroutine: about 25 KiB per watch, 250 MiB for 10,000 flannel nodes. A
// detached watch holds only the connection, the watch and two goroutines with
// shallow stacks: once it has waited DetachAfter with nothing to send, the
// handler takes the connection over from net/http and returns; the answer
// is written when an event (or the end) comes, and the connection goes back
// to the listener it came from (its Home), whose server reads the next
// request on it as usual. Watches answered sooner never detach: a connection
// handed back starts over in net/http with a new goroutine and buffers,
// which costs more CPU than the wait it saves on a busy watch.

// DefaultDetachAfter is how long a one-shot watch waits inside net/http
// before it detaches.
const DefaultDetachAfter = 250 * time.Millisecond

// detachWriteTimeout bounds writing a detached watch's answer: a
// client that does not read them loses its connection instead of holding a
// goroutine.
const detachWriteTimeout = 10 * time.Second

// Home is a listener that also accepts connections handed back by detached
// watches. Serve v2 requests on a Home (with its Context installed as the
// server's ConnContext) to let their watches detach; a request from any other
// listener keeps its watch inside net/http.
type Home struct {
	net.Listener

	accepted chan accepted // from the accept goroutine
	back     chan net.Conn // connections of answered detached watches
	done     chan struct{} // closed by Close
	once     sync.Once
	wg       sync.WaitGroup // the accept goroutine and every detached watch's goroutines

	mu       sync.Mutex // guards detached and closed
	detached map[*detachedWatch]struct{}
	closed   bool
}

type accepted struct {
	c   net.Conn
	err error
}

// NewHome wraps l; the caller closes it (http.Server does) and then waits
// for its detached watches with Wait.
func NewHome(l net.Listener) *Home {
	h := &Home{Listener: l, accepted: make(chan accepted), back: make(chan net.Conn),
		done: make(chan struct{}), detached: map[*detachedWatch]struct{}{}}
	h.wg.Add(1)
	go h.acceptLoop()
	return h
}

func (h *Home) acceptLoop() {
	defer h.wg.Done()
	for {
		c, err := h.Listener.Accept()
		select {
		case h.accepted <- accepted{c, err}:
		case <-h.done:
			if c != nil {
				_ = c.Close()
			}
			return
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// Accept returns the next new or handed-back connection.
func (h *Home) Accept() (net.Conn, error) {
	select {
	case c := <-h.back:
		return c, nil
	case a := <-h.accepted:
		return a.c, a.err
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and ends every detached watch: each answers with the
// empty end of a lost watch, which clients re-issue, and closes its
// connection.
func (h *Home) Close() error {
	err := h.Listener.Close()
	h.once.Do(func() { close(h.done) })
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	if errors.Is(err, net.ErrClosed) {
		return nil // closed twice: by Shutdown and by Serve's return
	}
	return err
}

// Wait waits until the accept goroutine and every detached watch are done
// (after Close), or ctx ends.
func (h *Home) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Detached is the number of watches detached now.
func (h *Home) Detached() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.detached)
}

type homeKey struct{}

// Context is an http.Server ConnContext that tells the handlers which Home
// a connection came from.
func (h *Home) Context(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, homeKey{}, h)
}

func homeOf(r *http.Request) *Home {
	h, _ := r.Context().Value(homeKey{}).(*Home)
	return h
}

// handBack returns an answered watch's connection to the server.
func (h *Home) handBack(c net.Conn) {
	select {
	case h.back <- c:
	case <-h.done:
		_ = c.Close()
	}
}

// detachable reports whether a watch may leave net/http: a one-shot GET over
// HTTP/1.1 that keeps its connection, served from a Home.
func detachable(r *http.Request, req *translate.Request) bool {
	return !req.Stream && r.Method == http.MethodGet && r.ProtoMajor == 1 && r.ProtoMinor == 1 && !r.Close &&
		homeOf(r) != nil
}

// detachedWatch is a watch answered outside net/http.
type detachedWatch struct {
	h *Home
	c net.Conn
	w Watch
	// gone is closed by the reader when its read returns: the client closed
	// the connection, sent something (pipelined: see extra), or the waiter
	// stopped the read to answer.
	gone  chan struct{}
	extra bool // the client sent bytes while detached; written before gone is closed
}

// detach takes r's connection from net/http, which has sent the headers of a
// chunked 200 (HTTP/1.1, no Content-Length, flushed before the handler
// ended), and answers w on it. It returns false when the connection cannot
// be taken; the caller then goes on serving the watch itself.
func (s *Server) detach(w http.ResponseWriter, r *http.Request, wa Watch) bool {
	h := homeOf(r)
	c, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	_ = c.SetDeadline(time.Time{}) // the server's request deadlines, if any
	p := &detachedWatch{h: h, c: c, w: wa, gone: make(chan struct{}), extra: rw.Reader.Buffered() > 0}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		wa.Cancel()
		_ = c.Close()
		return true
	}
	h.detached[p] = struct{}{}
	h.wg.Add(2)
	h.mu.Unlock()
	go p.read()
	go p.wait()
	return true
}

// read watches the connection for the client going away.
func (p *detachedWatch) read() {
	defer p.h.wg.Done()
	defer close(p.gone)
	var b [1]byte
	if n, _ := p.c.Read(b[:]); n > 0 {
		// A request pipelined behind the watch: the byte cannot be put
		// back. The watch ends at once with the empty end (clients re-issue
		// it) and the connection closes after it, which HTTP/1.1 clients
		// take as a cue to resend what was not answered.
		p.extra = true
	}
}

// wait answers the watch with its event, or with an empty body when it ends
// without one, then hands the connection back (or closes it when the client
// went away or pipelined a request).
func (p *detachedWatch) wait() {
	defer p.h.wg.Done()
	var body []byte
	clientGone := false
	select {
	case ev := <-p.w.Events():
		body = encodeEvent(ev)
	case <-p.w.Done():
		select {
		case ev := <-p.w.Events():
			body = encodeEvent(ev)
		default:
		}
	case <-p.gone:
		clientGone = true
	case <-p.h.done: // the server is closing: the empty end, which clients re-issue
	}
	p.w.Cancel()
	p.h.mu.Lock()
	delete(p.h.detached, p)
	p.h.mu.Unlock()
	if clientGone && !p.extra {
		_ = p.c.Close()
		return
	}
	// Stop the reader (as net/http does its background read) before the
	// connection is written and handed back.
	_ = p.c.SetReadDeadline(time.Unix(1, 0))
	<-p.gone
	_ = p.c.SetWriteDeadline(time.Now().Add(detachWriteTimeout))
	_, err := p.c.Write(chunked(body))
	if err != nil {
		_ = p.c.Close()
		return
	}
	if p.extra {
		p.closeUnread()
		return
	}
	_ = p.c.SetDeadline(time.Time{})
	p.h.handBack(p.c)
}

// closeUnread closes a connection the client has sent more on: closed with
// unread data, it would be reset, and the reset can reach the client before
// the answer does. As net/http does, it shuts the sending side first and
// gives the client a moment to read.
func (p *detachedWatch) closeUnread() {
	if cw, ok := p.c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		t := time.NewTimer(closeUnreadDelay)
		select {
		case <-t.C:
		case <-p.h.done:
			t.Stop()
		}
	}
	_ = p.c.Close()
}

// closeUnreadDelay is how long closeUnread waits (net/http waits as long).
const closeUnreadDelay = 500 * time.Millisecond

func encodeEvent(ev *translate.Event) []byte {
	if ev.Encoded != nil {
		return ev.Encoded
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return nil // an event is plain data; it always encodes
	}
	return append(b, '\n')
}

// chunked is body as the rest of a chunked HTTP/1.1 response: one chunk (if
// any) and the last, empty one.
func chunked(body []byte) []byte {
	out := make([]byte, 0, len(body)+16)
	if len(body) > 0 {
		out = strconv.AppendUint(out, uint64(len(body)), 16)
		out = append(out, "\r\n"...)
		out = append(out, body...)
		out = append(out, "\r\n"...)
	}
	return append(out, "0\r\n\r\n"...)
}
