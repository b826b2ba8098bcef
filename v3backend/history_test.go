// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// TestReplayedHistoryShowsPreviousNodesAndExpirations: a bridge that starts
// after a set over a value, a delete and a TTL key's expiry answers watches
// of those indexes from v3 history (a replay: its ring is empty) with the
// same events a bridge watching live saw: the set's and delete's previous
// node with its value, and the expired key's previous node with the
// expiration its write answered, which only the lease's record as of the
// revision before the expiry still knows.
func TestReplayedHistoryShowsPreviousNodesAndExpirations(t *testing.T) {
	e, _ := startEmbed(t, nil)
	inProcess := func(c *Config) { c.Member = e.Server }
	b1 := newBackendWith(t, unreachable, inProcess)
	ctx := context.Background()
	write := func(method, p string, form url.Values) *translate.Event {
		t.Helper()
		ev, _, err := b1.Write(ctx, request(t, method, p, form))
		if err != nil {
			t.Fatalf("%s %s: %v", method, p, err)
		}
		return ev
	}
	a := write("PUT", "/k", url.Values{"value": {"a"}})
	set := write("PUT", "/k", url.Values{"value": {"b"}})
	del := write("DELETE", "/k", nil)
	ttl := write("PUT", "/t", url.Values{"value": {"x"}, "ttl": {"1"}})
	if ttl.Node.Expiration == nil {
		t.Fatalf("the TTL write answered no expiration: %+v", ttl.Node)
	}
	exp := ttl.Node.Expiration.Format(time.RFC3339Nano)

	// The key expires (within its TTL and the lease pool's slack); the
	// first bridge's watch sees it live.
	live, _, err := b1.Watch(ctx, request(t, "GET", "/t", url.Values{"wait": {"true"},
		"waitIndex": {strconv.FormatUint(ttl.Node.ModifiedIndex+1, 10)}}))
	if err != nil {
		t.Fatalf("watch for the expiry: %v", err)
	}
	defer live.Cancel()
	var expired *translate.Event
	select {
	case expired = <-live.Events():
	case <-time.After(30 * time.Second):
		t.Fatal("the TTL key did not expire within 30 s")
	}

	want := []struct {
		key       string
		waitIndex uint64
		json      string
	}{
		{"/k", a.Node.ModifiedIndex + 1, fmt.Sprintf(`{"action":"set",`+
			`"node":{"key":"/k","value":"b","modifiedIndex":%d,"createdIndex":%[1]d},`+
			`"prevNode":{"key":"/k","value":"a","modifiedIndex":%d,"createdIndex":%[2]d}}`,
			set.Node.ModifiedIndex, a.Node.ModifiedIndex)},
		// The v3 key was created by the first write: the delete shows
		// that as its createdIndex, as the bridge's reads do after a set.
		{"/k", set.Node.ModifiedIndex + 1, fmt.Sprintf(`{"action":"delete",`+
			`"node":{"key":"/k","modifiedIndex":%d,"createdIndex":%d},`+
			`"prevNode":{"key":"/k","value":"b","modifiedIndex":%d,"createdIndex":%[2]d}}`,
			del.Node.ModifiedIndex, a.Node.ModifiedIndex, set.Node.ModifiedIndex)},
		{"/t", ttl.Node.ModifiedIndex + 1, fmt.Sprintf(`{"action":"expire",`+
			`"node":{"key":"/t","modifiedIndex":%d,"createdIndex":%d},`+
			`"prevNode":{"key":"/t","value":"x","expiration":%q,"modifiedIndex":%[2]d,"createdIndex":%[2]d}}`,
			expired.Node.ModifiedIndex, ttl.Node.ModifiedIndex, exp)},
	}
	// What the first bridge answered and saw live.
	for i, ev := range []*translate.Event{set, del, expired} {
		if got := strings.TrimSuffix(string(ev.JSON()), "\n"); got != want[i].json {
			t.Fatalf("live, the first bridge:\n got %s\nwant %s", got, want[i].json)
		}
	}

	// A second bridge, started now, has none of these in its ring, nor the
	// expired lease in its cache: it reads them from v3 history. The expiry
	// first: a replay from before the TTL write would learn the lease from
	// the write's revision.
	b2 := newBackendWith(t, unreachable, inProcess)
	for _, i := range []int{2, 0, 1} {
		w := want[i]
		wa, _, err := b2.Watch(ctx, request(t, "GET", w.key, url.Values{"wait": {"true"},
			"waitIndex": {strconv.FormatUint(w.waitIndex, 10)}}))
		if err != nil {
			t.Fatalf("watch %s from %d: %v", w.key, w.waitIndex, err)
		}
		// An answered one-shot watcher is done too: its event stays queued.
		select {
		case <-wa.Done():
		case <-time.After(30 * time.Second):
		}
		select {
		case ev := <-wa.Events():
			if got := strings.TrimSuffix(string(ev.JSON()), "\n"); got != w.json {
				t.Errorf("watch %s from %d, from history:\n got %s\nwant %s", w.key, w.waitIndex, got, w.json)
			}
		default:
			t.Errorf("watch %s from %d: no event from history within 30 s (%s)", w.key, w.waitIndex, wa.Reason())
		}
		wa.Cancel()
	}
}
