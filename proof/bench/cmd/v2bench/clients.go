// SPDX-License-Identifier: Apache-2.0

package main

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
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// kv is what the key-value workloads need of a system; v2 systems go
// through raw HTTP with keep-alive, direct-v3 through clientv3.
type kv interface {
	// put sets key to val.
	put(ctx context.Context, key, val string) (uint64, error)
	// get reads key, linearizably when quorum.
	get(ctx context.Context, key string, quorum bool) error
	// getIndex reads key's modifiedIndex (v3: mod revision).
	getIndex(ctx context.Context, key string) (uint64, error)
	// cas sets key to val if its modifiedIndex is prev. On a failed compare it
	// returns ok=false and, when the system tells it for free, the current
	// index (else 0: the caller re-reads).
	cas(ctx context.Context, key, val string, prev uint64) (idx uint64, ok bool, err error)
	// list reads dir recursively and returns how many keys it holds.
	list(ctx context.Context, dir string, count bool) (int, error)
	// create makes key with a TTL if absent (v2: prevExist=false&ttl; v3:
	// Grant + a create-if-absent Txn with the lease) and returns a handle for
	// refresh (v2: modifiedIndex; v3: lease id).
	create(ctx context.Context, key, val string, ttl int) (uint64, error)
	// refresh renews it (v2: prevIndex=handle&ttl, flannel's renewal; v3:
	// one KeepAliveOnce) and returns the new handle.
	refresh(ctx context.Context, key, val string, ttl int, handle uint64) (uint64, error)
}

// ---------------------------------------------------------------- v2 HTTP

// v2Error is a v2 error body, or a non-2xx answer.
type v2Error struct {
	Status    int
	ErrorCode int    `json:"errorCode"`
	Message   string `json:"message"`
	Cause     string `json:"cause"`
	Index     uint64 `json:"index"`
}

func (e *v2Error) Error() string {
	return fmt.Sprintf("HTTP %d errorCode %d: %s (%s)", e.Status, e.ErrorCode, e.Message, e.Cause)
}

type v2Node struct {
	Key           string   `json:"key"`
	Dir           bool     `json:"dir"`
	ModifiedIndex uint64   `json:"modifiedIndex"`
	Nodes         []v2Node `json:"nodes"`
}

type v2Resp struct {
	Action string  `json:"action"`
	Node   *v2Node `json:"node"`
}

type v2kv struct {
	base string
	root string // prefixed to every key path ("" or a directory such as /passthrough)
	hc   *http.Client
	user string // with pass, basic auth on every request ("": none)
	pass string
}

func newHTTPClient(maxConns int) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		MaxConnsPerHost:     0,
		IdleConnTimeout:     2 * time.Minute,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func newV2KV(base string) *v2kv { return &v2kv{base: base, hc: newHTTPClient(256)} }

// closeIdle closes the keep-alive connections (etcd's graceful stop waits
// for open ones).
func closeIdle(k kv) {
	if c, ok := k.(*v2kv); ok {
		c.hc.CloseIdleConnections()
	}
}

// do runs one v2 request; decode, if set, receives the body of a 2xx
// answer (else the body is discarded).
func (c *v2kv) do(ctx context.Context, method, path, query string, form url.Values, decode func([]byte) error) error {
	u := c.base + "/v2/keys" + c.root + path
	if query != "" {
		u += "?" + query
	}
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return c.send(req, decode)
}

// send sends req, with basic auth if c has a user; decode as for do.
func (c *v2kv) send(req *http.Request, decode func([]byte) error) error {
	if c.user != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		e := &v2Error{Status: resp.StatusCode}
		if json.Unmarshal(b, e) != nil {
			e.Message = strings.TrimSpace(string(b))
		}
		return e
	}
	if decode == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return decode(b)
}

func decodeIndex(idx *uint64) func([]byte) error {
	return func(b []byte) error {
		var r v2Resp
		if err := json.Unmarshal(b, &r); err != nil {
			return err
		}
		if r.Node == nil {
			return errors.New("no node in answer")
		}
		*idx = r.Node.ModifiedIndex
		return nil
	}
}

func (c *v2kv) put(ctx context.Context, key, val string) (uint64, error) {
	var idx uint64
	err := c.do(ctx, "PUT", key, "", url.Values{"value": {val}}, decodeIndex(&idx))
	return idx, err
}

