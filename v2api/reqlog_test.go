// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// The request log tells a watch by v2's rule: any true spelling of wait,
// and not a quorum wait (a plain read in v2).
func TestRequestLogTellsWatchesAsV2Does(t *testing.T) {
	for _, c := range []struct {
		target string
		logged []string
	}{
		{"/v2/keys/a?wait=true&recursive=1", []string{"watch started", "watch ended"}},
		{"/v2/keys/a?wait=1", []string{"watch started", "watch ended"}},
		{"/v2/keys/a?wait=true&quorum=true", []string{"request"}},
		{"/v2/keys/a", []string{"request"}},
	} {
		core, logs := observer.New(zapcore.DebugLevel)
		h := RequestLog(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
		}), zap.New(core))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", c.target, nil))
		var got []string
		for _, e := range logs.All() {
			got = append(got, e.Message)
		}
		if len(got) != len(c.logged) || got[0] != c.logged[0] || got[len(got)-1] != c.logged[len(c.logged)-1] {
			t.Errorf("%s: logged %q, want %q", c.target, got, c.logged)
		}
		if c.logged[0] == "watch started" && logs.All()[0].ContextMap()["recursive"] != (c.target == "/v2/keys/a?wait=true&recursive=1") {
			t.Errorf("%s: recursive logged %v", c.target, logs.All()[0].ContextMap()["recursive"])
		}
	}
}
