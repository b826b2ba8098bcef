// SPDX-License-Identifier: Apache-2.0

// Package auth is etcd v2's authentication and authorization, kept in etcd
// v3: the users, roles and enabled flag of a key space (Store, followed by a
// watch into an immutable State), and the decision on each request
// (Checker: HTTP basic auth or a client certificate, a cache of verified
// credentials, a limit on wrong passwords).
//
// SKELETON: the exported API below is the contract between this package,
// v2api, migrate and cmd/bridge; bodies are being filled in.
package auth

import (
	"context"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
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

// Role returns the named role: root's is built in.
func (s *State) Role(name string) (Role, bool) { panic("unimplemented") }

// Allowed reports whether user (nil: a request without credentials, held
// to the guest role) may read or write key, as v2 decided: with auth
// disabled, always; recursive asks for a pattern covering everything below
// key (a "*" pattern), else a pattern matching key.
func (s *State) Allowed(user *User, key string, recursive, write bool) bool { panic("unimplemented") }

// IsRoot reports whether user holds the root role.
func (s *State) IsRoot(user *User) bool { panic("unimplemented") }

// Keys are the v3 keys of one key space's auth data, under the meta prefix.
type Keys struct {
	Prefix string // every key below; a watch covers it
}

// KeysFor is the Keys of the key space with data prefix dataPrefix.
func KeysFor(metaPrefix, dataPrefix string) Keys { panic("unimplemented") }

// User, Role and Enabled are the v3 keys of a user, a role and the flag.
func (k Keys) User(name string) string { panic("unimplemented") }
func (k Keys) Role(name string) string { panic("unimplemented") }
func (k Keys) Enabled() string         { panic("unimplemented") }

// StoreConfig configures a Store.
type StoreConfig struct {
	Client interface {
		clientv3.KV
		clientv3.Watcher
	}
	Keys           Keys
	RequestTimeout time.Duration // bound of every v3 call
	// HashCost is bcrypt's cost for new passwords (0: v2's, bcrypt.DefaultCost).
	HashCost int
	Logger   *zap.Logger
}

// Store is the auth data of a key space in etcd v3, followed by a watch.
type Store struct{}

// NewStore is a store over cfg; Run follows v3.
func NewStore(cfg StoreConfig) *Store { panic("unimplemented") }

// Run reads the auth data and follows it with a watch until ctx ends.
func (s *Store) Run(ctx context.Context) { panic("unimplemented") }

// State is the newest State read; ok is false while none is current (never
// read, or the watch failed and has not been read again).
func (s *Store) State() (st *State, ok bool) { panic("unimplemented") }

// The auth API's writes, as v2 made them. Each returns an *Error for
// v2's refusals, and returns once State shows the change.

// PutUser creates u (Password and Roles) or updates it (Password, Grant,
// Revoke), as v2's PUT /v2/auth/users/name; out has no password.
func (s *Store) PutUser(ctx context.Context, u User) (out User, created bool, err error) {
	panic("unimplemented")
}
func (s *Store) DeleteUser(ctx context.Context, name string) error { panic("unimplemented") }

// PutRole creates r (Role, Permissions) or updates it (Grant, Revoke), as
// v2's PUT /v2/auth/roles/name.
func (s *Store) PutRole(ctx context.Context, r Role) (out Role, created bool, err error) {
	panic("unimplemented")
}
func (s *Store) DeleteRole(ctx context.Context, name string) error { panic("unimplemented") }
func (s *Store) Enable(ctx context.Context) error                  { panic("unimplemented") }
func (s *Store) Disable(ctx context.Context) error                 { panic("unimplemented") }

// Replace makes the stored auth data st's (users with their hashes as
// given): migrate's copy.
func (s *Store) Replace(ctx context.Context, st *State) error { panic("unimplemented") }

// Decision is the outcome of checking a request's credentials.
type Decision int

const (
	Allow        Decision = iota
	Deny                  // v2: 401, "Insufficient credentials"
	Unavailable           // no current State: v2's 300, retried elsewhere
)

// CheckerConfig configures a Checker.
type CheckerConfig struct {
	State func() (*State, bool) // Store.State
	// ClientCertAuth: a request without an Authorization header is the
	// user its verified client certificate's common name names, as v2
	// did with --client-cert-auth.
	ClientCertAuth bool
	Logger         *zap.Logger
}

// Checker decides requests.
type Checker struct{}

// NewChecker is a checker over cfg.
func NewChecker(cfg CheckerConfig) *Checker { panic("unimplemented") }

// Keys decides a /v2/keys request on key (the path after /v2/keys, as the
// client sent it).
func (c *Checker) Keys(r *http.Request, key string, recursive, write bool) Decision {
	panic("unimplemented")
}

// Root decides a request of the auth API that needs root.
func (c *Checker) Root(r *http.Request) Decision { panic("unimplemented") }

// Service is a Store and its Checker together: what the HTTP layer serves
// the auth API and checks requests with.
type Service struct {
	*Store
	*Checker
}
