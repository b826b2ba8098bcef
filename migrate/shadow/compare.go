// SPDX-License-Identifier: Apache-2.0

package shadow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/bridge/passthrough"
	"github.com/v2bridge/v2bridge/migrate/v2diff"
	"github.com/v2bridge/v2bridge/translate"
)

// job is one sampled request and the v2 server's answer to it.
type job struct {
	method, path, query string // path escaped, query raw
	auth                string // the client's Authorization, for re-reading the v2 server as it
	ans                 passthrough.Answer
}

// read is a read to ask either side: the request's own, or a GET of a
// written key.
type read struct {
	method, path, query, auth string
	v2Server                  string // base URL of the v2 server to re-read
}

func (q read) target() string {
	if q.query == "" {
		return q.path
	}
	return q.path + "?" + q.query
}

// outcome is how a comparison ended.
type outcome int

const (
	agreed     outcome = iota
	agreedLate         // after re-checking: the follower caught up
	lagged             // the v3 side still showed an older state
	diverged
	v3Unavailable
	v2ServerUnavailable
)

type result struct {
	outcome outcome
	key     string // the key the comparison was about
	x       *v2diff.Exchange
	diffs   []v2diff.Diff
}

// lagging is the kind a lagging comparison is listed under among the recent
// divergences (it is counted apart from them).
const lagging = "lagging"

var errUnavailable = errors.New("the v3 side answered error 300 or not in time")

// compare compares one sampled read and counts the outcome.
func (s *Shadow) compare(j *job) {
	ctx := s.ctx
	q := read{method: j.method, path: j.path, query: j.query, auth: j.auth, v2Server: j.ans.URL}
	res := s.checkRead(ctx, q, &v2diff.Response{Status: j.ans.Status, Header: j.ans.Header, Body: j.ans.Body})
	switch {
	case ctx.Err() != nil:
		s.drop(reasonClosing)
		return
	case res.outcome == v3Unavailable:
		s.drop(reasonV3Unavailable)
		return
	case res.outcome == v2ServerUnavailable:
		s.drop(reasonV2Server)
		return
	}
	switch res.outcome {
	case agreedLate:
		s.counts.retried.Add(1)
		s.m.retried.Inc()
	case lagged:
		s.counts.lagging.Add(1)
		s.m.lagging.Inc()
		s.report(j.method, res, lagging, where(res))
	case diverged:
		kind := kindOf(res.x, res.diffs)
		s.m.divergences.WithLabelValues(kind).Inc()
		s.report(j.method, res, kind, where(res))
	}
	// Counted as compared last: a reader that sees the comparison in Stats
	// finds everything else about it (metrics, log, divergence) in place.
	s.m.compared.WithLabelValues("read").Inc()
	s.counts.reads.Add(1)
}

// where is the first difference of a read's comparison.
func where(res result) string {
	if len(res.diffs) > 0 {
		return res.diffs[0].Where
	}
	return ""
}

// checkRead compares the v2 server's answer ref to q with the v3 side's.
func (s *Shadow) checkRead(ctx context.Context, q read, ref *v2diff.Response) result {
	res, err := s.agree(ctx, q, ref)
	if err != nil || res.outcome != diverged {
		return res
	}
	// A difference that outlived the catch-up time: it is the copy's only
	// if the v2 server still answers as it did.
	again, err := s.fetch(ctx, q)
	if err != nil {
		s.lg.Debug("shadow comparison: re-reading the v2 server failed", zap.String("key", res.key), zap.Error(err))
		return result{outcome: v2ServerUnavailable}
	}
	if s.same(q, ref, again) {
		return res
	}
	res2, err := s.agree(ctx, q, again)
	if err != nil {
		return res2
	}
	if res2.outcome == diverged {
		res2.outcome = lagged // the v2 server moves faster than the follower was seen to follow
	} else {
		res2.outcome = agreedLate
	}
	return res2
}

