// SPDX-License-Identifier: Apache-2.0

package passthrough

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
)

func TestWhatIsForwardedAndWhatIsAnsweredLocally(t *testing.T) {
	for _, c := range []struct {
		path      string
		forwarded bool
	}{
		{"/v2/keys", true},
		{"/v2/keys/a/b", true},
		{"/v2/stats/store", true},
		{"/v2/stats/self", false},
		{"/v2/stats/leader", false},
		{"/v2/auth/users", true},
		{"/version", true},
		{"/health", true},
		{"/v2/members", false},
		{"/v2/members/leader", false},
		{"/v2/machines", false},
		{"/readyz", false},
		{"/livez", false},
		{"/metrics", false},
		{"/v2/keysfoo", false},
	} {
		if got := forwarded(c.path); got != c.forwarded {
			t.Errorf("forwarded(%q) = %v, want %v", c.path, got, c.forwarded)
		}
	}
}

// TestAWatchIsShownNothingOutsideTheServedSubtrees: v2's history matches
// the deletion of a directory to a watch by string (deleting
// /coreos.com/net answers a watch on /coreos.com/network); a bridge serving
// /coreos.com/network leaves it out, and a watch for one event is sent again
// from the index after it. The deletion of a directory above the watched key
// is the watch's, as in v2.
func TestAWatchIsShownNothingOutsideTheServedSubtrees(t *testing.T) {
	const (
		other    = `{"action":"delete","node":{"key":"/coreos.com/net","dir":true,"modifiedIndex":7,"createdIndex":5},"prevNode":{"key":"/coreos.com/net","dir":true,"modifiedIndex":5,"createdIndex":5}}` + "\n"
		config   = `{"action":"set","node":{"key":"/coreos.com/network/config","value":"x","modifiedIndex":9,"createdIndex":9}}` + "\n"
		ancestor = `{"action":"delete","node":{"key":"/coreos.com","dir":true,"modifiedIndex":11,"createdIndex":2},"prevNode":{"key":"/coreos.com","dir":true,"modifiedIndex":2,"createdIndex":2}}` + "\n"
	)
	var mu sync.Mutex // guards asked
	var asked []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		mu.Lock()
		asked = append(asked, r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Etcd-Index", "6")
		q := r.URL.Query()
		switch {
		case q.Get("stream") == "true":
			_, _ = io.WriteString(w, other+config+other+ancestor)
		case q.Get("waitIndex") == "3":
			_, _ = io.WriteString(w, other)
		case q.Get("waitIndex") == "8":
			_, _ = io.WriteString(w, config)
		case q.Get("waitIndex") == "10":
			_, _ = io.WriteString(w, ancestor)
		}
	}))
	t.Cleanup(up.Close)
	p := readyPassthrough(t, Config{URLs: []string{up.URL}, Served: []string{"/coreos.com/network"}})
	bridge := httptest.NewServer(p)
	t.Cleanup(bridge.Close)
	for _, c := range []struct{ query, want string }{
		{"wait=true&recursive=true&waitIndex=3", config},
		{"wait=true&waitIndex=10", ancestor},
		{"wait=true&recursive=true&stream=true&waitIndex=3", config + ancestor},
	} {
		resp, err := http.Get(bridge.URL + "/v2/keys/coreos.com/network?" + c.query)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(body) != c.want || resp.Header.Get("X-Etcd-Index") != "6" {
			t.Errorf("%s: %d %q (X-Etcd-Index %q, %v)\nwant 200 %q", c.query, resp.StatusCode, body, resp.Header.Get("X-Etcd-Index"), err, c.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"wait=true&recursive=true&waitIndex=3", "recursive=true&wait=true&waitIndex=8",
		"wait=true&waitIndex=10", "wait=true&recursive=true&stream=true&waitIndex=3"}
	if !slices.Equal(asked, want) {
		t.Errorf("the v2 server was asked %q\nwant %q", asked, want)
	}
}
