// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/proof/v2ref"
)

// memAuth is an AuthTarget in memory.
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

func (m *memAuth) setHash(user, hash string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.st.Users[user]
	u.Password = hash
	st := *m.st
	st.Users = map[string]auth.User{}
	for k, v := range m.st.Users {
		st.Users[k] = v
	}
	st.Users[user] = u
	m.st = &st
}

// v2auth makes one request of the v2 auth API and wants it to succeed.
func v2auth(t *testing.T, method, url, body, user string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if name, pw, ok := strings.Cut(user, ":"); ok {
		req.SetBasicAuth(name, pw)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s", method, url, resp.Status)
	}
}

func TestCopyAuthFromReference(t *testing.T) {
	srv := v2ref.StartT(t, v2ref.Options{})
	ctx := context.Background()
	tgt := &memAuth{st: &auth.State{}}
	o := Options{V2Server: []string{srv.URL}, V2ServerUser: "root:rootpw", Auth: tgt, HashCost: bcrypt.MinCost}

	// A v2 server with no users: nothing to write.
	sum, err := CopyAuth(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if want := (&AuthSummary{Users: []string{}, Roles: []string{}}); !reflect.DeepEqual(sum, want) {
		t.Fatalf("empty v2 server: %+v, want %+v", sum, want)
	}
	if tgt.replaces != 0 {
		t.Fatalf("empty v2 server: %d writes", tgt.replaces)
	}

	v2auth(t, "PUT", srv.URL+"/v2/auth/users/root", `{"user":"root","password":"rootpw"}`, "")
	v2auth(t, "PUT", srv.URL+"/v2/auth/roles/apps", `{"role":"apps","permissions":{"kv":{"read":["/apps/*"],"write":["/apps/*","/x"]}}}`, "")
	v2auth(t, "PUT", srv.URL+"/v2/auth/users/alice", `{"user":"alice","password":"alicepw","roles":["apps"]}`, "")
	v2auth(t, "PUT", srv.URL+"/v2/auth/enable", "", "")

	// Without credentials the v2 server refuses to list its users.
	if _, err := CopyAuth(ctx, Options{V2Server: []string{srv.URL}, Auth: tgt}); err == nil || !strings.Contains(err.Error(), "--v2-server-user") {
		t.Fatalf("without --v2-server-user: %v", err)
	}

	sum, err = CopyAuth(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	want := &AuthSummary{Enabled: true, Users: []string{"alice", "root"}, Roles: []string{"apps", "guest"},
		UnknownPasswords: []string{"alice"}, Changed: true}
	if !reflect.DeepEqual(sum, want) {
		t.Fatalf("copy: %+v, want %+v", sum, want)
	}
	st, _ := tgt.State()
	if err := bcrypt.CompareHashAndPassword([]byte(st.Users["root"].Password), []byte("rootpw")); err != nil {
		t.Fatalf("root's hash: %v", err)
	}
	all := auth.RWPermission{Read: []string{"/*"}, Write: []string{"/*"}}
	wantSt := &auth.State{Enabled: true,
		Users: map[string]auth.User{
			"root":  {User: "root", Password: st.Users["root"].Password, Roles: []string{"root"}},
			"alice": {User: "alice", Roles: []string{"apps"}},
		},
		Roles: map[string]auth.Role{
			"apps":  {Role: "apps", Permissions: auth.Permissions{KV: auth.RWPermission{Read: []string{"/apps/*"}, Write: []string{"/apps/*", "/x"}}}},
			"guest": {Role: "guest", Permissions: auth.Permissions{KV: all}},
		}}
	if !reflect.DeepEqual(st, wantSt) {
		t.Fatalf("stored %+v\nwant %+v", st, wantSt)
	}
	rep, err := VerifyAuth(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if want := (&AuthReport{UnknownPasswords: []string{"alice"}}); !reflect.DeepEqual(rep, want) {
		t.Fatalf("verify: %+v, want %+v", rep, want)
	}

	// A learned password survives a re-run, which then writes nothing.
	tgt.setHash("alice", "learned-hash")
	sum, err = CopyAuth(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Changed || sum.UnknownPasswords != nil || tgt.replaces != 1 {
		t.Fatalf("re-run: %+v after %d writes", sum, tgt.replaces)
	}
	if st, _ := tgt.State(); st.Users["alice"].Password != "learned-hash" {
		t.Fatalf("re-run: alice's hash %q", st.Users["alice"].Password)
	}

	// Follow carries a change on the v2 server over, keeping the hashes.
	v2auth(t, "PUT", srv.URL+"/v2/auth/roles/apps", `{"role":"apps","revoke":{"kv":{"write":["/x"]}}}`, "root:rootpw")
	v2auth(t, "PUT", srv.URL+"/v2/auth/users/alice", `{"user":"alice","revoke":["apps"]}`, "root:rootpw")
	fctx, cancel := context.WithCancel(ctx)
	changed := make(chan *AuthSummary, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := FollowAuth(fctx, o, 50*time.Millisecond, nil, func(s *AuthSummary) { changed <- s },
			func(err error) { t.Errorf("follow: %v", err) }); err != nil {
			t.Errorf("follow: %v", err)
		}
	}()
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("follow did not copy the change")
	}
	cancel()
	<-done
	rep, err = VerifyAuth(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if want := (&AuthReport{}); !reflect.DeepEqual(rep, want) {
		t.Fatalf("verify after follow: %+v, want %+v", rep, want)
	}
	st, _ = tgt.State()
	if u := st.Users["alice"]; u.Password != "learned-hash" || len(u.Roles) != 0 {
		t.Fatalf("alice after follow: %+v", u)
	}

	// Once not allowed any more, it stops with the reason.
	var asked int
	var failures []string
	stop := fmt.Errorf("%w: the cutover is done", ErrStopFollowing)
	err = FollowAuth(ctx, o, time.Millisecond, func(context.Context) error {
		if asked++; asked < 4 {
			return errors.New("cannot tell") // skips a copy, reported once
		}
		return stop
	}, func(*AuthSummary) { t.Error("a copy while not allowed") }, func(err error) { failures = append(failures, err.Error()) })
	if err != stop || asked != 4 || !reflect.DeepEqual(failures, []string{"cannot tell"}) {
		t.Fatalf("follow not allowed: %v after %d asks, failures %q", err, asked, failures)
	}

	// Verify names each difference.
	tgt.mu.Lock()
	tgt.st = &auth.State{Users: map[string]auth.User{"bob": {User: "bob"}, "root": {User: "root", Roles: []string{"apps"}}},
		Roles: map[string]auth.Role{"apps": {Role: "apps"}}}
	tgt.mu.Unlock()
	rep, err = VerifyAuth(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	wantDiffs := []string{
		"auth enabled: v2 server true, bridge false",
		"auth role apps: permissions: v2 server read [/apps/*] write [/apps/*], bridge read [] write []",
		"auth role guest: missing",
		"auth user alice: missing",
		"auth user bob: extra",
		"auth user root: roles: v2 server [root], bridge [apps]",
	}
	var got []string
	for _, d := range rep.Differences {
		got = append(got, d.String())
	}
	if !reflect.DeepEqual(got, wantDiffs) || !reflect.DeepEqual(rep.UnknownPasswords, []string{"alice", "root"}) {
		t.Fatalf("verify: %q unknown %q\nwant %q", got, rep.UnknownPasswords, wantDiffs)
	}
}
