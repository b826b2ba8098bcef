// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/v2bridge/v2bridge/migrate/v2client"
	"github.com/v2bridge/v2bridge/translate"
)

// V2Server is the v2 server, as the commands and the follower's progress
// reporter reach it (through its v2client).
type V2Server struct {
	c       *v2client.Client
	timeout time.Duration
	// Quiet is how long a probe's watch must stay without an event to
	// count as parked (a v2 server writes a history hit right after the
	// headers).
	Quiet time.Duration
}

// NewV2Server reaches the v2 server at urls (the first that answers).
func NewV2Server(urls []string, tlsc *tls.Config, user string, timeout time.Duration) (*V2Server, error) {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	c, err := v2client.New(v2client.Config{URLs: urls, TLS: tlsc, User: user, HeaderTimeout: timeout})
	if err != nil {
		return nil, err
	}
	return &V2Server{c: c, timeout: timeout, Quiet: time.Second}, nil
}

// String names the v2 server.
func (s *V2Server) String() string { return s.c.String() }

// Close releases idle connections.
func (s *V2Server) Close() { s.c.Close() }

// do sends one request of the key p to the first URL that answers.
func (s *V2Server) do(ctx context.Context, method, p string, q url.Values, body url.Values) (*http.Response, error) {
	return s.c.Do(ctx, method, "/v2/keys"+p, q, body)
}

func headerIndex(h http.Header) (uint64, error) {
	v, err := strconv.ParseUint(h.Get("X-Etcd-Index"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the v2 server sent no X-Etcd-Index: is it an etcd v2 server?")
	}
	return v, nil
}

// v2Error reads a v2 error answer.
func v2Error(resp *http.Response, body []byte) error {
	var ve translate.Error
	if json.Unmarshal(body, &ve) == nil && ve.Code != 0 {
		return &ve
	}
	return fmt.Errorf("the v2 server answered %s: %.200s", resp.Status, body)
}

// Index is the v2 server's current index and cluster id (a quorum read of
// the root).
func (s *V2Server) Index(ctx context.Context) (uint64, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.do(ctx, http.MethodGet, "/", url.Values{"quorum": {"true"}}, nil)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	idx, err := headerIndex(resp.Header)
	if err != nil {
		return 0, "", err
	}
	return idx, resp.Header.Get("X-Etcd-Cluster-Id"), nil
}

// Caught probes whether every event below prefix from index from on has
// been seen: a recursive watch from there that parks (no event within
// Quiet) proves that none lies between from and the server's index when it
// parked, which it returns with true. A waiting event returns its index
// with false. A 401 means the server's history no longer reaches from.
func (s *V2Server) Caught(ctx context.Context, prefix string, from uint64) (bool, uint64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hctx, hcancel := context.WithTimeout(ctx, s.timeout)
	defer hcancel()
	q := url.Values{"wait": {"true"}, "recursive": {"true"}, "waitIndex": {strconv.FormatUint(from, 10)}}
	if prefix == "" {
		prefix = "/"
	}
	resp, err := s.do(hctx, http.MethodGet, prefix, q, nil)
	if err != nil {
		return false, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return false, 0, v2Error(resp, body)
	}
	at, err := headerIndex(resp.Header)
	if err != nil {
		return false, 0, err
	}
	// parked says the quiet timer, not the caller, ended the watch.
	var parked atomic.Bool
	quiet := time.AfterFunc(s.Quiet, func() {
		parked.Store(true)
		cancel()
	})
	defer quiet.Stop()
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if len(strings.TrimSpace(string(body))) == 0 {
		if rerr != nil && parked.Load() {
			return true, at, nil // parked: nothing in [from, at]
		}
		if err := context.Cause(hctx); err != nil && !parked.Load() {
			return false, 0, fmt.Errorf("probing the v2 server: %w", err)
		}
		return false, 0, errors.New("the v2 server ended the probe's watch without an event; probing again")
	}
	var ev translate.Event
	if err := json.Unmarshal(body, &ev); err != nil || ev.Node == nil {
		return false, 0, fmt.Errorf("the v2 server's watch answer does not decode: %.200s", body)
	}
	if ev.Node.ModifiedIndex > at {
		return true, at, nil // a live event: nothing matched in [from, at]
	}
	return false, ev.Node.ModifiedIndex, nil
}

// Put sets key to value on the v2 server (the rollback's padding).
func (s *V2Server) Put(ctx context.Context, key, value string) (uint64, error) {
	return s.write(ctx, http.MethodPut, key, url.Values{"value": {value}})
}

// Delete removes key on the v2 server; a missing key is no error.
func (s *V2Server) Delete(ctx context.Context, key string) (uint64, error) {
	idx, err := s.write(ctx, http.MethodDelete, key, nil)
	var ve *translate.Error
	if errors.As(err, &ve) && ve.Code == translate.EcodeKeyNotFound {
		return ve.Index, nil
	}
	return idx, err
}

func (s *V2Server) write(ctx context.Context, method, key string, form url.Values) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.do(ctx, method, key, url.Values{}, form)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 300 {
		return 0, v2Error(resp, body)
	}
	return headerIndex(resp.Header)
}

// List names the children of the directory dir on the v2 server (v2 lists
// no hidden node); exists is false when dir is not there.
func (s *V2Server) List(ctx context.Context, dir string) (children []string, exists bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.do(ctx, http.MethodGet, dir, url.Values{"quorum": {"true"}}, nil)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, false, fmt.Errorf("listing %s on the v2 server: %w", dir, err)
	}
	if resp.StatusCode != http.StatusOK {
		var ve *translate.Error
		err := v2Error(resp, body)
		if errors.As(err, &ve) && ve.Code == translate.EcodeKeyNotFound {
			err = nil
		}
		return nil, false, err
	}
	var ev translate.Event
	if err := json.Unmarshal(body, &ev); err != nil || ev.Node == nil {
		return nil, false, fmt.Errorf("listing %s on the v2 server: the answer does not decode: %.200s", dir, body)
	}
	for _, n := range ev.Node.Nodes {
		children = append(children, n.Key)
	}
	sort.Strings(children)
	return children, true, nil
}
