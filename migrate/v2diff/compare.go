// SPDX-License-Identifier: Apache-2.0

package v2diff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// IndexMap maps one server's index numbers to ordinals. Every write that
// succeeded on both servers is registered with its node.modifiedIndex, in
// the order the writes happened, so write #k has the same ordinal on both
// servers whatever its number. Any other index (a GET's X-Etcd-Index, an
// error's index, a revision the bridge spent on housekeeping) is placed
// between the known writes: "#k" is write k itself, "#k+" lies after write k
// and before write k+1. Only the relation to the writes is compared, never
// the numbers.
type IndexMap struct {
	known []uint64 // ascending
}

// Add registers a write index (idempotent).
func (m *IndexMap) Add(i uint64) {
	if i == 0 {
		return
	}
	n := sort.Search(len(m.known), func(j int) bool { return m.known[j] >= i })
	if n < len(m.known) && m.known[n] == i {
		return
	}
	m.known = append(m.known, 0)
	copy(m.known[n+1:], m.known[n:])
	m.known[n] = i
}

// Len is the number of registered writes.
func (m *IndexMap) Len() int { return len(m.known) }

// At is the index of write #k (1-based).
func (m *IndexMap) At(k int) uint64 {
	if k < 1 || k > len(m.known) {
		return 0
	}
	return m.known[k-1]
}

// Floor returns the ordinal of the last write at or before i, and whether i
// is that write itself.
func (m *IndexMap) Floor(i uint64) (int, bool) {
	n := sort.Search(len(m.known), func(j int) bool { return m.known[j] > i })
	return n, n > 0 && m.known[n-1] == i
}

// Ceil returns the ordinal of the first write at or after i (Len()+1 if none).
func (m *IndexMap) Ceil(i uint64) int {
	return sort.Search(len(m.known), func(j int) bool { return m.known[j] >= i }) + 1
}

// Name is the normalised form of index i: "#k" or "#k+".
func (m *IndexMap) Name(i uint64) string {
	k, exact := m.Floor(i)
	if exact {
		return "#" + strconv.Itoa(k)
	}
	return "#" + strconv.Itoa(k) + "+"
}

// Session is the comparison state of one run of requests against the two
// servers (one scripted case, or one random sequence).
type Session struct {
	Idx [2]*IndexMap
	// lives holds, per (reference) key, each file that lived there, for the
	// set-created-index divergence. Raw index numbers, not ordinals: an
	// event registered late (an expiry seen by a watch) shifts ordinals.
	lives map[string][]*life
	// written holds the bridge's side of every registered write, by its
	// index: the event a watch gets from history must be the one its write
	// made (events.go).
	written map[uint64]written
	// watches follows each watch, keyed by the bridge's request (all the
	// exchanges of one watch share its requests).
	watches map[*Request]*watchState
	// Tolerated counts the differences excused, per divergence id.
	Tolerated map[string]int
	// apart is how far apart in time the two answers Compare is judging
	// may have been made (0: unknown, or a few milliseconds): each server
	// computes an expiration from its own moment.
	apart time.Duration
}

// life is one file at a key, from the write that created it to its removal:
// v2 replaces the node on every set over it (new createdIndex), while the
// bridge's v3 key keeps the CreateRevision of the create.
type life struct {
	refCreated, bridgeCreated uint64          // the creating write on each side
	replaced                  map[uint64]bool // reference indexes of the sets that replaced it
}

// NewSession starts a comparison session.
func NewSession() *Session {
	return &Session{Idx: [2]*IndexMap{{}, {}}, lives: map[string][]*life{},
		written: map[uint64]written{}, watches: map[*Request]*watchState{}, Tolerated: map[string]int{}}
}

// Diff is one difference between the two servers' answers.
type Diff struct {
	Where   string // "status", "header X-Etcd-Index", "body.node.nodes[/a].ttl", ...
	Field   string // the last element: status, a header name, or a JSON field
	NodeKey string // the reference's key of the node holding Field, if any
	Ref     any
	Bridge  any
	Note    string
}

func (d Diff) String() string {
	s := fmt.Sprintf("%s: ref %v, bridge %v", d.Where, show(d.Ref), show(d.Bridge))
	if d.Note != "" {
		s += " (" + d.Note + ")"
	}
	return s
}

