// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"testing"
	"time"
)

// planCase is a write planned against a snapshot holding state: either the
// v2 error it must fail with (code, cause), or a check of the plan.
type planCase struct {
	name  string
	req   Request
	state []*KV
	code  int
	cause string
	check func(t *testing.T, p *Plan)
}

var planLayout, _ = NewLayout("", "_v2bridge/")

func fileKV(k, v string, rev, lease int64) *KV {
	return &KV{Key: planLayout.DataKey(k), Value: []byte(v), CreateRevision: rev, ModRevision: rev, Lease: lease}
}

func markerKV(k string, rev, lease int64) *KV {
	return &KV{Key: planLayout.MarkerKey(k), CreateRevision: rev, ModRevision: rev, Lease: lease}
}

// snapshotOf builds the snapshot of p at revision 20 the backend would read
// when the keys in state exist: each single read gets its key, each range
// read its first key.
func snapshotOf(p string, state []*KV) *Snapshot {
	reads := planLayout.SnapshotReads(p, false)
	vals := make([]*KV, len(reads))
	for i, r := range reads {
		for _, kv := range state {
			switch {
			case r.End == "" && kv.Key == r.Key:
				vals[i] = kv
			case r.End != "" && kv.Key >= r.Key && kv.Key < r.End && (vals[i] == nil || kv.Key < vals[i].Key):
				vals[i] = kv
			}
		}
	}
	return planLayout.NewSnapshot(p, 20, false, vals)
}

func runPlanCases(t *testing.T, cases []planCase) {
	t.Helper()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			p, verr := planLayout.PlanWrite(&req, snapshotOf(req.Path, c.state), nil, now)
			if c.code != 0 {
				if verr == nil || verr.Code != c.code || verr.Cause != c.cause {
					t.Fatalf("got %v, want error %d with cause %q", verr, c.code, c.cause)
				}
				return
			}
			if verr != nil {
				t.Fatalf("unexpected error %v", verr)
			}
			if c.check != nil {
				c.check(t, p)
			}
		})
	}
}

// TestCompareAndDeleteErrors: the error and cause v2 gives a compareAndDelete
// that cannot apply.
func TestCompareAndDeleteErrors(t *testing.T) {
	runPlanCases(t, []planCase{
		{
			// v2's cause is the root's internal path "/1", trimmed to "".
			name: "on the root names no path",
			req:  Request{Method: "DELETE", Path: "/", PrevValue: "x"},
			code: EcodeNotFile, cause: "",
		},
		{
			name:  "on a directory names it",
			req:   Request{Method: "DELETE", Path: "/d", PrevValue: "x"},
			state: []*KV{markerKV("/d", 5, 0)},
			code:  EcodeNotFile, cause: "/d",
		},
		{
			name:  "on a file with another value shows both",
			req:   Request{Method: "DELETE", Path: "/f", PrevValue: "x"},
			state: []*KV{fileKV("/f", "v", 5, 0)},
			code:  EcodeTestFailed, cause: "[x != v]",
		},
	})
}

// TestDeleteIgnoresTTL: v2 accepts and ignores a ttl on a delete, even one
// no lease could carry.
func TestDeleteIgnoresTTL(t *testing.T) {
	runPlanCases(t, []planCase{
		{
			name:  "delete asks for no lease",
			req:   Request{Method: "DELETE", Path: "/f", TTL: ptrU64(5)},
			state: []*KV{fileKV("/f", "v", 5, 0)},
			check: func(t *testing.T, p *Plan) {
				if p.TTL != 0 {
					t.Errorf("plan TTL %d", p.TTL)
				}
			},
		},
		{
			name:  "compareAndDelete with a ttl beyond any lease is no error",
			req:   Request{Method: "DELETE", Path: "/f", PrevValue: "v", TTL: ptrU64(MaxLeaseTTL + 1)},
			state: []*KV{fileKV("/f", "v", 5, 0)},
			check: func(t *testing.T, p *Plan) {
				if p.TTL != 0 || p.Action() != ActionCompareAndDelete {
					t.Errorf("plan TTL %d, action %s", p.TTL, p.Action())
				}
			},
		},
	})
}

func ptrU64(v uint64) *uint64 { return &v }
