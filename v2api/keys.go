// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"bytes"
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// The plain key-value requests of v2 clients — a GET, PUT, POST or DELETE of
// /v2/keys on a keep-alive HTTP/1.1 connection, a PUT or a POST with a small
// form body — are served by the Home's reader too, the one that serves the
// re-watches of detached connections (detach.go), when the Home is told to
// (HomeConfig.ServeKeys). A connection on a plain socket starts on that
// reader rather than in net/http: net/http's per-request work (its request
// parser, its response machinery, ParseForm, the request's contexts and the
// background read) was about a quarter of the bridge's CPU for a write. The
// reader parses a head it fully understands itself (parseHead), reads the
// body, builds the request net/http would, and runs the same handler with a
// writer that sends the head and the body in one write with a
// Content-Length. Anything else — another path, a larger body or head, a
// body that is not a form, Expect, a transfer coding, Connection: close,
// HTTP/1.0, pipelined requests, a body that does not come whole in time —
// goes back to net/http with the bytes read so far, and net/http answers it
// as it always has. TLS connections stay with net/http from the start.

const (
	// keysBodyMax is the largest body the reader reads itself; a v2
	// client's form is a value of a few hundred bytes.
	keysBodyMax = 8 << 10
)

// reqBufs are the buffers of requests that do not come whole in one read.
var reqBufs = sync.Pool{New: func() any { b := make([]byte, 0, detachedHeadMax+keysBodyMax); return &b }}

// adopt takes a new connection onto a reader of the Home's own, if it is a
// plain socket; it reports false when the connection is net/http's.
func (h *Home) adopt(c net.Conn) bool {
	d := newDirectIO(c)
	if d == nil {
		return false
	}
	now := time.Now()
	dc := &detachedConn{h: h, c: c, direct: d, gone: make(chan struct{}), born: now.UnixNano()}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		_ = c.Close()
		return true
	}
	h.conns[dc] = struct{}{}
	h.wg.Add(1) // the reader
	h.mu.Unlock()
	// The first request's head is due within the header timeout, as in
	// net/http, and the idle timeout counts from an answer: the deadline
	// is the nearer of the two, and rearm sets the next.
	deadline := after(h.cfg.ReadHeaderTimeout)
	if t := after(h.cfg.IdleTimeout); deadline.IsZero() || !t.IsZero() && t.Before(deadline) {
		deadline = t
	}
	_ = c.SetReadDeadline(deadline)
	go dc.readLoop()
	return true
}

// readRequest reads the request that begins with in, whole. It returns nil
// when the connection has been handed back to net/http (a request the
// reader does not take, more than one request, a head or body that does not
// come whole) or closed.
func (dc *detachedConn) readRequest(in []byte) *request {
	if i := bytes.Index(in, headEnd); i >= 0 {
		end := i + len(headEnd)
		r, n := parseHead(in[:end], dc.h.rules)
		switch {
		case r == nil || end+n < len(in): // not one to take, or more than one request
			return dc.handBack(in)
		case end+n == len(in): // the whole request in one read, as clients send it
			return dc.complete(r, in, end)
		}
	}
	return dc.readRest(in)
}

// handBack gives the connection back to net/http with b, what was read of
// it, and returns nil.
func (dc *detachedConn) handBack(b []byte) *request {
	dc.finish(bytes.Clone(b))
	return nil
}

// complete gives r, parsed from the head b[:end], its body: the rest of b,
// all of it and nothing behind it. A body that is no form goes back to
// net/http (nil).
func (dc *detachedConn) complete(r *request, b []byte, end int) *request {
	if len(b) > end && !r.setBody(b[end:]) {
		return dc.handBack(b)
	}
	return r
}

// readRest reads the rest of a request that began with in: its head within
// the header timeout (of the connection's start, for its first request; of
// its first byte for the others), its body within the body-read timeout.
func (dc *detachedConn) readRest(in []byte) *request {
	bp := reqBufs.Get().(*[]byte)
	b := append((*bp)[:0], in...)
	defer func() {
		*bp = b[:0]
		reqBufs.Put(bp)
	}()
	c, cfg := dc.c, &dc.h.cfg
	if cfg.ReadHeaderTimeout > 0 && dc.born != 0 && dc.idleSince.Load() == 0 {
		// The first request's head is due within the header timeout of
		// the connection's start, as in net/http, however late it began.
		_ = c.SetReadDeadline(time.Unix(0, dc.born).Add(cfg.ReadHeaderTimeout))
	} else {
		_ = c.SetReadDeadline(after(cfg.ReadHeaderTimeout))
	}
	end := 0
	for {
		if i := bytes.Index(b, headEnd); i >= 0 {
			end = i + len(headEnd)
			break
		}
		if bytes.Contains(b, []byte("\n\n")) || len(b) >= detachedHeadMax {
			// Not a head the reader takes: net/http's to read, or refuse.
			return dc.handBack(b)
		}
		n, err := c.Read(b[len(b):detachedHeadMax])
		b = b[:len(b)+n]
		if errors.Is(err, os.ErrDeadlineExceeded) { // too slow: net/http closes such a connection unanswered too
			dc.finish(nil)
			return nil
		}
		if err != nil {
			// Cut short (a half-close, a reset): net/http reads what came
			// and the end, and answers it as it would (its 400).
			return dc.handBack(b)
		}
	}
	r, n := parseHead(b[:end], dc.h.rules)
	if r == nil || end+n < len(b) {
		return dc.handBack(b)
	}
	if end+n > len(b) {
		_ = c.SetReadDeadline(after(cfg.BodyReadTimeout))
		for len(b) < end+n {
			m, err := c.Read(b[len(b):cap(b)])
			b = b[:len(b)+m]
			if err != nil {
				// A body cut short or too slow: net/http answers it (after a
				// body-read timeout of its own) as it would have.
				return dc.handBack(b)
			}
		}
		if len(b) > end+n { // a request behind it
			return dc.handBack(b)
		}
	}
	if r = dc.complete(r, b, end); r != nil {
		_ = c.SetReadDeadline(after(cfg.IdleTimeout)) // the idle deadline again, for rearm
	}
	return r
}
