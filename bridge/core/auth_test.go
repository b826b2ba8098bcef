// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/bridge/core"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
)

// TestNotReadyWithoutAuthState: a bridge with auth is not ready (nor is
// /readyz) until its auth Store has a current State, and is once it has.
func TestNotReadyWithoutAuthState(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cl := v2bridgetest.StartCluster(t, 1)
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	st := auth.NewStore(auth.StoreConfig{Client: cl.MemberClient(t, 0), Keys: auth.KeysFor(layout.MetaPrefix, layout.DataPrefix, layout.Served)})
	svc := &auth.Service{Store: st, Checker: auth.NewChecker(auth.CheckerConfig{State: st.State})}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	br, err := core.New(ctx, core.Config{Backend: v3backend.Config{Endpoints: cl.Endpoints(), Layout: layout},
		Logger: zap.NewNop(), Auth: svc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = br.Close(context.Background()) })
	for !br.Backend.Ready() {
		if ctx.Err() != nil {
			t.Fatal("backend never ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	readyz := func() int {
		w := httptest.NewRecorder()
		br.API.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return w.Code
	}
	if br.Ready() || readyz() == http.StatusOK {
		t.Fatalf("ready without auth data: %v, /readyz %d", br.Ready(), readyz())
	}
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); st.Run(rctx) }()
	t.Cleanup(func() { rcancel(); <-done })
	if err := br.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if code := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz %d once ready", code)
	}
}
