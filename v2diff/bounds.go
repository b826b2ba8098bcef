// SPDX-License-Identifier: Apache-2.0

package v2diff

import (
	"encoding/json"
	"math"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Helpers the allow-list uses to bound the bridge's side of an excused
// difference.

// in reports whether s is one of list.
func in(s string, list []string) bool {
	for _, x := range list {
		if s == x {
			return true
		}
	}
	return false
}

// isError reports whether side answered with v2 error code and HTTP status.
func isError(x *Exchange, side Side, status, code int) bool {
	return x.Resp[side] != nil && x.Resp[side].Status == status && x.ErrorCode(side) == code
}

// UintParam is a parameter of r as v2 parses an unsigned one, and whether
// it was given as one.
func UintParam(r *Request, name string) (uint64, bool) {
	v, ok := r.Param(name)
	if !ok {
		return 0, false
	}
	u, err := strconv.ParseUint(v, 10, 64)
	return u, err == nil
}

func intField(m map[string]any, f string) (int64, bool) {
	n, ok := m[f].(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

// ordinal parses an IndexMap name of an exact write ("#k").
func ordinal(v any) (int, bool) {
	s, ok := v.(string)
	if !ok || !strings.HasPrefix(s, "#") || strings.HasSuffix(s, "+") {
		return 0, false
	}
	k, err := strconv.Atoi(s[1:])
	return k, err == nil
}

// leaseOf checks that node n has a TTL between lo and hi seconds: a ttl in
// that range and an expiration that agrees with it. It returns what is
// wrong, or "".
func leaseOf(n map[string]any, lo, hi uint64) string {
	if n == nil {
		return "no node"
	}
	ttl, ok := NumField(n, "ttl")
	if !ok || ttl < lo || ttl > hi {
		return "ttl " + show(n["ttl"]) + " outside " + strconv.FormatUint(lo, 10) + "–" + strconv.FormatUint(hi, 10)
	}
	s := str(n["expiration"])
	exp, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !strings.HasSuffix(s, "Z") {
		return "expiration " + show(n["expiration"])
	}
	// ttl is the remaining time rounded up: it lies in (ttl-1, ttl] seconds.
	left := time.Until(exp)
	if left < time.Duration(lo-1)*time.Second-expirationTolerance ||
		left > time.Duration(hi)*time.Second+expirationTolerance {
		return "expiration " + s + " disagrees with the ttl"
	}
	return ""
}

// writeActions are the actions of v2 events.
var writeActions = []string{"set", "create", "update", "compareAndSwap", "delete", "compareAndDelete", "expire"}

// validHistoryEvent checks an event the bridge sent a watch (x.Req[Bridge])
// from its history: a write event the watch matches, at or after waitIndex,
// if first is set with no write of the session that the watch matches
// between the two, and, if head (the answer's headers) is given, not after
// X-Etcd-Index. It returns what is wrong, or "".
func validHistoryEvent(s *Session, x *Exchange, ev map[string]any, head *Response, first bool) string {
	if ev == nil {
		return "not a JSON event"
	}
	action := str(ev["action"])
	n, _ := ev["node"].(map[string]any)
	prev, _ := ev["prevNode"].(map[string]any)
	mi, ok := NumField(n, "modifiedIndex")
	switch {
	case !in(action, writeActions):
		return "action " + show(ev["action"])
	case n == nil || !ok || mi == 0:
		return "no node with a modifiedIndex"
	case !watchMatches(KeyOfPath(x.Req[Bridge].Path), x.Req[Bridge].BoolParam("recursive"), action, n, prev):
		return "an event the watch does not match"
	case !valueFits(action, n):
		return "a value where there is none, or none where there is one"
	}
	if w, ok := s.written[mi]; ok && (w.action != action || w.node["key"] != n["key"]) {
		return "the index of another write"
	}
	wi, _ := UintParam(x.Req[Bridge], "waitIndex")
	if mi < wi {
		return "modifiedIndex before waitIndex"
	}
	if i, ok := s.FirstMatch(KeyOfPath(x.Req[Bridge].Path), x.Req[Bridge].BoolParam("recursive"), wi, mi); ok && first {
		return "not the first event the watch matches: " + strconv.FormatUint(i, 10) + " is"
	}
	if head != nil {
		if xi, err := strconv.ParseUint(head.Header.Get("X-Etcd-Index"), 10, 64); err != nil || mi > xi {
			return "modifiedIndex after X-Etcd-Index"
		}
	}
	return ""
}

// silentWatch checks a watch the bridge keeps waiting: no write of the
// session at or after its waitIndex matches it. It returns what is wrong,
// or "".
func silentWatch(s *Session, x *Exchange) string {
	r := x.Req[Bridge]
	wi, _ := UintParam(r, "waitIndex")
	if i, ok := s.FirstMatch(KeyOfPath(r.Path), r.BoolParam("recursive"), wi, math.MaxUint64); ok {
		return "waiting, but write " + strconv.FormatUint(i, 10) + " matches"
	}
	return ""
}

// watchMatches applies v2's history match rules: the watched key itself,
// with recursive anything below it, and the removal of a directory whose
// key is a plain prefix of the watched key.
func watchMatches(watch string, recursive bool, action string, n, prev map[string]any) bool {
	key := str(n["key"])
	if key == watch || recursive && strings.HasPrefix(key, strings.TrimSuffix(watch, "/")+"/") {
		return true
	}
	removal := action == "delete" || action == "expire"
	return removal && prev != nil && prev["dir"] == true && strings.HasPrefix(watch, str(prev["key"]))
}

// valueFits: an event's node carries a value exactly when it is a file that
// is still there.
func valueFits(action string, n map[string]any) bool {
	_, hasValue := n["value"].(string)
	gone := action == "delete" || action == "compareAndDelete" || action == "expire"
	return hasValue == (!gone && n["dir"] != true)
}

// rawKeyOfPath is the part of a /v2/keys URL path that names the key,
// unescaped but not cleaned (the bridge's key limits look at the raw bytes).
func rawKeyOfPath(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimPrefix(p, "/v2/keys")
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}

// cleanKey is the key v2 makes of a raw one.
func cleanKey(raw string) string { return path.Join("/", raw) }

func utf8Valid(s string) bool { return utf8.ValidString(s) }

func hasControl(s string) bool {
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}
