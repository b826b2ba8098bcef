// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"strings"
	"testing"
)

// TestInOrderNamesKeepIncreasingAcrossADirectoryMadeAgain: a POST decided
// while its directory was missing, and sent only after the directory was
// made, posted to and deleted again, must not commit a name below the ones
// given meanwhile (v2 names by a global index, which only grows). Planned
// again, it gets a name above them; so does a POST into a directory
// deleted and made again.
func TestInOrderNamesKeepIncreasingAcrossADirectoryMadeAgain(t *testing.T) {
	m := newMemStore(t)
	late, verr := m.plan(m.parse("POST", "/q", "value=late"))
	if verr != nil {
		t.Fatal(verr)
	}
	var given []string
	for _, v := range []string{"a", "b"} {
		ev, verr := m.do("POST", "/q", "value="+v)
		if verr != nil {
			t.Fatal(verr)
		}
		given = append(given, ev.Node.Key)
	}
	if _, verr := m.do("DELETE", "/q", "recursive=true"); verr != nil {
		t.Fatal(verr)
	}
	if res, ok := m.commit(late); ok {
		t.Fatalf("a POST decided before the directory was made, posted to and deleted committed %s below %v",
			res.Node.Key, given)
	}
	for _, v := range []string{"late", "again"} {
		ev, verr := m.do("POST", "/q", "value="+v)
		if verr != nil {
			t.Fatal(verr)
		}
		if last := given[len(given)-1]; strings.Compare(ev.Node.Key, last) <= 0 {
			t.Fatalf("POST %s named %s, not above %s given before", v, ev.Node.Key, last)
		}
		given = append(given, ev.Node.Key)
	}
}
