// SPDX-License-Identifier: Apache-2.0

// Package doccheck holds a test, and no code: it keeps the written package
// map true. Every package of the module must appear in README.md's Layout
// and in docs/design.md's package map, neither may name a package that is
// gone, and every package must have a doc comment.
package doccheck
