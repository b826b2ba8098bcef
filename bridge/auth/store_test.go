// SPDX-License-Identifier: Apache-2.0

package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/bcrypt"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/proof/v2ref"
	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// startStore runs a Store over cli for the test's life and waits until its
// State is current.
func startStore(t *testing.T, cli *clientv3.Client, keys auth.Keys) *auth.Store {
	t.Helper()
	s := auth.NewStore(auth.StoreConfig{Client: cli, Keys: keys, RequestTimeout: 10 * time.Second, HashCost: bcrypt.MinCost})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitState(t, s, func(*auth.State) bool { return true })
	return s
}

// waitState waits (up to 30 s) until s has a current State cond holds for.
func waitState(t *testing.T, s *auth.Store, cond func(*auth.State) bool) *auth.State {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, ok := s.State(); ok && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			st, ok := s.State()
			t.Fatalf("no such State in 30 s; last %+v (current %v)", st, ok)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// step is one auth API request: what the reference server is sent, and
// what the Store is asked.
type step struct {
	method, path, body string
}

// storeAnswer is what v2's handlers would answer with the Store's result:
// the status and the body.
func storeAnswer(ctx context.Context, s *auth.Store, st step) (int, string) {
	name := st.path[strings.LastIndex(st.path, "/")+1:]
	var out any
	status := http.StatusOK
	var err error
	switch {
	case st.path == "/v2/auth/enable" && st.method == "PUT":
		err = s.Enable(ctx)
	case st.path == "/v2/auth/enable" && st.method == "DELETE":
		err = s.Disable(ctx)
	case strings.HasPrefix(st.path, "/v2/auth/users/") && st.method == "PUT":
		var u auth.User
		if err = json.Unmarshal([]byte(st.body), &u); err != nil {
			panic(err)
		}
		var created bool
		out, created, err = s.PutUser(ctx, u)
		if created {
			status = http.StatusCreated
		}
	case strings.HasPrefix(st.path, "/v2/auth/users/") && st.method == "DELETE":
		err = s.DeleteUser(ctx, name)
	case strings.HasPrefix(st.path, "/v2/auth/roles/") && st.method == "PUT":
		var r auth.Role
		if err = json.Unmarshal([]byte(st.body), &r); err != nil {
			panic(err)
		}
		var created bool
		out, created, err = s.PutRole(ctx, r)
		if created {
			status = http.StatusCreated
		}
	case strings.HasPrefix(st.path, "/v2/auth/roles/") && st.method == "DELETE":
		err = s.DeleteRole(ctx, name)
	default:
		panic("step " + st.method + " " + st.path)
	}
	var ae *auth.Error
	if errors.As(err, &ae) {
		b, _ := json.Marshal(map[string]string{"message": ae.Message})
		return ae.Status, string(b)
	}
	if err != nil {
		return 0, err.Error()
	}
	if out == nil {
		return status, ""
	}
	b, _ := json.Marshal(out)
	return status, string(b) + "\n"
}

// TestStoreMatchesV2 runs the same auth API writes on the reference v2
// server and on a Store, and compares every answer: status and body.
func TestStoreMatchesV2(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd and the reference v2 server")
	}
	ref := v2ref.StartT(t, v2ref.Options{})
	cl := v2bridgetest.StartCluster(t, 1)
	s := startStore(t, cl.MemberClient(t, 0), auth.KeysFor("_v2bridge/", "", nil))
	ctx := ctxT(t)
	steps := []step{
		{"PUT", "/v2/auth/enable", ""},
		{"DELETE", "/v2/auth/enable", ""},
		{"PUT", "/v2/auth/users/root", `{"user":"root","password":"pw"}`},
		{"PUT", "/v2/auth/users/root", `{"user":"root","password":"pw"}`},
		{"PUT", "/v2/auth/users/root", `{"user":"root"}`},
		{"PUT", "/v2/auth/users/root", `{"user":"root","grant":["root"]}`},
		{"PUT", "/v2/auth/users/root", `{"user":"root","revoke":["root"]}`}, // answers [], though root stays root
		{"PUT", "/v2/auth/users/root", `{"user":"root","revoke":["root"]}`},
		{"PUT", "/v2/auth/users/alice", `{"user":"alice","password":"a","roles":["nonexistent"]}`},
		{"PUT", "/v2/auth/users/alice", `{"user":"alice","password":"a","roles":["other"]}`},
		{"PUT", "/v2/auth/users/bob", `{"user":"bob"}`},
		{"PUT", "/v2/auth/users/bob", `{"user":"bob","password":"b"}`},
		{"PUT", "/v2/auth/users/bob", `{"user":"bob"}`},
		{"PUT", "/v2/auth/users/bob", `{"user":"bob"}`},
		{"PUT", "/v2/auth/users/bob", `{"user":"bob","grant":["r1","a0"]}`},
		{"PUT", "/v2/auth/users/bob", `{"user":"bob","grant":["r1"]}`},
		{"PUT", "/v2/auth/users/bob", `{"user":"bob","revoke":["zz"]}`},
		{"PUT", "/v2/auth/users/bob", `{"user":"bob","revoke":["a0"],"grant":["b0"]}`},
		{"PUT", "/v2/auth/users/bob", `{"user":"bob","roles":["x"],"grant":["b0"]}`},
		{"PUT", "/v2/auth/users/nobody", `{"user":"nobody","grant":["x"]}`},
		{"PUT", "/v2/auth/roles/root", `{"role":"root"}`},
		{"PUT", "/v2/auth/roles/root", `{"role":"root","grant":{"kv":{"read":["/x"]}}}`},
		{"PUT", "/v2/auth/roles/r1", `{"role":"r1"}`},
		{"PUT", "/v2/auth/roles/r1", `{"role":"r1"}`},
		{"PUT", "/v2/auth/roles/r1", `{"role":"r1","revoke":{"kv":{"read":["/x"]}}}`},
		{"PUT", "/v2/auth/roles/r1", `{"role":"r1","grant":{"kv":{"read":["/b","/a/*"],"write":["/w"]}}}`},
		{"PUT", "/v2/auth/roles/r1", `{"role":"r1","grant":{"kv":{"read":["/a/*"]}}}`},
		{"PUT", "/v2/auth/roles/r1", `{"role":"r1","grant":{"kv":{"write":["/w"]}}}`},
		{"PUT", "/v2/auth/roles/r1", `{"role":"r1","revoke":{"kv":{"read":["/x"]}}}`},
		{"PUT", "/v2/auth/roles/r1", `{"role":"r1","revoke":{"kv":{"read":["/b"]}},"grant":{"kv":{"read":["/c"]}}}`},
		{"PUT", "/v2/auth/roles/r1", `{"role":"r1","permissions":{"kv":{"read":["/q"]}},"grant":{"kv":{"read":["/d"]}}}`},
		{"PUT", "/v2/auth/roles/r2", `{"role":"r2","permissions":{"kv":{"read":["/q"],"write":null}},"grant":{"kv":{"read":[]}}}`},
		{"PUT", "/v2/auth/roles/zz", `{"role":"zz","grant":{"kv":{"read":["/x"]}}}`},
		{"DELETE", "/v2/auth/roles/zz", ""},
		{"DELETE", "/v2/auth/roles/root", ""},
		{"DELETE", "/v2/auth/roles/r2", ""},
		{"PUT", "/v2/auth/enable", ""},
		{"PUT", "/v2/auth/enable", ""},
		{"DELETE", "/v2/auth/users/root", ""},
		{"DELETE", "/v2/auth/users/zz", ""},
		{"PUT", "/v2/auth/roles/guest", `{"role":"guest","revoke":{"kv":{"write":["/*"]}}}`},
		{"DELETE", "/v2/auth/roles/guest", ""},
		{"DELETE", "/v2/auth/enable", ""},
		{"DELETE", "/v2/auth/enable", ""},
		{"PUT", "/v2/auth/enable", ""}, // no guest role is made again
		{"DELETE", "/v2/auth/enable", ""},
		{"DELETE", "/v2/auth/users/root", ""},
		{"PUT", "/v2/auth/enable", ""},
		{"DELETE", "/v2/auth/users/bob", ""},
	}
	for i, st := range steps {
		req, err := http.NewRequestWithContext(ctx, st.method, ref.URL+st.path, strings.NewReader(st.body))
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("root", "pw")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		status, body := storeAnswer(ctx, s, st)
		if status != resp.StatusCode || body != string(b) {
			t.Errorf("step %d %s %s %s:\n v2:    %d %q\n store: %d %q", i, st.method, st.path, st.body, resp.StatusCode, b, status, body)
		}
	}
	// What the Store holds is what v2 lists.
	st, _ := s.State()
	want := map[string][]string{"alice": {"nonexistent"}}
	if len(st.Users) != 1 || !reflect.DeepEqual(st.Users["alice"].Roles, want["alice"]) || st.Enabled {
		t.Errorf("final state %+v", st)
	}
	if _, ok := st.Roles["guest"]; !ok || len(st.Roles) != 2 {
		t.Errorf("final roles %+v", st.Roles)
	}
}

