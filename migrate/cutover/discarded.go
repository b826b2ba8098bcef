// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/translate"
)

// listDiscarded logs head, then every node of ds on a line of its own.
func (o *Options) listDiscarded(head string, ds []Discarded) {
	o.Log(head + ":")
	for _, d := range ds {
		o.Log("  " + d.String())
	}
}

// names are the first few paths of ds, for an error message.
func names(ds []Discarded) string {
	const few = 5
	var ps []string
	for i, d := range ds {
		if i == few {
			ps = append(ps, fmt.Sprintf("and %d more", len(ds)-few))
			break
		}
		ps = append(ps, d.Path)
	}
	return strings.Join(ps, ", ")
}

// newer are the nodes of again that first does not hold as they are now.
func newer(first, again []Discarded) []Discarded {
	seen := map[Discarded]bool{}
	for _, d := range first {
		seen[d] = true
	}
	var out []Discarded
	for _, d := range again {
		if !seen[d] {
			out = append(out, d)
		}
	}
	return out
}

// listChanged sorts the changed nodes by path, leaving out a directory
// with a changed file below it.
func listChanged(changed map[string]*Discarded) []Discarded {
	fileBelow := map[string]bool{}
	for p, d := range changed {
		if d.Dir || d.Auth {
			continue
		}
		for q := path.Dir(p); ; q = path.Dir(q) {
			fileBelow[q] = true
			if q == "/" {
				break
			}
		}
	}
	out := make([]Discarded, 0, len(changed))
	for p, d := range changed {
		if !d.Dir || !fileBelow[p] {
			out = append(out, *d)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Auth != out[j].Auth {
			return !out[i].Auth // the data's nodes first
		}
		return out[i].Path < out[j].Path
	})
	return out
}

// Discarded is a v2 node a client changed through etcd v3 since the cutover,
// as it is now: what a forced rollback loses.
type Discarded struct {
	Path    string `json:"path"`
	Dir     bool   `json:"dir,omitempty"`
	Deleted bool   `json:"deleted,omitempty"`
	Value   string `json:"value,omitempty"` // of a file still there
	// Auth: Path is a user, role or the enabled flag, by its URL in the
	// v2 auth API.
	Auth bool `json:"auth,omitempty"`
}

func (d Discarded) String() string {
	switch {
	case d.Auth && d.Deleted:
		return d.Path + " (auth data, deleted)"
	case d.Auth:
		return d.Path + " (auth data)"
	case d.Dir && d.Deleted:
		return d.Path + " (directory, deleted)"
	case d.Dir:
		return d.Path + " (directory)"
	case d.Deleted:
		return d.Path + " (deleted)"
	}
	return fmt.Sprintf("%s = %q", d.Path, d.Value)
}

// authPath names a key of the auth data by its URL in the v2 auth API.
func (o *Options) authPath(key string) (string, bool) {
	if o.Auth.Prefix == "" || !strings.HasPrefix(key, o.Auth.Prefix) {
		return "", false
	}
	rest := key[len(o.Auth.Prefix):]
	if rest == "enabled" {
		return "/v2/auth/enable", true
	}
	kind, name, ok := strings.Cut(rest, "/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", false // another key space's
	}
	switch kind {
	case "u":
		return "/v2/auth/users/" + name, true
	case "r":
		return "/v2/auth/roles/" + name, true
	}
	return "", false
}

// v3WritesSince counts the v2 nodes (files, and directories with no such
// file below them) that clients changed in etcd v3 after revision rev, and
// names them; see v3ChangesSince.
func (o *Options) v3WritesSince(ctx context.Context, rev int64) (int, []string, error) {
	ds, err := o.v3ChangesSince(ctx, rev)
	paths := make([]string, len(ds))
	for i, d := range ds {
		paths[i] = d.String()
	}
	return len(ds), paths, err
}

