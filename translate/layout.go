// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"fmt"
	"strconv"
	"strings"
)

// Layout maps v2 paths to v3 keys: a v2 file /a/b is the v3 key
// <data-prefix>/a/b holding the raw value; the bridge's own bookkeeping lives
// under <meta-prefix>, which no v2 path can reach.
type Layout struct {
	DataPrefix string // "" or "/x" (no trailing slash)
	MetaPrefix string // e.g. "_v2bridge/"
	// Served are the v2 subtrees served (WithServed); nil: all of them.
	Served []string
}

// NewLayout validates the two prefixes and refuses any overlap between the
// data key space (dataPrefix + "/...") and the meta key space.
func NewLayout(dataPrefix, metaPrefix string) (Layout, error) {
	dp := strings.TrimRight(dataPrefix, "/")
	if dp != "" && !strings.HasPrefix(dp, "/") {
		return Layout{}, fmt.Errorf("data prefix %q must be empty or start with '/'", dataPrefix)
	}
	if metaPrefix == "" {
		return Layout{}, fmt.Errorf("meta prefix must not be empty")
	}
	data := dp + "/"
	if strings.HasPrefix(metaPrefix, data) || strings.HasPrefix(data, metaPrefix) {
		return Layout{}, fmt.Errorf("meta prefix %q overlaps the data key space %q", metaPrefix, data)
	}
	return Layout{DataPrefix: dp, MetaPrefix: metaPrefix}, nil
}

// The kinds of key under the meta prefix: each kind's keys start with
// MetaPrefix + its tag.
const (
	markerTag  = "d" // + DataPrefix + p: directory markers
	seqTag     = "s" // + DataPrefix + p: in-order sequences
	leaseTag   = "l/"
	journalTag = "j" // the journal of old bridges, read by those serving "/"
	recordTag  = "J" // + DataPrefix + p: the journal record of p's last write
	ttlDirTag  = "t" // + DataPrefix + p: directories that carry a TTL
	ownFileTag = "f" // + DataPrefix + p: files no directory marker vouches for
	shadowTag  = "shadow/"
)

// childPath is p + "/" except for the root, which is already "/".
func childPath(p string) string {
	if p == "/" {
		return "/"
	}
	return p + "/"
}

// DataKey is the v3 key of the v2 file p.
func (l Layout) DataKey(p string) string { return l.DataPrefix + p }

// DataChildPrefix is the v3 prefix of everything below the v2 directory p.
func (l Layout) DataChildPrefix(p string) string { return l.DataPrefix + childPath(p) }

// MarkerKey is the v3 key that records the v2 directory p.
func (l Layout) MarkerKey(p string) string { return l.MetaPrefix + markerTag + l.DataPrefix + p }

// MarkerChildPrefix is the v3 prefix of the markers of every directory below p.
func (l Layout) MarkerChildPrefix(p string) string {
	return l.MetaPrefix + markerTag + l.DataPrefix + childPath(p)
}

// SeqKey holds the last in-order (POST) name used in directory p.
func (l Layout) SeqKey(p string) string { return l.MetaPrefix + seqTag + l.DataPrefix + p }

// LeaseKey records the expiration of a lease the bridge granted; it is
// attached to that lease, so it goes away with it.
func (l Layout) LeaseKey(id int64) string {
	return l.MetaPrefix + leaseTag + strconv.FormatInt(id, 16)
}

// TTLDirKey records, without a lease, that directory p carries a TTL. When
// the lease runs out the marker goes and this record stays: a bridge that
// was not running then finds the directory's remains by it and sweeps them.
func (l Layout) TTLDirKey(p string) string { return l.MetaPrefix + ttlDirTag + l.DataPrefix + p }

// TTLDirPrefix is the v3 prefix of every TTL directory record.
func (l Layout) TTLDirPrefix() string { return l.MetaPrefix + ttlDirTag + l.DataPrefix + "/" }

// PathOfTTLDir returns the v2 directory a TTL directory record names.
func (l Layout) PathOfTTLDir(key string) (string, bool) {
	pfx := l.TTLDirPrefix()
	if !strings.HasPrefix(key, pfx) {
		return "", false
	}
	return key[len(pfx)-1:], true
}

