// SPDX-License-Identifier: Apache-2.0

package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/migrate/v2diff"
)

// step is one request of a scripted case, sent to both servers. Form and
// Query are name/value pairs; Path, Form and Query may use {name.field} or
// {name.field+N} for values saved (per server) by an earlier step's Save:
// fields mi/ci (node.modifiedIndex/createdIndex), xi (X-Etcd-Index), ei (an
// error's index) and key (node.key).
type step struct {
	Method      string
	Path        string
	Form        []string
	Query       []string
	RawBody     string
	ContentType string
	// Authorization is the request's Authorization header (as, authz).
	Authorization string
	Save          string

	// Status and Code check the reference's answer, so a case cannot
	// silently stop testing what it names.
	Status int
	Code   int

	// Watch starts a watch named Watch with this request; its headers (or,
	// for an immediate or error answer, its whole answer) are compared.
	Watch string
	// Await compares the next Events (default 1) body lines of watch Await.
	// End expects the end of its body instead.
	Await  string
	Events int
	End    bool

	// Expect lists the divergences this step shows (each must occur).
	Expect []string
	// Shape compares JSON bodies by field names and value types only (for
	// endpoints whose values are one server's own: ids, URLs, versions).
	Shape bool
	// Bulk repeats the request Bulk times ({i} in Path and Form is the
	// repetition number), comparing only statuses: for filling history.
	Bulk int
}

// caseTimeout bounds one scripted case, its watches included.
const caseTimeout = 3 * time.Minute

type scriptCase struct {
	Name  string
	Steps []step
	// May lists the divergences the case may show beyond its steps'
	// Expect lists; any other excuse fails the case (a case that stops
	// testing what it names must not pass on an allow-list entry).
	May []string
}

// allowed is the set of divergences a case may show.
func (c scriptCase) allowed() map[string]bool {
	out := map[string]bool{}
	for _, id := range c.May {
		out[id] = true
	}
	for _, st := range c.Steps {
		for _, id := range st.Expect {
			out[id] = true
		}
	}
	return out
}

type caseRun struct {
	t       *testing.T
	ctx     context.Context // bounds the case's watches
	e       *env
	s       *v2diff.Session
	v       vars
	watches map[string]*watchPair
	n       int
	allowed map[string]bool // the divergences the case declares
}

func (e *env) runCase(t *testing.T, c scriptCase) {
	e.clearTree(t)
	ctx, cancel := ctxFor(t, caseTimeout)
	r := &caseRun{t: t, ctx: ctx, e: e, s: v2diff.NewSession(), v: newVars(), watches: map[string]*watchPair{},
		allowed: c.allowed()}
	defer func() {
		cancel()
		for _, w := range r.watches {
			w.ws[0].Close()
			w.ws[1].Close()
		}
		e.account(r.s, r.n)
	}()
	for i, st := range c.Steps {
		if t.Failed() {
			return
		}
		r.step(i, st)
	}
}

func (r *caseRun) build(side v2diff.Side, st step) *v2diff.Request {
	t := r.t
	req := &v2diff.Request{Method: st.Method, Path: r.v.expand(t, side, st.Path), RawBody: st.RawBody,
		ContentType: st.ContentType, Authorization: st.Authorization,
		Form: r.v.expandValues(t, side, pairs(st.Form)), Query: r.v.expandValues(t, side, pairs(st.Query))}
	if req.Method == "" {
		req.Method = "GET"
	}
	return req
}

func (r *caseRun) step(i int, st step) {
	t := r.t
	t.Helper()
	label := fmt.Sprintf("step %d", i+1)
	switch {
	case st.Bulk > 0:
		r.bulk(label, st)
		return
	case st.Await != "":
		r.await(label, st)
		return
	case st.Watch != "":
		r.startWatch(label, st)
		return
	}
	reqs := [2]*v2diff.Request{r.build(v2diff.Ref, st), r.build(v2diff.Bridge, st)}
	ctx, cancel := ctxFor(t, requestTimeout)
	defer cancel()
	resps, err := r.e.pair.DoBoth(ctx, reqs)
	if err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	x := v2diff.NewExchange(reqs, resps)
	r.finish(label, st, x, [2]*v2diff.Response{})
}

