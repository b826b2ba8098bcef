// SPDX-License-Identifier: Apache-2.0

// Package v2diff compares two etcd v2 servers' answers to the same request:
// it owns the request/answer vocabulary, the normalisation of what differs
// between any two v2 servers (index numbers, expiration instants, ids), and
// the allow-list of v2bridge's documented divergences with their bounds.
// It does no I/O: callers send the requests and hand it the answers.
//
// Each allow-list entry is one section of docs/compatibility.md, one-to-one
// by a test; a unit test feeds the allow-list wrong answers beside each
// documented one, and each scripted conformance case declares the entries
// it may need.
package v2diff
