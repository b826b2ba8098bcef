// SPDX-License-Identifier: Apache-2.0

package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/translate"
)

// outcome is what an answer says about an operation.
type outcome int

const (
	okay    outcome = iota // a 2xx answer
	failed                 // a v2 command error: decided, not applied
	unknown                // no answer, or a server error: may have been applied
	refused                // never sent (connection refused): not applied
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "v2 error", "no answer", "refused"}

// record is one operation as a client saw it. Times are nanoseconds since
// the run began.
type record struct {
	Client, Bridge int
	In             input
	Call, Ret      int64
	Out            output
	Class          outcome
	EtcdIndex      uint64 // X-Etcd-Index of an answer
	// GenCall and GenRet are the bridge's generation when the call was sent
	// and when its answer came (see bridgeSlot.gen).
	GenCall, GenRet int64
	// Resolved: the write had no answer; a watch event showed it happened.
	Resolved bool
}

// history collects every client's records.
type history struct {
	mu  sync.Mutex // guards ops
	ops []record
}

func (h *history) add(r record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, r)
}

func (h *history) all() []record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]record(nil), h.ops...)
}

// clock is the run's time base.
type clock struct{ start time.Time }

func (c clock) now() int64 { return int64(time.Since(c.start)) }

// bridgeSlot is one of the bridges: the process serving now and its
// generation, even while one serves and odd while it restarts.
type bridgeSlot struct {
	idx int
	url atomic.Pointer[string]
	gen atomic.Int64
}

func (b *bridgeSlot) URL() string { return *b.url.Load() }

// newHTTPClient has connections of its own; the header timeout catches a
// bridge that accepted a request and never answers.
func newHTTPClient(headerTimeout time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2,
		ResponseHeaderTimeout: headerTimeout, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}}
}

// request is an operation's HTTP method, path and query or form.
func request(in input) (method, path string, q url.Values) {
	q = url.Values{}
	const ttl = "3600" // never expires within a run
	switch in.Kind {
	case opGet, opGetDir:
		q.Set("quorum", "true")
		if in.Kind == opGetDir {
			q.Set("recursive", "true")
			q.Set("sorted", "true")
		}
		return http.MethodGet, in.Key, q
	case opPlainGet:
		return http.MethodGet, in.Key, q
	case opSet, opSetTTL, opCreate, opCASValue, opCASIndex:
		q.Set("value", in.Value)
		switch in.Kind {
		case opSetTTL:
			q.Set("ttl", ttl)
		case opCreate:
			q.Set("prevExist", "false")
		case opCASValue:
			q.Set("prevValue", in.PrevValue)
		case opCASIndex:
			q.Set("prevIndex", strconv.FormatUint(in.PrevIndex, 10))
		}
		return http.MethodPut, in.Key, q
	case opRefresh:
		q.Set("refresh", "true")
		q.Set("ttl", ttl)
		q.Set("prevExist", "true")
		return http.MethodPut, in.Key, q
	case opMkdir:
		q.Set("dir", "true")
		q.Set("prevExist", "false")
		return http.MethodPut, in.Key, q
	case opCAD:
		q.Set("prevValue", in.PrevValue)
		return http.MethodDelete, in.Key, q
	case opRmdir:
		q.Set("dir", "true")
		q.Set("recursive", "true")
		return http.MethodDelete, in.Key, q
	case opDelete:
		return http.MethodDelete, in.Key, q
	case opPost:
		q.Set("value", in.Value)
		return http.MethodPost, in.Key, q
	}
	panic(fmt.Sprintf("unknown op kind %d", in.Kind))
}

// v2Error is v2's error body.
type v2Error struct {
	Code  int    `json:"errorCode"`
	Index uint64 `json:"index"`
}

// send sends a v2 keys request to base; timeout bounds it.
func send(hc *http.Client, base, method, path string, q url.Values, timeout time.Duration) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	u := base + "/v2/keys" + path
	var body io.Reader
	if method == http.MethodPut || method == http.MethodPost {
		body = strings.NewReader(q.Encode())
	} else if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp, b, err
}

// neverSent reports whether a request failed before it reached a server.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// toNode is the model's view of a v2 node.
func toNode(n *translate.Node) *node {
	if n == nil {
		return nil
	}
	out := &node{Key: n.Key, Dir: n.Dir, TTL: n.Expiration != nil, Mod: n.ModifiedIndex, Creat: n.CreatedIndex}
	if n.Value != nil {
		out.Value, out.HasValue = *n.Value, true
	}
	for _, c := range n.Nodes {
		out.Nodes = append(out.Nodes, *toNode(c))
	}
	return out
}

func toOutput(ev *translate.Event) output {
	return output{Action: ev.Action, Node: toNode(ev.Node), Prev: toNode(ev.PrevNode)}
}

