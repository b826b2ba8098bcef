// SPDX-License-Identifier: Apache-2.0

package conformance

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Divergence is one documented difference between v2bridge and a real etcd
// v2 server. Every entry has a section in docs/compatibility.md whose heading
// carries its ID (TestAllowListMatchesDocs keeps the two in step), and the
// suite fails on any difference no entry excuses.
type Divergence struct {
	ID    string
	Title string
	// Reference marks a difference where the reference (etcd 3.5, or the Go
	// it is built with) departs from etcd 3.4, which the bridge follows.
	Reference bool
	// Match reports whether d, a difference found in x, is this divergence.
	// Nil for divergences the comparison absorbs by normalising (their
	// counts come from the normaliser, which names the ID it applied).
	Match func(s *Session, x *Exchange, d Diff) bool
}

// MinLeaseTTL is the smallest lease TTL etcd v3 grants with its default
// election settings, in seconds.
const MinLeaseTTL = 2

// Divergences is the allow-list. Keep it small: a real bug is fixed in the
// bridge, not listed here.
var Divergences = []Divergence{
	{
		ID:    "index-numbering",
		Title: "Index numbers are v3 revisions",
		// Normalised: indexes are compared through IndexMap.
	},
	{
		ID:    "raft-index",
		Title: "X-Raft-Index is the revision and X-Raft-Term is the backend's term",
		// Normalised: only the presence of X-Raft-* is compared.
	},
	{
		ID:    "sorted-listings",
		Title: "Listings are always sorted",
		// Normalised: listings without sorted=true are compared unordered.
	},
	{
		ID:    "set-created-index",
		Title: "After a set over an existing key, reads show the key's original createdIndex",
		Match: func(s *Session, x *Exchange, d Diff) bool {
			if d.Field != "createdIndex" {
				return false
			}
			// v2 shows the createdIndex of a set that replaced the key, the
			// bridge an earlier write's.
			rk, rok := ordinal(d.Ref)
			bk, bok := ordinal(d.Bridge)
			return rok && bok && bk < rk && s.Replaced(d.NodeKey, rk)
		},
	},
	{
		ID:    "history-horizon",
		Title: "Watch history reaches back to the v3 compaction, not 1000 events",
		Match: func(s *Session, x *Exchange, d Diff) bool {
			_, hasWait := x.Req[Ref].Param("waitIndex")
			return x.Watch && hasWait && x.ErrorCode(Ref) == 401 && x.Resp[Bridge].Status == 200 &&
				x.ErrorCode(Bridge) == 0
		},
	},
	{
		ID:    "stream-history",
		Title: "A stream watch from a past waitIndex goes on with every later event",
		Match: func(s *Session, x *Exchange, d Diff) bool {
			_, hasWait := x.Req[Ref].Param("waitIndex")
			return x.Event && hasWait && x.Req[Ref].BoolParam("stream") &&
				len(x.Resp[Ref].Body) == 0 && x.JSON[Bridge] != nil
		},
	},
	{
		ID:    "ttl-minimum",
		Title: "TTLs below v3's minimum lease TTL are rounded up",
		Match: func(s *Session, x *Exchange, d Diff) bool {
			v, ok := x.Req[Ref].Param("ttl")
			if !ok {
				return false
			}
			ttl, err := strconv.ParseUint(v, 10, 64)
			if err != nil || ttl >= MinLeaseTTL {
				return false
			}
			if d.Field != "ttl" && d.Field != "expiration" {
				return false
			}
			// The bridge shows at most the minimum lease TTL.
			n := x.Node(Bridge, "node")
			bt, _ := numField(n, "ttl")
			return bt <= MinLeaseTTL
		},
	},
	{
		ID:        "ttl-overflow",
		Title:     "TTLs reaching past the year 2262",
		Reference: true,
		Match: func(s *Session, x *Exchange, d Diff) bool {
			v, ok := x.Req[Ref].Param("ttl")
			if !ok {
				return false
			}
			ttl, err := strconv.ParseUint(v, 10, 64)
			// v2 computes the expiration in int64 nanoseconds since 1970.
			limit := time.Unix(0, math.MaxInt64).Sub(time.Now()) / time.Second
			return err == nil && ttl >= uint64(limit)
		},
	},
	{
		ID:        "dir-ttl-update",
		Title:     "Updating a directory's TTL",
		Reference: true,
		Match: func(s *Session, x *Exchange, d Diff) bool {
			r := x.Req[Ref]
			v, _ := r.Param("value")
			if r.Method != "PUT" || !r.BoolParam("prevExist") || v != "" {
				return false
			}
			cause, _ := x.obj(Ref)["cause"].(string)
			n := x.Node(Bridge, "node")
			return x.ErrorCode(Ref) == 300 && strings.Contains(cause, "Not a file") &&
				x.Action(Bridge) == "update" && n != nil && n["dir"] == true
		},
	},
	{
		ID:    "limits",
		Title: "Keys and values the bridge refuses: too long, too deep, control characters, invalid UTF-8, too large",
		Match: func(s *Session, x *Exchange, d Diff) bool {
			if x.ErrorCode(Bridge) != 209 {
				return false
			}
			cause, _ := x.obj(Bridge)["cause"].(string)
			for _, c := range limitCauses {
				if strings.HasPrefix(cause, c) {
					return true
				}
			}
			return false
		},
	},
	{
		ID:    "members",
		Title: "/v2/members lists the bridge itself, without peer URLs; membership changes are refused",
		Match: func(s *Session, x *Exchange, d Diff) bool {
			return strings.HasPrefix(x.Req[Ref].Path, "/v2/members") && d.Field == "peerURLs" && d.Bridge == 0
		},
	},
	{
		ID:    "cors",
		Title: "No CORS handling: OPTIONS is refused and no Access-Control-* headers are sent",
		Match: func(s *Session, x *Exchange, d Diff) bool {
			return x.Req[Ref].Method == "OPTIONS" && x.Resp[Ref].Status == 200 && x.Resp[Bridge].Status == 405
		},
	},
	{
		ID:        "health-format",
		Title:     "/health answers as etcd 3.4 does (JSON, no reason field)",
		Reference: true,
		Match: func(s *Session, x *Exchange, d Diff) bool {
			if x.Req[Ref].Path != "/health" {
				return false
			}
			return d.Field == "Content-Type" && d.Bridge == "application/json" ||
				d.Field == "reason" && d.Bridge == "absent"
		},
	},
	{
		ID:        "redirect-status",
		Title:     "Unclean paths are redirected with 301, not 307",
		Reference: true,
		Match: func(s *Session, x *Exchange, d Diff) bool {
			r, b := x.Resp[Ref], x.Resp[Bridge]
			return r.Status == 307 && b.Status == 301 &&
				stripHost(r.Header.Get("Location")) == stripHost(b.Header.Get("Location")) &&
				(d.Field == "status" || d.Field == "Content-Type" || d.Field == "body")
		},
	},
	{
		ID:    "v2-auth",
		Title: "The v2 auth API is not served",
		Match: func(s *Session, x *Exchange, d Diff) bool {
			return strings.HasPrefix(x.Req[Ref].Path, "/v2/auth") && x.Resp[Bridge].Status == 404
		},
	},
}

// limitCauses are the causes of the bridge's own 209s (translate.CleanPath
// and the backend's request size mapping).
var limitCauses = []string{"key is longer than", "key is deeper than", "key contains a control character",
	"key is not valid UTF-8", "value too large", "key is too deep for the backend"}

// ordinal parses an IndexMap name of an exact write ("#k").
func ordinal(v any) (int, bool) {
	s, ok := v.(string)
	if !ok || !strings.HasPrefix(s, "#") || strings.HasSuffix(s, "+") {
		return 0, false
	}
	k, err := strconv.Atoi(s[1:])
	return k, err == nil
}

// Excuse returns the divergence that explains d, if any.
func Excuse(s *Session, x *Exchange, d Diff) *Divergence {
	for i := range Divergences {
		dv := &Divergences[i]
		if dv.Match != nil && dv.Match(s, x, d) {
			return dv
		}
	}
	return nil
}