// finish checks, registers, compares and saves one exchange.
func (r *caseRun) finish(label string, st step, x *v2diff.Exchange, watchResp [2]*v2diff.Response) {
	t := r.t
	t.Helper()
	r.n++
	if st.Status != 0 && x.Resp[v2diff.Ref].Status != st.Status {
		t.Errorf("%s: the reference answered %s, the case expects status %d\n%s", label, x.Resp[v2diff.Ref], st.Status,
			x.Req[v2diff.Ref])
	}
	if st.Code != 0 && x.ErrorCode(v2diff.Ref) != st.Code {
		t.Errorf("%s: the reference answered %s, the case expects error %d\n%s", label, x.Resp[v2diff.Ref], st.Code,
			x.Req[v2diff.Ref])
	}
	r.s.Register(x)
	if st.Save != "" {
		r.v.save(st.Save, x, watchResp)
	}
	diffs := compareShape(x)
	if !st.Shape {
		diffs = r.s.Compare(x, x.Req[v2diff.Ref].BoolParam("sorted"))
	}
	fails, excused := excuse(r.s, x, diffs)
	if len(fails) > 0 {
		t.Errorf("%s: undocumented divergence\n%s", label, report(x, fails))
	}
	if bad := undeclared(excused, r.allowed); len(bad) > 0 {
		t.Errorf("%s: divergence %q excused, but the case does not declare it (a step's Expect or the case's "+
			"May)\n%s", label, bad, report(x, nil))
	}
	for _, id := range st.Expect {
		if excused[id] == 0 {
			t.Errorf("%s: expected divergence %q did not occur (fixed? then drop it from allow.go and "+
				"docs/compatibility.md)\n%s", label, id, report(x, nil))
		}
	}
}

func (r *caseRun) startWatch(label string, st step) {
	t := r.t
	t.Helper()
	reqs := [2]*v2diff.Request{r.build(v2diff.Ref, st), r.build(v2diff.Bridge, st)}
	ctx := r.ctx
	var ws [2]*Watch
	errs := make(chan error, 2)
	for side := v2diff.Ref; side <= v2diff.Bridge; side++ {
		go func(side v2diff.Side) {
			w, err := r.e.pair[side].StartWatch(ctx, reqs[side])
			ws[side] = w
			errs <- err
		}(side)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("%s: %v", label, err)
		}
	}
	r.watches[st.Watch] = &watchPair{ws: ws, reqs: reqs}
	heads := [2]*v2diff.Response{ws[0].Resp, ws[1].Resp}
	if ws[0].Resp.Status != 200 || ws[1].Resp.Status != 200 {
		// An error answer: compare it whole.
		var resps [2]*v2diff.Response
		for side := range ws {
			body := r.readAll(label, ws[side])
			resps[side] = &v2diff.Response{Status: ws[side].Resp.Status, Header: ws[side].Resp.Header, Body: body}
		}
		x := v2diff.NewExchange(reqs, resps)
		x.Watch = true
		r.finish(label, st, x, [2]*v2diff.Response{})
		return
	}
	x := v2diff.NewExchange(reqs, [2]*v2diff.Response{
		{Status: heads[0].Status, Header: heads[0].Header},
		{Status: heads[1].Status, Header: heads[1].Header},
	})
	x.Watch = true
	r.finish(label, st, x, heads)
}

func (r *caseRun) readAll(label string, w *Watch) []byte {
	ctx, cancel := ctxFor(r.t, requestTimeout)
	defer cancel()
	var out []byte
	for {
		l, err := w.Next(ctx)
		if err != nil {
			r.t.Fatalf("%s: %v", label, err)
		}
		if l == nil {
			return out
		}
		out = append(out, l...)
	}
}

// awaitTimeout bounds the wait for an event a case expects; expiry events
// take up to a few seconds on both servers.
const awaitTimeout = 15 * time.Second

// watchPair is one watch started on both servers.
type watchPair struct {
	ws   [2]*Watch
	reqs [2]*v2diff.Request
}

// graceAfterFirst is how long an event may trail the other server's
// (expiry sweeps run every 500 ms on either side).
const graceAfterFirst = 3 * time.Second

func (r *caseRun) await(label string, st step) {
	t := r.t
	t.Helper()
	wp, ok := r.watches[st.Await]
	if !ok {
		t.Fatalf("%s: no watch %q", label, st.Await)
	}
	ws := wp.ws
	ctx, cancel := ctxFor(t, awaitTimeout)
	defer cancel()
	if st.End {
		for side := range ws {
			l, err := ws[side].Next(ctx)
			if err != nil || l != nil {
				t.Errorf("%s: %s: want the end of the watch body, got %q, %v", label, v2diff.Side(side), l, err)
			}
		}
		return
	}
	n := st.Events
	if n == 0 {
		n = 1
	}
	for k := 0; k < n; k++ {
		type got struct {
			side v2diff.Side
			line []byte
			err  error
		}
		ch := make(chan got, 2)
		gctx, gcancel := context.WithCancel(ctx)
		for side := range ws {
			go func(side v2diff.Side) {
				l, err := ws[side].Next(gctx)
				ch <- got{side, l, err}
			}(v2diff.Side(side))
		}
		var lines [2][]byte
		var errs []string
		first := <-ch
		var timer <-chan time.Time
		if first.err == nil {
			timer = time.After(graceAfterFirst)
		}
		second := got{side: 1 - first.side}
		select {
		case second = <-ch:
		case <-timer:
			gcancel()
			<-ch
			second.err = fmt.Errorf("no event %v after the other server's", graceAfterFirst)
		}
		gcancel()
		for _, g := range []got{first, second} {
			lines[g.side] = g.line
			if g.err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", g.side, g.err))
			} else if g.line == nil {
				errs = append(errs, fmt.Sprintf("%s: the watch ended without an event", g.side))
			}
		}
		if lines[0] == nil && lines[1] == nil {
			t.Fatalf("%s: event %d of watch %s: %s", label, k+1, st.Await, strings.Join(errs, "; "))
		}
		x := v2diff.NewExchange(wp.reqs, [2]*v2diff.Response{{Status: 200, Header: map[string][]string{}, Body: lines[0]},
			{Status: 200, Header: map[string][]string{}, Body: lines[1]}})
		x.Watch = true
		x.Event = true
		r.finish(fmt.Sprintf("%s event %d", label, k+1), st, x, [2]*v2diff.Response{})
		if lines[0] == nil || lines[1] == nil {
			return // one watch is out of step with the other now
		}
	}
}

