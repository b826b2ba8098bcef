// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"strings"
	"testing"
	"time"
)

// TestUpdateKeepsTheNodesCreatedIndex: prevExist=true updates the node in
// place, as v2's Update does: the answer keeps the node's createdIndex
// (that of its v3 create revision, not of its last change) and shows the
// previous node in full; a set over the same file makes a new node.
func TestUpdateKeepsTheNodesCreatedIndex(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	old := &KV{Key: planLayout.DataKey("/a"), Value: []byte("old"), CreateRevision: 5, ModRevision: 7}
	yes := true
	for _, c := range []struct {
		name string
		req  Request
		want string
	}{
		{"update", Request{Method: "PUT", Path: "/a", Value: "new", PrevExist: &yes}, `{"action":"update",` +
			`"node":{"key":"/a","value":"new","modifiedIndex":21000000,"createdIndex":5000000},` +
			`"prevNode":{"key":"/a","value":"old","modifiedIndex":7000000,"createdIndex":5000000}}`},
		{"set", Request{Method: "PUT", Path: "/a", Value: "new"}, `{"action":"set",` +
			`"node":{"key":"/a","value":"new","modifiedIndex":21000000,"createdIndex":21000000},` +
			`"prevNode":{"key":"/a","value":"old","modifiedIndex":7000000,"createdIndex":5000000}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, verr := planLayout.PlanWrite(&c.req, snapshotOf("/a", []*KV{old}), nil, now)
			if verr != nil {
				t.Fatalf("unexpected error %v", verr)
			}
			p.Bind(0, time.Time{}, now, false)
			ev := p.Result(21)
			if got := strings.TrimSuffix(string(ev.JSON()), "\n"); got != c.want || ev.EtcdIndex != 21000000 {
				t.Errorf("answer %s (X-Etcd-Index %d)\nwant   %s (X-Etcd-Index 21000000)", got, ev.EtcdIndex, c.want)
			}
		})
	}
}
