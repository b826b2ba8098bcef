// SPDX-License-Identifier: Apache-2.0

package soak

import (
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// These run in every test run (no etcd, no bridge): they check the soak's
// judgement on made-up histories.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func put(key, value string) identity { return identity{key: key, value: value} }

func del(key, value string) identity { return identity{key: key, del: true, value: value} }

// history is a ledger built from acknowledged writes, in commit order: each
// is sent at its number of seconds and acknowledged 0.1 s later.
func history(writes ...expected) ledgerView {
	l := newLedger()
	for i, w := range writes {
		if w.sent.IsZero() {
			w.sent = at(float64(i + 1))
			w.acked = w.sent.Add(100 * time.Millisecond)
		}
		if w.action == "" {
			w.action = "set"
		}
		l.expect(w)
	}
	return l.snapshot()
}

func got(ids ...identity) []delivered {
	var out []delivered
	for i, id := range ids {
		action := "set"
		if id.del {
			action = "delete"
		}
		out = append(out, delivered{id: id, action: action, index: uint64(10 + i)})
	}
	return out
}

func TestAnalyze(t *testing.T) {
	a1, a2, a3 := put("/soak/v2/a", "w.1"), put("/soak/v2/a", "w.2"), put("/soak/v2/a", "w.3")
	b1 := put("/soak/v3/b", "x.1")
	three := history(expected{id: a1}, expected{id: a2}, expected{id: a3})
	tests := []struct {
		name   string
		ledger ledgerView
		rec    watchRecord
		check  func(t *testing.T, r watchReport)
	}{
		{"every expected event delivered once passes", three,
			watchRecord{scope: "/soak", events: got(a1, a2, a3)},
			func(t *testing.T, r watchReport) {
				if r.expected != 3 || r.delivered != 3 || r.lostTotal() != 0 || len(r.samples) != 0 {
					t.Errorf("%+v", r)
				}
			}},
		{"an event never delivered is lost, counted by its origin",
			history(expected{id: a1}, expected{id: b1, origin: fromV3Rest}),
			watchRecord{scope: "/soak", events: got(a1)},
			func(t *testing.T, r watchReport) {
				if r.lost[fromV3Rest] != 1 || r.lostTotal() != 1 || r.delivered != 1 {
					t.Errorf("%+v", r)
				}
			}},
		{"an event delivered twice is a duplicate", three,
			watchRecord{scope: "/soak", events: got(a1, a2, a2, a3)},
			func(t *testing.T, r watchReport) {
				if r.duplicates != 1 || r.lostTotal() != 0 {
					t.Errorf("%+v", r)
				}
			}},
		{"a key's events out of commit order are reordered", three,
			watchRecord{scope: "/soak", events: got(a2, a1, a3)},
			func(t *testing.T, r watchReport) {
				if r.reordered != 1 {
					t.Errorf("%+v", r)
				}
			}},
		{"an index not above the one before is a regression", three,
			watchRecord{scope: "/soak", events: []delivered{{id: a1, action: "set", index: 7}, {id: a2, action: "set", index: 7},
				{id: a3, action: "set", index: 8}}},
			func(t *testing.T, r watchReport) {
				if r.regressions != 1 {
					t.Errorf("%+v", r)
				}
			}},
		{"an event with another action than the writer was answered is flagged",
			history(expected{id: a1, action: "compareAndSwap"}),
			watchRecord{scope: "/soak", events: got(a1)},
			func(t *testing.T, r watchReport) {
				if r.wrongAction != 1 {
					t.Errorf("%+v", r)
				}
			}},
		{"events skipped between a 401 and the new listing are resyncs, not losses", three,
			watchRecord{scope: "/soak", events: got(a1, a3), resyncs: []resync{{after: &a1, listedAt: at(2.5)}}},
			func(t *testing.T, r watchReport) {
				if r.resynced != 1 || r.lostTotal() != 0 || r.delivered != 2 {
					t.Errorf("%+v", r)
				}
			}},
		{"events written after the new listing are still owed", three,
			watchRecord{scope: "/soak", events: got(a1), resyncs: []resync{{after: &a1, listedAt: at(2.5)}}},
			func(t *testing.T, r watchReport) {
				if r.resynced != 1 || r.lostTotal() != 1 {
					t.Errorf("%+v", r)
				}
			}},
		{"events of a write whose answer was lost are allowed, delivered or not", func() ledgerView {
			v := history(expected{id: a1})
			v.maybe[a2] = true
			v.maybeDel["/soak/v2/a"] = true
			return v
		}(),
			watchRecord{scope: "/soak", events: got(a1, a2, del("/soak/v2/a", "w.2"))},
			func(t *testing.T, r watchReport) {
				if r.maybes != 2 || r.unexplained != 0 || r.lostTotal() != 0 {
					t.Errorf("%+v", r)
				}
			}},
		{"an event no write explains is flagged", history(expected{id: a1}),
			watchRecord{scope: "/soak", events: got(a1, put("/soak/v2/a", "ghost"))},
			func(t *testing.T, r watchReport) {
				if r.unexplained != 1 {
					t.Errorf("%+v", r)
				}
			}},
		{"events outside the watcher's scope are not owed", history(expected{id: a1}, expected{id: b1}),
			watchRecord{scope: "/soak/v3", events: got(b1)},
			func(t *testing.T, r watchReport) {
				if r.expected != 1 || r.delivered != 1 || r.lostTotal() != 0 {
					t.Errorf("%+v", r)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, analyze(tc.ledger, tc.rec)) })
	}
}

func TestOwedCountsOnlyEventsWrittenAfterTheWatchAndAcknowledgedInTime(t *testing.T) {
	l := newLedger()
	l.expect(expected{id: put("/soak/v2/a", "1"), sent: at(1), acked: at(1.1)})
	l.expect(expected{id: put("/soak/v3/b", "1"), sent: at(3), acked: at(3.1)})
	l.expect(expected{id: del("/soak/v2/t", "1"), sent: at(2)}) // an expiry: no commit time, never owed
	tests := []struct {
		name          string
		scope         string
		since, before float64
		want          bool
	}{
		{"an event written after the watch and acknowledged before the bound", "/soak", 2, 4, true},
		{"an event written before the watch", "/soak/v2", 0.5 + 1, 10, false},
		{"an event acknowledged after the bound", "/soak", 2, 3, false},
		{"an event outside the scope", "/soak/v2", 2, 10, false},
		{"an event in the scope", "/soak/v3", 2, 10, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.owed(tc.scope, at(tc.since), at(tc.before)); got != tc.want {
				t.Errorf("owed(%s, %v, %v) = %v", tc.scope, tc.since, tc.before, got)
			}
		})
	}
}