func (c *v2kv) get(ctx context.Context, key string, quorum bool) error {
	q := ""
	if quorum {
		q = "quorum=true"
	}
	return c.do(ctx, "GET", key, q, nil, nil)
}

func (c *v2kv) getIndex(ctx context.Context, key string) (uint64, error) {
	var idx uint64
	err := c.do(ctx, "GET", key, "", nil, decodeIndex(&idx))
	return idx, err
}

func (c *v2kv) cas(ctx context.Context, key, val string, prev uint64) (uint64, bool, error) {
	var idx uint64
	err := c.do(ctx, "PUT", key, "", url.Values{"value": {val}, "prevIndex": {strconv.FormatUint(prev, 10)}}, decodeIndex(&idx))
	var ve *v2Error
	if errors.As(err, &ve) && ve.ErrorCode == 101 {
		return 0, false, nil
	}
	return idx, err == nil, err
}

func (c *v2kv) list(ctx context.Context, dir string, count bool) (int, error) {
	if !count {
		return 0, c.do(ctx, "GET", dir, "recursive=true", nil, nil)
	}
	n := 0
	err := c.do(ctx, "GET", dir, "recursive=true", nil, func(b []byte) error {
		var r v2Resp
		if err := json.Unmarshal(b, &r); err != nil {
			return err
		}
		var walk func(v2Node)
		walk = func(x v2Node) {
			if !x.Dir {
				n++
			}
			for _, c := range x.Nodes {
				walk(c)
			}
		}
		if r.Node != nil {
			walk(*r.Node)
		}
		return nil
	})
	return n, err
}

func (c *v2kv) create(ctx context.Context, key, val string, ttl int) (uint64, error) {
	var idx uint64
	err := c.do(ctx, "PUT", key, "", url.Values{"value": {val}, "ttl": {strconv.Itoa(ttl)}, "prevExist": {"false"}},
		decodeIndex(&idx))
	return idx, err
}

func (c *v2kv) refresh(ctx context.Context, key, val string, ttl int, handle uint64) (uint64, error) {
	var idx uint64
	err := c.do(ctx, "PUT", key, "", url.Values{"value": {val}, "ttl": {strconv.Itoa(ttl)},
		"prevIndex": {strconv.FormatUint(handle, 10)}}, decodeIndex(&idx))
	return idx, err
}

// ---------------------------------------------------------------- v3

// v3Prefix keeps direct-v3 keys outside the bridge's key range ("/" and
// "_v2bridge/"), so the bridge's hub does not see them.
const v3Prefix = "v3bench"

// v3PrefixOf is the prefix of sys's keys: direct-v3-hop reaches the etcd
// direct-v3-ext writes to, so it keeps apart from its keys (a create with
// prevExist=false must not find the other's key).
func v3PrefixOf(sys string) string {
	if sys == sysV3Hop {
		return "v3hop"
	}
	return v3Prefix
}

// v3kv drives clientv3, every key under prefix.
type v3kv struct {
	cli    *clientv3.Client
	prefix string
}

// bridgeTxner sends the transaction shape of a bridge's v2 PUT.
type bridgeTxner interface {
	bridgeTxn(ctx context.Context, key, val string) error
	oneCompareTxn(ctx context.Context, key, val string) error
}

// bridgeTxn is what a bridge sends for a v2 PUT of key over a file: compares
// on the key and on the file and marker of every ancestor (a file shadows
// its own marker and whatever is below it: those are not guarded); the put
// of the value (a set over a file needs no journal record: watchers decode
// it by rule). The compares hold; their values do not matter to the cost.
func (c v3kv) bridgeTxn(ctx context.Context, key, val string) error {
	k := c.prefix + key
	cmps := bridgeGuards(c.prefix, key, clientv3.Compare(clientv3.ModRevision(k), "<", 1<<62))
	r, err := c.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(k, val)).Commit()
	if err == nil && !r.Succeeded {
		err = errors.New("bridge-shaped transaction: a compare failed")
	}
	return err
}

// oneCompareTxn puts val at key in a transaction with one compare, on the
// key's own revision (it holds).
func (c v3kv) oneCompareTxn(ctx context.Context, key, val string) error {
	k := c.prefix + key
	r, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "<", 1<<62)).Then(clientv3.OpPut(k, val)).Commit()
	if err == nil && !r.Succeeded {
		err = errors.New("one-compare transaction: the compare failed")
	}
	return err
}

