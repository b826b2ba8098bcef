// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"testing"
	"time"
)

func TestStateOfEachRecord(t *testing.T) {
	for _, c := range []struct {
		name string
		rec  *Record
		want State
	}{
		{"no record is passthrough with writes", nil, State{Mode: ModePassthrough, Side: SidePassthrough, Writes: true}},
		{"passthrough after a rollback keeps its floor", &Record{Mode: ModePassthrough, Generation: 4, WatchFloor: 221},
			State{Mode: ModePassthrough, Side: SidePassthrough, Writes: true, Generation: 4, WatchFloor: 221}},
		{"passthrough after a rollback under a ceiling", &Record{Mode: ModePassthrough, Generation: 4, WatchFloor: 6, WatchCeiling: 12000000},
			State{Mode: ModePassthrough, Side: SidePassthrough, Writes: true, Generation: 4, WatchFloor: 6, WatchCeiling: 12000000}},
		{"fencing a cutover serves reads from the v2 server", &Record{Mode: ModeFencing, From: ModePassthrough, Generation: 1},
			State{Mode: ModeFencing, Side: SidePassthrough, Generation: 1}},
		{"fencing a rollback serves reads from v3 above the cutover floor", &Record{Mode: ModeFencing, From: ModeV3, Generation: 3, WatchFloor: 107},
			State{Mode: ModeFencing, Side: SideV3, Generation: 3, WatchFloor: 107}},
		{"v3 serves everything above the cutover index", &Record{Mode: ModeV3, Generation: 2, WatchFloor: 107},
			State{Mode: ModeV3, Side: SideV3, Writes: true, Generation: 2, WatchFloor: 107}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := StateOf(c.rec); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestPlansOfCutoverAndRollback(t *testing.T) {
	pass := &Record{Mode: ModePassthrough}
	fenceV3 := &Record{Mode: ModeFencing, From: ModePassthrough}
	fenceBack := &Record{Mode: ModeFencing, From: ModeV3}
	v3 := &Record{Mode: ModeV3}
	for _, c := range []struct {
		name     string
		rec      *Record
		cutover  Step
		rollback Step
	}{
		{"no record", nil, StepFence, StepDone},
		{"passthrough", pass, StepFence, StepDone},
		{"a cutover half-way", fenceV3, StepResume, StepRestore},
		{"a rollback half-way", fenceBack, StepConflict, StepResume},
		{"v3", v3, StepDone, StepFence},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, msg := PlanCutover(c.rec); got != c.cutover {
				t.Errorf("cutover: step %d (%s), want %d", got, msg, c.cutover)
			}
			if got, msg := PlanRollback(c.rec); got != c.rollback {
				t.Errorf("rollback: step %d (%s), want %d", got, msg, c.rollback)
			}
		})
	}
}

func TestNextRaisesTheGenerationAndKeepsTheRest(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &Record{Mode: ModeV3, Generation: 2, CutoverIndex: 107, WatchFloor: 107, V2Server: "http://old:2379"}
	n := Next(r, ModeFencing, ModeV3, "op@host", at)
	if n.Generation != 3 || n.Mode != ModeFencing || n.From != ModeV3 || n.WatchFloor != 107 || n.V2Server != r.V2Server || !n.At.Equal(at) {
		t.Errorf("next: %+v", n)
	}
	if first := Next(nil, ModeFencing, ModePassthrough, "op", at); first.Generation != 1 {
		t.Errorf("the first record's generation: %d", first.Generation)
	}
}

func TestDecodeRefusesWhatNoCommandWrites(t *testing.T) {
	for _, c := range []struct {
		name, value string
		ok          bool
	}{
		{"empty is no record", "", true},
		{"passthrough", `{"mode":"passthrough","generation":1}`, true},
		{"fencing from v3", `{"mode":"fencing","from":"v3","generation":3}`, true},
		{"fencing from nowhere", `{"mode":"fencing","generation":3}`, false},
		{"an unknown mode", `{"mode":"v4"}`, false},
		{"not JSON", `v3`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Decode([]byte(c.value))
			if (err == nil) != c.ok {
				t.Fatalf("Decode(%q) = %+v, %v", c.value, r, err)
			}
			if err == nil && r != nil {
				back, err := Decode(r.Encode())
				if err != nil || *back != *r {
					t.Errorf("round trip: %+v, %v", back, err)
				}
			}
		})
	}
}

func TestKeysAvoidTheBookkeepingTags(t *testing.T) {
	k := KeysFor("_v2bridge/")
	for _, key := range []string{k.Mode, k.Bridges, k.Follow, k.Pad} {
		rest := key[len("_v2bridge/"):]
		for _, tag := range []string{"d", "s", "l/", "j", "t"} {
			if len(rest) >= len(tag) && rest[:len(tag)] == tag {
				t.Errorf("%s starts with the bookkeeping tag %q", key, tag)
			}
		}
	}
}

func TestAVanishedRecordKeepsTheSideAndFencesWrites(t *testing.T) {
	for _, c := range []struct {
		name string
		rec  *Record
	}{
		{"etcd v3", &Record{Mode: ModeV3, Generation: 2, WatchFloor: 100}},
		{"the v2 server after a rollback", &Record{Mode: ModePassthrough, Generation: 4, WatchFloor: 6, WatchCeiling: 100}},
		{"fencing a cutover", &Record{Mode: ModeFencing, From: ModePassthrough, Generation: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := StateOf(c.rec)
			v := Vanished(st)
			if v.Side != st.Side || v.Writes || !v.Vanished || v.Mode != ModeFencing || v.Generation != st.Generation ||
				v.WatchFloor != st.WatchFloor || v.WatchCeiling != st.WatchCeiling {
				t.Errorf("vanished %+v from %+v", v, st)
			}
			if Vanished(v) != v {
				t.Errorf("vanishing twice changes the state: %+v", Vanished(v))
			}
		})
	}
}

// TestCovers: a copy covers a served subtree at or below it, never a
// sibling that shares its name's start.
func TestCovers(t *testing.T) {
	for _, c := range []struct {
		copied, served string
		want           bool
	}{
		{"/", "/", true}, {"/", "/coreos.com/network", true},
		{"/app", "/app", true}, {"/app", "/app/x", true},
		{"/app", "/apple", false}, {"/app", "/ap", false}, {"/app/x", "/app", false}, {"/app", "/", false},
	} {
		if got := Covers(c.copied, c.served); got != c.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", c.copied, c.served, got, c.want)
		}
	}
}