// AboveMarker is the value of the marker a bridge serving some subtrees
// gives a directory it creates above them (/coreos.com for
// /coreos.com/network): such a marker vouches for nothing below it but what
// markers further down vouch for. Any other marker says that a bridge
// serving the directory created it, and vouches for its whole subtree: what
// FindForeign, in v3backend, does not count as another tenant's.
const AboveMarker = "above"

// OwnFileKey is the record a bridge writes, in the same transaction and on
// the same lease, with every file p whose directory no marker vouches for:
// a file at the top, at a served prefix itself, or directly in a directory
// marked AboveMarker. The file was written by a v2 client while the
// record's ModRevision is the file's.
func (l Layout) OwnFileKey(p string) string { return l.MetaPrefix + ownFileTag + l.DataPrefix + p }

// JournalKey is rewritten by every bridge write with the v2 action it made.
func (l Layout) JournalKey() string { return l.MetaPrefix + journalTag }

// JournalSlotKey is where the write at place i of a transaction that
// carries several journaled writes puts its record instead (one key holds
// one record per revision).
func (l Layout) JournalSlotKey(i int) string {
	return l.MetaPrefix + journalTag + "/" + strconv.Itoa(i)
}

// RecordKey is where a bridge write of the v2 node p puts its journal
// record (Journal), on the bridge's journal lease (a record matters only in
// its own revision): with p's data key and marker, inside the ranges of
// every served subtree holding p, so a bridge serving others never sees it.
func (l Layout) RecordKey(p string) string { return l.MetaPrefix + recordTag + l.DataPrefix + p }

// isRecordKey reports whether key is a RecordKey of this data prefix.
func (l Layout) isRecordKey(key string) bool {
	rest, ok := strings.CutPrefix(key, l.MetaPrefix)
	if !ok {
		return false
	}
	rest, ok = strings.CutPrefix(rest, recordTag)
	return ok && l.inDataSpace(rest)
}

// IsJournalKey reports whether key is the journal key or a slot of it, or
// a journal record (RecordKey).
func (l Layout) IsJournalKey(key string) bool { return l.isOldJournalKey(key) || l.isRecordKey(key) }

// isOldJournalKey reports whether key is the journal key or a slot of it.
func (l Layout) isOldJournalKey(key string) bool {
	rest, ok := strings.CutPrefix(key, l.MetaPrefix+journalTag)
	return ok && (rest == "" || rest[0] == '/')
}

// isJournalSlot reports whether key is a slot of the journal key.
func (l Layout) isJournalSlot(key string) bool {
	return len(key) > len(l.MetaPrefix)+len(journalTag) && l.isOldJournalKey(key)
}

// PathOfData returns the v2 path of a data key.
func (l Layout) PathOfData(key string) (string, bool) {
	if !l.inDataSpace(key) {
		return "", false
	}
	return key[len(l.DataPrefix):], true
}

// PathOfMarker returns the v2 directory a marker key records. (It runs for
// every operation of a write and every key of a decoded revision, so it
// matches the prefix piece by piece rather than build it.)
func (l Layout) PathOfMarker(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, l.MetaPrefix)
	if !ok {
		return "", false
	}
	if rest, ok = strings.CutPrefix(rest, markerTag); !ok || !l.inDataSpace(rest) {
		return "", false
	}
	return rest[len(l.DataPrefix):], true
}

// pathKeys are the keys a write's snapshot reads and its guards compare
// for a path p, built once: p's data child prefix (DataPrefix + p + "/")
// and marker child prefix. p's own keys and those of every ancestor of p
// are prefixes of these, so they are slices of the same strings rather
// than a string each.
type pathKeys struct {
	root                   bool
	dataChild, markerChild string
	dataStart, markerStart int // where the v2 path starts in each
}

func (l Layout) keysOf(p string) pathKeys {
	k := pathKeys{root: p == "/", dataChild: l.DataChildPrefix(p), markerChild: l.MarkerChildPrefix(p)}
	k.dataStart, k.markerStart = len(l.DataPrefix), len(l.MetaPrefix)+len(markerTag)+len(l.DataPrefix)
	return k
}

