// SPDX-License-Identifier: Apache-2.0

package v2diff

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Events a bridge sends a watch from its history where the reference sends
// none to compare with (divergences history-horizon and stream-history) are
// judged against the session's record of the writes: each must be the event
// its write made, as the bridge answered that write.

// written is one registered write as the bridge answered it (or, for an
// expiry a watch saw, the event).
type written struct {
	action     string
	node, prev map[string]any
	// partial: the answer had no node (noValueOnSuccess). node holds what
	// the request tells (key, value or dir, indexes of a new node), prev is
	// unknown, and post is a POST's directory (its key is an in-order name
	// in it).
	partial bool
	post    string
	// refresh: v2 keeps a refresh in its history but no watch gets it; it
	// is recorded for the expiration it set.
	refresh bool
}

// record is the record of the write x, registered at the bridge's index bi.
func record(x *Exchange, bi uint64) written {
	r := x.Req[Bridge]
	w := written{action: x.Action(Bridge), node: x.Node(Bridge, "node"), prev: x.Node(Bridge, "prevNode"),
		refresh: !x.Watch && r.BoolParam("refresh")}
	if w.node != nil {
		return w
	}
	w.partial = true
	index := json.Number(strconv.FormatUint(bi, 10))
	key := KeyOfPath(r.Path)
	if r.Method == "POST" {
		w.post = key
		key = strings.TrimSuffix(key, "/") + "/" // matched by watches as a child of the directory
	}
	w.node = map[string]any{"key": key, "modifiedIndex": index}
	switch {
	case r.BoolParam("dir"):
		w.node["dir"] = true
	case !w.refresh && !removal(w.action): // a refresh keeps the value
		v, _ := r.Param("value")
		w.node["value"] = v
	}
	if w.action == "create" || w.action == "set" {
		w.node["createdIndex"] = index // v2's set makes a new node
	}
	if ttl, _ := r.Param("ttl"); ttl == "" {
		w.node["expiration"] = nil // known: none (a key absent from node is unknown)
	}
	return w
}

// watchState follows one watch: each server's index when it began (its
// X-Etcd-Index) and the lines each sent.
type watchState struct {
	start [2]uint64
	// last is the index of the bridge's latest line, before that of the
	// line before it.
	last, before uint64
	refLines     int // lines the reference sent
}

// followWatch notes what x tells of its watch. No v2 server sends a watch
// a line that is not after the line before (a stream gets each event once,
// in index order): that is a difference of its own.
func (s *Session) followWatch(x *Exchange) []Diff {
	if !x.Watch || x.Req[Bridge] == nil {
		return nil
	}
	st := s.watches[x.Req[Bridge]]
	if st == nil {
		st = &watchState{}
		s.watches[x.Req[Bridge]] = st
	}
	if !x.Event {
		for side, r := range x.Resp {
			st.start[side], _ = strconv.ParseUint(r.Header.Get("X-Etcd-Index"), 10, 64)
		}
		return nil
	}
	if len(x.Resp[Ref].Body) > 0 {
		st.refLines++
	}
	mi, ok := NumField(x.Node(Bridge, "node"), "modifiedIndex")
	if !ok {
		return nil
	}
	prev := st.last
	st.before, st.last = prev, max(prev, mi)
	if prev != 0 && mi <= prev {
		return []Diff{{Where: "stream order", Field: "modifiedIndex", Bridge: mi,
			Note: fmt.Sprintf("the line before was at %d", prev)}}
	}
	return nil
}

// watchSpec is a watch as the judge sees it: its key, recursive, and the
// bridge's index when it began (its X-Etcd-Index).
type watchSpec struct {
	key       string
	recursive bool
	start     uint64
}

func specOf(x *Exchange, start uint64) watchSpec {
	r := x.Req[Bridge]
	return watchSpec{key: KeyOfPath(r.Path), recursive: r.BoolParam("recursive"), start: start}
}

