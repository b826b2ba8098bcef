// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/core"
	"github.com/v2bridge/v2bridge/bridge/passthrough"
	"github.com/v2bridge/v2bridge/migrate/shadow"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2bridgetest"
	"github.com/v2bridge/v2bridge/v3backend"
)

// TestStartShadowObservesForThePassthrough: the wiring builds a shadow over
// a v3-mode bridge's store, which a passthrough then feeds, and publishes
// the bridge's record in v3.
func TestStartShadowObservesForThePassthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an etcd member")
	}
	cl := v2bridgetest.StartCluster(t, 1)
	layout, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	bcfg := v3backend.Config{Endpoints: cl.Endpoints(), DialTimeout: 5 * time.Second, Layout: layout}
	c := &Config{Logger: zap.NewNop(), Name: "wired", Backend: bcfg, RequestTimeout: 5 * time.Second,
		ShadowSampleRate: 1, ShadowPrefix: "/", ShadowQueue: 16, ServePrefix: "/"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	br, err := core.New(ctx, core.Config{Backend: bcfg, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = br.Close(context.Background()) }()

	off := *c
	off.ShadowSampleRate = 0
	if obs, stop, err := startShadow(&off, br, nil); obs != nil || err != nil {
		t.Fatalf("--shadow-sample-rate 0: %v %v", obs, err)
	} else {
		stop()
	}

	reg := prometheus.NewRegistry()
	obs, stop, err := startShadow(c, br, reg)
	if err != nil || obs == nil {
		t.Fatalf("startShadow: %v %v", obs, err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/health" {
			_, _ = io.WriteString(w, `{"health":"true"}`)
			return
		}
		w.Header().Set("X-Etcd-Index", "3")
		w.Header().Set("X-Etcd-Cluster-Id", "1")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"errorCode":100,"message":"Key not found","cause":"/k","index":3}`+"\n")
	}))
	defer up.Close()
	p, err := passthrough.New(passthrough.Config{URLs: []string{up.URL}, HeartbeatInterval: 20 * time.Millisecond, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/v2/keys/k", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("GET through the passthrough: %d %s", rec.Code, rec.Body)
	}
	sh := obs.(*shadow.Shadow)
	deadline := time.Now().Add(10 * time.Second)
	for sh.Stats().Reads != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("not compared: %+v", sh.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Close()
	stop() // publishes the last record
	cli, err := clientv3.New(clientv3.Config{Endpoints: cl.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	recs, err := shadow.ReadRecords(ctx, cli, layout)
	if err != nil || len(recs) != 1 || recs[0].Name != "wired" || recs[0].Counts.Reads != 1 || recs[0].Counts.Diverged() != 0 {
		t.Fatalf("records %+v %v", recs, err)
	}
	if mfs, err := reg.Gather(); err != nil || len(mfs) == 0 || !strings.HasPrefix(mfs[0].GetName(), "v2bridge_shadow_") {
		t.Errorf("metrics %v %v", mfs, err)
	}
}
