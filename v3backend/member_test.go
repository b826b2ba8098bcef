// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// unreachable is an endpoint nothing answers on (port 1 on loopback is
// refused): a backend that works with it calls its member in-process.
const unreachable = "http://127.0.0.1:1"

// TestInProcessMemberServesWithoutItsClientURL: a backend given the member
// running in its process serves writes, reads and watches through it, its
// endpoint reaching nothing.
func TestInProcessMemberServesWithoutItsClientURL(t *testing.T) {
	e, _ := startEmbed(t, nil)
	b := newBackendWith(t, unreachable, func(c *Config) { c.Member = e.Server })
	ctx := context.Background()
	ev, _, err := b.Write(ctx, request(t, "PUT", "/a", url.Values{"value": {"1"}}))
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	w, _, err := b.Watch(ctx, request(t, "GET", "/a", url.Values{"wait": {"true"},
		"waitIndex": {strconv.FormatUint(ev.Node.ModifiedIndex+1, 10)}}))
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Cancel()
	if _, _, err := b.Write(ctx, request(t, "PUT", "/a", url.Values{"value": {"2"},
		"prevIndex": {strconv.FormatUint(ev.Node.ModifiedIndex, 10)}})); err != nil {
		t.Fatalf("compare-and-swap: %v", err)
	}
	select {
	case got := <-w.Events():
		if got.Node == nil || got.Node.Value == nil || *got.Node.Value != "2" {
			t.Fatalf("watched %+v, want the swap to 2", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch saw no event")
	}
	got, _, err := b.Get(ctx, request(t, "GET", "/a", url.Values{"quorum": {"true"}}))
	if err != nil || got.Node == nil || *got.Node.Value != "2" {
		t.Fatalf("quorum read: %+v, %v; want 2", got, err)
	}
}

// TestInProcessMemberStoppedEndsWatches: when the member in the process
// stops, the heartbeat declares it lost, every watch it fed ends, and
// requests are refused as unavailable at once.
func TestInProcessMemberStoppedEndsWatches(t *testing.T) {
	e, stop := startEmbed(t, nil)
	b := newBackendWith(t, unreachable, func(c *Config) {
		c.Member = e.Server
		c.HeartbeatInterval, c.HeartbeatTimeout, c.DialTimeout = 100*time.Millisecond, 100*time.Millisecond, time.Second
	})
	ctx := context.Background()
	w, _, err := b.Watch(ctx, request(t, "GET", "/w", url.Values{"wait": {"true"}}))
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Cancel()
	start := time.Now()
	stop()
	select {
	case <-w.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the watch outlived its member")
	}
	t.Logf("watch ended %v after the member stopped: %s", time.Since(start), w.Reason())
	if b.Up() {
		t.Error("up with its member stopped")
	}
	if _, _, err := b.Write(ctx, request(t, "PUT", "/a", url.Values{"value": {"1"}})); !errors.Is(err, ErrUnavailable) {
		t.Errorf("write with the member stopped: %v, want ErrUnavailable", err)
	}
}