// tells reports whether a watch may be, and whether it must be, told of
// the event at index i. Up to start, the event was in v2's history when
// the watch came, and v2's history rules apply (EventHistory.scan): the
// watched key; with recursive anything below it, hidden or not; and the
// removal of a directory whose key is a plain prefix of the watched key.
// Later events reach it live (watcherHub.notify): the watched key; with
// recursive anything below it but hidden keys; and the removal of a
// directory above it, if the watched key was in it, which the judge does
// not know (may, not must).
func (w watchSpec) tells(i uint64, action string, n, prev map[string]any) (may, must bool) {
	key := str(n["key"])
	dir := strings.TrimSuffix(w.key, "/") + "/"
	if i <= w.start {
		ok := key == w.key || w.recursive && strings.HasPrefix(key, dir) ||
			removal(action) && prev != nil && prev["dir"] == true && strings.HasPrefix(w.key, str(prev["key"]))
		return ok, ok
	}
	if key == w.key || w.recursive && strings.HasPrefix(key, dir) && !strings.Contains(key[len(dir)-1:], "/_") {
		return true, true
	}
	return removal(action) && n["dir"] == true && strings.HasPrefix(w.key, key+"/"), false
}

// removal reports whether action removes its node.
func removal(action string) bool {
	return action == "delete" || action == "compareAndDelete" || action == "expire"
}

// firstMatch returns the bridge's index of the first registered write in
// [from, before) that watch w must be told of, if any.
func (s *Session) firstMatch(w watchSpec, from, before uint64) (uint64, bool) {
	var first uint64
	found := false
	for i, r := range s.written {
		if r.refresh || i < from || i >= before || found && i > first {
			continue
		}
		if _, must := w.tells(i, r.action, r.node, r.prev); must {
			first, found = i, true
		}
	}
	return first, found
}

// historyAnswer checks the bridge's answer from history to a watch the
// reference answered 401: the first event the watch is told of at or after
// its waitIndex, and not after the answer's X-Etcd-Index. It returns what
// is wrong, or "".
func (s *Session) historyAnswer(x *Exchange) string {
	xi, err := strconv.ParseUint(x.Resp[Bridge].Header.Get("X-Etcd-Index"), 10, 64)
	if err != nil {
		return "no X-Etcd-Index"
	}
	wi, _ := UintParam(x.Req[Bridge], "waitIndex")
	return s.toldEvent(x, specOf(x, xi), wi, x.Object(Bridge))
}

// streamLine checks a line the bridge streamed after the reference's one
// event from history: the next event the watch is told of after the line
// before it (or its waitIndex). It returns what is wrong, or "".
func (s *Session) streamLine(x *Exchange, st *watchState) string {
	wi, _ := UintParam(x.Req[Bridge], "waitIndex")
	return s.toldEvent(x, specOf(x, st.start[Bridge]), max(wi, st.before+1), x.Object(Bridge))
}

// toldEvent checks ev, sent to watch w as the first event it is told of at
// or after index from: a write's event (written), that w is told of, with
// no write w must be told of between from and it.
func (s *Session) toldEvent(x *Exchange, w watchSpec, from uint64, ev map[string]any) string {
	if why := s.writtenEvent(ev); why != "" {
		return why
	}
	n, prev := ev["node"].(map[string]any), mapOf(ev["prevNode"])
	mi, _ := NumField(n, "modifiedIndex")
	switch may, _ := w.tells(mi, str(ev["action"]), n, prev); {
	case !may:
		return "an event the watch is not told of"
	case mi < from:
		return fmt.Sprintf("index %d, before %d", mi, from)
	case w.start < mi && !x.Req[Bridge].BoolParam("stream"):
		return "modifiedIndex after X-Etcd-Index"
	}
	if i, ok := s.firstMatch(w, from, mi); ok {
		return fmt.Sprintf("not the first event the watch is told of: %d is", i)
	}
	return ""
}

