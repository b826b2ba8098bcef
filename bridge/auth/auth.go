// SPDX-License-Identifier: Apache-2.0

// Package auth is etcd v2's authentication and authorization, kept in etcd
// v3: the users, roles and enabled flag of a key space (Store, followed by a
// watch into an immutable State), and the decision on each request
// (Checker: HTTP basic auth or a client certificate, a cache of verified
// credentials, a limit on wrong passwords).
package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
)

// The built-in names, as in v2.
const (
	RootName  = "root"  // the user and role that may administer auth
	GuestName = "guest" // the role of a request without credentials
)

// User is a v2 user, in v2's JSON. Stored, Password is its bcrypt hash; in
// a request, the new password in clear. Grant and Revoke are only in
// requests.
type User struct {
	User     string   `json:"user"`
	Password string   `json:"password,omitempty"`
	Roles    []string `json:"roles"`
	Grant    []string `json:"grant,omitempty"`
	Revoke   []string `json:"revoke,omitempty"`
}

// Role is a v2 role, in v2's JSON. Grant and Revoke are only in requests.
type Role struct {
	Role        string       `json:"role"`
	Permissions Permissions  `json:"permissions"`
	Grant       *Permissions `json:"grant,omitempty"`
	Revoke      *Permissions `json:"revoke,omitempty"`
}

// Permissions is a role's permissions on keys.
type Permissions struct {
	KV RWPermission `json:"kv"`
}

// RWPermission lists v2 path patterns: "/a/b" is that key, "/a/*" (any
// pattern ending in "*") every key with the prefix before the star.
type RWPermission struct {
	Read  []string `json:"read"`
	Write []string `json:"write"`
}

// Error is a refusal of the auth API: v2 answers {"message": Message}
// with HTTP Status. Messages are v2's ("auth: User x does not exist").
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

// State is the auth data of one key space at one v3 revision. It is never
// changed once published: a change makes a new State.
type State struct {
	Rev     int64
	Enabled bool
	Users   map[string]User // by name; Password is the hash
	Roles   map[string]Role // stored roles by name (root is built in, never stored)
}

// rootRole is the built-in root role: every key, read and write.
var rootRole = Role{Role: RootName, Permissions: Permissions{KV: RWPermission{Read: []string{"/*"}, Write: []string{"/*"}}}}

// guestRole is the guest role Enable creates when there is none: as root's,
// so that turning auth on changes nothing for requests without credentials
// until the guest role is narrowed.
var guestRole = Role{Role: GuestName, Permissions: Permissions{KV: RWPermission{Read: []string{"/*"}, Write: []string{"/*"}}}}

// Role returns the named role: root's is built in.
func (s *State) Role(name string) (Role, bool) {
	if name == RootName {
		return rootRole, true
	}
	r, ok := s.Roles[name]
	return r, ok
}

// Allowed reports whether user (nil: a request without credentials, held
// to the guest role) may read or write key, as v2 decided: with auth
// disabled, always; recursive asks for a pattern covering everything below
// key (a "*" pattern), else a pattern matching key.
//
// As in v2, the guest role is always matched as for a single key, recursive
// or not, and a user's role that does not exist grants nothing.
func (s *State) Allowed(user *User, key string, recursive, write bool) bool {
	if !s.Enabled {
		return true
	}
	if user == nil {
		g, ok := s.Roles[GuestName]
		return ok && g.Permissions.KV.allows(key, false, write)
	}
	for _, name := range user.Roles {
		r, ok := s.Role(name)
		if !ok {
			continue
		}
		if name == RootName || r.Permissions.KV.allows(key, recursive, write) {
			return true
		}
	}
	return false
}

