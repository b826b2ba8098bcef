// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/v2bridge/v2bridge/migrate/v2client"
	"github.com/v2bridge/v2bridge/translate"
)

// ErrUnreachable matches (errors.Is) errors about a v2 server that does not answer.
var ErrUnreachable = v2client.ErrUnreachable

// ErrNoV2API matches (errors.Is) errors about a v2 server URL that answers HTTP
// but does not serve the etcd v2 keys API.
var ErrNoV2API = errors.New("the v2 server does not serve the etcd v2 keys API")

// v2ServerError is a v2 server problem of one of the kinds above, with its own text.
type v2ServerError struct {
	kind error
	msg  string
}

func (e *v2ServerError) Error() string        { return e.msg }
func (e *v2ServerError) Is(target error) bool { return target == e.kind }

// v2Server is what the migration asks of a running v2 server, through its
// v2client.
type v2Server struct {
	c       *v2client.Client
	timeout time.Duration // of each request but watches
}

// close drops the connections to the v2 server this process keeps open.
func (s *v2Server) close() { s.c.Close() }

func newV2Server(o *Options) (*v2Server, error) {
	if len(o.V2Server) == 0 {
		return nil, errors.New("no v2 server URL (--v2-server)")
	}
	c, err := v2client.New(v2client.Config{URLs: o.V2Server, TLS: o.V2ServerTLS, User: o.V2ServerUser})
	if err != nil {
		return nil, err
	}
	s := &v2Server{c: c, timeout: o.V2ServerTimeout}
	if s.timeout == 0 {
		s.timeout = 2 * time.Minute
	}
	return s, nil
}

func (s *v2Server) String() string { return s.c.String() }

// do sends a GET of the API path p with query q and returns the response
// with its body read, or an error naming what is wrong with the v2 server.
func (s *v2Server) do(ctx context.Context, p string, q url.Values) (*http.Response, []byte, error) {
	resp, err := s.c.Do(ctx, http.MethodGet, p, q, nil)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, v2client.Unreachable("reading the answer of the v2 server %s: %v", s, err)
	}
	return resp, body, nil
}

// decode interprets a /v2/keys answer: an event, a v2 error, or proof that
// the URL serves something else.
func (s *v2Server) decode(p string, resp *http.Response, body []byte) (*translate.Event, uint64, error) {
	idx, idxErr := strconv.ParseUint(resp.Header.Get("X-Etcd-Index"), 10, 64)
	isJSON := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json")
	if isJSON && resp.StatusCode >= 400 {
		var ve translate.Error
		if json.Unmarshal(body, &ve) == nil && ve.Code != 0 {
			if ve.Code == translate.EcodeUnauthorized {
				return nil, 0, fmt.Errorf("the v2 server %s refused the request: %v (pass --v2-server-user name:password)", s, &ve)
			}
			return nil, idx, &ve
		}
	}
	if isJSON && resp.StatusCode < 300 && idxErr == nil {
		if len(strings.TrimSpace(string(body))) == 0 {
			return nil, idx, nil // a watch the server ended without an event
		}
		var ev translate.Event
		if err := json.Unmarshal(body, &ev); err == nil && ev.Action != "" && ev.Node != nil {
			return &ev, idx, nil
		}
	}
	snippet := strings.TrimSpace(string(body))
	if len(snippet) > 120 {
		snippet = snippet[:120] + "..."
	}
	return nil, 0, &v2ServerError{kind: ErrNoV2API, msg: fmt.Sprintf(
		"%s does not serve the etcd v2 keys API: GET %s answered %s %q; the URL must be an etcd v2 server "+
			"(etcd 3.4/3.5 started with --enable-v2=true, or etcd 2.x); etcd 3.6 and later have no v2 API",
		s, p, resp.Status, snippet)}
}

// get reads p from the v2 server: recursive, sorted and through quorum, so the
// snapshot is consistent and its X-Etcd-Index is where a watch resumes.
// A missing key is (nil, index, nil).
func (s *v2Server) get(ctx context.Context, p string, recursive bool) (*translate.Node, uint64, error) {
	q := url.Values{"quorum": {"true"}, "sorted": {"true"}}
	if recursive {
		q.Set("recursive", "true")
	}
	kp := "/v2/keys" + p
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, body, err := s.do(ctx, kp, q)
	if err != nil {
		return nil, 0, err
	}
	ev, idx, err := s.decode(kp, resp, body)
	var ve *translate.Error
	if errors.As(err, &ve) && ve.Code == translate.EcodeKeyNotFound {
		return nil, ve.Index, nil
	}
	if err == nil && ev == nil {
		return nil, 0, &v2ServerError{kind: ErrNoV2API, msg: fmt.Sprintf("%s does not serve the etcd v2 keys API: GET %s answered an empty body", s, kp)}
	}
	if err != nil {
		return nil, 0, err
	}
	return ev.Node, idx, nil
}

// watch waits for the first event at or after waitIndex on root and below.
// (nil, nil) means the server ended the watch without one: ask again.
func (s *v2Server) watch(ctx context.Context, root string, waitIndex uint64) (*translate.Event, error) {
	q := url.Values{"wait": {"true"}, "recursive": {"true"}, "waitIndex": {strconv.FormatUint(waitIndex, 10)}}
	kp := "/v2/keys" + root
	resp, body, err := s.do(ctx, kp, q)
	if err != nil {
		return nil, err
	}
	ev, _, err := s.decode(kp, resp, body)
	return ev, err
}