// silentWatch checks a watch the bridge keeps waiting: no registered write
// at or after its waitIndex (all of them in history when it came) matches
// it. It returns what is wrong, or "".
func (s *Session) silentWatch(x *Exchange) string {
	wi, _ := UintParam(x.Req[Bridge], "waitIndex")
	if i, ok := s.firstMatch(specOf(x, ^uint64(0)), wi, ^uint64(0)); ok {
		return fmt.Sprintf("waiting, but write %d matches", i)
	}
	return ""
}

// writeActions are the actions of v2 events.
var writeActions = []string{"set", "create", "update", "compareAndSwap", "delete", "compareAndDelete", "expire"}

// writtenEvent checks that ev is the event of a registered write, as the
// bridge answered it: the same action, node and prevNode, but for the ttl
// and expiration within the tolerances. An event no write made may only be
// an expiry. It returns what is wrong, or "".
func (s *Session) writtenEvent(ev map[string]any) string {
	if ev == nil {
		return "not a JSON event"
	}
	action := str(ev["action"])
	n, prev := mapOf(ev["node"]), mapOf(ev["prevNode"])
	if why := eventShape(action, n, prev); why != "" {
		return why
	}
	mi, _ := NumField(n, "modifiedIndex")
	w, ok := s.written[mi]
	switch {
	case !ok && action == "expire":
		return s.expiry(n, prev)
	case !ok:
		return fmt.Sprintf("no write of the session at index %d", mi)
	case w.refresh:
		return "the index of a refresh, which makes no event"
	case w.action != action:
		return fmt.Sprintf("action %q, the write's is %q", action, w.action)
	}
	want := w.node
	if w.post != "" {
		if !inDir(str(n["key"]), w.post) {
			return "key " + show(n["key"]) + ", not an in-order key in " + w.post
		}
		want = withField(want, "key", n["key"])
	}
	if why := sameNode("node", want, n, w.partial); why != "" {
		return why
	}
	if w.partial {
		return "" // the prevNode is unknown
	}
	if (w.prev == nil) != (prev == nil) {
		return "prevNode " + show(ev["prevNode"]) + ", the write's " + show(w.prev)
	}
	return sameNode("prevNode", w.prev, prev, false)
}

// eventShape checks what holds for every v2 event: a write's action, a
// node with a modifiedIndex, a value exactly when the node is a file still
// there, a createdIndex not after the modifiedIndex, and a prevNode, if
// any, that is the same key before.
func eventShape(action string, n, prev map[string]any) string {
	mi, ok := NumField(n, "modifiedIndex")
	switch {
	case !in(action, writeActions):
		return "action " + show(action)
	case n == nil || !ok || mi == 0:
		return "no node with a modifiedIndex"
	case !valueFits(action, n):
		return "a value where there is none, or none where there is one"
	}
	for _, m := range []map[string]any{n, prev} {
		if m == nil {
			continue
		}
		ci, _ := NumField(m, "createdIndex")
		mmi, _ := NumField(m, "modifiedIndex")
		if ci > mmi {
			return "createdIndex after modifiedIndex"
		}
	}
	if prev != nil {
		pmi, _ := NumField(prev, "modifiedIndex")
		if prev["key"] != n["key"] || pmi >= mi {
			return "a prevNode that is not the key before the event"
		}
	}
	return ""
}

// valueFits: an event's node carries a value exactly when it is a file that
// is still there.
func valueFits(action string, n map[string]any) bool {
	_, hasValue := n["value"].(string)
	return hasValue == (!removal(action) && n["dir"] != true)
}

