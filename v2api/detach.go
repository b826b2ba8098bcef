// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"context"
	"errors"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// A one-shot v2 watch spends nearly all its life waiting, and its client
// re-issues it the moment it is answered. Inside net/http each waiting watch
// holds the connection's goroutine, grown deep by the request it serves,
// the connection's read and write buffers and a background-read goroutine:
// about 25 KiB a watch, 250 MiB for 10,000 flannel nodes. And every
// re-issued watch pays net/http's per-request machinery again.
//
// So a watch with nothing to send yet leaves net/http: the handler takes its
// connection over (Hijack) and the connection becomes detached. A detached
// connection has one reader goroutine, blocked in a one-byte read while a
// watch waits (that read also tells when the client goes away), and one
// small goroutine per waiting watch that writes the answer. The client's
// next request is read and served on the reader itself, through the same
// handler, with no buffer kept while nothing is read. A request that is not
// a one-shot watch (or that the detached reader cannot take whole) goes back
// to the listener the connection came from (its Home), with the bytes read
// so far, and net/http serves it as any other.

// detachWriteTimeout bounds writing an answer on a detached connection:
// a client that does not read loses its connection instead of holding a
// goroutine. (A variable for tests.)
var detachWriteTimeout = 10 * time.Second

const (
	// closeUnreadDelay is the longest a connection the client sent more on
	// is kept, half-closed and drained, before it is closed (net/http waits
	// as long); closeUnreadMax bounds what is drained.
	closeUnreadDelay = 500 * time.Millisecond
	closeUnreadMax   = 64 << 10
	// detachedHeadMax is the largest request head a detached connection
	// reads itself; a larger one goes back to net/http.
	detachedHeadMax = 4096
	// headDelay is the longest the head of a waiting watch is held back
	// for its event to go out with it, in one write (see flushHeads).
	headDelay = 10 * time.Millisecond
)

// HomeConfig configures a Home.
type HomeConfig struct {
	// Handler serves the requests read on detached connections: the same
	// handler the http.Server serving the Home has (less what reads a
	// body within the limits below, which the reader does itself).
	Handler http.Handler
	// ServeKeys lets the Home's reader serve the plain key-value requests
	// of /v2/keys too (see keys.go): connections on a plain socket start
	// on it rather than in net/http, and detached ones take them.
	ServeKeys bool
	// KeepWatches: the handler keeps watches inside net/http (its Config's
	// DetachWatches is off), so the reader hands them back.
	KeepWatches bool
	// ReadHeaderTimeout bounds reading a request's head on a detached
	// connection; IdleTimeout closes one idle between requests (as the
	// http.Server's limits of the same names do; 0: no limit).
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// BodyReadTimeout bounds reading a body on the reader (0: no limit);
	// a body of MaxBodyBytes or more is left to net/http (0: no cap).
	BodyReadTimeout time.Duration
	MaxBodyBytes    int64
	// ErrorLog receives the panics of handlers run on detached connections
	// (nil: the log package's standard logger), as http.Server's does.
	ErrorLog *log.Logger
}

// Home is a listener that also accepts connections handed back by detached
// readers. Serve the v2 API on a Home, with its Context as the server's
// ConnContext, to let watches detach; a request from any other listener keeps
// its watch inside net/http.
type Home struct {
	net.Listener
	cfg   HomeConfig
	rules headRules // what the reader serves itself

	accepted chan accepted // from the accept goroutine
	back     chan net.Conn // connections handed back to net/http
	done     chan struct{} // closed by Close
	once     sync.Once
	wg       sync.WaitGroup // the accept goroutine, every detached reader and waiter, the head flusher

	waiting atomic.Int64               // watches waiting on detached connections
	date    atomic.Pointer[cachedDate] // the Date header of this second

	mu     sync.Mutex // guards conns and closed
	conns  map[*detachedConn]struct{}
	closed bool

	hmu      sync.Mutex      // guards heads and flushing
	heads    []*detachedConn // connections whose waiting watch's head may still be unwritten
	flushing bool            // the head flusher runs (and will see heads)
}

type accepted struct {
	c   net.Conn
	err error
}

