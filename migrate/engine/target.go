// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v3backend"
)

// target reads and writes the bridge's v3 layout through the bridge's own
// backend: every request is parsed by translate.ParseRequest and served by
// Backend.Get/Write, exactly as the bridge serves a v2 client.
type target struct {
	be *v3backend.Backend
}

// get is the bridge's view of p (quorum); nil when p does not exist there
// (including when a file stands where p's parent directory should be).
func (t *target) get(ctx context.Context, p string, recursive bool) (*translate.Node, error) {
	f := url.Values{"quorum": {"true"}, "sorted": {"true"}}
	if recursive {
		f.Set("recursive", "true")
	}
	req, verr := translate.ParseRequest("GET", p, f)
	if verr != nil {
		return nil, verr
	}
	ev, _, err := t.be.Get(ctx, req)
	var ve *translate.Error
	if errors.As(err, &ve) && (ve.Code == translate.EcodeKeyNotFound || ve.Code == translate.EcodeNotDir) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ev.Node, nil
}

// write sends one v2 write (PUT or DELETE with a v2 form) to the backend.
func (t *target) write(ctx context.Context, method, p string, f url.Values) (*translate.Event, error) {
	req, verr := translate.ParseRequest(method, p, f)
	if verr != nil {
		return nil, verr
	}
	ev, _, err := t.be.Write(ctx, req)
	return ev, err
}

// isKeyError reports whether err concerns one key only (a v2 error such as a
// value over the backend's request limit or a failed precondition), so the
// copy can go on with the other keys; anything else (backend unavailable,
// database full, cancelled) stops it.
func isKeyError(err error) bool {
	var ve *translate.Error
	return errors.As(err, &ve) && ve.Code != translate.EcodeRaftInternal && ve.Code != translate.EcodeLeaderElect
}

// isRace reports whether a guarded write failed because the target changed
// after it was read: re-read and decide again.
func isRace(err error) bool {
	var ve *translate.Error
	if !errors.As(err, &ve) {
		return false
	}
	switch ve.Code {
	case translate.EcodeKeyNotFound, translate.EcodeTestFailed, translate.EcodeNodeExist,
		translate.EcodeNotFile, translate.EcodeNotDir, translate.EcodeDirNotEmpty:
		return true
	}
	return false
}

// ttlSeconds is the remaining TTL of a v2 server node at this moment, rounded
// up as v2 shows it; ok is false for a node whose TTL already ran out.
func ttlSeconds(n *translate.Node, now time.Time) (secs int64, has, ok bool) {
	if n.Expiration == nil {
		return 0, false, true
	}
	rem := n.Expiration.Sub(now)
	if rem <= 0 {
		return 0, true, false
	}
	return int64((rem + time.Second - 1) / time.Second), true, true
}

// withTTL adds the node's remaining TTL to f; expired nodes get the shortest
// TTL when atLeastOne (the v2 server is about to report their expiry).
func withTTL(f url.Values, n *translate.Node, atLeastOne bool) bool {
	secs, has, ok := ttlSeconds(n, time.Now())
	if !has {
		return true
	}
	if !ok {
		if !atLeastOne {
			return false
		}
		secs = 1
	}
	f.Set("ttl", strconv.FormatInt(secs, 10))
	return true
}

// errExpired marks a v2 server node whose TTL ran out before it could be copied.
var errExpired = errors.New("TTL ran out on the v2 server before the copy")

// create writes n where the target has nothing (prevExist=false, so a node
// written meanwhile by someone else is never overwritten).
func (t *target) create(ctx context.Context, n *translate.Node, atLeastOne bool) (*translate.Event, error) {
	f := url.Values{"prevExist": {"false"}}
	if !withTTL(f, n, atLeastOne) {
		return nil, errExpired
	}
	if n.Dir {
		f.Set("dir", "true")
	} else {
		f.Set("value", value(n))
	}
	return t.write(ctx, "PUT", n.Key, f)
}

// replaceFile changes the value (and TTL) of the file cur into n's, guarded
// by cur's modifiedIndex.
func (t *target) replaceFile(ctx context.Context, n, cur *translate.Node, atLeastOne bool) (*translate.Event, error) {
	f := url.Values{"value": {value(n)}, "prevIndex": {strconv.FormatUint(cur.ModifiedIndex, 10)}}
	if !withTTL(f, n, atLeastOne) {
		return nil, errExpired
	}
	return t.write(ctx, "PUT", n.Key, f)
}