// compareShape compares status, content type and the JSON structure (field
// names and kinds of values) of two answers; an empty list matches a list of
// anything but is reported, as the bridge's empty peerURLs are.
func compareShape(x *v2diff.Exchange) []v2diff.Diff {
	var out []v2diff.Diff
	if x.Resp[v2diff.Ref].Status != x.Resp[v2diff.Bridge].Status {
		out = append(out, v2diff.Diff{Where: "status", Field: "status", Ref: x.Resp[v2diff.Ref].Status, Bridge: x.Resp[v2diff.Bridge].Status})
	}
	if a, b := x.Resp[v2diff.Ref].Header.Get("Content-Type"), x.Resp[v2diff.Bridge].Header.Get("Content-Type"); a != b {
		out = append(out, v2diff.Diff{Where: "header Content-Type", Field: "Content-Type", Ref: a, Bridge: b})
	}
	if x.JSON[v2diff.Ref] == nil && x.JSON[v2diff.Bridge] == nil {
		return out
	}
	return append(out, diffShape("body", "", x.JSON[v2diff.Ref], x.JSON[v2diff.Bridge])...)
}

func diffShape(where, field string, r, b any) []v2diff.Diff {
	if kind(r) != kind(b) {
		return []v2diff.Diff{{Where: where, Field: field, Ref: kind(r), Bridge: kind(b), Note: "shape"}}
	}
	switch rv := r.(type) {
	case map[string]any:
		bv := b.(map[string]any)
		var out []v2diff.Diff
		for _, k := range unionKeys(rv, bv) {
			out = append(out, diffShape(where+"."+k, k, rv[k], bv[k])...)
		}
		return out
	case []any:
		bv := b.([]any)
		if len(rv) == 0 || len(bv) == 0 {
			if len(rv) != len(bv) {
				return []v2diff.Diff{{Where: where, Field: field, Ref: len(rv), Bridge: len(bv), Note: "list length"}}
			}
			return nil
		}
		return diffShape(where+"[0]", field, rv[0], bv[0])
	}
	return nil
}

func kind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "list"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "bool"
	case nil:
		return "absent"
	}
	return fmt.Sprintf("%T", v)
}

// bulk sends st.Bulk requests to each server (one after the other on each,
// both servers at once) and registers the writes.
func (r *caseRun) bulk(label string, st step) {
	t := r.t
	ctx, cancel := ctxFor(t, 2*time.Minute)
	defer cancel()
	var resps [2][]*v2diff.Response
	var reqs [2][]*v2diff.Request
	errs := make(chan error, 2)
	for side := v2diff.Ref; side <= v2diff.Bridge; side++ {
		for i := 0; i < st.Bulk; i++ {
			one := st
			one.Path = strings.ReplaceAll(st.Path, "{i}", fmt.Sprint(i))
			one.Form = nil
			for _, f := range st.Form {
				one.Form = append(one.Form, strings.ReplaceAll(f, "{i}", fmt.Sprint(i)))
			}
			reqs[side] = append(reqs[side], r.build(side, one))
		}
		go func(side v2diff.Side) {
			for _, q := range reqs[side] {
				resp, err := r.e.pair[side].Do(ctx, q)
				if err != nil {
					errs <- err
					return
				}
				resps[side] = append(resps[side], resp)
			}
			errs <- nil
		}(side)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("%s: %v", label, err)
		}
	}
	for i := range resps[0] {
		x := v2diff.NewExchange([2]*v2diff.Request{reqs[0][i], reqs[1][i]}, [2]*v2diff.Response{resps[0][i], resps[1][i]})
		if x.Resp[v2diff.Ref].Status != x.Resp[v2diff.Bridge].Status || x.Resp[v2diff.Ref].Status >= 300 {
			t.Fatalf("%s: repetition %d\n%s", label, i, report(x, nil))
		}
		r.s.Register(x)
	}
	r.n += st.Bulk
}
