// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"net"
	"testing"
)

// TestBridgeStartRetriesATakenPort: the bridge binary exits when another
// process took its port between FreeURL and its bind, and the tests' start
// helper starts it again on fresh ports instead of failing.
func TestBridgeStartRetriesATakenPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	attempts := 0
	p := startHealthyBridge(t, func() (string, []string, []string) {
		attempts++
		url, args := embeddedArgs(t)
		if attempts == 1 {
			url = "http://" + taken.Addr().String()
			args = append(args, "--listen-client-urls", url) // the last one wins
		}
		return url, nil, args
	})
	if attempts != 2 {
		t.Fatalf("%d attempts, want 2 (one on the taken port)", attempts)
	}
	if r := do(t, "GET", p.url, "/v2/keys/", nil); r.status != 200 {
		t.Fatalf("the restarted bridge: %d %s", r.status, r.body)
	}
}
