// SPDX-License-Identifier: Apache-2.0

package passthrough

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// ServeHTTP forwards the v2 API to the v2 server and answers the bridge's own
// membership and probes locally.
func (p *Passthrough) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if forwarded(r.URL.Path) {
		p.forward(w, r)
		return
	}
	p.api.ServeHTTP(w, r)
}

// forwarded reports whether a path is the v2 server's to answer: the keys and
// their watches, the store stats, v2 auth, /version and /health. The
// membership is the bridges' (/v2/members, /v2/machines), and so are the
// stats naming members (/v2/stats/self, /v2/stats/leader): the v2 server's
// would name its own members, which no bridge lists.
func forwarded(path string) bool {
	return path == "/v2/keys" || strings.HasPrefix(path, "/v2/keys/") ||
		path == "/v2/stats/store" || strings.HasPrefix(path, "/v2/auth/") ||
		path == "/version" || path == "/health"
}

// LastIndex is the last X-Etcd-Index a v2 server answered with (0: none
// yet).
func (p *Passthrough) LastIndex() uint64 { return p.lastIndex.Load() }

// hopHeaders are connection-level headers, not forwarded either way.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, c := range src.Values("Connection") {
		for _, k := range strings.Split(c, ",") {
			dst.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range hopHeaders {
		dst.Del(k)
	}
}

// forward makes the one round trip of r to the v2 server in use.
func (p *Passthrough) forward(w http.ResponseWriter, r *http.Request) {
	if !p.up.Load() {
		p.writeError(w, fmt.Errorf("v2 server %s unavailable", p.V2Server()))
		return
	}
	// A watch has no deadline of its own: the v2 server's liveness and the
	// client bound it.
	watching := translate.IsWatchRequest(r)
	sampled := !watching && p.cfg.Observer != nil && p.cfg.Observer.Sample(r)
	parent := r.Context()
	if !watching {
		tctx, tcancel := context.WithTimeout(parent, p.cfg.RequestTimeout)
		defer tcancel()
		parent = tctx
	}
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	fr := &forwarding{cancel: cancel, watch: watching}
	if !p.register(fr) {
		p.writeError(w, errors.New("bridge shutting down"))
		return
	}
	defer p.unregister(fr)
	// A loss declared between the check above and the registration would
	// leave this request waiting on a lost v2 server.
	if !p.up.Load() {
		p.writeError(w, fmt.Errorf("v2 server %s unavailable", p.V2Server()))
		return
	}

	base := p.targets[p.current.Load()]
	target := *base
	target.Path += r.URL.Path
	target.RawPath = ""
	if r.URL.RawPath != "" {
		target.RawPath = base.EscapedPath() + r.URL.RawPath
	}
	target.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(ctx, r.Method, target.String(), r.Body)
	if err != nil {
		p.writeError(w, fmt.Errorf("forwarding %s %s: %w", r.Method, r.URL.Path, err))
		return
	}
	copyHeader(out.Header, r.Header)
	out.ContentLength = r.ContentLength
	if r.Body == nil || r.Body == http.NoBody {
		out.Body = nil
	}
	start := time.Now()
	resp, err := p.tr.RoundTrip(out)
	if !watching {
		defer func() { p.metrics.latency.WithLabelValues(methodLabel(r.Method)).Observe(time.Since(start).Seconds()) }()
	}
	code := 0
	if err == nil {
		code = resp.StatusCode
	}
	p.metrics.requests.WithLabelValues(methodLabel(r.Method), strconv.Itoa(code)).Inc()
	if err != nil {
		if watching && errors.Is(context.Cause(ctx), errLost) {
			// Lost before the headers came: the watch ends the documented
			// way, an empty 200, and the client re-issues it.
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Etcd-Index", strconv.FormatUint(p.lastIndex.Load(), 10))
			w.WriteHeader(http.StatusOK)
			return
		}
		if r.Context().Err() != nil {
			return // the client went away
		}
		if cause := context.Cause(ctx); errors.Is(cause, errLost) {
			err = cause
		}
		p.writeError(w, fmt.Errorf("forwarding %s %s to %s: %w", r.Method, r.URL.Path, target.Host, err))
		return
	}
	defer func() { _ = resp.Body.Close() }()
	p.note(resp.Header)
	if watching && resp.StatusCode == http.StatusOK {
		p.relayWatch(ctx, w, r, target, resp)
		return
	}
	// Not a watch (or a watch refused with an error): read the whole answer
	// within the deadline before sending anything, so the client gets it
	// complete or a v2 error.
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errLost) {
			err = cause
		}
		p.writeError(w, fmt.Errorf("reading the answer of %s to %s %s: %w", target.Host, r.Method, r.URL.Path, err))
		return
	}
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	if sampled {
		// After the write: the client's answer never waits for the copy.
		p.cfg.Observer.Observe(r, Answer{URL: base.String(), Status: resp.StatusCode,
			Header: resp.Header.Clone(), Body: body})
	}
}

