// SPDX-License-Identifier: Apache-2.0

package steps

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/migrate/engine"
)

// memAuth is the bridges' auth data in memory.
type memAuth struct {
	mu       sync.Mutex // guards st and replaces
	st       *auth.State
	replaces int
}

func (m *memAuth) State() (*auth.State, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st, true
}

func (m *memAuth) Replace(_ context.Context, st *auth.State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st = st
	m.replaces++
	return nil
}

// oldAuthServer answers the v2 auth API with auth enabled, one user
// (alice, of role reader) and one role; forbidden answers 403 to all.
func oldAuthServer(t *testing.T, forbidden bool) (url string, asked *int) {
	t.Helper()
	var mu sync.Mutex // guards n
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		if forbidden {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v2/auth/enable":
			_, _ = w.Write([]byte(`{"enabled":true}`))
		case "/v2/auth/users":
			_, _ = w.Write([]byte(`{"users":[{"user":"alice","roles":["reader"]}]}`))
		case "/v2/auth/roles":
			_, _ = w.Write([]byte(`{"roles":[{"role":"reader","permissions":{"kv":{"read":["/a/*"],"write":[]}}}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

// deadURL is the URL of a server that no longer listens.
func deadURL(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}

func TestTheCutoversAuthCopyTriesTheV2ServersURLsInOrder(t *testing.T) {
	ctx := context.Background()
	good, _ := oldAuthServer(t, false)
	want := cutover.AuthCopy{Enabled: true, Users: 1, Roles: 1, UnknownPasswords: []string{"alice"}}
	for _, dryRun := range []bool{true, false} {
		tgt := &memAuth{st: &auth.State{}}
		copyAuth := copyAuthFunc(engine.Options{V2ServerTimeout: 2 * time.Second, Auth: tgt}, []string{deadURL(t), good})
		got, err := copyAuth(ctx, dryRun)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("dry run %v: %+v (%v), want %+v from the second URL", dryRun, got, err, want)
		}
		st, _ := tgt.State()
		wantReplaces, wantUsers := 1, 1
		if dryRun {
			wantReplaces, wantUsers = 0, 0
		}
		if tgt.replaces != wantReplaces || len(st.Users) != wantUsers || st.Enabled != !dryRun {
			t.Fatalf("dry run %v: %d replaces, users %v, enabled %v; want %d, %d user(s), enabled %v",
				dryRun, tgt.replaces, st.Users, st.Enabled, wantReplaces, wantUsers, !dryRun)
		}
	}

	// An old server that answers, wrongly, ends the copy: the next is not
	// asked.
	refusing, _ := oldAuthServer(t, true)
	next, asked := oldAuthServer(t, false)
	tgt := &memAuth{st: &auth.State{}}
	_, err := copyAuthFunc(engine.Options{V2ServerTimeout: 2 * time.Second, Auth: tgt}, []string{refusing, next})(ctx, false)
	if err == nil || errors.Is(err, engine.ErrUnreachable) || !strings.Contains(err.Error(), "403") || *asked != 0 || tgt.replaces != 0 {
		t.Fatalf("error %v, next server asked %d times, %d replaces; want the 403 alone", err, *asked, tgt.replaces)
	}
}
