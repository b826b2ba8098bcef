// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"net/url"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestAValueNotUTF8 is refused on every v2 write, so a value a v2 client
// wrote stays writable by v2 clients; one a v3 client wrote is kept from
// being replaced by a changed copy, and the answer says who wrote it.
func TestAValueNotUTF8(t *testing.T) {
	cl := v2bridgetest.StartCluster(t, 1)
	u := v2bridgetest.StartBridge(t, cl.Endpoints(), v2bridgetest.Options{}).URL
	const refused = `{"errorCode":209,"message":"Invalid field","cause":"value is not valid UTF-8","index":0}` + "\n"
	for _, w := range []struct {
		method, path string
		form         url.Values
	}{
		{"PUT", "/v2/keys/bin", form("value", "a\xffb")},
		{"PUT", "/v2/keys/bin", form("value", "\xff", "prevExist", "false")},
		{"POST", "/v2/keys/queue", form("value", "\xc3")},
	} {
		if r := do(t, w.method, u, w.path, w.form); r.status != 400 || r.body != refused || r.header.Get("X-Etcd-Index") != "0" {
			t.Errorf("%s %s %v: %d %s (X-Etcd-Index %q)\nwant 400 %s", w.method, w.path, w.form, r.status, r.body, r.header.Get("X-Etcd-Index"), refused)
		}
	}
	if r := do(t, "PUT", u, "/v2/keys/bin", form("value", "text")); r.status != 201 {
		t.Fatalf("PUT text: %d %s", r.status, r.body)
	}
	if r := do(t, "PUT", u, "/v2/keys/bin", form("value", "\xff", "prevValue", "text")); r.status != 400 || r.body != refused {
		t.Errorf("compareAndSwap to a value not UTF-8: %d %s", r.status, r.body)
	}
	if r := do(t, "PUT", u, "/v2/keys/bin", form("value", "more", "prevValue", "text")); r.status != 200 {
		t.Errorf("compareAndSwap after: %d %s", r.status, r.body)
	}

	if _, err := cl.Client(t).Put(ctxT(t, 10*time.Second), "/proto", "k8s\x00\x8f\xff"); err != nil {
		t.Fatal(err)
	}
	r := do(t, "PUT", u, "/v2/keys/proto", form("value", "x"))
	a := answerOf(t, r)
	if want := "/proto holds a value a v3 client wrote that is not valid UTF-8 (binary data), which v2 cannot show faithfully: " +
		"the bridge does not replace it (a delete does)"; r.status != 403 || a.ErrorCode != 102 || a.Message != "Not a file" || a.Cause != want {
		t.Errorf("PUT over a v3 client's binary value: %d %s\nwant 403, error 102, cause %q", r.status, r.body, want)
	}
	if r := do(t, "DELETE", u, "/v2/keys/proto", nil); r.status != 200 {
		t.Errorf("DELETE: %d %s", r.status, r.body)
	}
}
