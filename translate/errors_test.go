// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// An error answers as v2 writes it: its index, JSON, its status, its body.
func TestErrorWriteResponse(t *testing.T) {
	for _, c := range []struct {
		err    *Error
		status int
		body   string
	}{
		{NewError(EcodeKeyNotFound, "/a", 7), http.StatusNotFound,
			`{"errorCode":100,"message":"Key not found","cause":"/a","index":7}` + "\n"},
		{NewError(EcodeRaftInternal, "lost", 0), http.StatusInternalServerError,
			`{"errorCode":300,"message":"Raft Internal Error","cause":"lost","index":0}` + "\n"},
		{NewError(EcodeEventIndexCleared, "the requested history has been cleared [5/2]", 4), http.StatusBadRequest,
			`{"errorCode":401,"message":"The event in requested index is outdated and cleared","cause":"the requested history has been cleared [5/2]","index":4}` + "\n"},
	} {
		rec := httptest.NewRecorder()
		rec.Header().Set("X-Etcd-Index", "99") // replaced, not added to
		if got := c.err.WriteResponse(rec); got != c.status {
			t.Errorf("%v: returned %d, want %d", c.err, got, c.status)
		}
		h := rec.Result().Header
		if rec.Code != c.status || rec.Body.String() != c.body || len(h) != 2 ||
			len(h["X-Etcd-Index"]) != 1 || h.Get("X-Etcd-Index") != strconv.FormatUint(c.err.Index, 10) || h.Get("Content-Type") != "application/json" {
			t.Errorf("%v: %d %v %q; want %d, X-Etcd-Index %d, JSON, %q", c.err, rec.Code, h, rec.Body, c.status, c.err.Index, c.body)
		}
	}
}