// data is DataKey(p) (the root's is its child prefix).
func (k *pathKeys) data() string {
	if k.root {
		return k.dataChild
	}
	return k.dataChild[:len(k.dataChild)-1]
}

// marker is MarkerKey(p).
func (k *pathKeys) marker() string {
	if k.root {
		return k.markerChild
	}
	return k.markerChild[:len(k.markerChild)-1]
}

// dataAt and markerAt are DataKey(a) and MarkerKey(a) for an ancestor a of p.
func (k *pathKeys) dataAt(a string) string   { return k.dataChild[:k.dataStart+len(a)] }
func (k *pathKeys) markerAt(a string) string { return k.markerChild[:k.markerStart+len(a)] }

// childEnd is PrefixEnd of a child prefix, which ends in "/": the same
// string with "0", the byte after '/'.
func childEnd(pfx string) string { return pfx[:len(pfx)-1] + "0" }

// countAncestors is len(Ancestors(p)), without building them.
func countAncestors(p string) int {
	if len(p) < 2 {
		return 0
	}
	return strings.Count(p[1:], "/")
}

// inDataSpace reports whether key starts with DataPrefix + "/" (without
// building that string: it runs for every key the bridge mirrors).
func (l Layout) inDataSpace(key string) bool {
	rest, ok := strings.CutPrefix(key, l.DataPrefix)
	return ok && strings.HasPrefix(rest, "/")
}

// Mirrored reports whether key is one the bridge keeps a copy of in memory:
// a data key, a directory marker, an in-order sequence key, a TTL
// directory record (those of this data prefix and of the served subtrees,
// with the data keys and markers of the directories above them) or, serving
// the whole tree, a lease record. The journal is not: only the watch side
// reads it, from the events themselves.
func (l Layout) Mirrored(key string) bool {
	if p, ok := l.PathOfData(key); ok {
		return l.servesOrAbove(p)
	}
	rest, ok := strings.CutPrefix(key, l.MetaPrefix)
	if !ok {
		return false
	}
	if strings.HasPrefix(rest, leaseTag) {
		return !l.Scoped() // other tenants' too: a scoped bridge reads its own (leases.go)
	}
	if sub, ok := strings.CutPrefix(rest, markerTag); ok {
		return l.inDataSpace(sub) && l.servesOrAbove(sub[len(l.DataPrefix):])
	}
	if sub, ok := strings.CutPrefix(rest, seqTag); ok {
		return l.inDataSpace(sub) && l.Serves(sub[len(l.DataPrefix):])
	}
	if sub, ok := strings.CutPrefix(rest, ttlDirTag); ok {
		return l.inDataSpace(sub) && l.Serves(sub[len(l.DataPrefix):])
	}
	return false
}

// WatchRange is one v3 key range covering both the data and the meta key
// spaces, so one v3 watch sees a bridge write's data, markers and journal
// record together, in the same revision.
func (l Layout) WatchRange() (start, end string) {
	data := l.DataPrefix + "/"
	start, end = data, PrefixEnd(data)
	if l.MetaPrefix < start {
		start = l.MetaPrefix
	}
	if me := PrefixEnd(l.MetaPrefix); me > end {
		end = me
	}
	return start, end
}

// PrefixEnd is the v3 range end covering every key with prefix p.
func PrefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

// Ancestors lists the directories above p, from the top down, without the root.
func Ancestors(p string) []string {
	var out []string
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// Parent is the v2 directory holding p.
func Parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// IsHiddenName reports whether the last element of p starts with '_'.
func IsHiddenName(p string) bool {
	i := strings.LastIndexByte(p, '/')
	return i >= 0 && i+1 < len(p) && p[i+1] == '_'
}

// ShadowPrefix is where bridges in passthrough mode publish the counters of
// their shadow comparison against etcd v3, one leased record per bridge,
// for `v2bridge verify`.
func (l Layout) ShadowPrefix() string { return l.MetaPrefix + shadowTag }
