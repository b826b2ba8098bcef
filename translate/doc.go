// SPDX-License-Identifier: Apache-2.0

// Package translate is what the etcd v2 API means, as pure functions: v2
// request parsing and limits, the key layout of v2 paths in etcd v3, a
// write's snapshot, decision and guards, the journal, decoding a v3 revision
// into v2 events and numbering their indexes, listings, watch match rules,
// and v2's JSON and errors.
//
// It does no I/O and imports nothing of the bridge: its callers read and
// write etcd v3 and serve HTTP, so every rule here is tested without etcd.
package translate