// TestStoreFollows: a change made through one Store is in the other's State
// (another bridge's) once its watch delivers it; a change returns only once
// its own Store's State has it; keys of another data prefix are left alone.
func TestStoreFollows(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cl := v2bridgetest.StartCluster(t, 1)
	cli := cl.MemberClient(t, 0)
	keys := auth.KeysFor("_v2bridge/", "", nil)
	// Data prefix "/t"'s auth data of before (Legacy) lives under this key
	// space's prefix.
	other := auth.Keys{Prefix: auth.KeysFor("_v2bridge/", "/t", nil).Legacy}
	if !strings.HasPrefix(other.Prefix, keys.Prefix) {
		t.Fatalf("prefixes %q %q", keys.Prefix, other.Prefix)
	}
	ctx := ctxT(t)
	if _, err := cli.Put(ctx, other.User("eve"), `{"user":"eve","password":"x","roles":null}`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, other.Enabled(), "true"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, keys.Prefix+"u/bad", "not json"); err != nil {
		t.Fatal(err)
	}
	a := startStore(t, cli, keys)
	b := startStore(t, cl.MemberClient(t, 0), keys)
	if st, _ := a.State(); st.Enabled || len(st.Users) != 0 || len(st.Roles) != 0 {
		t.Fatalf("initial state %+v", st)
	}

	if _, _, err := a.PutUser(ctx, auth.User{User: "root", Password: "pw"}); err != nil {
		t.Fatal(err)
	}
	st, _ := a.State() // read-your-writes: no wait
	root, ok := st.Users["root"]
	if !ok || root.User != "root" || !reflect.DeepEqual(root.Roles, []string{"root"}) ||
		bcrypt.CompareHashAndPassword([]byte(root.Password), []byte("pw")) != nil {
		t.Fatalf("root after PutUser: %+v", root)
	}
	if err := a.Enable(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ = a.State()
	if g := st.Roles["guest"]; !st.Enabled || g.Role != "guest" || !reflect.DeepEqual(g.Permissions.KV,
		auth.RWPermission{Read: []string{"/*"}, Write: []string{"/*"}}) {
		t.Fatalf("after Enable: %+v", st)
	}
	waitState(t, b, func(st *auth.State) bool { return st.Enabled && len(st.Users) == 1 && len(st.Roles) == 1 })

	// The other key space's data is untouched and unseen.
	resp, err := cli.Get(ctx, other.Prefix, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 2 {
		t.Fatalf("other key space: %v %v", resp, err)
	}

	// Concurrent grants to one user, through both stores, all land.
	if _, _, err := a.PutUser(ctx, auth.User{User: "u", Password: "p"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			_, _, err := s.PutUser(ctx, auth.User{User: "u", Grant: []string{fmt.Sprintf("r%d", i)}})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	want := []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"}
	st = waitState(t, b, func(st *auth.State) bool { return len(st.Users["u"].Roles) == 8 })
	if !reflect.DeepEqual(st.Users["u"].Roles, want) {
		t.Fatalf("roles %v", st.Users["u"].Roles)
	}
}

// TestStorePropagation measures how long a change made through one Store
// takes to be in another's State (two bridges of one cluster).
func TestStorePropagation(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cl := v2bridgetest.StartCluster(t, 1)
	keys := auth.KeysFor("_v2bridge/", "", nil)
	a := startStore(t, cl.MemberClient(t, 0), keys)
	b := startStore(t, cl.MemberClient(t, 0), keys)
	ctx := ctxT(t)
	const n = 50
	var writes, lags []time.Duration
	for i := range n {
		name := fmt.Sprintf("role%d", i)
		start := time.Now()
		if _, _, err := a.PutRole(ctx, auth.Role{Role: name}); err != nil {
			t.Fatal(err)
		}
		writes = append(writes, time.Since(start)) // a's State has it
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Microsecond) {
			st, ok := b.State()
			if _, seen := st.Roles[name]; ok && seen {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not seen by the other Store in 30 s", name)
			}
		}
		lags = append(lags, time.Since(start))
	}
	slices.Sort(writes)
	slices.Sort(lags)
	t.Logf("%d writes: returned (own State has it) p50 %v max %v; in the other Store's State p50 %v max %v",
		n, writes[n/2], writes[n-1], lags[n/2], lags[n-1])
	if lags[n-1] > 10*time.Second {
		t.Errorf("max propagation %v", lags[n-1])
	}
}

// TestStoreReplaceLearn: Replace makes the stored data exactly a State's,
// across several transactions; Learn stores a password v2 accepted.
func TestStoreReplaceLearn(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cl := v2bridgetest.StartCluster(t, 1)
	cli := cl.MemberClient(t, 0)
	keys := auth.KeysFor("_v2bridge/", "", nil)
	s := startStore(t, cli, keys)
	ctx := ctxT(t)
	if _, _, err := s.PutUser(ctx, auth.User{User: "gone", Password: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutRole(ctx, auth.Role{Role: "gone"}); err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("old"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	want := &auth.State{Enabled: true, Users: map[string]auth.User{}, Roles: map[string]auth.Role{}}
	for i := range 150 { // more than one transaction's worth
		name := fmt.Sprintf("user%03d", i)
		want.Users[name] = auth.User{User: name, Password: string(hash), Roles: []string{"reader"}}
	}
	want.Users["root"] = auth.User{User: "root", Password: string(hash), Roles: []string{"root"}}
	want.Roles["reader"] = auth.Role{Role: "reader", Permissions: auth.Permissions{KV: auth.RWPermission{Read: []string{"/*"}}}}
	want.Roles["guest"] = auth.Role{Role: "guest", Permissions: auth.Permissions{KV: auth.RWPermission{Read: []string{}, Write: []string{}}}}
	if err := s.Replace(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, _ := s.State()
	if !got.Enabled || !reflect.DeepEqual(got.Users, want.Users) || !reflect.DeepEqual(got.Roles, want.Roles) {
		t.Fatalf("after Replace: enabled %v, %d users, roles %+v", got.Enabled, len(got.Users), got.Roles)
	}
	// A fresh read (another bridge) sees the same.
	other := startStore(t, cli, keys)
	if st, _ := other.State(); !st.Enabled || !reflect.DeepEqual(st.Users, want.Users) || !reflect.DeepEqual(st.Roles, want.Roles) {
		t.Fatalf("read again: %+v", st)
	}

	// Learn: the stored hash already verifies "old": nothing to do.
	if changed, err := s.Learn(ctx, "user001", "old"); err != nil || changed {
		t.Fatalf("Learn(old) = %v, %v", changed, err)
	}
	if changed, err := s.Learn(ctx, "nobody", "x"); err != nil || changed {
		t.Fatalf("Learn(nobody) = %v, %v", changed, err)
	}
	if changed, err := s.Learn(ctx, "user001", "new"); err != nil || !changed {
		t.Fatalf("Learn(new) = %v, %v", changed, err)
	}
	st, _ := s.State()
	u := st.Users["user001"]
	if bcrypt.CompareHashAndPassword([]byte(u.Password), []byte("new")) != nil || !reflect.DeepEqual(u.Roles, []string{"reader"}) {
		t.Fatalf("after Learn: %+v", u)
	}

	// A user given without a hash keeps the stored one (learned since the
	// caller read): only its roles change.
	again := &auth.State{Enabled: true, Users: map[string]auth.User{}, Roles: want.Roles}
	for name, u := range want.Users {
		u.Password = ""
		again.Users[name] = u
	}
	again.Users["user001"] = auth.User{User: "user001", Roles: []string{"guest"}}
	if err := s.Replace(ctx, again); err != nil {
		t.Fatal(err)
	}
	st, _ = s.State()
	if u := st.Users["user001"]; bcrypt.CompareHashAndPassword([]byte(u.Password), []byte("new")) != nil ||
		!reflect.DeepEqual(u.Roles, []string{"guest"}) {
		t.Fatalf("after a Replace without hashes: %+v", u)
	}
	if u := st.Users["user002"]; u.Password != string(hash) {
		t.Fatalf("after a Replace without hashes: %+v", u)
	}

	// Replace with a disabled, empty State removes everything.
	if err := s.Replace(ctx, &auth.State{}); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.State(); st.Enabled || len(st.Users) != 0 || len(st.Roles) != 0 {
		t.Fatalf("after an empty Replace: %+v", st)
	}
	resp, err := cli.Get(ctx, keys.Prefix, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != keys.Enabled() || string(resp.Kvs[0].Value) != "false" {
		t.Fatalf("stored after an empty Replace: %v %v", resp.Kvs, err)
	}
}

// TestStoreNotCurrent: before Run reads and after it ends, no State is
// current; a write without a following Store cannot be confirmed.
func TestStoreNotCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cl := v2bridgetest.StartCluster(t, 1)
	cli := cl.MemberClient(t, 0)
	s := auth.NewStore(auth.StoreConfig{Client: cli, Keys: auth.KeysFor("m/", "", nil), RequestTimeout: time.Second, HashCost: bcrypt.MinCost})
	if _, ok := s.State(); ok {
		t.Fatal("current before Run")
	}
	if _, ok := s.Current(ctxT(t), 50*time.Millisecond); ok {
		t.Fatal("Current before Run")
	}
	// Current waits for the first read.
	got := make(chan bool, 1)
	go func() { _, ok := s.Current(ctxT(t), time.Minute); got <- ok }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	if !<-got {
		t.Fatal("Current did not see the first read")
	}
	waitState(t, s, func(*auth.State) bool { return true })
	cancel()
	<-done
	if _, ok := s.State(); ok {
		t.Fatal("current after Run")
	}
	err := s.Enable(ctxT(t))
	var ae *auth.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
		t.Fatalf("Enable without root: %v", err)
	}
	_, _, err = s.PutRole(ctxT(t), auth.Role{Role: "r"})
	if err == nil || !strings.Contains(err.Error(), "not yet seen") {
		t.Fatalf("PutRole without Run: %v", err)
	}
}

// TestStoreLostLeaderIsNotCurrent: a Store whose member loses its leader
// has no current State (requests get no stale decision) until the member is
// back, and then has the changes made meanwhile.
func TestStoreLostLeaderIsNotCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cl := v2bridgetest.StartCluster(t, 3)
	keys := auth.KeysFor("_v2bridge/", "", nil)
	s := startStore(t, cl.MemberClient(t, 0), keys)
	other := startStore(t, cl.MemberClient(t, 1), keys)
	ck := auth.NewChecker(auth.CheckerConfig{State: s.State})
	r, _ := http.NewRequest(http.MethodGet, "http://bridge/v2/keys/a", nil)
	if d := ck.Keys(r, "/a", false, false); d != auth.Allow {
		t.Fatalf("before: %v", d)
	}
	cl.Isolate(0)
	healed := false
	defer func() {
		if !healed {
			cl.Heal(0)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := s.State(); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("State still current 30 s after the member was cut off")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := ck.Keys(r, "/a", false, false); d != auth.Unavailable {
		t.Fatalf("while cut off: %v", d)
	}
	ctx := ctxT(t)
	if _, _, err := other.PutUser(ctx, auth.User{User: "root", Password: "pw"}); err != nil {
		t.Fatal(err)
	}
	if err := other.Enable(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Heal(0)
	healed = true
	waitState(t, s, func(st *auth.State) bool { return st.Enabled })
	// Enabled, with the full-access guest role: a request without
	// credentials passes, one with a wrong password does not.
	if d := ck.Keys(r, "/a", false, false); d != auth.Allow {
		t.Fatalf("after: %v", d)
	}
	r.SetBasicAuth("root", "wrong")
	if d := ck.Keys(r, "/a", false, false); d != auth.Deny {
		t.Fatalf("after, a wrong password: %v", d)
	}
}

// TestStoreSilentMemberIsNotCurrent: a Store whose member goes silent (its
// traffic dropped, no connection closed) keeps no State current for longer
// than its RequestTimeout plus a probe; a Store whose member answers stays
// current however quiet the auth data.
func TestStoreSilentMemberIsNotCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cl := v2bridgetest.StartCluster(t, 3)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cl.Members[0].ProxyURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	const timeout = 2 * time.Second
	s := auth.NewStore(auth.StoreConfig{Client: cli, Keys: auth.KeysFor("_v2bridge/", "", nil), RequestTimeout: timeout})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitState(t, s, func(*auth.State) bool { return true })

	// Quiet but answering: current throughout.
	for end := time.Now().Add(3 * timeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, ok := s.State(); !ok {
			t.Fatal("not current while the member answers")
		}
	}

	cl.Blackhole(0)
	healed := false
	defer func() {
		if !healed {
			cl.Heal(0)
		}
	}()
	start := time.Now()
	for {
		if _, ok := s.State(); !ok {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("State still current 30 s after the member went silent")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stale := time.Since(start)
	t.Logf("State given up %v after the member went silent (RequestTimeout %v)", stale, timeout)
	if stale > timeout+timeout/5+2*time.Second {
		t.Errorf("State given up after %v: more than RequestTimeout and a probe", stale)
	}
	cl.Heal(0)
	healed = true
	waitState(t, s, func(*auth.State) bool { return true })
}

// TestStoreMovesOffASilentMember: a Store over every member, one of which
// goes silent, is without a current State for a few seconds at most: it
// reads again from another member.
func TestStoreMovesOffASilentMember(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cl := v2bridgetest.StartCluster(t, 3)
	const timeout = 2 * time.Second
	for bad := range 3 {
		cli, err := clientv3.New(clientv3.Config{Endpoints: cl.ProxiedEndpoints(), DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s := auth.NewStore(auth.StoreConfig{Client: cli, Keys: auth.KeysFor("_v2bridge/", "", nil), RequestTimeout: timeout})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); s.Run(ctx) }()
		waitState(t, s, func(*auth.State) bool { return true })
		cl.Blackhole(bad)
		// Over 8 s, the longest stretch without a current State.
		var worst, gap time.Duration
		last := time.Now()
		for end := last.Add(8 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			now := time.Now()
			if _, ok := s.State(); ok {
				gap = 0
			} else {
				gap += now.Sub(last)
				worst = max(worst, gap)
			}
			last = now
		}
		cl.Heal(bad)
		cancel()
		<-done
		_ = cli.Close()
		t.Logf("member %d silent: longest stretch without a current State %v (RequestTimeout %v)", bad, worst, timeout)
		if worst > 6*time.Second {
			t.Errorf("member %d silent: no current State for %v", bad, worst)
		}
	}
}

// TestStoreWatchLeavesASilentMember: a Store over every member, one of
// which went silent, whose watch went to the silent member (and so was
// never created) gets a current State from another member: the next
// attempt's watch is not sent down the same stream again.
func TestStoreWatchLeavesASilentMember(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	cl := v2bridgetest.StartCluster(t, 3)
	// The balancer's first pick is random: a Store whose first watch went
	// to a member that answers proves nothing, and another is started,
	// until one's watch has gone to the silent member (1 in 3).
	for trial := 1; ; trial++ {
		if trial > 30 {
			t.Fatal("in 30 Stores, no watch went to the silent member")
		}
		if storeMovesOffAWatchNotCreated(t, cl, 0) {
			return
		}
	}
}

// storeMovesOffAWatchNotCreated connects a client to every member of cl,
// takes member bad off the network, and runs a Store over the client until
// it has a current State. It reports whether a watch of the Store was not
// created before then; if one was, the State must come within 15 s of it.
func storeMovesOffAWatchNotCreated(t *testing.T, cl *v2bridgetest.Cluster, bad int) (tried bool) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: cl.ProxiedEndpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	// Connected to every member before one goes silent (a connection
	// to a silent member would never be made, nor used).
	seen := map[uint64]bool{}
	for len(seen) < len(cl.Members) {
		resp, err := cli.Get(ctxT(t), "k")
		if err != nil {
			t.Fatal(err)
		}
		seen[resp.Header.MemberId] = true
	}
	cl.Blackhole(bad)
	defer cl.Heal(bad)
	core, logs := observer.New(zap.WarnLevel)
	s := auth.NewStore(auth.StoreConfig{Client: cli, Keys: auth.KeysFor("_v2bridge/", "", nil),
		RequestTimeout: 2 * time.Second, Logger: zap.New(core)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var since time.Time // when a watch was first seen not created
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if since.IsZero() {
			for _, e := range logs.All() {
				if err, _ := e.ContextMap()["error"].(string); strings.Contains(err, "not created") {
					since = time.Now()
					t.Logf("a watch was not created, %v after the Store started", since.Sub(start))
					break
				}
			}
		}
		if _, ok := s.State(); ok {
			if !since.IsZero() {
				t.Logf("current %v after that", time.Since(since))
			}
			return !since.IsZero()
		}
		switch {
		case since.IsZero() && time.Since(start) > 30*time.Second:
			t.Fatal("no current State, and no watch seen not created, 30 s after the Store started")
		case !since.IsZero() && time.Since(since) > 15*time.Second:
			var errs []any
			for _, e := range logs.All() {
				errs = append(errs, e.ContextMap()["error"])
			}
			t.Fatalf("no current State 15 s after a watch was not created; the attempts ended: %v", errs)
		}
	}
}
