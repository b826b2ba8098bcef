// SPDX-License-Identifier: Apache-2.0

package conformance

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/v2bridge/v2bridge/migrate/v2diff"
)

// Server is one v2 server under test.
type Server struct {
	Side   v2diff.Side
	URL    string
	Client *http.Client
}

// NewServer returns a Server whose client never follows redirects (v2's
// 301s are part of what is compared).
func NewServer(side v2diff.Side, base string) *Server {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &Server{Side: side, URL: strings.TrimRight(base, "/"), Client: &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}}
}

func (s *Server) newHTTPRequest(ctx context.Context, r *v2diff.Request) (*http.Request, error) {
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
	if r.Authorization != "" {
		req.Header.Set("Authorization", r.Authorization)
	}
	return req, nil
}

// Do sends r and reads the whole answer.
func (s *Server) Do(ctx context.Context, r *v2diff.Request) (*v2diff.Response, error) {
	req, err := s.newHTTPRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	resp, err := s.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", s.Side, r, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: reading body: %w", s.Side, r, err)
	}
	return &v2diff.Response{Status: resp.StatusCode, Header: resp.Header, Body: b, Sent: sent, At: time.Now()}, nil
}

// Pair is one server of each side.
type Pair [2]*Server

// DoBoth sends r to both servers at the same time.
func (p Pair) DoBoth(ctx context.Context, reqs [2]*v2diff.Request) ([2]*v2diff.Response, error) {
	var out [2]*v2diff.Response
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
	Resp *v2diff.Response // status and headers; Body stays empty
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
func (s *Server) StartWatch(ctx context.Context, r *v2diff.Request) (*Watch, error) {
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
	w := &Watch{Resp: &v2diff.Response{Status: resp.StatusCode, Header: resp.Header},
		lines: make(chan line, 1024), errc: make(chan error, 1), cancel: cancel}
	go func() {
		defer func() { _ = resp.Body.Close() }()
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
