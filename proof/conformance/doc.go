// SPDX-License-Identifier: Apache-2.0

// Package conformance is the differential conformance suite against a real
// etcd v2 server: it runs the same etcd v2 HTTP requests against etcd 3.5
// with the v2 store (see proof/v2ref) and against v2bridge, and compares
// the answers with package v2diff, which normalises what legitimately
// differs between two v2 servers (index numbers, expiration instants, ids).
//
// Every difference that survives the normalisation must be one of the
// documented divergences of docs/compatibility.md (v2diff.Divergences);
// anything else fails the suite. The suite is test code only: scripted
// cases (one per v2 behaviour), watch cases, and seeded random operation
// sequences, sent through the HTTP harness in client_test.go. Each run does
// at least 10,000 random operations (a run that did fewer fails; make
// conformance-long does more), watches and short TTLs expiring mid-sequence
// included; a failure prints the seed, and CONFORMANCE_SEED or -seed replays
// it.
package conformance
