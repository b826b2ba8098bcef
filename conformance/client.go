// SPDX-License-Identifier: Apache-2.0

// Package conformance runs the same etcd v2 HTTP requests against a real
// etcd v2 server (etcd 3.5 with the v2 store, see internal/v2ref) and against
// v2bridge, and compares the answers after normalising what legitimately
// differs between two v2 servers (index numbers, expiration instants, ids).
//
// Every difference that survives the normalisation must be one of the
// documented divergences of docs/compatibility.md (see allow.go); anything
// else fails the suite. The tests live in this package's _test files:
// scripted cases (one per v2 behaviour), watch cases, and seeded random
// operation sequences.
package conformance

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// Side names one of the two servers of a comparison.
type Side int

const (
	Ref    Side = iota // the real etcd v2 server
	Bridge             // v2bridge
)

func (s Side) String() string {
	if s == Ref {
		return "ref"
	}
	return "bridge"
}

// Request is one v2 HTTP request. Form goes in the body for PUT and POST and
// in the query string otherwise; Query always goes in the query string.
type Request struct {
	Method string
	Path   string // e.g. "/v2/keys/a"; may carry a raw query
	Form   url.Values
	Query  url.Values
	// RawBody, if set, is sent as the body instead of Form.
	RawBody string
	// ContentType overrides the body's content type.
	ContentType string
}

// Params is the request's parameters as v2 sees them: body values first,
// then the query.
func (r *Request) Params() url.Values {
	out := url.Values{}
	add := func(v url.Values) {
		for k, vs := range v {
			out[k] = append(out[k], vs...)
		}
	}
	if r.Method == "PUT" || r.Method == "POST" {
		add(r.Form)
	}
	if i := strings.IndexByte(r.Path, '?'); i >= 0 {
		if q, err := url.ParseQuery(r.Path[i+1:]); err == nil {
			add(q)
		}
	}
	add(r.Query)
	if r.Method != "PUT" && r.Method != "POST" {
		add(r.Form)
	}
	return out
}

// Param is the first value of a parameter and whether it was given.
func (r *Request) Param(name string) (string, bool) {
	vs, ok := r.Params()[name]
	if !ok || len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// BoolParam reports whether a parameter is given and true.
func (r *Request) BoolParam(name string) bool {
	v, _ := r.Param(name)
	switch v {
	case "1", "t", "T", "TRUE", "true", "True":
		return true
	}
	return false
}

func (r *Request) String() string {
	var b strings.Builder
	b.WriteString(r.Method)
	b.WriteByte(' ')
	b.WriteString(r.Path)
	if len(r.Query) > 0 {
		if strings.Contains(r.Path, "?") {
			b.WriteByte('&')
		} else {
			b.WriteByte('?')
		}
		b.WriteString(encodeSorted(r.Query))
	}
	switch {
	case r.RawBody != "":
		fmt.Fprintf(&b, " body=%q", r.RawBody)
	case len(r.Form) > 0:
		fmt.Fprintf(&b, " form=%s", encodeSorted(r.Form))
	}
	return b.String()
}

func encodeSorted(v url.Values) string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		for _, x := range v[k] {
			parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(x))
		}
	}
	return strings.Join(parts, "&")
}

// Response is what one server answered. For a watch, Lines holds the
// events read so far (one JSON object per line).
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *Response) String() string {
	if r == nil {
		return "<none>"
	}
	var hs []string
	for _, h := range []string{"Content-Type", "X-Etcd-Index", "X-Etcd-Cluster-Id", "X-Raft-Index", "X-Raft-Term",
		"Allow", "Location"} {
		if v := r.Header.Values(h); len(v) > 0 {
			hs = append(hs, h+"="+strings.Join(v, ","))
		}
	}
	return fmt.Sprintf("%d [%s] %q", r.Status, strings.Join(hs, " "), r.Body)
}

// Server is one v2 server under test.
type Server struct {
	Side   Side
	URL    string
	Client *http.Client
}

// NewServer returns a Server whose client never follows redirects (v2's
// 301s are part of what is compared).
func NewServer(side Side, base string) *Server {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &Server{Side: side, URL: strings.TrimRight(base, "/"), Client: &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}}
}

func (s *Server) newHTTPRequest(ctx context.Context, r *Request) (*http.Request, error) {
	u := s.URL + r.Path
	var body io.Reader
	ctype := r.ContentType
	q := url.Values{}
	for k, vs := range r.Query {
		q[k] = append(q[k], vs...)
	}
	switch {
	case r.RawBody != "":
		body = strings.NewReader(r.RawBody)
		if ctype == "" {
			ctype = "application/x-www-form-urlencoded"
		}
	case len(r.Form) > 0 && (r.Method == "PUT" || r.Method == "POST"):
		body = strings.NewReader(r.Form.Encode())
		if ctype == "" {
			ctype = "application/x-www-form-urlencoded"
		}
	default:
		for k, vs := range r.Form {
			q[k] = append(q[k], vs...)
		}
	}
	if len(q) > 0 {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		u += sep + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	return req, nil
}

// Do sends r and reads the whole answer.
func (s *Server) Do(ctx context.Context, r *Request) (*Response, error) {
	req, err := s.newHTTPRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", s.Side, r, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: reading body: %w", s.Side, r, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// Pair is one server of each side.
type Pair [2]*Server

// DoBoth sends r to both servers at the same time.
func (p Pair) DoBoth(ctx context.Context, reqs [2]*Request) ([2]*Response, error) {
	var out [2]*Response
	var errs [2]error
	var wg sync.WaitGroup
	for i := range p {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out[i], errs[i] = p[i].Do(ctx, reqs[i])
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// Watch is a v2 long-poll (or stream) in progress: the headers have
// arrived; body lines arrive on Lines.
type Watch struct {
	Resp *Response // status and headers; Body stays empty
	// LastAt is when the line Next returned last arrived.
	LastAt time.Time
	lines  chan line
	errc   chan error
	cancel context.CancelFunc
}

// StartWatch sends a watch request and returns once the response headers
// arrived: from then on the server has registered the watcher (v2 flushes
// the headers as soon as the watcher exists; an immediate answer from
// history arrives together with its body).
func (s *Server) StartWatch(ctx context.Context, r *Request) (*Watch, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := s.newHTTPRequest(ctx, r)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%s: %s: %w", s.Side, r, err)
	}
	w := &Watch{Resp: &Response{Status: resp.StatusCode, Header: resp.Header},
		lines: make(chan line, 1024), errc: make(chan error, 1), cancel: cancel}
	go func() {
		defer resp.Body.Close()
		defer close(w.lines)
		br := bufio.NewReader(resp.Body)
		for {
			b, err := br.ReadBytes('\n')
			if len(b) > 0 {
				w.lines <- line{b, time.Now()}
			}
			if err != nil {
				if err != io.EOF {
					w.errc <- err
				}
				return
			}
		}
	}()
	return w, nil
}

// Next returns the next body line (with its newline), or nil at the end of
// the body. It gives up at ctx's deadline.
func (w *Watch) Next(ctx context.Context) ([]byte, error) {
	select {
	case l, ok := <-w.lines:
		if !ok {
			select {
			case err := <-w.errc:
				return nil, err
			default:
				return nil, nil
			}
		}
		w.LastAt = l.at
		return l.b, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no watch event: %w", ctx.Err())
	}
}

// line is one body line of a watch and when it arrived.
type line struct {
	b  []byte
	at time.Time
}

// Close ends the watch request.
func (w *Watch) Close() { w.cancel() }