// relayWatch relays a watch's headers at once, then its events as they come.
// Only whole lines (one JSON event each) are passed on, so a watch ended by
// a loss of the v2 server ends its body between events, never inside one.
// An event outside the served subtrees (unserved) is left out: a watch
// for one event is sent again, to target, from the index after it.
func (p *Passthrough) relayWatch(ctx context.Context, w http.ResponseWriter, r *http.Request, target url.URL, resp *http.Response) {
	copyHeader(w.Header(), resp.Header)
	w.Header().Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	key := path.Join("/", strings.TrimPrefix(r.URL.Path, "/v2/keys"))
	stream, _ := strconv.ParseBool(r.URL.Query().Get("stream"))
	for {
		next := p.relayEvents(ctx, w, rc, resp, key, stream)
		_ = resp.Body.Close()
		if next == 0 {
			return
		}
		q := target.Query()
		q.Set("waitIndex", strconv.FormatUint(next, 10))
		target.RawQuery = q.Encode()
		out, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
		if err != nil {
			return
		}
		copyHeader(out.Header, r.Header)
		if resp, err = p.tr.RoundTrip(out); err != nil {
			return // the client re-issues the watch
		}
		if resp.StatusCode != http.StatusOK {
			_ = resp.Body.Close()
			return
		}
	}
}

// relayEvents relays resp's events until it ends. A watch for one event
// whose event is unserved ends there, and relayEvents returns the index to
// watch from again (0: the watch is over).
func (p *Passthrough) relayEvents(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController,
	resp *http.Response, key string, stream bool) uint64 {
	var pending []byte
	buf := make([]byte, 32<<10)
	// pass writes the whole events in b that are served, and tells whether
	// the watch goes on.
	pass := func(b []byte) (uint64, bool) {
		for len(b) > 0 {
			line := b
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				line = b[:i+1]
			}
			b = b[len(line):]
			if idx, ok := p.unserved(key, line); ok {
				if !stream {
					return idx + 1, false
				}
				continue
			}
			if _, werr := w.Write(line); werr != nil {
				return 0, false // the client went away
			}
		}
		_ = rc.Flush()
		return 0, true
	}
	for {
		n, err := resp.Body.Read(buf)
		pending = append(pending, buf[:n]...)
		if i := bytes.LastIndexByte(pending, '\n'); i >= 0 {
			if next, ok := pass(pending[:i+1]); !ok {
				return next
			}
			pending = append(pending[:0], pending[i+1:]...)
		}
		if err == nil {
			continue
		}
		switch {
		case errors.Is(err, io.EOF):
			// The v2 server ended the answer: the rest is its last event.
			next, _ := pass(pending)
			return next
		case errors.Is(context.Cause(ctx), errLost):
			p.lg.Debug("watch ended: v2 server lost", zap.Error(context.Cause(ctx)))
		default:
			// Cut by the v2 server, or the client went away: end the body
			// between events; the client re-issues the watch.
			p.lg.Debug("watch ended", zap.Error(err))
		}
		return 0
	}
}

// unserved reports whether line is the event of a key outside the served
// subtrees that is no directory above the watched key: the deletion of a
// directory that v2's history matches to a watch by string (deleting
// /coreos.com/net answers a watch on /coreos.com/network). It returns the
// event's index.
func (p *Passthrough) unserved(key string, line []byte) (uint64, bool) {
	if !p.layout.Scoped() {
		return 0, false
	}
	var ev struct {
		Node *struct {
			Key           string `json:"key"`
			ModifiedIndex uint64 `json:"modifiedIndex"`
		} `json:"node"`
	}
	if json.Unmarshal(line, &ev) != nil || ev.Node == nil || ev.Node.ModifiedIndex == 0 {
		return 0, false
	}
	k := path.Join("/", ev.Node.Key)
	if p.layout.Serves(k) || translate.Within(k, key) {
		return 0, false
	}
	return ev.Node.ModifiedIndex, true
}

// note remembers the index and cluster id a v2 server answer carries.
func (p *Passthrough) note(h http.Header) {
	if v, err := strconv.ParseUint(h.Get("X-Etcd-Index"), 10, 64); err == nil && v > 0 {
		p.lastIndex.Store(v)
	}
	if v, err := strconv.ParseUint(h.Get("X-Etcd-Cluster-Id"), 16, 64); err == nil && v > 0 {
		p.clusterID.Store(v)
	}
}

// writeError answers v2's error 300 (HTTP 500), which v2 clients retry on
// their next endpoint.
func (p *Passthrough) writeError(w http.ResponseWriter, err error) {
	translate.NewError(translate.EcodeRaftInternal, err.Error(), p.lastIndex.Load()).WriteResponse(w)
}

// MetricsHandler serves only /metrics and the probes, for metrics listeners.
func (p *Passthrough) MetricsHandler() http.Handler { return p.api.MetricsHandler() }

// methodLabel keeps the method label of the metrics to v2's methods.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPost, http.MethodDelete:
		return m
	}
	return "other"
}
