// SPDX-License-Identifier: Apache-2.0

package v2diff

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
//
// A Match excuses one difference at a time, so each one checks both halves:
// that the difference is in a field the divergence changes, and that the
// bridge's whole answer is the documented one (an entry must never excuse a
// wrong answer that happens to sit where a documented one would).
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

// Limits the bridge documents (docs/compatibility.md): the judge checks a
// refusal against these, not against the bridge's own code.
const (
	// MinLeaseTTL is the smallest lease TTL etcd v3 grants with its default
	// election settings, in seconds.
	MinLeaseTTL = 2
	// MaxLeaseTTL is v3's largest lease TTL, in seconds.
	MaxLeaseTTL = 9_000_000_000
	// maxKeyBytes and maxKeyDepth bound a key the bridge accepts.
	maxKeyBytes = 4096
	maxKeyDepth = 48
	// maxRequestBytes is etcd's default --max-request-bytes.
	maxRequestBytes = 3 << 19 // 1.5 MiB
)

// Divergences is the allow-list. Keep it small: a real bug is fixed in the
// bridge, not listed here.
var Divergences = []Divergence{
	{
		ID:    "index-numbering",
		Title: "Index numbers are v3 revisions × 1,000,000, numbering the events within a revision",
		// Normalised: indexes are compared through IndexMap.
	},
	{
		ID:    "raft-index",
		Title: "X-Raft-Index is X-Etcd-Index and X-Raft-Term is the backend's term",
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
		Match: matchSetCreatedIndex,
	},
	{
		ID:    "history-horizon",
		Title: "A bridge that just started replays v3 history for a waitIndex older than its kept events",
		Match: matchHistoryHorizon,
	},
	{
		ID:    "stream-history",
		Title: "A stream watch from a past waitIndex goes on with every later event",
		Match: matchStreamHistory,
	},
	{
		ID:    "ttl-minimum",
		Title: "ttl=0 lives a second",
		Match: matchTTLMinimum,
	},
	{
		ID:        "ttl-overflow",
		Title:     "TTLs reaching past the year 2262",
		Reference: true,
		Match:     matchTTLOverflow,
	},
	{
		ID:        "dir-ttl-update",
		Title:     "Updating a directory's TTL",
		Reference: true,
		Match:     matchDirTTLUpdate,
	},
	{
		ID:    "limits",
		Title: "Keys and values the bridge refuses: too long, too deep, control characters, invalid UTF-8, too large",
		Match: matchLimits,
	},
	{
		ID:    "members",
		Title: "/v2/members lists the live bridges, without peer URLs; membership changes are refused",
		Match: matchMembers,
	},
	{
		ID:    "cors",
		Title: "No CORS handling: OPTIONS is refused and no Access-Control-* headers are sent",
		Match: matchCORS,
	},
	{
		ID:        "health-format",
		Title:     "/health answers as etcd 3.4 does (JSON, no reason field)",
		Reference: true,
		Match:     matchHealthFormat,
	},
	{
		ID:        "redirect-status",
		Title:     "Unclean paths are redirected with 301, not 307",
		Reference: true,
		Match:     matchRedirectStatus,
	},
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

// matchSetCreatedIndex: the bridge shows the createdIndex of the file's
// original create where v2 shows the set that replaced it.
func matchSetCreatedIndex(s *Session, x *Exchange, d Diff) bool {
	if d.Field != "createdIndex" {
		return false
	}
	rk, ok := ordinal(d.Ref)
	if !ok {
		return false
	}
	orig, ok := s.OriginalCreate(d.NodeKey, s.Idx[Ref].At(rk))
	return ok && d.Bridge == s.Idx[Bridge].Name(orig)
}

// wholeAnswer are the places where two answers differ when one server
// answers with an error and the other one with a write or an event.
var wholeAnswer = []string{"status", "header X-Raft-Index", "header X-Raft-Term", "body.errorCode",
	"body.message", "body.cause", "body.index", "body.action", "body.node", "body.prevNode"}

// refusalAnswer adds X-Etcd-Index to wholeAnswer, for errors whose index
// is 0 (refused before the store is read, or not a v2 store error).
var refusalAnswer = append(append([]string(nil), wholeAnswer...), "header X-Etcd-Index")

// matchHistoryHorizon: v2 answers 401 where the bridge still has the
// history: it answers with the first matching event, as its write made it,
// or waits when there is none yet.
func matchHistoryHorizon(s *Session, x *Exchange, d Diff) bool {
	if !x.Watch || x.Event || !isError(x, Ref, 400, 401) || x.Resp[Bridge].Status != 200 {
		return false
	}
	if len(x.Resp[Bridge].Body) == 0 {
		return in(d.Where, []string{"status", "header X-Raft-Index", "header X-Raft-Term", "body"}) &&
			s.silentWatch(x) == ""
	}
	return in(d.Where, wholeAnswer) && s.historyAnswer(x) == ""
}

// matchStreamHistory: after its one event from history, v2's stream is
// silent; the bridge's goes on with the next events the watch is told of,
// each as its write made it.
func matchStreamHistory(s *Session, x *Exchange, d Diff) bool {
	wi, ok := UintParam(x.Req[Ref], "waitIndex")
	if !x.Event || !x.Req[Ref].BoolParam("stream") || !ok || wi == 0 || len(x.Resp[Ref].Body) != 0 ||
		d.Where != "body" {
		return false
	}
	// v2 found waitIndex in its history (it was not after v2's index when
	// the watch came) and sent that one event.
	st := s.watches[x.Req[Bridge]]
	if st == nil || wi > st.start[Ref] || st.refLines != 1 {
		return false
	}
	return s.streamLine(x, st) == ""
}

// matchTTLMinimum: ttl=0 of a write lives a second, as ttl=1.
func matchTTLMinimum(s *Session, x *Exchange, d Diff) bool {
	ttl, ok := UintParam(x.Req[Ref], "ttl")
	m := x.Req[Ref].Method
	if !ok || ttl != 0 || m != "PUT" && m != "POST" || x.Watch ||
		!in(x.Action(Bridge), []string{"set", "create", "update", "compareAndSwap"}) ||
		!in(d.Where, []string{"body.node.ttl", "body.node.expiration"}) {
		return false
	}
	return leaseOf(x.Node(Bridge, "node"), 1, 1, x.Resp[Bridge]) == ""
}

// matchTTLOverflow: v2 overflows an expiration past 2262; the bridge honours
// the TTL up to MaxLeaseTTL and refuses a larger one with 202.
func matchTTLOverflow(s *Session, x *Exchange, d Diff) bool {
	ttl, ok := UintParam(x.Req[Ref], "ttl")
	if !ok || ttl < overflowTTL() || x.Req[Ref].Method == "DELETE" || x.ErrorCode(Ref) != 0 {
		return false
	}
	if ttl > MaxLeaseTTL {
		return in(d.Where, refusalAnswer) &&
			refusal(x, 202, "The given TTL in POST form is not a number", "ttl exceeds the maximum of 9000000000")
	}
	if !in(d.Where, []string{"body.node.ttl", "body.node.expiration"}) || !overflowedInRef(x) {
		return false
	}
	return leaseOf(x.Node(Bridge, "node"), ttl-ttlTolerance, ttl, x.Resp[Bridge]) == ""
}

// overflowTTL is the smallest TTL whose expiration v2 cannot represent (it
// counts nanoseconds since 1970 in an int64).
func overflowTTL() uint64 {
	return uint64(time.Until(time.Unix(0, math.MaxInt64))/time.Second) + 1
}

// overflowedInRef: a set or create made the node permanent, an update or
// compare-and-swap made it expire at once.
func overflowedInRef(x *Exchange) bool {
	n := x.Node(Ref, "node")
	if n == nil {
		return false
	}
	switch x.Action(Ref) {
	case "set", "create":
		return n["ttl"] == nil && n["expiration"] == nil
	case "update", "compareAndSwap":
		if ttl, ok := intField(n, "ttl"); ok && ttl > 0 {
			return false
		}
		if n["expiration"] == nil {
			return true
		}
		exp, err := time.Parse(time.RFC3339Nano, str(n["expiration"]))
		return err == nil && exp.Before(time.Now())
	}
	return false
}

// matchDirTTLUpdate: etcd 3.5 fails an update of a directory with 300; the
// bridge updates it as 3.4 does.
func matchDirTTLUpdate(s *Session, x *Exchange, d Diff) bool {
	r := x.Req[Ref]
	if v, _ := r.Param("value"); r.Method != "PUT" || !r.BoolParam("prevExist") || v != "" {
		return false
	}
	// 3.5's 300 carries index 0, so X-Etcd-Index differs too.
	if !isError(x, Ref, 500, 300) || !strings.Contains(str(x.Object(Ref)["cause"]), "Not a file") ||
		!in(d.Where, refusalAnswer) {
		return false
	}
	return dirUpdate(x) == ""
}

// dirUpdate checks the bridge's answer to a directory update: the same
// directory, its createdIndex kept, a later modifiedIndex, and the TTL the
// request asked for (none without ttl). It returns what is wrong, or "".
func dirUpdate(x *Exchange) string {
	n, prev := x.Node(Bridge, "node"), x.Node(Bridge, "prevNode")
	key := KeyOfPath(x.Req[Bridge].Path)
	switch {
	case x.Resp[Bridge].Status != 200 || x.Action(Bridge) != "update":
		return "not a 200 update"
	case n == nil || prev == nil:
		return "node or prevNode missing"
	case n["key"] != key || prev["key"] != key || n["dir"] != true || prev["dir"] != true:
		return "not the directory updated"
	case n["value"] != nil || n["nodes"] != nil:
		return "a value or children"
	}
	ci, _ := NumField(n, "createdIndex")
	pci, _ := NumField(prev, "createdIndex")
	mi, _ := NumField(n, "modifiedIndex")
	pmi, _ := NumField(prev, "modifiedIndex")
	if ci == 0 || ci != pci || mi <= pmi || x.Resp[Bridge].Header.Get("X-Etcd-Index") != strconv.FormatUint(mi, 10) {
		return "indexes"
	}
	ttl, ok := UintParam(x.Req[Bridge], "ttl")
	if !ok {
		if n["ttl"] != nil || n["expiration"] != nil {
			return "a TTL without ttl"
		}
		return ""
	}
	return leaseOf(n, max(ttl, 1)-ttlTolerance, max(ttl, 1), x.Resp[Bridge])
}

// matchLimits: the bridge refuses a key or value over a documented limit
// with 209; the cause must name a limit the request really exceeds.
func matchLimits(s *Session, x *Exchange, d Diff) bool {
	if !in(d.Where, refusalAnswer) {
		return false
	}
	if b := x.Resp[Bridge]; x.Req[Bridge].Method == "HEAD" {
		// No body to name the limit: any exceeded key limit will do.
		return b.Status == 400 && len(b.Body) == 0 && b.Header.Get("X-Etcd-Index") == "0" &&
			exceededLimit(x.Req[Bridge], "")
	}
	cause := str(x.Object(Bridge)["cause"])
	return refusal(x, 209, "Invalid field", cause) && exceededLimit(x.Req[Bridge], cause)
}

// refusal reports whether the bridge refused the request before reading
// the store, as v2 refuses a request it cannot parse: HTTP 400 and error
// code with its message and cause, index 0 in the body and in
// X-Etcd-Index, and no X-Raft-* headers (v2 sends them with writes and
// reads only).
func refusal(x *Exchange, code int, message, cause string) bool {
	b, obj := x.Resp[Bridge], x.Object(Bridge)
	index, ok := NumField(obj, "index")
	return isError(x, Bridge, 400, code) && obj["message"] == message && obj["cause"] == cause && ok && index == 0 &&
		len(obj) == 4 && b.Header.Get("X-Etcd-Index") == "0" &&
		b.Header.Get("X-Raft-Index") == "" && b.Header.Get("X-Raft-Term") == ""
}

// limitChecks pair each refusal's cause with the test of the request that
// justifies it.
var limitChecks = []struct {
	cause    string
	exceeded func(key, value string) bool
}{
	{"key is not valid UTF-8", func(k, _ string) bool { return !utf8Valid(k) }},
	{"value is not valid UTF-8", func(_, v string) bool { return !utf8Valid(v) }},
	{"key contains a control character", func(k, _ string) bool { return hasControl(k) }},
	{"key is longer than 4096 bytes", func(k, _ string) bool { return len(cleanKey(k)) > maxKeyBytes }},
	{"key is deeper than 48 levels", func(k, _ string) bool { return strings.Count(cleanKey(k), "/") > maxKeyDepth }},
	{"value too large", func(k, v string) bool { return v3RequestBytes(k, v) > maxRequestBytes }},
}

// exceededLimit reports whether r exceeds the limit cause names ("" for
// any key limit: a HEAD answer has no body to name one).
func exceededLimit(r *Request, cause string) bool {
	key := rawKeyOfPath(r.Path)
	value, _ := r.Param("value")
	for _, c := range limitChecks {
		if cause == "" && strings.HasPrefix(c.cause, "key") && c.exceeded(key, value) {
			return true
		}
		if cause != "" && strings.HasPrefix(cause, c.cause) && c.exceeded(key, value) {
			return true
		}
	}
	return false
}

// v3RequestBytes bounds from above the size of the v3 transaction a write
// of value at key makes: the value, and the key and a marker for the key
// and each ancestor, read and guarded.
func v3RequestBytes(key, value string) int {
	depth := strings.Count(cleanKey(key), "/")
	return len(value) + (2*depth+4)*(len(key)+64)
}

// matchMembers: the bridge lists itself without peer URLs.
func matchMembers(s *Session, x *Exchange, d Diff) bool {
	return x.Req[Ref].Method == "GET" && strings.HasPrefix(x.Req[Ref].Path, "/v2/members") &&
		in(d.Where, []string{"body.members[0].peerURLs", "body.peerURLs"}) && d.Bridge == 0
}

// matchCORS: OPTIONS is a method the bridge does not route.
func matchCORS(s *Session, x *Exchange, d Diff) bool {
	b := x.Resp[Bridge]
	return x.Req[Ref].Method == "OPTIONS" && x.Resp[Ref].Status == 200 && b.Status == 405 &&
		b.Header.Get("Allow") == "HEAD,GET,PUT,POST,DELETE" && strings.TrimSpace(string(b.Body)) == "Method Not Allowed" &&
		in(d.Where, []string{"status", "header Allow", "header Content-Type", "body"})
}

// matchHealthFormat: /health as 3.4 answers it.
func matchHealthFormat(s *Session, x *Exchange, d Diff) bool {
	if x.Req[Ref].Path != "/health" {
		return false
	}
	return d.Where == "header Content-Type" && d.Bridge == "application/json" ||
		d.Where == "body.reason" && d.Bridge == "absent"
}

// matchRedirectStatus: 301 to the same clean path where the reference
// (newer Go) answers 307.
func matchRedirectStatus(s *Session, x *Exchange, d Diff) bool {
	r, b := x.Resp[Ref], x.Resp[Bridge]
	loc := stripHost(b.Header.Get("Location"))
	return r.Status == 307 && b.Status == 301 && loc != "" && stripHost(r.Header.Get("Location")) == loc &&
		movedPage(b) && in(d.Where, []string{"status", "header Content-Type", "body"})
}

// movedPage: a 301's body is empty, or the small page Go writes for one.
func movedPage(b *Response) bool {
	body, ct := string(b.Body), b.Header.Get("Content-Type")
	return body == "" && ct == "" ||
		ct == "text/html; charset=utf-8" && strings.HasPrefix(body, "<a href=") &&
			strings.Contains(body, ">Moved Permanently</a>")
}
