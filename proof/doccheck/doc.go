// SPDX-License-Identifier: Apache-2.0

// Package doccheck holds tests, and no code: they keep the docs true to the
// tree. Every package of the module must appear in docs/design.md's package
// map, which may name no package that is gone, and every package must have
// a doc comment. Every flag README.md and docs/ name must be one the
// v2bridge binary's help lists (or another program's, listed by name),
// every V2BRIDGE_ variable a flag's, and every make target the Makefile's.
// (The integration tests run the docs' command blocks themselves.)
package doccheck