func TestExplainLoss(t *testing.T) {
	faults := []fault{
		{kind: freeze, member: 1, start: at(10), end: at(14)},
		{kind: blackhole, member: 2, leader: true, start: at(30), end: at(33)},
		{kind: leaderMove, member: 0, leader: true, start: at(50), end: at(50.1)},
	}
	tests := []struct {
		name   string
		member int
		t      float64
		want   string
	}{
		{"a loss of the frozen member", 1, 12, "its member faulted"},
		{"a loss detected after a short fault was healed", 1, 16, "its member faulted"},
		{"a loss of a healthy member while the leader was blackholed", 0, 32, "leader lost or moved"},
		{"a loss right after a leader move", 1, 52, "leader lost or moved"},
		{"a loss of a healthy member with a healthy leader is false", 0, 12, ""},
		{"a loss long after every fault is false", 1, 100, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := explainLoss(faults, tc.member, at(tc.t), 5*time.Second); got != tc.want {
				t.Errorf("explainLoss = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClassifyWrites(t *testing.T) {
	tests := []struct {
		name string
		a    v2Answer
		err  error
		want outcome
	}{
		{"an acknowledged write", v2Answer{status: 200, ev: &translate.Event{Action: "set"}}, nil, applied},
		{"a compare failure is refused", v2Answer{status: 412, err: &v2Error{Code: 101}}, nil, refused},
		{"a missing key is refused", v2Answer{status: 404, err: &v2Error{Code: 100}}, nil, refused},
		{"a raft internal error may have been applied", v2Answer{status: 500, err: &v2Error{Code: 300}}, nil,
			uncertain},
		{"a 5xx without v2 JSON may have been applied", v2Answer{status: 502, body: "bad gateway"}, nil, uncertain},
		{"a request that could not connect was never sent", v2Answer{},
			&url.Error{Op: "Put", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}, refused},
		{"a connection reset after sending may have been applied", v2Answer{},
			&url.Error{Op: "Put", Err: &net.OpError{Op: "read", Err: errors.New("connection reset")}}, uncertain},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.a, tc.err); got != tc.want {
				t.Errorf("classify = %v, want %v", got, tc.want)
			}
		})
	}
}