// agree asks the v3 side q until its answer agrees with ref, for at most
// the catch-up time.
func (s *Shadow) agree(ctx context.Context, q read, ref *v2diff.Response) (result, error) {
	deadline := time.Now().Add(s.cfg.CatchUp)
	wait := 20 * time.Millisecond
	for attempt := 0; ; attempt++ {
		b, err := s.ask(ctx, q)
		if err != nil {
			return result{outcome: v3Unavailable}, err
		}
		x, diffs := s.diff(q, ref, b)
		if len(diffs) == 0 {
			if attempt > 0 {
				return result{outcome: agreedLate}, nil
			}
			return result{outcome: agreed}, nil
		}
		if time.Now().Add(wait).After(deadline) {
			return result{outcome: diverged, key: keyOf(q.path, diffs), x: x, diffs: diffs}, nil
		}
		if !ctxsleep.Sleep(ctx, wait) {
			return result{outcome: v3Unavailable}, ctx.Err()
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// diff compares the v2 server's answer ref to q with the v3 side's answer b,
// as the conformance suite compares a bridge with a v2 server; what it
// excuses, and TTLs within the tolerance, are left out.
func (s *Shadow) diff(q read, ref, b *v2diff.Response) (*v2diff.Exchange, []v2diff.Diff) {
	req := &v2diff.Request{Method: q.method, Path: q.target()}
	x := v2diff.NewExchange([2]*v2diff.Request{req, req}, [2]*v2diff.Response{ref, b})
	sess := v2diff.NewSession()
	var out []v2diff.Diff
	for _, d := range sess.Compare(x, req.BoolParam("sorted")) {
		if v2diff.Excuse(sess, x, d) != nil || s.tolerable(d) {
			continue
		}
		out = append(out, d)
	}
	return x, out
}

// same reports whether two answers of the v2 server to q agree (it did not
// change in between).
func (s *Shadow) same(q read, a, b *v2diff.Response) bool {
	_, diffs := s.diff(q, a, b)
	return len(diffs) == 0
}

// tolerable reports whether d is two TTLs or expirations of one node within
// the tolerance (the conformance suite's own is tighter: it compares two
// servers written at the same moment, not a copy a follower made).
func (s *Shadow) tolerable(d v2diff.Diff) bool {
	switch d.Field {
	case "ttl":
		r, rok := d.Ref.(json.Number)
		b, bok := d.Bridge.(json.Number)
		if !rok || !bok {
			return false
		}
		ri, err1 := r.Int64()
		bi, err2 := b.Int64()
		return err1 == nil && err2 == nil && math.Abs(float64(ri-bi)) <= math.Ceil(s.cfg.TTLTolerance.Seconds())
	case "expiration":
		r, rok := d.Ref.(string)
		b, bok := d.Bridge.(string)
		if !rok || !bok {
			return false
		}
		rt, err1 := time.Parse(time.RFC3339Nano, r)
		bt, err2 := time.Parse(time.RFC3339Nano, b)
		return err1 == nil && err2 == nil && rt.Sub(bt).Abs() <= s.cfg.TTLTolerance
	}
	return false
}

// kindOf names what differs most: whether the key is there at all, then
// the error, the kind of node, its children, its value, its TTL.
func kindOf(x *v2diff.Exchange, diffs []v2diff.Diff) string {
	rc, bc := x.ErrorCode(v2diff.Ref), x.ErrorCode(v2diff.Bridge)
	switch {
	case rc == bc:
	case rc == 0 && bc == translate.EcodeKeyNotFound:
		return KindMissing
	case rc == translate.EcodeKeyNotFound && bc == 0:
		return KindExtra
	default:
		return KindErrorCode
	}
	fields := map[string]bool{}
	for _, d := range diffs {
		fields[d.Field] = true
	}
	switch {
	case fields["node"] && bc == translate.EcodeKeyNotFound:
		return KindMissing
	case fields["node"]:
		return KindValue
	case fields["dir"]:
		return KindDir
	case fields["nodes"]:
		return KindChildren
	case fields["value"]:
		return KindValue
	case fields["ttl"] || fields["expiration"]:
		return KindTTL
	}
	return KindOther
}

// keyOf is the key a difference is about: the node holding the first
// differing field, else the key the request names.
func keyOf(p string, diffs []v2diff.Diff) string {
	for _, d := range diffs {
		if d.NodeKey != "" {
			return d.NodeKey
		}
	}
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	return path.Clean("/" + strings.TrimPrefix(p, "/v2/keys"))
}

// under reports whether the v2 key k is in the compared subtree.
func (s *Shadow) under(k string) bool {
	p := s.cfg.Prefix
	return p == "/" || k == p || strings.HasPrefix(k, p+"/")
}

// ask has the v3 side answer q as a v3-mode bridge would, within the
// timeout. An answer that says the v3 side is unavailable is an error, not
// an answer to compare.
func (s *Shadow) ask(ctx context.Context, q read) (*v2diff.Response, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	r, err := http.NewRequestWithContext(cctx, q.method, q.target(), nil)
	if err != nil {
		return nil, fmt.Errorf("shadow request %s %s: %w", q.method, q.target(), err)
	}
	rec := httptest.NewRecorder()
	s.api.ServeHTTP(rec, r)
	if cctx.Err() != nil {
		return nil, fmt.Errorf("asking the v3 side %s %s: %w", q.method, q.target(), cctx.Err())
	}
	res := rec.Result()
	resp := &v2diff.Response{Status: res.StatusCode, Header: res.Header, Body: rec.Body.Bytes()}
	if q.method == http.MethodHead {
		resp.Body = nil // an HTTP server sends no body to a HEAD
	}
	if resp.Status == http.StatusInternalServerError && bytes.Contains(resp.Body, []byte(`"errorCode":300`)) {
		return nil, errUnavailable
	}
	return resp, nil
}

// fetch reads q from the v2 server again, within the timeout.
func (s *Shadow) fetch(ctx context.Context, q read) (*v2diff.Response, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	r, err := http.NewRequestWithContext(cctx, q.method, strings.TrimSuffix(q.v2Server, "/")+q.target(), nil)
	if err != nil {
		return nil, fmt.Errorf("re-reading %s from the v2 server: %w", q.target(), err)
	}
	if q.auth != "" {
		r.Header.Set("Authorization", q.auth)
	}
	resp, err := s.cfg.V2ServerClient.Do(r)
	if err != nil {
		return nil, fmt.Errorf("re-reading %s from the v2 server: %w", q.target(), err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(s.cfg.MaxBody)+1))
	if err != nil {
		return nil, fmt.Errorf("re-reading %s from the v2 server: %w", q.target(), err)
	}
	if len(body) > s.cfg.MaxBody {
		return nil, fmt.Errorf("re-reading %s from the v2 server: answer over %d bytes", q.target(), s.cfg.MaxBody)
	}
	return &v2diff.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// report counts and logs a divergence (kind) or a lagging comparison: the
// key at warn level, at most one line a second after a burst of ten; the
// values only at debug level. It counts last, so that whoever sees the count
// finds the lines logged.
func (s *Shadow) report(method string, res result, kind, where string) {
	at := time.Now().UTC()
	defer s.counts.diverged(Divergence{Key: res.key, Kind: kind, Method: method, Where: where, At: at})
	if s.warn.Allow() {
		msg := "shadow comparison: etcd v3 answers differently from the v2 server"
		if kind == lagging {
			msg = "shadow comparison: the follower has not applied the v2 server's change (it lags)"
		}
		fields := []zap.Field{zap.String("key", res.key), zap.String("kind", kind), zap.String("method", method),
			zap.String("where", where), zap.Int("differences", len(res.diffs))}
		if n := s.suppressed.Swap(0); n > 0 {
			fields = append(fields, zap.Int64("suppressed", n))
		}
		s.lg.Warn(msg, fields...)
	} else {
		s.suppressed.Add(1)
	}
	if ce := s.lg.Check(zap.DebugLevel, "shadow comparison: the differences, with values"); ce != nil {
		ds := make([]string, 0, min(len(res.diffs), 10))
		for i, d := range res.diffs {
			if i == 10 {
				break
			}
			ds = append(ds, d.String())
		}
		ce.Write(zap.String("key", res.key), zap.String("kind", kind), zap.Strings("differences", ds))
	}
}
