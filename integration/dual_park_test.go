// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// In dual mode a watch on the v3 side waits parked outside net/http
// (--watch-detach, on by default), and a rollback ends it with the empty
// answer clients re-issue, as it ends a watch waiting inside net/http.
func TestDualModeParksWatchesAndEndsThemAtASwitch(t *testing.T) {
	e := newDualEnv(t)
	br := e.startBridge(t, "")
	e.startFollower(t, network)
	if r := e.command(t, "cutover"); r.code != 0 {
		t.Fatalf("cutover: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	waitFor(t, 30*time.Second, "the bridge to serve etcd v3", func() bool { return statsMode(t, br.url) == "v3" })
	detached := func(n string) bool {
		return strings.Contains(do(t, "GET", br.url, "/metrics", nil).body, "\nv2bridge_watches_detached "+n+"\n")
	}

	c, err := net.DialTimeout("tcp", strings.TrimPrefix(br.url, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(90 * time.Second))
	_, _ = io.WriteString(c, "GET /v2/keys"+network+"/parked?wait=true HTTP/1.1\r\nHost: x\r\n\r\n")
	rd := bufio.NewReader(c)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the watch's head: %v %v", resp, err)
	}
	waitFor(t, 10*time.Second, "the watch to wait parked", func() bool { return detached("1") })

	if r := e.command(t, "rollback"); r.code != 0 {
		t.Fatalf("rollback: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 0 {
		t.Fatalf("the parked watch at the rollback: %q %v, want an empty, complete body", b, err)
	}
	if statsMode(t, br.url) != "passthrough" {
		t.Fatalf("the watch ended, but the bridge serves %q", statsMode(t, br.url))
	}
	waitFor(t, 10*time.Second, "no watch parked", func() bool { return detached("0") })
	// The connection goes on serving, from the v2 server now.
	_, _ = io.WriteString(c, "GET /v2/keys"+network+"/config HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err = http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || !strings.Contains(string(b), `10.5.0.0/16`) {
		t.Fatalf("the next request on the connection: %d %s", resp.StatusCode, b)
	}
}
