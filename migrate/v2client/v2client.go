// SPDX-License-Identifier: Apache-2.0

// Package v2client is the one HTTP client the bridge's commands reach the
// v2 server with, as any v2 client would: its URLs tried in turn, its
// credentials, TLS and timeouts. What is asked of it (copying, following,
// probing, padding) belongs to the packages that ask.
package v2client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrUnreachable matches (errors.Is) errors about a server that does not
// answer.
var ErrUnreachable = errors.New("the v2 server is unreachable")

// Config configures a Client.
type Config struct {
	// URLs are the server's, tried in turn: the first that answers serves
	// a request.
	URLs []string
	TLS  *tls.Config
	// User is "name:password" for a server with auth enabled ("": none).
	User string
	// HeaderTimeout bounds the wait for an answer's head (0: only the
	// request's context does). A v2 watch's head comes at once.
	HeaderTimeout time.Duration
	// Transport, if set, carries the requests instead of the client's own
	// (TLS and HeaderTimeout then are its business).
	Transport http.RoundTripper
}

// Client reaches one v2 server.
type Client struct {
	urls       []*url.URL
	tr         *http.Transport
	hc         *http.Client
	user, pass string
}

// New is a client of the server at cfg.URLs.
func New(cfg Config) (*Client, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("no URL of the v2 server")
	}
	c := &Client{tr: &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: cfg.TLS,
		MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: cfg.HeaderTimeout}}
	c.hc = &http.Client{Transport: c.tr}
	if cfg.Transport != nil {
		c.hc.Transport = cfg.Transport
	}
	for _, raw := range cfg.URLs {
		u, err := url.Parse(strings.TrimRight(raw, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("bad URL of the v2 server %q: want http(s)://host:port", raw)
		}
		c.urls = append(c.urls, u)
	}
	if cfg.User != "" {
		var ok bool
		if c.user, c.pass, ok = strings.Cut(cfg.User, ":"); !ok {
			return nil, errors.New("the v2 server's user must be name:password")
		}
	}
	return c, nil
}

// String names the server: its URLs.
func (c *Client) String() string {
	parts := make([]string, 0, len(c.urls))
	for _, u := range c.urls {
		parts = append(parts, u.String())
	}
	return strings.Join(parts, ",")
}

// User is the name and password the client sends ("" when none).
func (c *Client) User() (name, password string) { return c.user, c.pass }

// Close drops the idle connections kept to the server.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// Do sends method to the API path p (below each URL's own path, such as
// /v2/keys/a) with the query q and, when form is not nil, form as its body,
// to the first URL that answers. The caller closes the answer's body. An
// error matches ErrUnreachable when no URL answered, or is ctx's.
func (c *Client) Do(ctx context.Context, method, p string, q, form url.Values) (*http.Response, error) {
	var errs []error
	for _, base := range c.urls {
		u := *base
		u.Path = base.Path + p
		u.RawPath = ""
		u.RawQuery = q.Encode()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
		if err != nil {
			return nil, err
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if c.user != "" {
			req.SetBasicAuth(c.user, c.pass)
		}
		resp, err := c.hc.Do(req)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		errs = append(errs, err)
	}
	return nil, &unreachableError{fmt.Sprintf("cannot reach the v2 server %s: %v", c, errors.Join(errs...))}
}

// Unreachable is an error of kind ErrUnreachable with the text of
// fmt.Sprintf(format, args...).
func Unreachable(format string, args ...any) error {
	return &unreachableError{fmt.Sprintf(format, args...)}
}

type unreachableError struct{ msg string }

func (e *unreachableError) Error() string        { return e.msg }
func (e *unreachableError) Is(target error) bool { return target == ErrUnreachable }
