// SPDX-License-Identifier: Apache-2.0

package hub

import (
	"testing"

	"github.com/v2bridge/v2bridge/translate"
)

func ringEvent(index uint64) *translate.Event {
	return &translate.Event{Action: translate.ActionSet, Node: &translate.Node{Key: "/k", ModifiedIndex: index}}
}

// from finds the oldest event at or after an index, wherever the ring's
// oldest event sits in its buffer.
func TestRingFromFindsTheOldestEventAtOrAfterAnIndex(t *testing.T) {
	r := newRing(4)
	if got := r.from(1); got != 0 {
		t.Fatalf("empty ring: %d, want 0", got)
	}
	for _, i := range []uint64{10, 11, 13, 14, 16, 17} { // wraps: the ring keeps 13, 14, 16, 17
		r.push(ringEvent(i))
	}
	for _, tc := range []struct {
		index uint64
		want  int
	}{
		{1, 0}, {13, 0}, {14, 1}, {15, 2}, {16, 2}, {17, 3}, {18, 4},
	} {
		if got := r.from(tc.index); got != tc.want {
			t.Errorf("from(%d) = %d, want %d", tc.index, got, tc.want)
		}
	}
}