// allows reports whether one of the read (or write) patterns matches key:
// for recursive, only a "*" pattern whose prefix key has.
func (p RWPermission) allows(key string, recursive, write bool) bool {
	pats := p.Read
	if write {
		pats = p.Write
	}
	for _, pat := range pats {
		if pat == "" { // matches nothing (v2 failed the request)
			continue
		}
		if prefix, ok := strings.CutSuffix(pat, "*"); ok {
			if strings.HasPrefix(key, prefix) {
				return true
			}
		} else if !recursive && key == pat {
			return true
		}
	}
	return false
}

// IsRoot reports whether user holds the root role.
func (s *State) IsRoot(user *User) bool {
	return user != nil && slices.Contains(user.Roles, RootName)
}

// Keys are the v3 keys of one key space's auth data, under the meta prefix.
// A key space is the bridges with one data prefix and one set of served
// subtrees: they share users, roles and the enabled flag, and no other
// bridge reaches them.
type Keys struct {
	Prefix string // every key below; a watch covers it
	// Legacy is where bridges that shared one key space per data prefix
	// kept this one's data (Adopt copies it from there once); "" when that
	// is Prefix.
	Legacy string
}

// KeysFor is the Keys of the bridges with data prefix dataPrefix serving
// the subtrees served (translate.ParseServed's; nil or ["/"]: all).
//
// The bridges with data prefix "" serving all keep the key space of
// before: metaPrefix + "a/". Every other key space is metaPrefix + "a:" and
// a digest of the data prefix and the sorted served list, then "/": a key
// space's keys are then never another's, nor below another's prefix.
func KeysFor(metaPrefix, dataPrefix string, served []string) Keys {
	legacy := metaPrefix + "a" + dataPrefix + "/"
	all := len(served) == 0 || slices.Contains(served, "/")
	if all && dataPrefix == "" {
		return Keys{Prefix: legacy}
	}
	id := []string{dataPrefix}
	if all {
		id = append(id, "/")
	} else {
		id = append(id, served...)
		slices.Sort(id[1:])
		id = slices.Compact(id)
	}
	b, err := json.Marshal(id) // a list of strings, told apart from any other
	if err != nil {
		panic(err) // strings always encode
	}
	sum := sha256.Sum256(b)
	return Keys{Prefix: metaPrefix + "a:" + hex.EncodeToString(sum[:16]) + "/", Legacy: legacy}
}

// User is the v3 key of the user name.
func (k Keys) User(name string) string { return k.Prefix + "u/" + name }

// Role is the v3 key of the role name.
func (k Keys) Role(name string) string { return k.Prefix + "r/" + name }

// Enabled is the v3 key of the flag: "true" while auth is on.
func (k Keys) Enabled() string { return k.Prefix + "enabled" }

// Owns reports whether key is one of this key space's auth keys: the flag, a
// user or a role. A key under Prefix that is none of these is not the
// auth data of any bridge of today: under metaPrefix + "a/", the key
// spaces of data prefixes other than "" kept it before.
func (k Keys) Owns(key string) bool {
	kind, _ := k.parse(key)
	return kind != 0
}

// parse names what key is: 'e' (the flag), 'u' (user name) or 'r' (role
// name); 0 for a key this key space does not own.
func (k Keys) parse(key string) (kind byte, name string) {
	rest, ok := strings.CutPrefix(key, k.Prefix)
	if !ok {
		return 0, ""
	}
	if rest == "enabled" {
		return 'e', ""
	}
	for _, c := range []byte{'u', 'r'} {
		if n, ok := strings.CutPrefix(rest, string(c)+"/"); ok && n != "" && !strings.Contains(n, "/") {
			return c, n
		}
	}
	return 0, ""
}

// Decision is the outcome of checking a request's credentials.
type Decision int

// The decisions.
const (
	Allow       Decision = iota
	Deny                 // v2: 401, "Insufficient credentials"
	Unavailable          // no current State: v2's 300, retried elsewhere
)

// Service is a Store and its Checker together: what the HTTP layer serves
// the auth API and checks requests with.
type Service struct {
	*Store
	*Checker
}
