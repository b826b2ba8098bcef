// SPDX-License-Identifier: Apache-2.0

// Package cutover is the one switch of a migration from a v2 server to etcd v3: bridges in dual mode (a --v2-server and an etcd v3
// cluster) serve from whichever side the mode record in etcd v3 names, and
// the cutover and rollback commands move every bridge at once by rewriting
// that record, fencing writes while the authority changes hands.
//
// The parts: the record and its rules (record.go, pure), the switching HTTP
// handler a dual-mode bridge serves through (switch.go), the agent that
// keeps a bridge registered and in step with the record (agent.go), and the
// operator's commands (ops.go, their steps written once for both
// directions) with the v2 server's side of them (v2server.go) and the
// rollback's scan for writes it would discard (discarded.go). The agent's
// registration is the bridge's entry in package membership, which the
// commands list to wait for every bridge.
package cutover

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/v2bridge/v2bridge/bridge/membership"
	"github.com/v2bridge/v2bridge/translate"
)

// Modes a record can name.
const (
	// ModePassthrough: the v2 server is the authority; bridges forward
	// every request to it. An absent record means this.
	ModePassthrough = "passthrough"
	// ModeFencing: the authority is changing hands; bridges refuse writes
	// and serve reads from the side named by the record's From.
	ModeFencing = "fencing"
	// ModeV3: etcd v3 is the authority; bridges serve from it.
	ModeV3 = "v3"
)

// Side is where a bridge sends the requests it serves.
type Side int

const (
	// SideUnknown is a bridge's side before it has read the record: it
	// serves nothing.
	SideUnknown Side = iota
	// SidePassthrough forwards requests to the v2 server.
	SidePassthrough
	// SideV3 serves requests from etcd v3.
	SideV3
)

func (s Side) String() string {
	switch s {
	case SidePassthrough:
		return ModePassthrough
	case SideV3:
		return ModeV3
	}
	return "unknown"
}

// Record is the mode record, the JSON value of Keys.Mode. Every write of it
// raises Generation by one and is a compare-and-swap on the key's revision,
// so two operators cannot interleave.
type Record struct {
	Mode string `json:"mode"`
	// From is, while fencing, the side that keeps serving reads: the one
	// the authority is leaving (passthrough during a cutover, v3 during a
	// rollback).
	From       string    `json:"from,omitempty"`
	Generation uint64    `json:"generation"`
	By         string    `json:"by"`
	At         time.Time `json:"at"`
	// V2Server is the v2 server the switch was made against, and its
	// cluster id.
	V2Server          string `json:"source,omitempty"`
	V2ServerClusterID string `json:"sourceClusterId,omitempty"`
	// V2ServerIndex is the v2 server's index when the cutover switched to
	// v3 (every index a client got from it is at most about this).
	V2ServerIndex uint64 `json:"sourceIndex,omitempty"`
	// CutoverIndex is the v2 index of the v3 side when the cutover switched
	// to v3, made larger than V2ServerIndex first; V3Revision the revision
	// of the v3 record, from which a rollback looks for writes made through
	// v3.
	CutoverIndex uint64 `json:"cutoverIndex,omitempty"`
	V3Revision   int64  `json:"v3Revision,omitempty"`
	// RollbackIndex is the v2 server's index when a rollback switched back
	// to it, made larger than every v3 index first.
	RollbackIndex uint64 `json:"rollbackIndex,omitempty"`
	// WatchFloor: a waitIndex at or below it was issued by the other side
	// (or before the switch) and gets error 401, so the client re-lists.
	// It is CutoverIndex while v3 serves and RollbackIndex while the v2
	// server serves after a rollback.
	WatchFloor uint64 `json:"watchFloor,omitempty"`
	// WatchCeiling: a waitIndex above it was issued by etcd v3 and gets
	// error 401 on the v2 server. A rollback sets it (to CutoverIndex)
	// instead of raising the v2 server's index, when every index etcd v3
	// gave clients since the cutover is above it and the v2 server's is
	// well below it.
	WatchCeiling uint64 `json:"watchCeiling,omitempty"`
	// V3Writes, on a rollback's fencing record, counts the writes found in
	// etcd v3 since the cutover (a rollback with --force carries on).
	V3Writes int `json:"v3Writes,omitempty"`
}

// Decode reads a record; an empty value is an absent record.
func Decode(b []byte) (*Record, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("mode record: %w", err)
	}
	switch r.Mode {
	case ModePassthrough, ModeV3:
	case ModeFencing:
		if r.From != ModePassthrough && r.From != ModeV3 {
			return nil, fmt.Errorf("mode record: fencing from %q: want passthrough or v3", r.From)
		}
	default:
		return nil, fmt.Errorf("mode record: unknown mode %q", r.Mode)
	}
	return &r, nil
}

// Encode is the record's JSON value.
func (r *Record) Encode() []byte {
	b, _ := json.Marshal(r)
	return b
}

// State is what a bridge does under a record.
type State struct {
	// Mode is the record's mode (passthrough for an absent record); empty
	// while the record is not known.
	Mode         string
	Side         Side
	Writes       bool   // writes are served (not fenced)
	WatchFloor   uint64 // a waitIndex at or below it gets 401
	WatchCeiling uint64 // a waitIndex above it gets 401 (0: none)
	Generation   uint64
	// Vanished: the record was deleted after the bridge applied this
	// generation (see Vanished).
	Vanished bool
	// ClusterID is the v2 server's X-Etcd-Cluster-Id as the cutover read
	// it (empty before a cutover): every answer presents it, whichever
	// side serves.
	ClusterID string
}