func show(v any) string {
	switch x := v.(type) {
	case nil:
		return "<absent>"
	case string:
		return strconv.Quote(x)
	case []byte:
		return strconv.Quote(string(x))
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// Exchange is one request answered by both servers.
type Exchange struct {
	Req  [2]*Request
	Resp [2]*Response
	// JSON holds each body decoded (nil if it is not one JSON value).
	JSON [2]any
	// Watch marks the answer to a watch request (Req); Event marks one event
	// line of it (Resp holds just that line).
	Watch, Event bool
}

// Object is side s's body as an object (nil if none).
func (x *Exchange) Object(s Side) map[string]any {
	m, _ := x.JSON[s].(map[string]any)
	return m
}

// ErrorCode is the v2 errorCode of side s's answer, 0 if it is not an error.
func (x *Exchange) ErrorCode(s Side) int {
	if m := x.Object(s); m != nil {
		if n, ok := m["errorCode"].(json.Number); ok {
			c, _ := n.Int64()
			return int(c)
		}
	}
	return 0
}

// Action is the v2 action of side s's answer ("" for errors).
func (x *Exchange) Action(s Side) string {
	if m := x.Object(s); m != nil {
		a, _ := m["action"].(string)
		return a
	}
	return ""
}

// Node returns side s's body.node as an object.
func (x *Exchange) Node(s Side, field string) map[string]any {
	if m := x.Object(s); m != nil {
		n, _ := m[field].(map[string]any)
		return n
	}
	return nil
}

// DecodeJSON decodes a body as the comparison sees it: one JSON value, its
// numbers kept as json.Number; nil if the body is not one JSON value.
func DecodeJSON(b []byte) any {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	if dec.More() {
		return nil
	}
	return v
}

// NumField is field f of a decoded object as an unsigned number (an index).
func NumField(m map[string]any, f string) (uint64, bool) {
	n, ok := m[f].(json.Number)
	if !ok {
		return 0, false
	}
	u, err := strconv.ParseUint(string(n), 10, 64)
	return u, err == nil
}

// Tolerances for what differs between any two v2 servers answering the same
// request a few milliseconds apart: the expiration each computed from its own
// clock (the bridge's up to LeaseWindow after the TTL), the ttl each rounded
// up from it at its own moment.
const (
	expirationTolerance = 500 * time.Millisecond
	ttlTolerance        = 1
)

// LeaseWindow is how much later than its TTL the bridge may expire a key
// (translate.LeaseWindow): a key written just after its shared lease was
// granted shares the lease's expiration.
const LeaseWindow = 100 * time.Millisecond

// NewExchange decodes both answers.
func NewExchange(reqs [2]*Request, resps [2]*Response) *Exchange {
	x := &Exchange{Req: reqs, Resp: resps}
	for i, r := range resps {
		if r != nil {
			x.JSON[i] = DecodeJSON(r.Body)
		}
	}
	return x
}

// Register records the write both servers just made, so its index gets the
// same ordinal on both sides. It runs before the exchange is compared.
func (s *Session) Register(x *Exchange) {
	writeOK := func(side Side) (uint64, bool) {
		m := x.Object(side)
		if m == nil || m["errorCode"] != nil || x.Event && x.Resp[side].Status != 200 {
			return 0, false
		}
		a, _ := m["action"].(string)
		if a == "" || a == "get" {
			return 0, false
		}
		if n, _ := m["node"].(map[string]any); n != nil {
			return NumField(n, "modifiedIndex")
		}
		// noValueOnSuccess: a write's X-Etcd-Index is its own index.
		u, err := strconv.ParseUint(x.Resp[side].Header.Get("X-Etcd-Index"), 10, 64)
		return u, err == nil
	}
	ri, rok := writeOK(Ref)
	bi, bok := writeOK(Bridge)
	if !rok || !bok {
		return
	}
	s.Idx[Ref].Add(ri)
	s.Idx[Bridge].Add(bi)
	s.registerLife(x, ri, bi)
	s.written[bi] = record(x, bi)
}

// registerLife records a write that created a file (a new life) or, a set
// over an existing file, replaced it.
func (s *Session) registerLife(x *Exchange, ri, bi uint64) {
	action := x.Action(Ref)
	var key string
	var fresh, replace bool
	if n := x.Node(Ref, "node"); n != nil {
		if n["dir"] != nil {
			return
		}
		key = str(n["key"])
		prev := x.Node(Ref, "prevNode")
		ci, _ := NumField(n, "createdIndex")
		replace = action == "set" && prev != nil && prev["dir"] == nil
		fresh = !replace && ci == ri
	} else {
		// noValueOnSuccess: 201 is a new node, a set's 200 a replaced file
		// (a set over a directory fails); POST does not tell its key.
		if x.Req[Ref].BoolParam("dir") || x.Req[Ref].Method == "POST" {
			return
		}
		key = KeyOfPath(x.Req[Ref].Path)
		fresh = x.Resp[Ref].Status == 201
		replace = action == "set" && x.Resp[Ref].Status == 200
	}
	switch {
	case replace:
		if l := s.lifeAt(key, ri); l != nil {
			l.replaced[ri] = true
		}
	case fresh && !s.hasLife(key, ri):
		s.lives[key] = append(s.lives[key], &life{refCreated: ri, bridgeCreated: bi, replaced: map[uint64]bool{}})
	}
}

// lifeAt is the life of key that the reference index before ri belongs to:
// the latest one created before ri.
func (s *Session) lifeAt(key string, ri uint64) *life {
	var best *life
	for _, l := range s.lives[key] {
		if l.refCreated < ri && (best == nil || l.refCreated > best.refCreated) {
			best = l
		}
	}
	return best
}

// hasLife reports whether the life created at ri is known (a watch event
// registers its write a second time).
func (s *Session) hasLife(key string, ri uint64) bool {
	for _, l := range s.lives[key] {
		if l.refCreated == ri {
			return true
		}
	}
	return false
}

// OriginalCreate returns the bridge's index of the write that created the
// file at key which the set at reference index ri replaced, if ri was such
// a set.
func (s *Session) OriginalCreate(key string, ri uint64) (uint64, bool) {
	l := s.lifeAt(key, ri)
	if l == nil || !l.replaced[ri] {
		return 0, false
	}
	return l.bridgeCreated, true
}

// KeyOfPath is the v2 key a /v2/keys URL path names.
func KeyOfPath(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	p = path.Clean("/" + strings.TrimPrefix(p, "/v2/keys"))
	return p
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

var inOrderName = regexp.MustCompile(`\d{20}`)

// normKey normalises the in-order (POST) names in a key: the name is the
// index v2 gave the create, so it is mapped like an index, to the ordinal of
// the write that created it (the bridge picks the name before it knows its
// revision, so the name may be a little lower than the createdIndex when
// another write interleaved; "the first write at or after the name" is that
// create either way).
func (s *Session) normKey(side Side, key string) string {
	return inOrderName.ReplaceAllStringFunc(key, func(d string) string {
		u, err := strconv.ParseUint(d, 10, 64)
		if err != nil {
			return d
		}
		return "<#" + strconv.Itoa(s.Idx[side].Ceil(u)) + ">"
	})
}

// diffCause compares the causes of two errors, normalised.
func (s *Session) diffCause(x *Exchange) []Diff {
	r, b := x.Object(Ref)["cause"], x.Object(Bridge)["cause"]
	nr, nb := s.normCause(x, Ref), s.normCause(x, Bridge)
	if nr != nb || (r == nil) != (b == nil) {
		return []Diff{{Where: "body.cause", Field: "cause", Ref: r, Bridge: b, Note: fmt.Sprintf("normalised %q vs %q", nr, nb)}}
	}
	if r != b {
		s.Tolerated["index-numbering"]++
	}
	return nil
}

var compared = regexp.MustCompile(`\[(\S*) != (\S*)\]`)

// normCause normalises what side's error cause carries that differs
// between servers: in-order names in paths, and the indexes of a 101 or
// 401 cause.
func (s *Session) normCause(x *Exchange, side Side) string {
	cause := str(x.Object(side)["cause"])
	switch x.ErrorCode(side) {
	case 101:
		// v2 writes "[prevValue != value]", "[prevIndex != modifiedIndex]",
		// or both in that order when both compares failed. Only the index
		// pair is mapped: values are compared as they are, numbers or not.
		pairs := compared.FindAllStringSubmatchIndex(cause, -1)
		r := x.Req[side]
		if len(pairs) == 0 || r == nil {
			return cause
		}
		if _, ok := r.Param("prevIndex"); !ok {
			return cause
		}
		pv, hasValue := r.Param("prevValue")
		p := pairs[len(pairs)-1]
		left, right := cause[p[2]:p[3]], cause[p[4]:p[5]]
		if len(pairs) == 1 && hasValue && left == pv {
			return cause // the value pair: only the value compare failed
		}
		a, errA := strconv.ParseUint(left, 10, 64)
		b, errB := strconv.ParseUint(right, 10, 64)
		if errA != nil || errB != nil {
			return cause
		}
		return cause[:p[0]] + "[" + s.Idx[side].Name(a) + " != " + s.Idx[side].Name(b) + "]" + cause[p[1]:]
	case 401:
		// "[oldest kept index/waitIndex]". Which event is the oldest a
		// server still keeps depends on every client's writes and on how
		// they interleaved, which differs between two servers fed by
		// concurrent sequences: compared is that it is newer than the
		// waitIndex (the history really was cleared) and not newer than
		// the current index (the error's index), not which it is.
		current, _ := NumField(x.Object(side), "index")
		return clearedIndexes.ReplaceAllStringFunc(cause, func(m string) string {
			p := clearedIndexes.FindStringSubmatch(m)
			a, _ := strconv.ParseUint(p[1], 10, 64)
			b, _ := strconv.ParseUint(p[2], 10, 64)
			oldest := "newer than " + s.Idx[side].Name(b)
			if a <= b || a > current {
				oldest = s.Idx[side].Name(a) // not cleared, or past the present: shown as is, so it differs
			}
			return "[" + oldest + "/" + s.Idx[side].Name(b) + "]"
		})
	}
	return s.normKey(side, cause)
}

var clearedIndexes = regexp.MustCompile(`\[(\d+)/(\d+)\]`)

// Compare compares an exchange and returns its differences.
func (s *Session) Compare(x *Exchange, sortedListing bool) []Diff {
	var out []Diff
	r, b := x.Resp[Ref], x.Resp[Bridge]
	s.apart = answersApart(r, b)
	defer func() { s.apart = 0 }()
	if r.Status != b.Status {
		out = append(out, Diff{Where: "status", Field: "status", Ref: r.Status, Bridge: b.Status})
	}
	out = append(out, s.compareHeaders(x)...)
	out = append(out, s.followWatch(x)...)
	// Bodies.
	jr, jb := x.JSON[Ref], x.JSON[Bridge]
	switch {
	case jr != nil && jb != nil:
		if !x.Watch || len(r.Body) > 0 {
			if bytes.HasSuffix(r.Body, []byte("\n")) != bytes.HasSuffix(b.Body, []byte("\n")) {
				out = append(out, Diff{Where: "body trailing newline", Field: "body",
					Ref: bytes.HasSuffix(r.Body, []byte("\n")), Bridge: bytes.HasSuffix(b.Body, []byte("\n"))})
			}
		}
		code := x.ErrorCode(Ref)
		diffs := s.diffValue("body", "", "", jr, jb, code, sortedListing)
		if code != 0 && x.Object(Ref) != nil && x.Object(Bridge) != nil {
			diffs = append(diffs, s.diffCause(x)...)
		}
		if len(diffs) == 0 {
			// v2 writes its fields in a fixed order (key, value, dir,
			// expiration, ttl, nodes, modifiedIndex, createdIndex).
			if or, ob := fieldOrders(r.Body), fieldOrders(b.Body); or != ob {
				diffs = append(diffs, Diff{Where: "body field order", Field: "body", Ref: or, Bridge: ob})
			}
		}
		out = append(out, diffs...)
	case jr == nil && jb == nil:
		if !bytes.Equal(r.Body, b.Body) {
			out = append(out, Diff{Where: "body", Field: "body", Ref: string(r.Body), Bridge: string(b.Body)})
		}
	default:
		out = append(out, Diff{Where: "body", Field: "body", Ref: string(r.Body), Bridge: string(b.Body),
			Note: "only one body is JSON"})
	}
	return out
}

// CompareNode compares two decoded v2 nodes (objects of a body's "node"
// field) by the rules of Compare: indexes through the index maps, ttl and
// expiration within the tolerances, listings in key order.
func (s *Session) CompareNode(where string, r, b map[string]any) []Diff {
	return s.diffValue(where, "", "", r, b, 0, true)
}

func (s *Session) compareHeaders(x *Exchange) []Diff {
	var out []Diff
	r, b := x.Resp[Ref].Header, x.Resp[Bridge].Header
	for _, h := range []string{"Content-Type", "Allow"} {
		if r.Get(h) != b.Get(h) {
			out = append(out, Diff{Where: "header " + h, Field: h, Ref: r.Get(h), Bridge: b.Get(h)})
		}
	}
	if lr, lb := r.Get("Location"), b.Get("Location"); stripHost(lr) != stripHost(lb) {
		out = append(out, Diff{Where: "header Location", Field: "Location", Ref: lr, Bridge: lb})
	}
	// Present on both or on neither; the values are ids and raft numbers,
	// which differ between any two clusters.
	for _, h := range []string{"X-Etcd-Cluster-Id", "X-Raft-Index", "X-Raft-Term"} {
		if (len(r.Values(h)) > 0) != (len(b.Values(h)) > 0) {
			out = append(out, Diff{Where: "header " + h, Field: h, Ref: r.Get(h), Bridge: b.Get(h), Note: "presence"})
		}
	}
	// X-Raft-Index: the bridge sends the revision (divergence raft-index).
	if r.Get("X-Raft-Index") != "" && b.Get("X-Raft-Index") != "" && r.Get("X-Raft-Index") != b.Get("X-Raft-Index") {
		s.Tolerated["raft-index"]++
	}
	xr, xb := r.Values("X-Etcd-Index"), b.Values("X-Etcd-Index")
	if len(xr) != len(xb) {
		out = append(out, Diff{Where: "header X-Etcd-Index", Field: "X-Etcd-Index", Ref: xr, Bridge: xb, Note: "count"})
	} else if len(xr) > 0 {
		ir, er := strconv.ParseUint(xr[0], 10, 64)
		ib, eb := strconv.ParseUint(xb[0], 10, 64)
		if (er == nil) != (eb == nil) {
			out = append(out, Diff{Where: "header X-Etcd-Index", Field: "X-Etcd-Index", Ref: xr[0], Bridge: xb[0]})
		} else if er == nil && !s.sameFloor(ir, ib) {
			out = append(out, Diff{Where: "header X-Etcd-Index", Field: "X-Etcd-Index",
				Ref: s.Idx[Ref].Name(ir), Bridge: s.Idx[Bridge].Name(ib), Note: "relative to the writes"})
		} else if ir != ib {
			s.Tolerated["index-numbering"]++
		}
	}
	return out
}

func stripHost(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.IndexByte(u[i+3:], '/'); j >= 0 {
			return u[i+3+j:]
		}
		return ""
	}
	return u
}

// sameFloor compares a current-index style number (X-Etcd-Index, an error's
// index): the same last write before it on both sides. The index 0 of a
// request-parse error is kept apart from every real index.
func (s *Session) sameFloor(r, b uint64) bool {
	if r == 0 || b == 0 {
		return r == b
	}
	fr, _ := s.Idx[Ref].Floor(r)
	fb, _ := s.Idx[Bridge].Floor(b)
	return fr == fb
}

// diffValue walks two decoded JSON values. nodeKey is the reference's key
// of the enclosing node, field the name of v in its parent.
func (s *Session) diffValue(where, field, nodeKey string, r, b any, code int, sorted bool) []Diff {
	switch field {
	case "modifiedIndex", "createdIndex":
		return s.diffIndex(where, field, nodeKey, r, b, true)
	case "index":
		if code != 0 {
			return s.diffIndex(where, field, nodeKey, r, b, false)
		}
	case "expiration":
		return diffExpiration(where, nodeKey, r, b, s.apart)
	case "ttl":
		return diffTTL(where, nodeKey, r, b)
	case "key":
		rs, bs := str(r), str(b)
		nr, nb := s.normKey(Ref, rs), s.normKey(Bridge, bs)
		if _, ok := r.(string); !ok || nr != nb {
			return []Diff{{Where: where, Field: field, NodeKey: nodeKey, Ref: r, Bridge: b}}
		}
		if rs != bs {
			s.Tolerated["index-numbering"]++
		}
		return nil
	case "cause":
		if code != 0 && where == "body.cause" {
			return nil // an error's cause: diffCause, which knows the request
		}
	}
	switch rv := r.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return []Diff{{Where: where, Field: field, NodeKey: nodeKey, Ref: r, Bridge: b}}
		}
		key := nodeKey
		if k, ok := rv["key"].(string); ok {
			key = k
		}
		var out []Diff
		for _, f := range unionKeys(rv, bv) {
			w := where + "." + f
			if f == "nodes" {
				out = append(out, s.diffNodes(w, key, rv[f], bv[f], code, sorted)...)
				continue
			}
			out = append(out, s.diffValue(w, f, key, rv[f], bv[f], code, sorted)...)
		}
		return out
	case []any:
		bv, ok := b.([]any)
		if !ok || len(rv) != len(bv) {
			return []Diff{{Where: where, Field: field, NodeKey: nodeKey, Ref: r, Bridge: b}}
		}
		var out []Diff
		for i := range rv {
			out = append(out, s.diffValue(fmt.Sprintf("%s[%d]", where, i), field, nodeKey, rv[i], bv[i], code, sorted)...)
		}
		return out
	default:
		if !equalScalar(r, b) {
			return []Diff{{Where: where, Field: field, NodeKey: nodeKey, Ref: r, Bridge: b}}
		}
		return nil
	}
}

