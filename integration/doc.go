// SPDX-License-Identifier: Apache-2.0

// Package integration tests the bridge end to end, and holds nothing but
// its tests: the v2bridge binary and in-process bridges (v2bridgetest)
// against real etcd members, real v2 clients, failover, TLS, migration and
// the cutover. Unit tests stay with their packages.
package integration