// expiry checks an expire event no watch of the session saw live against
// the write that made it: the last registered write that changed its key
// (or removed it or a directory above it) left a node with a TTL, which is
// the event's prevNode (its ttl taken at the expiry: none), and the node is
// the key removed. It returns what is wrong, or "".
func (s *Session) expiry(n, prev map[string]any) string {
	key := str(n["key"])
	mi, _ := NumField(n, "modifiedIndex")
	var last uint64
	for i, w := range s.written {
		k := str(w.node["key"])
		if i < mi && i > last && (k == key || removal(w.action) && strings.HasPrefix(key, k+"/")) {
			last = i
		}
	}
	w, ok := s.written[last]
	switch {
	case !ok || w.node["key"] != key || removal(w.action):
		return "an expiry of " + key + ", which no write of the session left"
	case w.node["expiration"] == nil && (!w.partial || hasKey(w.node, "expiration")):
		return "an expiry of " + key + ", which its last write left without a TTL"
	case prev == nil:
		return "an expiry without prevNode"
	case prev["ttl"] != nil:
		return "an expiry whose prevNode has a ttl left"
	}
	want := w.node
	if orig, ok := s.originalCreate(key, last); ok && numEq(prev["createdIndex"], orig) {
		// A set replaced the file: its v3 key kept the create
		// (set-created-index), and the expiry is decoded from it.
		want = withField(want, "createdIndex", json.Number(strconv.FormatUint(orig, 10)))
	}
	if why := sameNode("prevNode", withField(want, "ttl", nil), prev, w.partial); why != "" {
		return why
	}
	if n["dir"] != prev["dir"] || n["createdIndex"] != prev["createdIndex"] {
		return "a node that is not the key its prevNode was"
	}
	return ""
}

// originalCreate is, for the bridge's write at bi, a set that replaced a
// file, the bridge's index of the write that created the file.
func (s *Session) originalCreate(key string, bi uint64) (uint64, bool) {
	k, exact := s.Idx[Bridge].Floor(bi)
	if !exact {
		return 0, false
	}
	return s.OriginalCreate(key, s.Idx[Ref].At(k))
}

// sameNode compares an event's node or prevNode (got) with the recorded
// one (want): every field the same, ttl and expiration within the
// tolerances, and an index other than the event's own modifiedIndex may
// be its revision's index (index-numbering: events decoded from v3 history
// show a key last changed in a revision with several events so). With
// partial, only the fields want holds are compared. It returns what is
// wrong, or "".
func sameNode(where string, want, got map[string]any, partial bool) string {
	for _, f := range unionKeys(want, got) {
		if partial && !hasKey(want, f) {
			continue
		}
		w, g := want[f], got[f]
		var same bool
		switch f {
		case "ttl":
			same = len(diffTTL("", "", w, g)) == 0
		case "expiration":
			same = len(diffExpiration("", "", w, g, 0)) == 0
		case "modifiedIndex", "createdIndex":
			wi, _ := NumField(want, f)
			gi, _ := NumField(got, f)
			own := where == "node" && f == "modifiedIndex"
			same = w == nil && g == nil || w != nil && wi == gi || !own && wi != 0 && gi == revisionIndex(wi)
		default:
			same = equalScalar(w, g)
		}
		if !same {
			return fmt.Sprintf("%s.%s %s, the write's %s", where, f, show(g), show(w))
		}
	}
	return ""
}

// indexesPerRevision: a v3 revision r owns the bridge's indexes up to
// r × 1,000,000 (index-numbering).
const indexesPerRevision = 1_000_000

// revisionIndex is the index of the revision that index i belongs to.
func revisionIndex(i uint64) uint64 {
	return (i + indexesPerRevision - 1) / indexesPerRevision * indexesPerRevision
}

// inDir reports whether key is an in-order key (a POST's) in dir.
func inDir(key, dir string) bool {
	name, ok := strings.CutPrefix(key, strings.TrimSuffix(dir, "/")+"/")
	return ok && inOrderName.MatchString(name) && len(name) == 20
}

// numEq reports whether v is the number u.
func numEq(v any, u uint64) bool {
	n, ok := v.(json.Number)
	return ok && string(n) == strconv.FormatUint(u, 10)
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

// withField is a copy of m with field f set to v (removed if v is nil).
func withField(m map[string]any, f string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for k, x := range m {
		out[k] = x
	}
	if v == nil {
		delete(out, f)
	} else {
		out[f] = v
	}
	return out
}