// v3ChangesSince lists, each once, in path order, with its last value, every
// v2 node whose data key or directory marker clients changed in etcd v3
// after revision rev; a directory only when no file below it is listed (a
// file's write creates its ancestors' markers). Changes no client made are
// left out: lease expiries (a deleted key that carried a lease, in a
// revision without a bridge's journal record), which the v2 server has of
// its own, and the sweeps that remove what was below an expired directory
// (a revision whose journal record is a sweep). A refresh is a client's
// write: the v2 server would let the key expire. It writes the pad key,
// where the history it reads ends.
func (o *Options) v3ChangesSince(ctx context.Context, rev int64) ([]Discarded, error) {
	start, end := o.Layout.WatchRange()
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	wch := o.Client.Watch(wctx, start, clientv3.WithRange(end), clientv3.WithRev(rev+1), clientv3.WithPrevKV())
	// The scan ends at a write of its own to the pad key, inside the
	// range: the watch sends events in revision order, so once it sends
	// that write's, it has sent every earlier one. Progress requests
	// cannot end it: etcd before 3.4.25 and 3.5.8 answers one at once
	// with the current revision, while this watch is still replaying
	// history, and the scan would miss the writes after where it got to.
	cctx, cancel := o.call(ctx)
	resp, err := o.Client.Put(cctx, o.Keys.Pad, "rollback scan")
	cancel()
	if err != nil {
		return nil, fmt.Errorf("writing %s to mark the end of the scan: %w", o.Keys.Pad, err)
	}
	last := resp.Header.Revision
	changed := map[string]*Discarded{}
	for {
		wr, ok := <-wch
		if !ok {
			return nil, fmt.Errorf("scanning etcd v3 history from revision %d: %w", rev+1, wctx.Err())
		}
		if err := wr.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return nil, fmt.Errorf("etcd v3 history since the cutover (revision %d) was compacted", rev+1)
			}
			return nil, fmt.Errorf("scanning etcd v3 history: %w", err)
		}
		byRev := map[int64]bool{} // revisions with a bridge journal record
		revEvents := map[int64][]translate.V3Event{}
		for _, ev := range wr.Events {
			if o.Layout.IsJournalKey(string(ev.Kv.Key)) && ev.Type == clientv3.EventTypePut { // not a journal lease's expiry
				byRev[ev.Kv.ModRevision] = true
			}
			te := translate.V3Event{Delete: ev.Type == clientv3.EventTypeDelete,
				KV: translate.KV{Key: string(ev.Kv.Key), Value: ev.Kv.Value, ModRevision: ev.Kv.ModRevision}}
			revEvents[ev.Kv.ModRevision] = append(revEvents[ev.Kv.ModRevision], te)
		}
		sweeps := map[int64]bool{}
		for r, evs := range revEvents {
			if byRev[r] && o.Layout.IsSweep(evs) {
				sweeps[r] = true
			}
		}
		for _, ev := range wr.Events {
			if sweeps[ev.Kv.ModRevision] {
				continue // a directory's TTL ran out: no client's write
			}
			key := string(ev.Kv.Key)
			if p, ok := o.authPath(key); ok {
				// Keyed apart from a data node of the same path; never a
				// value: a user's holds its password hash.
				changed["auth "+p] = &Discarded{Path: p, Auth: true, Deleted: ev.Type == clientv3.EventTypeDelete}
				continue
			}
			p, ok := o.Layout.PathOfData(key)
			dir := false
			if !ok {
				if p, ok = o.Layout.PathOfMarker(key); !ok {
					continue
				}
				dir = true
			}
			if ev.Type == clientv3.EventTypeDelete && ev.PrevKv != nil && ev.PrevKv.Lease != 0 && !byRev[ev.Kv.ModRevision] {
				continue // an expiry, which the v2 server has of its own
			}
			d := Discarded{Path: p, Dir: dir, Deleted: ev.Type == clientv3.EventTypeDelete}
			if !dir && !d.Deleted {
				d.Value = string(ev.Kv.Value)
			}
			if old := changed[p]; dir && old != nil && !old.Dir {
				continue // the file's own change says more
			}
			changed[p] = &d
		}
		if n := len(wr.Events); n > 0 && wr.Events[n-1].Kv.ModRevision >= last {
			return listChanged(changed), nil
		}
	}
}