// do sends one operation through b and records it.
func do(hc *http.Client, ck clock, b *bridgeSlot, client int, in input) record {
	r := record{Client: client, Bridge: b.idx, In: in}
	method, path, q := request(in)
	r.GenCall = b.gen.Load()
	r.Call = ck.now()
	resp, body, err := send(hc, b.URL(), method, path, q, requestTimeout)
	r.Ret = ck.now()
	r.GenRet = b.gen.Load()
	switch {
	case err != nil && resp == nil && neverSent(err):
		r.Class = refused
		return r
	case err != nil:
		r.Class, r.Out.Unknown = unknown, true
		return r
	}
	r.EtcdIndex, _ = strconv.ParseUint(resp.Header.Get("X-Etcd-Index"), 10, 64)
	if resp.StatusCode/100 == 2 {
		var ev translate.Event
		if json.Unmarshal(body, &ev) == nil && ev.Action != "" {
			r.Class, r.Out = okay, toOutput(&ev)
			return r
		}
	} else {
		var e v2Error
		if json.Unmarshal(body, &e) == nil && e.Code != 0 && e.Code < 300 {
			r.Class, r.Out.Code = failed, e.Code
			return r
		}
	}
	r.Class, r.Out.Unknown = unknown, true
	return r
}

// requestTimeout bounds every operation: above the bridge's own 5 s
// deadline on backend calls, so a bridge that answers answers in time.
const requestTimeout = 10 * time.Second

// keySpace names the keys of an epoch: file keys and directory keys. Each
// epoch has fresh keys, so a key's history (a porcupine partition) stays
// short however long the run.
type keySpace struct {
	root     string
	epochLen time.Duration
}

const filesPerEpoch, dirsPerEpoch = 4, 2

func (k keySpace) file(epoch int64, j int) string { return fmt.Sprintf("%s/e%d/f%d", k.root, epoch, j) }
func (k keySpace) dir(epoch int64, j int) string  { return fmt.Sprintf("%s/e%d/d%d", k.root, epoch, j) }

// seen is what a client last saw of a file.
type seen struct {
	value string
	mod   uint64
}

// client issues random operations through one bridge, one at a time.
type client struct {
	id      int
	b       *bridgeSlot
	hc      *http.Client
	ck      clock
	keys    keySpace
	hist    *history
	rng     *rand.Rand
	seq     int
	seen    map[string]seen
	pause   time.Duration
	longOut time.Duration // the longest stretch without a served answer
}

// weights of the operations a client picks.
var weights = [numOpKinds]int{opGet: 10, opPlainGet: 12, opSet: 8, opSetTTL: 4, opCreate: 6, opCASValue: 10,
	opCASIndex: 8, opCAD: 4, opDelete: 3, opRefresh: 4, opMkdir: 3, opRmdir: 2, opPost: 8, opGetDir: 5}

func (c *client) next() input {
	total := 0
	for _, w := range weights {
		total += w
	}
	n, kind := c.rng.IntN(total), opKind(0)
	for k, w := range weights {
		if n < w {
			kind = opKind(k)
			break
		}
		n -= w
	}
	epoch := int64(c.ck.now()) / int64(c.keys.epochLen)
	in := input{Kind: kind}
	if kind.dirOp() {
		in.Key = c.keys.dir(epoch, c.rng.IntN(dirsPerEpoch))
	} else {
		in.Key = c.keys.file(epoch, c.rng.IntN(filesPerEpoch))
	}
	if kind.write() && kind != opRefresh && kind != opMkdir && kind != opRmdir && kind != opDelete && kind != opCAD {
		c.seq++
		in.Value = fmt.Sprintf("c%d.%d", c.id, c.seq)
	}
	s, ok := c.seen[in.Key]
	switch {
	case !ok || c.rng.IntN(5) == 0:
		in.PrevValue, in.PrevIndex = "c0.0", s.mod+1 // most likely wrong
	default:
		in.PrevValue, in.PrevIndex = s.value, s.mod
	}
	if kind != opCASValue && kind != opCAD {
		in.PrevValue = ""
	}
	if kind != opCASIndex {
		in.PrevIndex = 0
	}
	return in
}

// run issues operations until ctx ends.
func (c *client) run(ctx context.Context) {
	failSince := int64(-1)
	for ctx.Err() == nil {
		r := do(c.hc, c.ck, c.b, c.id, c.next())
		c.hist.add(r)
		switch r.Class {
		case okay, failed:
			if failSince >= 0 {
				c.longOut = max(c.longOut, time.Duration(r.Ret-failSince))
				failSince = -1
			}
			c.learn(r)
			ctxsleep.Sleep(ctx, c.pause)
		default:
			if failSince < 0 {
				failSince = r.Call
			}
			ctxsleep.Sleep(ctx, 100*time.Millisecond)
		}
	}
}

// learn keeps what an answer shows of a file, for later compares.
func (c *client) learn(r record) {
	if r.In.Kind.dirOp() {
		return
	}
	switch {
	case r.Class == failed && r.Out.Code == 100:
		delete(c.seen, r.In.Key)
	case r.Class != okay:
	case r.Out.Action == "delete" || r.Out.Action == "compareAndDelete":
		delete(c.seen, r.In.Key)
	case r.Out.Node != nil:
		c.seen[r.In.Key] = seen{value: r.Out.Node.Value, mod: r.Out.Node.Mod}
	}
}