// NewHome wraps l; the caller closes it (http.Server does) and then waits
// for its detached connections with Wait.
func NewHome(l net.Listener, cfg HomeConfig) *Home {
	h := &Home{Listener: l, cfg: cfg, accepted: make(chan accepted), back: make(chan net.Conn),
		done: make(chan struct{}), conns: map[*detachedConn]struct{}{}}
	h.rules = headRules{watches: !cfg.KeepWatches}
	if cfg.ServeKeys {
		h.rules.keys, h.rules.maxBody = true, keysBodyMax
		if m := cfg.MaxBodyBytes; m > 0 && m <= keysBodyMax {
			h.rules.maxBody = int(m) - 1 // a body of the cap is net/http's to refuse
		}
	}
	h.wg.Add(1)
	go h.acceptLoop()
	return h
}

func (h *Home) acceptLoop() {
	defer h.wg.Done()
	for {
		c, err := h.Listener.Accept()
		if err == nil && h.cfg.ServeKeys && h.adopt(c) {
			continue
		}
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

// Close stops accepting and ends every detached connection: a waiting
// watch answers with the empty end of a lost watch, which clients re-issue,
// and every connection closes.
func (h *Home) Close() error {
	err := h.Listener.Close()
	h.once.Do(func() { close(h.done) })
	h.mu.Lock()
	h.closed = true
	conns := slices.Collect(maps.Keys(h.conns))
	h.mu.Unlock()
	for _, dc := range conns {
		dc.mu.Lock()
		// A waiter closes its own connection once it has answered, and a
		// reader serving a request once it has answered it.
		idle := dc.w == nil && !dc.busy
		dc.shut = dc.shut || idle
		dc.mu.Unlock()
		if idle {
			_ = dc.c.Close()
		}
	}
	if errors.Is(err, net.ErrClosed) {
		return nil // closed twice: by Shutdown and by Serve's return
	}
	return err
}

// Wait waits until the accept goroutine and every detached connection are
// done (after Close), or ctx ends.
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

// closing reports whether the Home has been closed.
func (h *Home) closing() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// Detached is the number of watches waiting on detached connections.
func (h *Home) Detached() int { return int(h.waiting.Load()) }

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

// handBack returns a connection to net/http.
func (h *Home) handBack(c net.Conn) {
	select {
	case h.back <- c:
	case <-h.done:
		_ = c.Close()
	}
}

// detachedConn is a connection taken over from net/http.
type detachedConn struct {
	h *Home
	c net.Conn
	// direct reads and writes c's descriptor (nil when c has none to
	// offer: TLS, a wrapper that hides it): the reader waits for the next
	// request with no buffer, then reads all that came in one system call;
	// the head flusher writes without waiting.
	direct *directIO
	remote string // c's remote address, for the requests read on it
	// gone is closed when the reader stops while a watch waits: the client
	// closed the connection or sent a request behind the watch (extra).
	gone     chan struct{}
	finished sync.Once
	// idleSince is when the connection last answered (Unix ns): idle from
	// then until the client sends more, unless a watch waits; 0 until its
	// first answer.
	idleSince atomic.Int64
	born      int64 // when the Home adopted it (Unix ns), before its reader started

	// mu guards w, extra, busy, shut, head and headOff. The waiter holds
	// it while it writes the answer, so the reader sees the watch answered
	// before it reads what the client sends next, and the flusher while it
	// writes a head, so a head never follows its answer.
	mu    sync.Mutex
	w     Watch // the watch waiting on the connection; nil between watches
	extra bool  // the client sent bytes while a watch waited
	busy  bool  // the reader is reading or serving a request
	shut  bool  // the Home's Close closed the connection, idle
	// head holds the waiting watch's head, from headOff on still to be
	// written, when its writing is left to the head flusher (nil: written,
	// or none). Whoever has it (the flusher that writes it all, or the
	// waiter) puts it back to answerBufs.
	head    *[]byte
	headOff int
}

// finish closes the connection, or hands it back to net/http with the bytes
// read from it so far (back != nil), once.
func (dc *detachedConn) finish(back []byte) {
	dc.finished.Do(func() {
		dc.h.mu.Lock()
		delete(dc.h.conns, dc)
		dc.h.mu.Unlock()
		if back == nil {
			_ = dc.c.Close()
			return
		}
		_ = dc.c.SetDeadline(time.Time{})
		var c net.Conn = dc.c
		if len(back) > 0 {
			c = &prefixConn{Conn: dc.c, pre: back}
		}
		dc.h.handBack(c)
	})
}

// closeUnread closes a connection the client has sent more on: closed with
// unread data, it would be reset, and the reset can reach the client before
// the answer does. As net/http does, it shuts the sending side first and
// gives the client a moment to read; and it reads what the client sends
// meanwhile, so that the close finds nothing unread. The drain is what
// matters when the connection cannot be half-closed: one counted by a
// connection-limiting listener hides its CloseWrite. The Home's Close ends
// the drain by closing the connection.
func (dc *detachedConn) closeUnread() {
	if cw, ok := dc.c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = dc.c.SetReadDeadline(time.Now().Add(closeUnreadDelay))
	_, _ = io.CopyN(io.Discard, dc.c, closeUnreadMax)
	dc.finish(nil)
}

// prefixConn is a connection handed back with bytes already read from it.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// detach takes r's connection from net/http, before any header is written,
// and leaves wa waiting on it. It returns false when the connection cannot be
// taken; the caller then serves the watch itself.
func (s *Server) detach(w http.ResponseWriter, r *http.Request, wa Watch) bool {
	h := homeOf(r)
	c, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	if pc, ok := c.(*prefixConn); ok && len(pc.pre) == 0 {
		c = pc.Conn // handed back before, every prefix byte read since
	}
	// Lift the server's deadlines, if any; the reader's is the idle one
	// (see rearm).
	_ = c.SetWriteDeadline(time.Time{})
	_ = c.SetReadDeadline(after(h.cfg.IdleTimeout))
	extra := rw.Reader.Buffered() > 0
	dc := &detachedConn{h: h, c: c, remote: r.RemoteAddr, gone: make(chan struct{}), extra: extra}
	dc.idleSince.Store(time.Now().UnixNano())
	dc.direct = newDirectIO(c)
	if extra {
		// net/http has read a request behind the watch already: the watch
		// ends at once, as when the reader finds one (readLoop), and no
		// reader starts (what it would read comes after the lost bytes).
		close(dc.gone)
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		wa.Cancel()
		// The Home closed as the watch came: it gets the empty end at once,
		// as the watches waiting then did, and its connection closes.
		dw := &detachedWriter{dc: dc, hdr: w.Header(), code: http.StatusOK}
		dw.hdr.Set("Connection", "close")
		_ = dw.finish()
		_ = c.Close()
		return true
	}
	h.conns[dc] = struct{}{}
	if !extra {
		h.wg.Add(1) // the reader
	}
	h.mu.Unlock()
	dw := &detachedWriter{dc: dc, hdr: w.Header()}
	dw.wait(wa, detachObservers(w))
	dw.startWaiter()
	if !extra {
		go dc.readLoop()
	}
	return true
}

// readLoop waits for what the client sends while a watch waits, and reads
// and serves the next request when the client sends one.
func (dc *detachedConn) readLoop() {
	defer dc.h.wg.Done()
	var one [1]byte
	for {
		var buf *[]byte // a pooled buffer holding in, from a direct read
		var in []byte
		var err error
		if dc.direct != nil {
			buf, in, err = dc.direct.readReady()
		} else {
			// One byte: no buffer is held while the watch waits.
			var n int
			n, err = dc.c.Read(one[:])
			in = one[:n]
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && dc.rearm() {
			continue
		}
		dc.mu.Lock()
		waiting, shut := dc.w != nil, dc.shut
		dc.busy = !waiting && len(in) > 0 && err == nil
		if waiting {
			// The client went away, or pipelined a request behind the
			// watch: the watch ends at once (with the empty end, which
			// clients re-issue) and the connection closes after it, which
			// HTTP/1.1 clients take as a cue to resend what was not
			// answered. The waiter does both; gone is closed under mu so
			// that it sees the reader gone before it leaves the
			// connection to it.
			dc.extra = len(in) > 0
			close(dc.gone)
		}
		dc.mu.Unlock()
		stay := false
		switch {
		case waiting:
		case len(in) == 0 || err != nil || shut: // gone, idle too long, or the Home closed it
			dc.finish(nil)
		default:
			stay = dc.serve(in) && dc.served()
		}
		if buf != nil {
			rawBufs.Put(buf)
		}
		if !stay {
			return
		}
	}
}

// rearm handles the reader's deadline going off. The reader keeps one
// deadline, the idle timeout, set when it starts and set again only when it
// goes off: setting it after every answer and lifting it for every waiting
// watch cost two timer updates per delivery. rearm reports whether the
// connection is to stay (a watch waits on it, it answered less than the
// idle timeout ago, or, new from the listener and not answered yet, it is
// within the header timeout), with the deadline set again.
func (dc *detachedConn) rearm() bool {
	cfg := &dc.h.cfg
	dc.mu.Lock()
	waiting := dc.w != nil
	dc.mu.Unlock()
	now := time.Now()
	var until time.Time
	since := dc.idleSince.Load()
	switch {
	case waiting: // a waiting watch is not idle
		until = after(cfg.IdleTimeout)
	case since == 0: // adopted, and its first request not read yet
		if cfg.ReadHeaderTimeout > 0 {
			until = time.Unix(0, dc.born).Add(cfg.ReadHeaderTimeout)
		}
	case cfg.IdleTimeout > 0:
		until = time.Unix(0, since).Add(cfg.IdleTimeout)
	}
	if !until.IsZero() && !until.After(now) {
		return false
	}
	_ = dc.c.SetReadDeadline(until)
	return true
}

// rawBufs are the buffers of direct reads: a re-watch's head is a few
// hundred bytes, a larger one is read on with a reader of detachedHeadMax.
var rawBufs = sync.Pool{New: func() any { b := make([]byte, 1024); return &b }}

var headEnd = []byte("\r\n\r\n")

// serve reads the request that begins with in and serves it if it is one
// the reader takes; anything else goes back to net/http. It reports whether
// the connection stays detached.
func (dc *detachedConn) serve(in []byte) bool {
	r := dc.readRequest(in)
	if r == nil {
		return false
	}
	req := &r.req
	h := dc.h
	// The request keeps the background context: it has no cancellation (a
	// watch waits past its handler, and a cancelable parent would cost
	// every derived context a registration), and a watch on a detached
	// connection needs no Home from it (its writer says where it runs).
	// The backend bounds every call of a request with a deadline of its
	// own, so a client that leaves mid-request holds nothing for long.
	if dc.remote == "" {
		dc.remote = dc.c.RemoteAddr().String()
	}
	req.RemoteAddr = dc.remote
	dw := newDetachedWriter(dc)
	if !h.run(dw, req) {
		dc.finish(nil)
		return false
	}
	if dw.waiting {
		dw.startWaiter() // which owns dw from now on
		return true
	}
	err := dw.finish()
	closing := dw.closing
	dw.release()
	if err != nil || closing {
		dc.finish(nil)
		return false
	}
	dc.idleSince.Store(time.Now().UnixNano())
	return true
}

// served ends the reader's turn with a request it served: the connection is
// idle again (unless a watch waits on it), or closes if the Home has closed
// meanwhile. It reports whether the connection stays.
func (dc *detachedConn) served() bool {
	dc.mu.Lock()
	dc.busy = false
	waiting := dc.w != nil
	dc.mu.Unlock()
	if !waiting && dc.h.closing() {
		dc.finish(nil)
		return false
	}
	return true
}

// run serves req, recovering a panic as net/http does: the connection
// closes and the panic is logged.
func (h *Home) run(w *detachedWriter, req *http.Request) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				return
			}
			lg := h.cfg.ErrorLog
			if lg == nil {
				lg = log.Default()
			}
			lg.Printf("http: panic serving %v on a detached connection: %v\n%s", req.RemoteAddr, p, debug.Stack())
		}
	}()
	h.cfg.Handler.ServeHTTP(w, req)
	return true
}