// fixTTL gives cur (same value or a directory) the TTL of n: a refresh (which
// wakes no watcher, as on v2) when n has a TTL, else an update that makes it
// permanent.
func (t *target) fixTTL(ctx context.Context, n, cur *translate.Node) (*translate.Event, error) {
	f := url.Values{}
	if !withTTL(f, n, true) {
		return nil, errExpired
	}
	if n.Dir {
		f.Set("dir", "true")
		f.Set("prevExist", "true")
		return t.write(ctx, "PUT", n.Key, f)
	}
	f.Set("prevIndex", strconv.FormatUint(cur.ModifiedIndex, 10))
	if f.Get("ttl") != "" {
		f.Set("refresh", "true")
	} else {
		f.Set("value", value(n))
	}
	return t.write(ctx, "PUT", n.Key, f)
}

// replaceKind puts n where cur is a node of the other kind: a directory over
// a file in one write (v2 set with dir=true), a file over a directory by
// deleting the directory first.
func (t *target) replaceKind(ctx context.Context, n, cur *translate.Node) (*translate.Event, error) {
	if n.Dir {
		f := url.Values{"dir": {"true"}}
		if !withTTL(f, n, true) {
			return nil, errExpired
		}
		return t.write(ctx, "PUT", n.Key, f)
	}
	if _, err := t.remove(ctx, cur); err != nil {
		return nil, err
	}
	return t.create(ctx, n, true)
}

// remove deletes cur: a file guarded by its modifiedIndex, a directory with
// everything below it.
func (t *target) remove(ctx context.Context, cur *translate.Node) (*translate.Event, error) {
	if cur.Dir {
		return t.write(ctx, "DELETE", cur.Key, url.Values{"recursive": {"true"}})
	}
	return t.write(ctx, "DELETE", cur.Key, url.Values{"prevIndex": {strconv.FormatUint(cur.ModifiedIndex, 10)}})
}

func value(n *translate.Node) string {
	if n.Value == nil {
		return ""
	}
	return *n.Value
}

// diff compares a v2 server node with the bridge's node at the same path the
// way verify and the idempotency check both do: kind, value, TTL presence,
// and (when tol > 0) an expiration further apart than tol (KindExpiry).
func diff(src, dst *translate.Node, tol time.Duration) (kind, detail string) {
	switch {
	case src == nil && dst == nil:
		return "", ""
	case dst == nil:
		return KindMissing, "not on the bridge"
	case src == nil:
		return KindExtra, "on the bridge only (" + describe(dst) + ")"
	case src.Dir != dst.Dir:
		return KindType, fmt.Sprintf("%s on the v2 server, %s on the bridge", kindName(src), kindName(dst))
	case !src.Dir && value(src) != value(dst):
		return KindValue, fmt.Sprintf("v2 server holds %s, bridge holds %s", quote(value(src)), quote(value(dst)))
	case (src.Expiration == nil) != (dst.Expiration == nil):
		if src.Expiration != nil {
			return KindTTL, fmt.Sprintf("TTL on the v2 server (expires %s), permanent on the bridge", src.Expiration.Format(time.RFC3339))
		}
		return KindTTL, fmt.Sprintf("permanent on the v2 server, TTL on the bridge (expires %s)", dst.Expiration.Format(time.RFC3339))
	case src.Expiration != nil && tol > 0:
		if d := dst.Expiration.Sub(*src.Expiration); d > tol || d < -tol {
			return KindExpiry, fmt.Sprintf("expires %s on the v2 server, %s on the bridge (%v apart)",
				src.Expiration.Format(time.RFC3339), dst.Expiration.Format(time.RFC3339), d.Round(time.Second))
		}
	}
	return "", ""
}

func kindName(n *translate.Node) string {
	if n.Dir {
		return "a directory"
	}
	return "a file"
}

func describe(n *translate.Node) string {
	if n.Dir {
		return "directory"
	}
	return "file " + quote(value(n))
}

func quote(s string) string {
	if len(s) > 60 {
		return strconv.Quote(s[:57]) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}
