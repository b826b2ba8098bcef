// SPDX-License-Identifier: Apache-2.0

package detach

import (
	"io"
	"testing"
)

// TestAnHTTP10RequestIsNotParked: an HTTP/1.0 client cannot read the
// chunked answer a parked request gets, even one that keeps its connection
// alive: its wait stays in net/http, which answers it as HTTP/1.0.
func TestAnHTTP10RequestIsNotParked(t *testing.T) {
	h := newWaiter(true)
	l := serve(t, h, 0, nil)
	c := dial(t, l)
	c.send(t, "GET /wait HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
	if parked := recv(t, h.parked, "the wait"); parked {
		t.Fatal("an HTTP/1.0 request was parked")
	}
	resp := c.head(t)
	h.answers <- []byte(`{"action":"set"}`)
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != `{"action":"set"}` || resp.StatusCode != 200 || len(resp.TransferEncoding) != 0 ||
		resp.Header.Get("X-Etcd-Index") != "7" {
		t.Fatalf("answer: %d te=%v %v body %q (%v); want 200 unchunked with the handler's headers and body",
			resp.StatusCode, resp.TransferEncoding, resp.Header, b, err)
	}
	if e := recv(t, h.ends, "end"); e.gone || e.bytes != len(b) {
		t.Fatalf("the wait ended %+v", e)
	}
	if l.Parked() != 0 {
		t.Fatalf("%d requests parked", l.Parked())
	}
}
