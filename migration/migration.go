// SPDX-License-Identifier: Apache-2.0

// Package migration runs the migration's commands, `v2bridge migrate`,
// `verify`, `migrate cutover` and `migrate rollback`: the steps each takes
// over the packages that own them (migrate, cutover, shadow, and assemble's
// clients of etcd v3), and what each reports, as text or as one JSON
// summary. The binary parses their flags and calls one function per command.
package migration