// after is now + d, or no deadline when d is 0 (as http.Server's limits).
func after(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

// detachedWriter is the ResponseWriter of a request served on a detached
// connection (or of the watch that detached it).
type detachedWriter struct {
	dc      *detachedConn
	hdr     http.Header
	code    int
	flushed bool // the head is chunked, and out (or the connection) has it
	waiting bool // a watch was left waiting on the connection
	reader  bool // served on the detached reader, from writers (release puts it back)
	closing bool // the connection closes after the answer (finish decides)
	body    []byte
	out     []byte // what goes out next, not written yet
	err     error
	// wa waits on the connection (wait), ends are told when it ends.
	wa   Watch
	ends []func(bytes int, gone bool)
}

// writers recycles the writers (their header maps and buffers) of the
// requests read on detached connections.
var writers = sync.Pool{New: func() any { return &detachedWriter{hdr: make(http.Header, 8), reader: true} }}

func newDetachedWriter(dc *detachedConn) *detachedWriter {
	w := writers.Get().(*detachedWriter)
	w.dc = dc
	return w
}

// release puts a writer from writers back, once its answer is written.
func (w *detachedWriter) release() {
	if !w.reader {
		return
	}
	if len(w.hdr) > 16 {
		clear(w.hdr)
	}
	for k, vs := range w.hdr { // keys and slices kept for the next answer's setHeader
		w.hdr[k] = vs[:0]
	}
	w.dc, w.code, w.flushed, w.waiting, w.closing, w.err, w.wa, w.ends = nil, 0, false, false, false, nil, nil, nil
	if cap(w.body) > 64<<10 || cap(w.out) > 64<<10 { // a large answer's buffers are not kept
		w.body, w.out = nil, nil
	}
	w.body, w.out = w.body[:0], w.out[:0]
	writers.Put(w)
}

func (w *detachedWriter) Header() http.Header { return w.hdr }

func (w *detachedWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *detachedWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if w.reader && !w.waiting && len(w.body)+len(b) > largeAnswer {
		return w.writeChunk(b)
	}
	w.body = append(w.body, b...)
	return len(b), nil
}

// largeAnswer is the most of an answer the reader's writer gathers to send
// with a Content-Length; more goes out chunked as the handler writes it, as
// net/http sends a large answer, instead of copied whole twice (gathered,
// then behind the head) into buffers too large to keep.
const largeAnswer = 32 << 10

// writeChunk sends the head (chunked, the first time), what the handler
// wrote before, and b as a chunk, without copying b.
func (w *detachedWriter) writeChunk(b []byte) (int, error) {
	if !w.flushed {
		w.sniff(b)
	}
	w.stage()
	w.out = strconv.AppendUint(w.out, uint64(len(b)), 16)
	w.out = append(w.out, "\r\n"...)
	if w.err == nil { // as long as the client takes some, as write does
		w.err = w.dc.writeSteady(net.Buffers{w.out, b, []byte("\r\n")})
	}
	w.out = w.out[:0]
	if w.err != nil {
		return 0, w.err
	}
	return len(b), nil
}

// Flush sends the head (chunked) and the body so far.
func (w *detachedWriter) Flush() {
	w.stage()
	w.write(w.out)
	w.out = w.out[:0]
}

// sniff sets the Content-Type net/http sets on an answer whose handler set
// none, from the body's first bytes: what the handler wrote so far, then
// more (nil: nothing more).
func (w *detachedWriter) sniff(more []byte) {
	if len(w.hdr["Content-Type"]) > 0 || len(w.body)+len(more) == 0 { // a recycled header keeps its keys
		return
	}
	first := w.body
	if len(first) < 512 && len(more) > 0 {
		first = append(first[:len(first):len(first)], more[:min(len(more), 512-len(first))]...)
	}
	w.hdr["Content-Type"] = []string{http.DetectContentType(first)}
}

// stage moves the head (chunked, the first time) and the body so far to
// out.
func (w *detachedWriter) stage() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if !w.flushed {
		w.out = w.head(w.out, -1)
		w.flushed = true
	}
	w.out = appendChunk(w.out, w.body)
	w.body = w.body[:0]
}

