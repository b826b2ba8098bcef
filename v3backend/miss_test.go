// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// TestAMissNamesTheRevisionItsReadSaw: a plain GET that found nothing in
// the bridge's copy answers 100 with the index of that copy, even when the
// copy catches up with a write of the key before the error is made (an
// error at the write's index would say the key was missing there).
func TestAMissNamesTheRevisionItsReadSaw(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an etcd member")
	}
	ep := startMember(t, nil)
	b, gate := newGatedBackend(t, ep)
	other := otherClient(t, ep)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gate.Lock()
	held := true
	defer func() {
		if held {
			gate.Unlock()
		}
	}()
	put, err := other.Put(ctx, "/late", "1")
	if err != nil {
		t.Fatal(err)
	}
	afterMissTest = func() {
		gate.Unlock()
		held = false
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if rev, ok := b.mirror.Rev(); ok && rev >= put.Header.Revision {
				return
			}
			if time.Now().After(deadline) {
				t.Error("the copy did not catch up with the write")
				return
			}
		}
	}
	defer func() { afterMissTest = nil }()
	_, _, err = b.Get(ctx, request(t, "GET", "/late", nil))
	var terr *translate.Error
	if !errors.As(err, &terr) || terr.Code != translate.EcodeKeyNotFound || terr.Cause != "/late" ||
		terr.Index >= translate.Index(put.Header.Revision) {
		t.Fatalf("GET of a key the copy had not seen: %v; want 100 for /late at an index below %d, the write's",
			err, translate.Index(put.Header.Revision))
	}
}
