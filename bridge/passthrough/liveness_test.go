// SPDX-License-Identifier: Apache-2.0

package passthrough

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2api"
)

// fakeV2Server answers /health while healthy and names itself on the keys.
type fakeV2Server struct {
	*httptest.Server
	healthy atomic.Bool
}

func startFake(t *testing.T, name string) *fakeV2Server {
	f := &fakeV2Server{}
	f.healthy.Store(true)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && !f.healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Etcd-Index", "7")
		_, _ = io.WriteString(w, name)
	}))
	t.Cleanup(f.Close)
	return f
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code, rec.Body.String()
}

func TestFailsOverAlongTheListAndBack(t *testing.T) {
	a, b := startFake(t, "a"), startFake(t, "b")
	p, err := New(Config{URLs: []string{a.URL, b.URL}, HeartbeatInterval: 20 * time.Millisecond,
		HeartbeatTimeout: 50 * time.Millisecond, HeartbeatFailures: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitReady := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.WaitReady(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for _, step := range []struct {
		name     string
		act      func()
		want     string
		lostWait bool // wait until the loss is declared before the request
	}{
		{"the first v2 server serves", func() {}, "a", false},
		{"the next one serves once the first is lost", func() { a.healthy.Store(false) }, "b", true},
		{"the first serves again once the second is lost", func() { a.healthy.Store(true); b.healthy.Store(false) }, "a", true},
	} {
		step.act()
		if step.lostWait {
			deadline := time.Now().Add(5 * time.Second)
			for p.Ready() && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
		}
		waitReady(step.name)
		if code, body := get(t, p, "/v2/keys/x"); code != 200 || body != step.want {
			t.Fatalf("%s: %d %q, want 200 %q", step.name, code, body, step.want)
		}
	}
}

func TestRequestsWhileLostGetError300AtOnce(t *testing.T) {
	a := startFake(t, "a")
	a.healthy.Store(false)
	p, err := New(Config{URLs: []string{a.URL}, HeartbeatInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	code, body := get(t, p, "/v2/keys/x?wait=true")
	if code != 500 || !strings.Contains(body, `"errorCode":300`) || time.Since(start) > time.Second {
		t.Fatalf("%d %q after %v, want a fast error 300", code, body, time.Since(start))
	}
	if code, _ := get(t, p, "/readyz"); code != 503 {
		t.Fatalf("/readyz %d, want 503", code)
	}
}

// members is a registry's list, as given.
type members []v2api.Member

func (m members) Members() []v2api.Member { return m }

// TestMembershipIsAnsweredLocally: the members and the stats naming them are
// the bridges', not the v2 server's: its member IDs are nowhere listed.
func TestMembershipIsAnsweredLocally(t *testing.T) {
	a := startFake(t, "a")
	other := v2api.Member{ID: 1, Name: "other", ClientURLs: []string{"http://other:2379"}}
	p, err := New(Config{URLs: []string{a.URL}, Name: "b", AdvertiseURLs: []string{"http://bridge:2379"},
		Members: members{other}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	self := strconv.FormatUint(v2api.MemberID([]string{"http://bridge:2379"}), 16)
	for _, c := range []struct{ path, want string }{
		{"/v2/machines", "http://other:2379, http://bridge:2379"},
		{"/v2/members", `{"members":[{"id":"1","name":"other","peerURLs":[],"clientURLs":["http://other:2379"]},` +
			`{"id":"` + self + `","name":"b","peerURLs":[],"clientURLs":["http://bridge:2379"]}]}` + "\n"},
		{"/v2/stats/leader", `{"followers":{},"leader":"1"}` + "\n"},
	} {
		if code, body := get(t, p, c.path); code != 200 || body != c.want {
			t.Errorf("%s: %d %q, want 200 %q", c.path, code, body, c.want)
		}
	}
	code, body := get(t, p, "/v2/stats/self")
	var st struct {
		Name, ID, State string
		LeaderInfo      struct{ Leader string }
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 || st.Name != "b" || st.ID != self ||
		st.State != "StateFollower" || st.LeaderInfo.Leader != "1" {
		t.Fatalf("/v2/stats/self: %d %q: %v", code, body, err)
	}
}

func TestAWatchEndedByALossEndsBetweenEvents(t *testing.T) {
	healthy := atomic.Bool{}
	healthy.Store(true)
	parked := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if !healthy.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"action":"set","node":{"key":"/a","value":"1"}}`+"\n"+`{"action":"set","no`)
		_ = http.NewResponseController(w).Flush()
		close(parked)
		<-r.Context().Done() // half an event sent, the rest never comes
	}))
	t.Cleanup(up.Close)
	p := readyPassthrough(t, Config{URLs: []string{up.URL}, HeartbeatInterval: 20 * time.Millisecond,
		HeartbeatTimeout: 50 * time.Millisecond, HeartbeatFailures: 2})
	bridge := httptest.NewServer(p)
	t.Cleanup(bridge.Close)
	resp, err := http.Get(bridge.URL + "/v2/keys/a?wait=true&stream=true")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	<-parked
	healthy.Store(false)
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != `{"action":"set","node":{"key":"/a","value":"1"}}`+"\n" {
		t.Fatalf("body %q (%v), want the whole first event and nothing of the second", body, err)
	}
}

func TestARequestInFlightWhenTheV2ServerIsLostGetsError300BeforeItsDeadline(t *testing.T) {
	healthy := atomic.Bool{}
	healthy.Store(true)
	parked, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if !healthy.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		_, _ = io.ReadAll(r.Body) // from then on a closed connection cancels r's context
		close(parked)
		select { // a write the v2 server never answers
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) }) // runs first
	p := readyPassthrough(t, Config{URLs: []string{up.URL}, HeartbeatInterval: 20 * time.Millisecond,
		HeartbeatTimeout: 50 * time.Millisecond, HeartbeatFailures: 2, RequestTimeout: time.Minute})
	type answer struct {
		code int
		body string
	}
	got := make(chan answer, 1)
	go func() {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest("PUT", "/v2/keys/a", strings.NewReader("value=1")))
		got <- answer{rec.Code, rec.Body.String()}
	}()
	<-parked
	healthy.Store(false)
	select {
	case a := <-got:
		if a.code != 500 || !strings.Contains(a.body, `"errorCode":300`) || !strings.Contains(a.body, "v2 server lost") {
			t.Fatalf("%d %q, want error 300 naming the loss", a.code, a.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request waits on a lost v2 server")
	}
}

// readyPassthrough starts a Passthrough on cfg, closed when the test ends,
// and waits (at most 5 s) until it is ready.
func readyPassthrough(t *testing.T, cfg Config) *Passthrough {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}