// bridgeGuards is the key's own compare followed by the compares a bridge
// sends on every ancestor of key: no file there, its marker unchanged.
func bridgeGuards(prefix, key string, own clientv3.Cmp) []clientv3.Cmp {
	cmps := []clientv3.Cmp{own}
	for i := 1; i < len(key); i++ {
		if key[i] == '/' {
			a := key[:i]
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(prefix+a), "=", 0),
				clientv3.Compare(clientv3.ModRevision(prefix+"_m"+a), "<", 1<<62))
		}
	}
	return cmps
}

// bridgeTTLTxn is what a bridge sends for a v2 TTL write in ttl-cycle-64:
// the compares of bridgeTxn (the key's compare names its create or its
// previous revision, as a create with prevExist=false and a renewal with
// prevIndex do), the put of the value with the shared lease, and the
// journal record (a TTL write keeps one: the watch side shows its TTL and a
// renewal's compareAndSwap from it). The shared lease is granted by the
// caller, once, as the bridge grants one for many writes.
func (c v3kv) bridgeTTLTxn(ctx context.Context, key, val string, lease clientv3.LeaseID, prev int64) (int64, error) {
	k := c.prefix + key
	cmps := bridgeGuards(c.prefix, key, clientv3.Compare(clientv3.ModRevision(k), "=", prev))
	journal := `{"action":"compareAndSwap","node":{"key":"` + key + `","expiration":"2026-01-01T00:00:00Z","ttl":60,` +
		`"modifiedIndex":0,"createdIndex":0},"prevNode":{"key":"` + key + `","modifiedIndex":0,"createdIndex":0}}`
	r, err := c.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(k, val, clientv3.WithLease(lease)),
		clientv3.OpPut(c.prefix+"_journal", journal)).Commit()
	if err == nil && !r.Succeeded {
		err = errors.New("bridge-shaped TTL transaction: a compare failed")
	}
	if err != nil {
		return 0, err
	}
	return r.Header.Revision, nil
}

func (c v3kv) put(ctx context.Context, key, val string) (uint64, error) {
	r, err := c.cli.Put(ctx, c.prefix+key, val)
	if err != nil {
		return 0, err
	}
	return uint64(r.Header.Revision), nil
}

func (c v3kv) get(ctx context.Context, key string, quorum bool) error {
	var opts []clientv3.OpOption
	if !quorum {
		opts = append(opts, clientv3.WithSerializable())
	}
	_, err := c.cli.Get(ctx, c.prefix+key, opts...)
	return err
}

func (c v3kv) getIndex(ctx context.Context, key string) (uint64, error) {
	r, err := c.cli.Get(ctx, c.prefix+key, clientv3.WithSerializable())
	if err != nil {
		return 0, err
	}
	if len(r.Kvs) == 0 {
		return 0, errors.New("key not found")
	}
	return uint64(r.Kvs[0].ModRevision), nil
}

// cas is v3's idiom: compare the mod revision, and on a miss read the
// current one in the same transaction.
func (c v3kv) cas(ctx context.Context, key, val string, prev uint64) (uint64, bool, error) {
	k := c.prefix + key
	r, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", int64(prev))).
		Then(clientv3.OpPut(k, val)).Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return 0, false, err
	}
	if r.Succeeded {
		return uint64(r.Header.Revision), true, nil
	}
	if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		return uint64(kvs[0].ModRevision), false, nil
	}
	return 0, false, nil
}

func (c v3kv) list(ctx context.Context, dir string, count bool) (int, error) {
	r, err := c.cli.Get(ctx, c.prefix+dir+"/", clientv3.WithPrefix(), clientv3.WithSerializable())
	if err != nil {
		return 0, err
	}
	return len(r.Kvs), nil
}

func (c v3kv) create(ctx context.Context, key, val string, ttl int) (uint64, error) {
	g, err := c.cli.Grant(ctx, int64(ttl))
	if err != nil {
		return 0, err
	}
	k := c.prefix + key
	r, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, val, clientv3.WithLease(g.ID))).Commit()
	if err != nil {
		return 0, err
	}
	if !r.Succeeded {
		return 0, errors.New("key exists")
	}
	return uint64(g.ID), nil
}

func (c v3kv) refresh(ctx context.Context, key, val string, ttl int, handle uint64) (uint64, error) {
	_, err := c.cli.KeepAliveOnce(ctx, clientv3.LeaseID(handle))
	return handle, err
}
