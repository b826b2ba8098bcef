// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/bridge/detach"
)

// parkingSide is a v3 side whose watches wait parked outside their
// handler (detach.Park) until EndWatches.
type parkingSide struct {
	end   chan struct{}
	ended chan string // EndWatches's reasons
}

func (p *parkingSide) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Etcd-Cluster-Id", "v3side") // the switch presents the v2 server's
	w.Header().Set("X-Etcd-Index", "9")
	if !detach.Park(w, r, func(gone <-chan struct{}) []byte {
		select {
		case <-p.end:
		case <-gone:
		}
		return nil
	}, nil) {
		http.Error(w, "not parked", http.StatusInternalServerError)
	}
}

func (p *parkingSide) endWatches(reason string) {
	p.ended <- reason
	close(p.end)
}

// A watch parked on the v3 side ends, with the empty answer clients
// re-issue, when the switch leaves that side: the switch ends it through
// the side's EndWatches. Its head carries the cluster ID the switch
// presents, as every answer's does.
func TestSwitchEndsParkedWatchesWhenTheSideChanges(t *testing.T) {
	s, _, _ := newTestSwitch(t)
	v3 := &parkingSide{end: make(chan struct{}), ended: make(chan string, 1)}
	ok := func() bool { return true }
	s.SetV3(SideHandlers{API: v3, Probes: v3, Ready: ok, EndWatches: v3.endWatches})
	apply(t, s, &Record{Mode: ModeV3, Generation: 2, V2ServerClusterID: "0ld"})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dl := detach.NewListener(ln, 0)
	srv := &http.Server{Handler: detach.Handler(s), ConnContext: dl.ConnContext, ConnState: dl.ConnState,
		ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(dl)
	}()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
		_ = dl.Wait(ctx)
	}()

	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "GET /v2/keys/a?wait=true HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-Etcd-Cluster-Id") != "0ld" || resp.Header.Get("X-Etcd-Index") != "9" {
		t.Fatalf("the watch's head: %d %v, want 200, the v2 server's cluster ID, index 9", resp.StatusCode, resp.Header)
	}
	waitUntil(t, func() bool { return dl.Parked() == 1 })

	apply(t, s, &Record{Mode: ModePassthrough, Generation: 3, V2ServerClusterID: "0ld"})
	if got := recv(t, "EndWatches", v3.ended); got != "the bridge switched to the passthrough side" {
		t.Errorf("EndWatches(%q)", got)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 0 {
		t.Fatalf("the parked watch after the switch: %q %v, want an empty, complete body", b, err)
	}
	waitUntil(t, func() bool { return dl.Parked() == 0 })
	// The connection serves on, from the v2 server now.
	_, _ = io.WriteString(c, "GET /v2/keys/a HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "old" {
		t.Fatalf("the next request: %d %q, want the v2 server's answer", resp.StatusCode, b)
	}
}