func (w *detachedWriter) write(b []byte) {
	if w.err != nil || len(b) == 0 {
		return
	}
	// The reader holds no lock while it writes: an answer of its own may
	// take as long as its client keeps reading, as in net/http.
	w.err = w.dc.writeOut(b, w.reader)
}

// write writes b within detachWriteTimeout.
func (dc *detachedConn) write(b []byte) error { return dc.writeOut(b, false) }

// writeOut writes b within detachWriteTimeout, or, when steady, with each
// detachWriteTimeout taking some of it: a large answer to a slow client is
// written whole, however long it takes in all (net/http's server has no
// write timeout), and only a client that takes nothing for that long loses
// its connection. The waiter, which writes under detachedConn.mu (that the
// head flusher may wait for), keeps the plain bound. An answer
// nearly always fits in the socket's buffer at once: a direct write that
// does not wait needs no deadline set (a timer each); what it leaves is
// written under one.
func (dc *detachedConn) writeOut(b []byte, steady bool) error {
	if dc.direct != nil {
		n, err := dc.direct.writeNow(b)
		if n == len(b) {
			return nil
		}
		if err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		b = b[n:]
	}
	if steady {
		return dc.writeSteady(net.Buffers{b})
	}
	_ = dc.c.SetWriteDeadline(time.Now().Add(detachWriteTimeout))
	_, err := dc.c.Write(b)
	return err
}

