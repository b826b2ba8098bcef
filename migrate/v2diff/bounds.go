// SPDX-License-Identifier: Apache-2.0

package v2diff

import (
	"encoding/json"
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

// answerAge bounds how long before the judge looks at an answer whose
// sending time is unknown the server made it.
const answerAge = 500 * time.Millisecond

// leaseOf checks that node n of answer a has a TTL between lo and hi
// seconds: a ttl in that range and an expiration that agrees with it, the
// ttl being the time left when the answer was made, rounded up. The answer
// was made between a.Sent and a.At (unknown: within answerAge before now).
// It returns what is wrong, or "".
func leaseOf(n map[string]any, lo, hi uint64, a *Response) string {
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
	// When the answer was made, the expiration was (ttl-1, ttl] seconds
	// away, and LeaseWindow more: at most that from its receipt, more than
	// ttl-1 from its sending.
	sent, at := a.Sent, a.At
	if at.IsZero() {
		at = time.Now()
	}
	if sent.IsZero() {
		sent = at.Add(-answerAge)
	}
	full := time.Duration(ttl) * time.Second
	if exp.Sub(at) > full+LeaseWindow || exp.Sub(sent) <= full-time.Second {
		return "expiration " + s + " disagrees with the ttl"
	}
	return ""
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
