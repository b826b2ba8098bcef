// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// TestACompareOnAPassedIndexIsAnsweredFromThePresent: a compare-and-swap
// on an index older than the node's fails whatever happens, but its answer
// (code, cause, index) is the store's at the time of the request. While
// the bridge's copy has not seen the node deleted elsewhere, the answer is
// the deletion's 100 (Key not found), not a 101 drawn from the copy.
func TestACompareOnAPassedIndexIsAnsweredFromThePresent(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an etcd member")
	}
	ep := startMember(t, nil)
	b, gate := newGatedBackend(t, ep)
	other := otherClient(t, ep)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, _, err := b.Write(ctx, request(t, "PUT", "/passed", url.Values{"value": {"1"}}))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Write(ctx, request(t, "PUT", "/passed", url.Values{"value": {"2"}})); err != nil {
		t.Fatal(err)
	}
	older := first.Node.ModifiedIndex // an index the node has moved past
	gate.Lock()
	held := true
	defer func() {
		if held {
			gate.Unlock()
		}
	}()
	del, err := other.Delete(ctx, "/passed")
	if err != nil || del.Deleted != 1 {
		t.Fatalf("delete elsewhere: %v %+v", err, del)
	}
	_, _, err = b.Write(ctx, request(t, "PUT", "/passed", url.Values{"value": {"3"}, "prevIndex": {strconv.FormatUint(older, 10)}}))
	gate.Unlock()
	held = false
	var terr *translate.Error
	if !errors.As(err, &terr) {
		t.Fatalf("compare-and-swap on a deleted node: %v, want error 100", err)
	}
	want := translate.NewError(translate.EcodeKeyNotFound, "/passed", translate.Index(del.Header.Revision))
	if *terr != *want {
		t.Fatalf("compare-and-swap on a deleted node:\n got %+v\nwant %+v", *terr, *want)
	}
}
