// SPDX-License-Identifier: Apache-2.0

package auth

import (
	"testing"

	"github.com/v2bridge/v2bridge/translate"
)

func TestKeys(t *testing.T) {
	k := KeysFor("_v2bridge/", "", nil)
	if k.Prefix != "_v2bridge/a/" || k.User("bob") != "_v2bridge/a/u/bob" || k.Role("ops") != "_v2bridge/a/r/ops" ||
		k.Enabled() != "_v2bridge/a/enabled" || k.Legacy != "" {
		t.Fatalf("keys: %+v %q %q %q", k, k.User("bob"), k.Role("ops"), k.Enabled())
	}
	if all := KeysFor("_v2bridge/", "", []string{"/"}); all != k {
		t.Fatalf("serving / : %+v, want %+v", all, k)
	}
	if got := KeysFor("m/", "/tenant", nil); got.Prefix != "m/a:5f93a2414eaa00c1be8a5706d8de83f5/" || got.Legacy != "m/a/tenant/" {
		t.Fatalf("data prefix /tenant: %+v", got)
	}
	for key, want := range map[string]bool{
		"_v2bridge/a/enabled":          true,
		"_v2bridge/a/u/bob":            true,
		"_v2bridge/a/r/ops":            true,
		"_v2bridge/a/u/":               false, // no name
		"_v2bridge/a/u/x/y":            false,
		"_v2bridge/a/tenant/u/bob":     false, // data prefix "tenant"'s
		"_v2bridge/a/tenant/enabled":   false,
		"_v2bridge/a/enabledx":         false,
		"_v2bridge/b/u/bob":            false,
		"_v2bridge/a/x/bob":            false,
		"/_v2bridge/a/u/bob":           false,
		"_v2bridge/a/r/ops/r/deep/key": false,
	} {
		if got := k.Owns(key); got != want {
			t.Errorf("Owns(%q) = %v, want %v", key, got, want)
		}
	}
}

func perms(read, write []string) Permissions {
	return Permissions{KV: RWPermission{Read: read, Write: write}}
}

func TestAllowed(t *testing.T) {
	st := &State{Enabled: true,
		Users: map[string]User{
			"root":  {User: "root", Roles: []string{"root"}},
			"alice": {User: "alice", Roles: []string{"ops", "ghost"}},
			"bob":   {User: "bob"},
		},
		Roles: map[string]Role{
			"ops":   {Role: "ops", Permissions: perms([]string{"/app/*", "/exact", ""}, []string{"/app/w*"})},
			"guest": {Role: "guest", Permissions: perms([]string{"/pub/*", "/one"}, nil)},
		}}
	root, alice, bob := st.Users["root"], st.Users["alice"], st.Users["bob"]
	cases := []struct {
		user            *User
		key             string
		recursive, wrte bool
		want            bool
	}{
		{&root, "/anything", true, true, true},
		{&alice, "/app/x", false, false, true},
		{&alice, "/app", false, false, false}, // "/app/*" needs the slash
		{&alice, "/app/", true, false, true},
		{&alice, "/app/x", false, true, false},
		{&alice, "/app/wx", false, true, true},
		{&alice, "/app/w", true, true, true},
		{&alice, "/exact", false, false, true},
		{&alice, "/exact", true, false, false}, // recursive needs a "*" pattern
		{&alice, "/exact/below", false, false, false},
		{&alice, "", false, false, false}, // the empty pattern matches nothing
		{&bob, "/app/x", false, false, false},
		{nil, "/pub/x", false, false, true},
		{nil, "/pub/x", false, true, false},
		{nil, "/one", false, false, true},
		{nil, "/one", true, false, true}, // guest: always a single key's match
		{nil, "/two", false, false, false},
	}
	for _, c := range cases {
		if got := st.Allowed(c.user, c.key, c.recursive, c.wrte); got != c.want {
			name := "guest"
			if c.user != nil {
				name = c.user.User
			}
			t.Errorf("Allowed(%s, %q, recursive %v, write %v) = %v, want %v", name, c.key, c.recursive, c.wrte, got, c.want)
		}
	}

	// Without a guest role, no request without credentials passes.
	noGuest := &State{Enabled: true, Users: st.Users, Roles: map[string]Role{"ops": st.Roles["ops"]}}
	if noGuest.Allowed(nil, "/pub/x", false, false) {
		t.Error("no guest role: allowed")
	}
	// Disabled: all passes, even a user without roles.
	off := &State{Users: st.Users, Roles: map[string]Role{}}
	if !off.Allowed(nil, "/x", true, true) || !off.Allowed(&bob, "/x", true, true) {
		t.Error("disabled: denied")
	}

	if !st.IsRoot(&root) || st.IsRoot(&alice) || st.IsRoot(nil) {
		t.Error("IsRoot")
	}
	if r, ok := st.Role("root"); !ok || r.Role != "root" || len(r.Permissions.KV.Read) != 1 || r.Permissions.KV.Read[0] != "/*" ||
		len(r.Permissions.KV.Write) != 1 || r.Permissions.KV.Write[0] != "/*" {
		t.Errorf("root role %+v %v", r, ok)
	}
	if r, ok := st.Role("ops"); !ok || r.Role != "ops" {
		t.Errorf("ops role %+v %v", r, ok)
	}
	if _, ok := st.Role("ghost"); ok {
		t.Error("ghost role found")
	}
}

