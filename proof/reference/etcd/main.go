// SPDX-License-Identifier: Apache-2.0

// Command etcd is etcd 3.5 itself (the etcd server of the version this
// module requires, go.etcd.io/etcd/server/v3 v3.5.35): etcd's own main,
// with etcd's own flags. The tests of the main module run their members as
// this binary to check the bridge against etcd 3.5 (the Makefile's
// test-matrix target builds it).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
