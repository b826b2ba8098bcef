// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// TestSwapsThatLoseDoNotTakeTurns: while a compare-and-swap on a key is in
// flight, one on an index the key has already moved past fails at once,
// without waiting for it; those on the index it replaces wait for it to
// commit, then all fail against the index it wrote, without a turn each.
func TestSwapsThatLoseDoNotTakeTurns(t *testing.T) {
	b, ic := batchBackend(t, "/c")
	ctx := context.Background()
	moved, _, err := b.Write(ctx, request(t, "PUT", "/c", url.Values{"value": {"v1"}}))
	if err != nil {
		t.Fatal(err)
	}
	passed, cur := moved.PrevNode.ModifiedIndex, moved.Node.ModifiedIndex
	swap := func(prev uint64) *translate.Request {
		return request(t, "PUT", "/c", url.Values{"value": {"x"}, "prevIndex": {strconv.FormatUint(prev, 10)}})
	}
	lost := func(what string, err error, prev, now uint64) {
		t.Helper()
		var terr *translate.Error
		if !errors.As(err, &terr) || terr.Code != translate.EcodeTestFailed || terr.Cause != fmt.Sprintf("[%d != %d]", prev, now) {
			t.Errorf("%s: %v, want 101 with cause [%d != %d]", what, err, prev, now)
		}
	}

	held, release := holdFirstTxn(ic)
	first := make(chan writeResult, 1)
	go func() {
		ev, _, err := b.Write(ctx, swap(cur))
		first <- writeResult{ev, err}
	}()
	<-held
	stale, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, _, err = b.Write(stale, swap(passed))
	cancel()
	lost("a swap on an index already passed, while a swap of its key is in flight", err, passed, cur)

	slot := &b.writeSlots[recentSlot("/c")%len(b.writeSlots)]
	same := make(chan []writeResult, 1)
	go func() { same <- writeAll(b, []*translate.Request{swap(cur), swap(cur), swap(cur)}) }()
	deadline := time.Now().Add(10 * time.Second)
	for waiting := false; !waiting; time.Sleep(time.Millisecond) { // poll
		slot.mu.Lock()
		waiting = slot.released != nil
		slot.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the swaps on the index in flight do not wait for its write")
		}
	}
	close(release)
	won := <-first
	if won.err != nil {
		t.Fatal(won.err)
	}
	for i, r := range <-same {
		lost(fmt.Sprintf("swap %d on the index the write in flight replaced", i), r.err, cur, won.ev.Node.ModifiedIndex)
	}
}
