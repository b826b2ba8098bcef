// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"math"
	"testing"
)

func TestIndexesNumberEventsWithinTheirRevision(t *testing.T) {
	cases := []struct {
		name     string
		rev      int64
		pos, n   int
		want     uint64
		wantBack int64 // Revision of the index
	}{
		{"a revision's only event takes the revision's index", 1234, 0, 1, 1234000000, 1234},
		{"the last of three events takes the revision's index", 1234, 2, 3, 1234000000, 1234},
		{"the first of three events is two below it", 1234, 0, 3, 1233999998, 1234},
		{"more events than a block holds: the first ones share its first index", 5, 0, IndexesPerRevision + 7, 4000001, 5},
		{"the last event of an oversized revision keeps the revision's index", 5, IndexesPerRevision + 6, IndexesPerRevision + 7, 5000000, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := EventIndex(c.rev, c.pos, c.n)
			if got != c.want {
				t.Fatalf("EventIndex(%d, %d, %d) = %d, want %d", c.rev, c.pos, c.n, got, c.want)
			}
			if r := Revision(got); r != c.wantBack {
				t.Fatalf("Revision(%d) = %d, want %d", got, r, c.wantBack)
			}
		})
	}
}

func TestIndexAndRevisionAgreeAtTheBlockEdges(t *testing.T) {
	for _, rev := range []int64{1, 2, 999, 1 << 40} {
		if r := Revision(Index(rev)); r != rev {
			t.Errorf("Revision(Index(%d)) = %d", rev, r)
		}
		if r := Revision(FirstIndex(rev)); r != rev {
			t.Errorf("Revision(FirstIndex(%d)) = %d", rev, r)
		}
		if r := Revision(Index(rev) + 1); r != rev+1 {
			t.Errorf("X-Etcd-Index + 1 after revision %d is in revision %d, want %d", rev, r, rev+1)
		}
		if FirstIndex(rev+1) != Index(rev)+1 {
			t.Errorf("blocks of %d and %d are not contiguous", rev, rev+1)
		}
	}
	if Index(0) != 0 || FirstIndex(0) != 0 || Revision(0) != 0 {
		t.Fatal("revision 0 must be index 0 (no index)")
	}
	if r := Revision(math.MaxUint64); r <= 0 {
		t.Fatalf("Revision(MaxUint64) = %d, want a positive revision", r)
	}
}