// eventStream is a v2 watch with stream=true: the server writes each event
// as one JSON object and keeps the request open.
type eventStream struct {
	body io.ReadCloser
	dec  *json.Decoder
	// index is the v2 server's X-Etcd-Index when the watch was made. An event
	// at or below it came from the v2 server's history: v2 then answers with
	// that one event and registers no watcher, so the stream sends no more.
	index uint64
}

// stream opens a recursive stream watch on root from waitIndex. The stream
// lives as long as ctx; a v2 error (401: the history no longer reaches
// waitIndex) comes back as a *translate.Error.
func (s *v2Server) stream(ctx context.Context, root string, waitIndex uint64) (*eventStream, error) {
	q := url.Values{"wait": {"true"}, "recursive": {"true"}, "stream": {"true"},
		"waitIndex": {strconv.FormatUint(waitIndex, 10)}}
	kp := "/v2/keys" + root
	resp, err := s.c.Do(ctx, http.MethodGet, kp, q, nil)
	if err != nil {
		return nil, err
	}
	idx, idxErr := strconv.ParseUint(resp.Header.Get("X-Etcd-Index"), 10, 64)
	if resp.StatusCode != http.StatusOK || idxErr != nil ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, v2client.Unreachable("reading the answer of the v2 server %s: %v", s, err)
		}
		_, _, err = s.decode(kp, resp, body)
		if err == nil { // an event in a non-200 answer: not a stream
			err = v2client.Unreachable("the v2 server %s answered a stream watch with %s", s, resp.Status)
		}
		return nil, err
	}
	return &eventStream{body: resp.Body, dec: json.NewDecoder(resp.Body), index: idx}, nil
}

// next reads the stream's next event; io.EOF when the server ended it.
func (st *eventStream) next() (*translate.Event, error) {
	var ev translate.Event
	if err := st.dec.Decode(&ev); err != nil {
		return nil, err
	}
	if ev.Action == "" || ev.Node == nil {
		return nil, fmt.Errorf("the v2 server streamed something other than a v2 event (action %q)", ev.Action)
	}
	return &ev, nil
}

func (st *eventStream) close() { _ = st.body.Close() }

var clearedCause = regexp.MustCompile(`\[(\d+)/(\d+)\]`)

// historyStart reads the first index v2 still holds from a 401's cause,
// "the requested history has been cleared [start/wait]".
func historyStart(ve *translate.Error) (uint64, bool) {
	m := clearedCause.FindStringSubmatch(ve.Cause)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	return n, err == nil
}

// discoverHidden finds hidden nodes below root from the v2 server's event
// history: v2 never lists hidden nodes, but its history replay (a watch with
// an old waitIndex) does not filter them. Only the last 1000 events are kept,
// so this finds hidden keys written recently, not all of them. It returns
// every hidden node on the way to each event's key (a hidden directory and
// any hidden node inside it, which listing the directory would not show).
//
// The history is split into a few ranges scanned side by side, each one
// watch per event: a watch answers with the first event at or after its
// waitIndex, at once from the history; one with nothing left before upTo
// would wait for a future event, so a short deadline ends it.
func (s *v2Server) discoverHidden(ctx context.Context, root string, upTo uint64) ([]string, error) {
	ask := func(wait uint64) (*translate.Event, error) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ev, err := s.watch(rctx, root, wait)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, nil
		}
		return ev, err
	}
	first := uint64(1)
	if _, err := ask(first); err != nil {
		var ve *translate.Error
		if !errors.As(err, &ve) || ve.Code != translate.EcodeEventIndexCleared {
			return nil, err
		}
		start, ok := historyStart(ve)
		if !ok {
			return nil, nil
		}
		first = start
	}
	if first > upTo {
		return nil, nil
	}
	const ranges = 8
	size := (upTo - first + ranges) / ranges
	var mu sync.Mutex
	seen := map[string]bool{}
	var firstErr error
	var wg sync.WaitGroup
	for lo := first; lo <= upTo; lo += size {
		hi := min(lo+size-1, upTo)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := lo; w <= hi; {
				ev, err := ask(w)
				if err != nil {
					var ve *translate.Error
					if !errors.As(err, &ve) { // a 401: the history moved on past w
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
					return
				}
				if ev == nil || ev.Node.ModifiedIndex > upTo {
					return
				}
				mu.Lock()
				for _, h := range hiddenNodes(root, ev.Node.Key) {
					seen[h] = true
				}
				mu.Unlock()
				w = max(w, ev.Node.ModifiedIndex) + 1
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	out := make([]string, 0, len(seen))
	for h := range seen {
		out = append(out, h)
	}
	sort.Strings(out)
	return out, firstErr
}

// hiddenNodes lists every hidden node on the way from root down to key.
func hiddenNodes(root, key string) []string {
	if !under(key, root) || key == root {
		return nil
	}
	var out []string
	for _, a := range append(translate.Ancestors(key), key) {
		if len(a) > len(root) && under(a, root) && translate.IsHiddenName(a) {
			out = append(out, a)
		}
	}
	return out
}

// under reports whether p is root or below it.
func under(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}

// hiddenBelow reports whether p, seen from root, passes through a hidden element.
func hiddenBelow(root, p string) bool {
	if p == root {
		return false
	}
	rel := p
	if root != "/" {
		rel = strings.TrimPrefix(p, root)
	}
	return strings.Contains(rel, "/_")
}