// Unknown is the state of a bridge that has not read the record: it serves
// nothing, since it cannot tell which side is the authority.
var Unknown = State{}

// StateOf is what a bridge does under r (nil: no record, passthrough).
func StateOf(r *Record) State {
	if r == nil {
		return State{Mode: ModePassthrough, Side: SidePassthrough, Writes: true}
	}
	st := State{Mode: r.Mode, Generation: r.Generation, WatchFloor: r.WatchFloor, WatchCeiling: r.WatchCeiling,
		ClusterID: r.V2ServerClusterID}
	switch r.Mode {
	case ModePassthrough:
		st.Side, st.Writes = SidePassthrough, true
	case ModeV3:
		st.Side, st.Writes = SideV3, true
	case ModeFencing:
		st.Side = SidePassthrough
		if r.From == ModeV3 {
			st.Side = SideV3
		}
	}
	return st
}

// Vanished is what a bridge that applied st does once the record is
// deleted: it keeps its side, its watch bounds and its generation, and
// refuses writes until an operator writes a record. Only a bridge that
// never applied a record takes an absent one for passthrough: one that
// served etcd v3 must not go back to the v2 server because the
// bookkeeping was cleaned up, and no side may take writes while nothing
// says which is the authority.
func Vanished(st State) State {
	st.Mode, st.Writes, st.Vanished = ModeFencing, false, true
	return st
}

// Step is what a command does next given the record it read.
type Step int

const (
	// StepDone does nothing: the record already says what the command
	// wants.
	StepDone Step = iota
	// StepFence writes a fencing record, then waits for the bridges.
	StepFence
	// StepResume waits for the bridges, then goes on: a fencing record of
	// the same command is there (it was interrupted).
	StepResume
	// StepRestore is a rollback's step when an interrupted cutover left a
	// fencing record: it writes passthrough at once (v3 never served).
	StepRestore
	// StepConflict stops: the other command is half-way; finish or undo it
	// first.
	StepConflict
)

// PlanCutover is the cutover's next step under the record it read.
func PlanCutover(r *Record) (Step, string) {
	switch {
	case r == nil || r.Mode == ModePassthrough:
		return StepFence, ""
	case r.Mode == ModeV3:
		return StepDone, fmt.Sprintf("already in v3 mode (generation %d, set by %s at %s): nothing to do",
			r.Generation, r.By, r.At.Format(time.RFC3339))
	case r.From == ModePassthrough:
		return StepResume, fmt.Sprintf("a cutover is in progress (generation %d, fenced by %s at %s): resuming it",
			r.Generation, r.By, r.At.Format(time.RFC3339))
	}
	return StepConflict, fmt.Sprintf("a rollback is in progress (generation %d, fenced by %s at %s): "+
		"finish it with `migrate rollback` first", r.Generation, r.By, r.At.Format(time.RFC3339))
}

// PlanRollback is the rollback's next step under the record it read.
func PlanRollback(r *Record) (Step, string) {
	switch {
	case r == nil || r.Mode == ModePassthrough:
		return StepDone, "already in passthrough mode: nothing to do"
	case r.Mode == ModeV3:
		return StepFence, ""
	case r.From == ModeV3:
		return StepResume, fmt.Sprintf("a rollback is in progress (generation %d, fenced by %s at %s): resuming it",
			r.Generation, r.By, r.At.Format(time.RFC3339))
	}
	return StepRestore, fmt.Sprintf("a cutover was interrupted while fencing (generation %d, by %s at %s): "+
		"etcd v3 never served, so writes go back to the v2 server at once", r.Generation, r.By, r.At.Format(time.RFC3339))
}

// Next is the record that follows r: mode set, generation raised, the
// rest carried over unless the caller changes it.
func Next(r *Record, mode, from, by string, at time.Time) Record {
	var n Record
	if r != nil {
		n = *r
	}
	n.Mode, n.From, n.By, n.At = mode, from, by, at.UTC()
	n.Generation++
	return n
}

// Covers reports whether a copy of the v2 subtree copied holds every path
// of the subtree served (copied is served or one of its ancestors).
func Covers(copied, served string) bool { return translate.Within(copied, served) }

// FollowRecord is what `migrate --follow` writes at Keys.Follow: how far it
// applied the v2 server's events.
type FollowRecord struct {
	V2Server  string    `json:"source"`
	ClusterID string    `json:"clusterId,omitempty"`
	Prefix    string    `json:"prefix"`
	Index     uint64    `json:"index"` // every v2 server event up to it is applied
	Updated   time.Time `json:"updated"`
	Stopped   string    `json:"stopped,omitempty"` // why the follower stopped, once it has
}

// Keys are the v3 keys of the switch, under the bridges' meta prefix.
type Keys struct {
	Mode    string // the mode record
	Bridges string // prefix of the registrations, one per bridge (membership.Bridges)
	Follow  string // the follower's progress
	Pad     string // rewritten to raise the v3 revision past the old index
}

// KeysFor are the keys under metaPrefix. None starts with a tag of the
// bridge's bookkeeping (markers, sequences, leases, journal, TTL records).
func KeysFor(metaPrefix string) Keys {
	return Keys{Mode: metaPrefix + "mode", Bridges: membership.Bridges(metaPrefix),
		Follow: metaPrefix + "migrate/follow", Pad: metaPrefix + "migrate/pad"}
}
