// SPDX-License-Identifier: Apache-2.0

package hub

import (
	"context"
	"errors"

	"github.com/v2bridge/v2bridge/translate"
)

// Source is what the hub needs from the backend: the shared feed of decoded
// v2 events, history feeds for replays, and two cheap reads. The backend
// implements it over etcd v3; tests use a fake.
type Source interface {
	// Feed opens the shared feed from revision from (0: from now on; its
	// first batch is then Created with the revision it starts after). It
	// waits until a backend session is up, or ctx ends. The feed ends
	// with the session it runs on: a lost member ends it.
	Feed(ctx context.Context, from int64) (Feed, error)
	// History opens a feed of history from revision from, for a replay. Its
	// batches come in revision order; once it has caught up with the
	// present it sends Progress batches. With keys (v2 paths), it skims:
	// it reads only the changes that may concern a watcher on one of keys
	// or below them (MayConcern), decodes none, and sends an Unread batch
	// for each revision that may hold such an event and Progress batches
	// over those that hold none.
	History(ctx context.Context, from int64, keys []string) (Feed, error)
	// Kept reports whether revision rev is still in the backend's history
	// (false: compacted).
	Kept(ctx context.Context, rev int64) (bool, error)
}

// Feed is a stream of decoded revisions.
type Feed interface {
	// Next returns the next batch; an error ends the feed (ErrCompacted:
	// its start is no longer in history).
	Next(ctx context.Context) (Batch, error)
	// Close releases the feed.
	Close()
}

// Batch is one revision's v2 events (a revision may hold none the v2 API
// shows), or a notice that everything up to Rev has been seen.
type Batch struct {
	Rev     int64
	Events  []*translate.Event
	Created bool // the feed is established; nothing else is in the batch
	// Progress: every revision up to Rev has been delivered (skimming:
	// nothing up to Rev concerns the keys).
	Progress bool
	// Unread (skimming only): revision Rev may hold events for the keys;
	// it was not decoded (the reader reads it in full).
	Unread bool
}

// ErrCompacted means a feed's start revision has been compacted away.
var ErrCompacted = errors.New("hub: the requested revision has been compacted")

// ErrNotLive means the hub has no shared feed (the backend is lost or
// closing).
var ErrNotLive = errors.New("hub: the shared watch is not established")