// TestKeysAreNoDataKeys: the auth keys are none of the bridge's data keys,
// markers or mirrored bookkeeping, whatever the data prefix.
func TestKeysAreNoDataKeys(t *testing.T) {
	for _, dp := range []string{"", "/t", "/a"} {
		l, err := translate.NewLayout(dp, "_v2bridge/")
		if err != nil {
			t.Fatal(err)
		}
		k := KeysFor(l.MetaPrefix, l.DataPrefix, nil)
		for _, key := range []string{k.Enabled(), k.User("bob"), k.Role("ops"), k.User("_x"), k.Role("d")} {
			_, data := l.PathOfData(key)
			_, marker := l.PathOfMarker(key)
			if data || marker || l.Mirrored(key) || l.IsJournalKey(key) {
				t.Errorf("data prefix %q: %q is data %v, marker %v, mirrored %v", dp, key, data, marker, l.Mirrored(key))
			}
		}
	}
}

// TestKeysOfKeySpacesNeverMeet: no key of one key space (data prefix and
// served subtrees) is another's, nor under another's prefix, whatever the
// names, and the served list's order does not matter. (The data prefixes
// "" and "/u" once shared a key: "/u"'s flag was ""'s user "enabled".)
func TestKeysOfKeySpacesNeverMeet(t *testing.T) {
	spaces := []struct {
		dp     string
		served []string
	}{
		{"", nil}, {"/u", nil}, {"/r", nil}, {"/u/u", nil}, {"/x", nil},
		{"", []string{"/coreos.com/network"}}, {"", []string{"/other"}}, {"/u", []string{"/other"}},
		{"", []string{"/a", "/b"}}, {"", []string{"/a"}}, {"", []string{"/b"}}, {"", []string{"/a,/b"}},
		{"", []string{"/a/b"}}, {"/a", []string{"/b"}},
	}
	names := []string{"enabled", "u", "r", "root", "guest", "a", "x"}
	owner := map[string]int{}
	for i, s := range spaces {
		k := KeysFor("_v2bridge/", s.dp, s.served)
		keys := []string{k.Enabled()}
		for _, n := range names {
			keys = append(keys, k.User(n), k.Role(n))
		}
		for _, key := range keys {
			if j, ok := owner[key]; ok {
				t.Errorf("%q is a key of %+v and of %+v", key, spaces[j], s)
			}
			owner[key] = i
			if !k.Owns(key) {
				t.Errorf("%+v does not own its key %q", s, key)
			}
		}
	}
	for key, i := range owner {
		for j, s := range spaces {
			if k := KeysFor("_v2bridge/", s.dp, s.served); j != i && k.Owns(key) {
				t.Errorf("%+v owns %q, a key of %+v", s, key, spaces[i])
			}
		}
	}
	if a, b := KeysFor("m/", "", []string{"/b", "/a"}), KeysFor("m/", "", []string{"/a", "/b"}); a != b {
		t.Errorf("the order of the served list matters: %+v, %+v", a, b)
	}
}
