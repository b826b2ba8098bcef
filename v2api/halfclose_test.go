// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/translate"
)

// cancelAwareStore is a fakeStore whose writes wait for release and then,
// as a real backend does, fail with the context's error if it was cancelled
// meanwhile.
type cancelAwareStore struct {
	*fakeStore
	release chan struct{}
}

func (s cancelAwareStore) Write(ctx context.Context, r *translate.Request) (*translate.Event, Meta, error) {
	<-s.release
	if err := ctx.Err(); err != nil {
		return nil, Meta{}, err
	}
	return s.fakeStore.Write(ctx, r)
}

// A client that half-closes its connection after a PUT (it is still
// reading) gets the answer of the write, not an error it would retry into a
// second write: the write is not cancelled with the request's context.
func TestWriteOfAClientThatHalfClosesIsAnsweredWithItsOutcome(t *testing.T) {
	ev := translate.Event{Action: "set", EtcdIndex: 9, Node: &translate.Node{Key: "/a", Value: strp("v"),
		ModifiedIndex: 9, CreatedIndex: 9}}
	st := cancelAwareStore{&fakeStore{writeEv: &ev, meta: Meta{ClusterID: 0xbeef, RaftTerm: 2}}, make(chan struct{})}
	s := New(Config{Store: st})
	seen := make(chan context.Context, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Context()
		s.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	body := "value=v"
	_, _ = io.WriteString(c, "PUT /v2/keys/a HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"+
		"Content-Length: 7\r\n\r\n"+body)
	_ = c.(*net.TCPConn).CloseWrite()
	select {
	case ctx := <-seen:
		select {
		case <-ctx.Done(): // net/http saw the half-close and cancelled the request
		case <-time.After(10 * time.Second):
			t.Fatal("net/http did not cancel the request of a client that half-closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the handler")
	}
	close(st.release)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer after the half-close: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	want := `{"action":"set","node":{"key":"/a","value":"v","modifiedIndex":9,"createdIndex":9}}` + "\n"
	if resp.StatusCode != 201 || string(b) != want || resp.Header.Get("X-Etcd-Index") != "9" ||
		resp.Header.Get("X-Etcd-Cluster-Id") != "beef" || resp.Header.Get("X-Raft-Term") != "2" {
		t.Fatalf("answer %d %v %q; want 201 with the write's event %q", resp.StatusCode, resp.Header, b, want)
	}
	if n := len(st.recorded()); n != 1 {
		t.Fatalf("%d writes, want 1", n)
	}
}
