// SPDX-License-Identifier: Apache-2.0

package passthrough

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// fakeObserver samples what sample says and keeps what it observes.
type fakeObserver struct {
	sample func(*http.Request) bool

	mu       sync.Mutex // guards asked and observed
	asked    []string
	observed []Answer
}

func (o *fakeObserver) Sample(r *http.Request) bool {
	o.mu.Lock()
	o.asked = append(o.asked, r.Method+" "+r.URL.String())
	o.mu.Unlock()
	return o.sample(r)
}

func (o *fakeObserver) Observe(_ *http.Request, a Answer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.observed = append(o.observed, a)
}

func TestTheObserverSeesSampledAnswersButNoWatch(t *testing.T) {
	up := startFake(t, "answer")
	obs := &fakeObserver{sample: func(r *http.Request) bool { return r.URL.Query().Get("skip") == "" }}
	p := readyPassthrough(t, Config{URLs: []string{up.URL}, HeartbeatInterval: 20 * time.Millisecond, Observer: obs})
	for _, path := range []string{"/v2/keys/a", "/v2/keys/a?skip=1", "/v2/keys/a?wait=true", "/v2/members"} {
		if code, body := get(t, p, path); code != 200 || path != "/v2/members" && body != "answer" {
			t.Fatalf("GET %s: %d %q", path, code, body)
		}
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("PUT", "/v2/keys/b", nil))
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if want := []string{"GET /v2/keys/a", "GET /v2/keys/a?skip=1", "PUT /v2/keys/b"}; len(obs.asked) != len(want) ||
		obs.asked[0] != want[0] || obs.asked[1] != want[1] || obs.asked[2] != want[2] {
		t.Errorf("Sample asked for %q, want %q (no watch, nothing answered locally)", obs.asked, want)
	}
	if len(obs.observed) != 2 {
		t.Fatalf("observed %d answers, want the 2 sampled", len(obs.observed))
	}
	a := obs.observed[0]
	if a.URL != up.URL || a.Status != 200 || string(a.Body) != "answer" || a.Header.Get("X-Etcd-Index") != "7" {
		t.Errorf("observed %+v", a)
	}
}