// writeSteady writes bufs with each detachWriteTimeout taking some of them
// (see writeOut).
func (dc *detachedConn) writeSteady(bufs net.Buffers) error {
	for {
		_ = dc.c.SetWriteDeadline(time.Now().Add(detachWriteTimeout))
		n, err := bufs.WriteTo(dc.c) // consumes what it wrote
		if err == nil || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
}

// head appends the status line and headers; contentLength < 0: chunked.
func (w *detachedWriter) head(b []byte, contentLength int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(w.code), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(w.code)...)
	b = append(b, "\r\n"...)
	for k, vs := range w.hdr { // in any order, as HTTP allows
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") { // as net/http does: no header splitting
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	b = append(b, "Date: "...)
	b = append(b, w.dc.h.httpDate()...)
	if contentLength < 0 {
		b = append(b, "\r\nTransfer-Encoding: chunked\r\n\r\n"...)
	} else {
		b = append(b, "\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(contentLength), 10)
		b = append(b, "\r\n\r\n"...)
	}
	return b
}

type cachedDate struct {
	sec  int64
	text string
}

// httpDate is the Date header's value, formatted once a second: formatting
// it for every answer cost more than the rest of the head.
func (h *Home) httpDate() string {
	now := time.Now()
	if d := h.date.Load(); d != nil && d.sec == now.Unix() {
		return d.text
	}
	d := &cachedDate{sec: now.Unix(), text: now.UTC().Format(http.TimeFormat)}
	h.date.Store(d)
	return d.text
}

// chunkingSize is the most of a body net/http's server holds before it
// sends the head: a larger body goes out chunked, a body up to it with its
// Content-Length.
const chunkingSize = 2048

// finish sends what the handler wrote, as a whole answer, in one write.
// An answer the reader serves says, as net/http's would, that the
// connection closes after it when the handler asks for that or the Home
// is closing (closing), has its Content-Type sniffed if it has none, and
// is chunked when its body is larger than chunkingSize.
func (w *detachedWriter) finish() error {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if w.reader {
		w.closing = w.dc.h.closing()
		for _, v := range w.hdr["Connection"] {
			w.closing = w.closing || strings.EqualFold(v, "close")
		}
	}
	if !w.flushed {
		if w.closing {
			setHeader(w.hdr, "Connection", "close")
		}
		if w.reader {
			w.sniff(nil)
			if len(w.body) > chunkingSize {
				w.stage() // net/http sends a body it cannot hold whole chunked
			}
		}
	}
	if w.flushed {
		w.out = append(appendChunk(w.out, w.body), "0\r\n\r\n"...)
	} else {
		w.out = append(w.head(w.out, len(w.body)), w.body...)
	}
	w.write(w.out)
	return w.err
}

// wait leaves wa waiting on the connection, to be answered with a chunked
// 200 by a goroutine of its own, which startWaiter starts once the handler
// is done with w. The head goes out with the answer when the event is there
// by the time that goroutine runs, and before it otherwise.
func (w *detachedWriter) wait(wa Watch, ends []func(bytes int, gone bool)) {
	dc := w.dc
	w.code = http.StatusOK
	w.stage()
	w.waiting = true
	w.wa, w.ends = wa, ends
	dc.mu.Lock()
	dc.w = wa
	dc.mu.Unlock()
	dc.h.waiting.Add(1)
}

// startWaiter starts the goroutine that answers the watch wait left,
// with a copy of the head: the writer (its header, its buffers) is done
// with, not kept as long as the watch waits.
func (w *detachedWriter) startWaiter() {
	dc, wa, ends := w.dc, w.wa, w.ends
	head := answerBufs.Get().(*[]byte)
	*head = append((*head)[:0], w.out...)
	w.release()
	dc.h.wg.Add(1)
	go dc.answer(wa, head, ends)
}

// answerBufs recycles the buffers of waiting watches' heads and answers.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func putAnswerBuf(b *[]byte) {
	if cap(*b) <= 64<<10 { // a large answer's buffer is not kept
		*b = (*b)[:0]
		answerBufs.Put(b)
	}
}

// deferHead leaves the head of dc's waiting watch to the head flusher,
// which it starts if it is not running. The caller is a waiter, counted in
// wg.
func (h *Home) deferHead(dc *detachedConn) {
	h.hmu.Lock()
	h.heads = append(h.heads, dc)
	start := !h.flushing
	h.flushing = true
	if start {
		h.wg.Add(1)
	}
	h.hmu.Unlock()
	if start {
		go h.flushHeads()
	}
}

// flushHeads writes, every headDelay, the heads of the waiting watches that
// still have theirs to write, and ends when none is left or the Home
// closes (the waiters then write them with the empty end).
//
// v2 sends a waiting watch's head at once, so that the client knows its
// watch is registered; and a busy watcher's event often comes a few
// milliseconds after its re-watch. Holding the head back that long lets
// the answer carry it, one write instead of two; one goroutine for all the
// heads keeps that free of a timer per watch.
func (h *Home) flushHeads() {
	defer h.wg.Done()
	t := time.NewTimer(headDelay)
	defer t.Stop()
	var batch []*detachedConn
	for {
		select {
		case <-t.C:
		case <-h.done:
			h.hmu.Lock()
			h.heads, h.flushing = nil, false
			h.hmu.Unlock()
			return
		}
		h.hmu.Lock()
		batch, h.heads = h.heads, batch[:0]
		if len(batch) == 0 {
			h.flushing = false
			h.hmu.Unlock()
			return
		}
		h.hmu.Unlock()
		for i, dc := range batch {
			if !dc.flushHead() {
				// Its waiter is writing: the head goes with that answer,
				// or, if the lock was someone else's for a moment, in the
				// next round.
				h.hmu.Lock()
				h.heads = append(h.heads, dc)
				h.hmu.Unlock()
			}
			batch[i] = nil
		}
		t.Reset(headDelay)
	}
}

// flushHead writes what it can of the head of dc's waiting watch without
// waiting (a client that does not read holds up no other); the answer
// writes the rest. It reports false, having done nothing, when dc's lock is
// held: by its waiter, maybe writing a large answer to a client that takes
// it slowly, which must not hold up the heads of other connections.
func (dc *detachedConn) flushHead() bool {
	if !dc.mu.TryLock() {
		return false
	}
	defer dc.mu.Unlock()
	if dc.head == nil {
		return true
	}
	b := (*dc.head)[dc.headOff:]
	n, err := dc.direct.writeNow(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The deadline of an earlier write, which a write that does not
		// wait has no use for.
		_ = dc.c.SetWriteDeadline(time.Time{})
		n, _ = dc.direct.writeNow(b)
	}
	if n < len(b) {
		dc.headOff += n
		return true
	}
	putAnswerBuf(dc.head)
	dc.head = nil
	return true
}

// answer waits for wa's event or end and writes it, then leaves the
// connection to the reader for the next request (or closes it). head is
// the watch's head, not written yet.
func (dc *detachedConn) answer(wa Watch, head *[]byte, ends []func(bytes int, gone bool)) {
	defer dc.h.wg.Done()
	var body []byte
	var gone bool
	defer func() {
		for _, f := range ends {
			f(len(body), gone)
		}
	}()
	var ev *translate.Event
	var err error
	select {
	case ev = <-wa.Events(): // there already: the head goes out with it
	default:
		if dc.direct != nil {
			// The flusher writes the head within headDelay, unless the
			// answer takes it first.
			dc.mu.Lock()
			dc.head, dc.headOff = head, 0
			dc.mu.Unlock()
			head = nil
			dc.h.deferHead(dc)
		} else {
			err = dc.write(*head)
			*head = (*head)[:0]
		}
		select {
		case ev = <-wa.Events():
		case <-wa.Done():
			select {
			case ev = <-wa.Events():
			default:
			}
		case <-dc.gone:
		case <-dc.h.done: // the server is closing: the empty end, which clients re-issue
		}
	}
	if ev != nil {
		body = ev.JSON()
	}
	wa.Cancel()
	dc.h.waiting.Add(-1)
	dc.mu.Lock()
	dc.w = nil
	// What goes out: the head if it is still unwritten (or what of it the
	// flusher could not write), the event, the end.
	var out []byte
	switch {
	case dc.head != nil:
		head, out = dc.head, (*dc.head)[dc.headOff:]
		dc.head = nil
	case head == nil: // the flusher wrote it
		head = answerBufs.Get().(*[]byte)
		out = (*head)[:0]
	default:
		out = *head
	}
	defer func() {
		*head = out[:0]
		putAnswerBuf(head)
	}()
	select {
	case <-dc.gone: // the reader stopped, maybe as the event came
		gone = true
	default:
	}
	answered := false
	if err == nil && (!gone || dc.extra) {
		out = append(appendChunk(out, body), "0\r\n\r\n"...)
		answered = dc.write(out) == nil
	}
	closing := false
	select {
	case <-dc.h.done:
		closing = true
	default:
	}
	if answered {
		dc.idleSince.Store(time.Now().UnixNano())
	}
	dc.mu.Unlock()
	switch {
	case !answered || closing:
		dc.finish(nil)
	case gone: // with a request pipelined behind the watch
		dc.closeUnread()
	}
	// Otherwise the reader, still reading, serves what the client sends
	// next.
}

// appendChunk appends body as one chunk of a chunked HTTP/1.1 body.
func appendChunk(out, body []byte) []byte {
	if len(body) == 0 {
		return out
	}
	out = strconv.AppendUint(out, uint64(len(body)), 16)
	out = append(out, "\r\n"...)
	out = append(out, body...)
	return append(out, "\r\n"...)
}

// detachObserver is a ResponseWriter wrapper that wants to hear how a watch
// ended after it left the handler (the request log).
type detachObserver interface {
	watchDetached() func(bytes int, gone bool)
}

// detachObservers tells every detachObserver in w's chain that its watch
// detaches, and returns what to call when it ends.
func detachObservers(w http.ResponseWriter) []func(int, bool) {
	var fs []func(int, bool)
	for {
		if o, ok := w.(detachObserver); ok {
			if f := o.watchDetached(); f != nil {
				fs = append(fs, f)
			}
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return fs
		}
		w = u.Unwrap()
	}
}

// asDetached is the detachedWriter under w, if any (a logging wrapper may
// stand between).
func asDetached(w http.ResponseWriter) *detachedWriter {
	for {
		switch x := w.(type) {
		case *detachedWriter:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

// detachable reports whether r's connection may leave net/http: bodiless
// HTTP/1.1 that keeps the connection, from a Home. Only net/http knows where
// a body ends (and leaves unread one over the body limit).
func detachable(r *http.Request) bool {
	return r.Method == http.MethodGet && r.ProtoMajor == 1 && r.ProtoMinor == 1 && !r.Close &&
		r.ContentLength == 0 && len(r.TransferEncoding) == 0 && homeOf(r) != nil
}
