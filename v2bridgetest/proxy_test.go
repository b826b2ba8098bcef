// SPDX-License-Identifier: Apache-2.0

package v2bridgetest

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer echoes every line back.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dialProxy(t *testing.T, p *faultProxy) (net.Conn, *bufio.Reader) {
	c, err := net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func echoes(t *testing.T, c net.Conn, r *bufio.Reader, line string) bool {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	got, err := r.ReadString('\n')
	return err == nil && got == line+"\n"
}

func TestProxyBlackholeAndHeal(t *testing.T) {
	var cut atomic.Bool
	p, err := newFaultProxy(echoServer(t), false, func(int) bool { return cut.Load() }, func(string) int { return -1 })
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	if !strings.HasPrefix(p.url, "http://127.0.0.1:") {
		t.Fatalf("proxy on %s, want loopback", p.url)
	}
	c, r := dialProxy(t, p)
	if !echoes(t, c, r, "one") {
		t.Fatal("no echo through a healthy proxy")
	}
	cut.Store(true)
	if echoes(t, c, r, "two") {
		t.Fatal("echo through a blackholed proxy")
	}
	c2, r2 := dialProxy(t, p) // accepted, never answered
	if echoes(t, c2, r2, "three") {
		t.Fatal("a new connection was answered while blackholed")
	}
	cut.Store(false)
	p.heal()
	// The connections that lost bytes are closed; a new one works.
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("a connection that lost bytes was left open")
	}
	c3, r3 := dialProxy(t, p)
	if !echoes(t, c3, r3, "four") {
		t.Fatal("no echo after heal")
	}
}

func TestPeerProxyKnowsTheSender(t *testing.T) {
	var cutFrom atomic.Int64
	cutFrom.Store(-1)
	lookup := func(hex string) int {
		if hex == "8e9e05c52164694d" {
			return 1
		}
		return -1
	}
	p, err := newFaultProxy(echoServer(t), true, func(src int) bool { return src >= 0 && int64(src) == cutFrom.Load() }, lookup)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	c, r := dialProxy(t, p)
	sendHead(t, c, r, "8e9e05c52164694d")
	if !echoes(t, c, r, "from member 1") {
		t.Fatal("no echo before the cut")
	}
	cutFrom.Store(1)
	if echoes(t, c, r, "cut") {
		t.Fatal("echo from a member that is cut off")
	}
	other, ro := dialProxy(t, p)
	sendHead(t, other, ro, "2")
	if !echoes(t, other, ro, "from another member") {
		t.Fatal("a member that is not cut off was cut off")
	}
}

// sendHead sends an HTTP request head like rafthttp's and reads its echo.
func sendHead(t *testing.T, c net.Conn, r *bufio.Reader, from string) {
	t.Helper()
	if _, err := c.Write([]byte("GET /raft/stream/message/1 HTTP/1.1\r\nHost: x\r\nX-Server-From: " + from + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("head not echoed: %v", err)
		}
		if line == "\r\n" {
			return
		}
	}
}
