// SPDX-License-Identifier: Apache-2.0

package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// target is the address of the bridge that runs now. Clients read it for
// every request, so after a restart they find the new bridge, as a client
// whose endpoint is a local name or a node's loopback address does.
type target struct{ url atomic.Pointer[string] }

func newTarget(u string) *target {
	t := &target{}
	t.set(u)
	return t
}

func (t *target) get() string  { return *t.url.Load() }
func (t *target) set(u string) { t.url.Store(&u) }

// v2Error is v2's error JSON.
type v2Error struct {
	Code    int    `json:"errorCode"`
	Message string `json:"message"`
	Cause   string `json:"cause"`
	Index   uint64 `json:"index"`
}

// v2Answer is a v2 keys API answer.
type v2Answer struct {
	status int
	index  uint64           // X-Etcd-Index
	ev     *translate.Event // a 2xx with a body
	err    *v2Error         // a v2 error
	body   string           // anything else (start of it)
}

// outcome is what a write's answer says about whether it was applied.
type outcome int

const (
	applied   outcome = iota // acknowledged
	refused                  // certainly not applied: a v2 command error, or never sent
	uncertain                // may have been applied: the answer was lost or is a server error
)

// classify tells whether a write took effect from its answer.
func classify(a v2Answer, err error) outcome {
	switch {
	case err != nil && neverSent(err):
		return refused
	case err != nil:
		return uncertain
	case a.status/100 == 2 && a.ev != nil:
		return applied
	case a.err != nil && a.err.Code < 300: // 1xx command and 2xx form errors decide before writing
		return refused
	default: // 300 (raft internal: the backend call failed or was cut), a 5xx without v2 JSON
		return uncertain
	}
}

// neverSent reports whether a request failed before it reached the server
// (connection refused while the bridge restarts).
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// v2Do sends one v2 keys request: path is the key, q the query (GET,
// DELETE) or the form (PUT, POST).
func v2Do(ctx context.Context, hc *http.Client, base, method, path string, q url.Values) (v2Answer, error) {
	u := base + "/v2/keys" + path
	var body io.Reader
	if method == http.MethodPut || method == http.MethodPost {
		body = strings.NewReader(q.Encode())
	} else if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return v2Answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return v2Answer{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return v2Answer{}, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return decodeAnswer(resp, b), nil
}

func decodeAnswer(resp *http.Response, b []byte) v2Answer {
	a := v2Answer{status: resp.StatusCode}
	a.index, _ = strconv.ParseUint(resp.Header.Get("X-Etcd-Index"), 10, 64)
	if len(b) == 0 {
		return a
	}
	if resp.StatusCode/100 == 2 {
		var ev translate.Event
		if json.Unmarshal(b, &ev) == nil && ev.Action != "" {
			a.ev = &ev
			return a
		}
	} else {
		var e v2Error
		if json.Unmarshal(b, &e) == nil && e.Code != 0 {
			a.err = &e
			return a
		}
	}
	a.body = string(b[:min(len(b), 200)])
	return a
}

// newHTTPClient is a client with its own connections. A request's context
// bounds it; the header timeout catches a server that accepted the
// connection but never answers (a frozen process behind it).
func newHTTPClient() (*http.Client, *http.Transport) {
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4, ResponseHeaderTimeout: 10 * time.Second,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}
	return &http.Client{Transport: tr}, tr
}