func equalScalar(a, b any) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	return fmt.Sprintf("%T:%v", a, a) == fmt.Sprintf("%T:%v", b, b)
}

func unionKeys(a, b map[string]any) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range []map[string]any{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

// diffNodes compares two listings. Without sorted=true v2 lists a directory
// in Go map order, so both listings are put in key order first; the bridge
// always lists in key order (divergence sorted-listings, harmless).
func (s *Session) diffNodes(where, parentKey string, r, b any, code int, sorted bool) []Diff {
	rl, rok := r.([]any)
	bl, bok := b.([]any)
	if !rok || !bok {
		return []Diff{{Where: where, Field: "nodes", NodeKey: parentKey, Ref: r, Bridge: b}}
	}
	keyOf := func(side Side, v any) string {
		m, _ := v.(map[string]any)
		return s.normKey(side, str(m["key"]))
	}
	if !sorted {
		rl = append([]any(nil), rl...)
		bl = append([]any(nil), bl...)
		before := keysOf(rl, func(v any) string { return keyOf(Ref, v) })
		sort.SliceStable(rl, func(i, j int) bool { return keyOf(Ref, rl[i]) < keyOf(Ref, rl[j]) })
		sort.SliceStable(bl, func(i, j int) bool { return keyOf(Bridge, bl[i]) < keyOf(Bridge, bl[j]) })
		if before != keysOf(rl, func(v any) string { return keyOf(Ref, v) }) {
			s.Tolerated["sorted-listings"]++
		}
	}
	rk := keysOf(rl, func(v any) string { return keyOf(Ref, v) })
	bk := keysOf(bl, func(v any) string { return keyOf(Bridge, v) })
	if rk != bk {
		return []Diff{{Where: where, Field: "nodes", NodeKey: parentKey, Ref: rk, Bridge: bk, Note: "listed keys"}}
	}
	var out []Diff
	for i := range rl {
		out = append(out, s.diffValue(fmt.Sprintf("%s[%s]", where, keyOf(Ref, rl[i])), "", parentKey, rl[i], bl[i], code, sorted)...)
	}
	return out
}

func keysOf(l []any, f func(any) string) string {
	ks := make([]string, len(l))
	for i, v := range l {
		ks[i] = f(v)
	}
	return strings.Join(ks, " ")
}

// diffIndex compares index numbers through the index maps. Node indexes
// (exact) must name the same write; current-index numbers must fall after
// the same write.
func (s *Session) diffIndex(where, field, nodeKey string, r, b any, exact bool) []Diff {
	rn, rok := r.(json.Number)
	bn, bok := b.(json.Number)
	if !rok || !bok {
		if r == nil && b == nil {
			return nil
		}
		return []Diff{{Where: where, Field: field, NodeKey: nodeKey, Ref: r, Bridge: b}}
	}
	ri, _ := strconv.ParseUint(string(rn), 10, 64)
	bi, _ := strconv.ParseUint(string(bn), 10, 64)
	var same bool
	if exact {
		same = s.Idx[Ref].Name(ri) == s.Idx[Bridge].Name(bi)
	} else {
		same = s.sameFloor(ri, bi)
	}
	if !same {
		return []Diff{{Where: where, Field: field, NodeKey: nodeKey,
			Ref: s.Idx[Ref].Name(ri), Bridge: s.Idx[Bridge].Name(bi), Note: fmt.Sprintf("raw %d vs %d", ri, bi)}}
	}
	if ri != bi {
		s.Tolerated["index-numbering"]++
	}
	return nil
}

// answersApart is the longest time that can lie between the moments two
// servers made their answers: from the first one's sending to the other's
// receipt (0 when a time is unknown). Under a slow machine a client that
// asks one server and then the other gets expirations that far apart.
func answersApart(r, b *Response) time.Duration {
	if r == nil || b == nil || r.Sent.IsZero() || r.At.IsZero() || b.Sent.IsZero() || b.At.IsZero() {
		return 0
	}
	return max(b.At.Sub(r.Sent), r.At.Sub(b.Sent), 0)
}

// diffExpiration compares two expirations: within expirationTolerance of
// each other, and apart more (see answersApart).
func diffExpiration(where, nodeKey string, r, b any, apart time.Duration) []Diff {
	if r == nil && b == nil {
		return nil
	}
	rs, rok := r.(string)
	bs, bok := b.(string)
	if !rok || !bok {
		return []Diff{{Where: where, Field: "expiration", NodeKey: nodeKey, Ref: r, Bridge: b}}
	}
	rt, er := time.Parse(time.RFC3339Nano, rs)
	bt, eb := time.Parse(time.RFC3339Nano, bs)
	if er != nil || eb != nil || !strings.HasSuffix(bs, "Z") || !strings.HasSuffix(rs, "Z") {
		return []Diff{{Where: where, Field: "expiration", NodeKey: nodeKey, Ref: r, Bridge: b, Note: "format"}}
	}
	if d := rt.Sub(bt); math.Abs(float64(d)) > float64(expirationTolerance+apart) {
		return []Diff{{Where: where, Field: "expiration", NodeKey: nodeKey, Ref: r, Bridge: b,
			Note: fmt.Sprintf("%v apart", d)}}
	}
	return nil
}

func diffTTL(where, nodeKey string, r, b any) []Diff {
	if r == nil && b == nil {
		return nil
	}
	rn, rok := r.(json.Number)
	bn, bok := b.(json.Number)
	if !rok || !bok {
		return []Diff{{Where: where, Field: "ttl", NodeKey: nodeKey, Ref: r, Bridge: b}}
	}
	ri, _ := rn.Int64()
	bi, _ := bn.Int64()
	if ri-bi > ttlTolerance || bi-ri > ttlTolerance {
		return []Diff{{Where: where, Field: "ttl", NodeKey: nodeKey, Ref: r, Bridge: b}}
	}
	return nil
}

// fieldOrders lists the distinct field orders of the objects in a JSON
// document (sorted, so the order of list elements does not matter).
func fieldOrders(b []byte) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	seen := map[string]bool{}
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			var keys []string
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				keys = append(keys, fmt.Sprint(k))
				if err := walk(); err != nil {
					return err
				}
			}
			seen[strings.Join(keys, ",")] = true
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	if walk() != nil {
		return ""
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, "{"+k+"}")
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}
