// SPDX-License-Identifier: Apache-2.0

//go:build race

package soak

// raceBuild: the soak runs under the race detector, and so does the bridge.
const raceBuild = true
