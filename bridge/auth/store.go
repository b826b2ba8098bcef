// SPDX-License-Identifier: Apache-2.0

package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/metadata"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
)

// StoreConfig configures a Store.
type StoreConfig struct {
	Client interface {
		clientv3.KV
		clientv3.Watcher
	}
	// Live, if set, tells whether Client reaches etcd now: a bridge's
	// Client is its checked session (v3backend.Conn), whose calls end when
	// the bridge loses its member. While it does not, the store waits for
	// it (and follows again the moment it does), and a request waits for
	// no auth data: the backend is known lost, and the request is refused
	// at once.
	Live           ctxsleep.Live
	Keys           Keys
	RequestTimeout time.Duration // bound of every v3 call
	// HashCost is bcrypt's cost for new passwords (0: v2's, bcrypt.DefaultCost).
	HashCost int
	Logger   *zap.Logger
}

// Store is the auth data of a key space in etcd v3, followed by a watch.
type Store struct {
	cfg StoreConfig
	cur atomic.Pointer[State] // the current State; nil while none is

	mu      sync.Mutex    // guards changed
	changed chan struct{} // closed (and replaced) when cur changes
}

// NewStore is a store over cfg; Run follows v3.
func NewStore(cfg StoreConfig) *Store {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.HashCost == 0 {
		cfg.HashCost = bcrypt.DefaultCost
	}
	return &Store{cfg: cfg, changed: make(chan struct{})}
}

// State is the newest State read; ok is false while none is current (never
// read, or the watch failed and has not been read again).
func (s *Store) State() (st *State, ok bool) {
	st = s.cur.Load()
	return st, st != nil
}

// Current is the current State, waiting up to d (within ctx) for one while
// none is: the first read after a start or a failed watch takes a round
// trip, which a request can wait out rather than fail. While Live says
// etcd is out of reach, it does not wait.
func (s *Store) Current(ctx context.Context, d time.Duration) (*State, bool) {
	st, err := s.waitFor(ctx, d, func(*State) bool { return true })
	return st, err == nil
}

// errNotYet: waitFor's time ran out.
var errNotYet = errors.New("auth: no such State in time")

// errDown: waitFor gave up as etcd is out of reach (Live).
var errDown = errors.New("auth: etcd v3 is out of reach")

// waitFor waits, up to d and within ctx, for a current State cond holds
// for.
func (s *Store) waitFor(ctx context.Context, d time.Duration, cond func(*State) bool) (*State, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if st, ok := s.State(); ok && cond(st) {
			return st, nil
		}
		var live <-chan struct{}
		if s.cfg.Live != nil {
			up, changed := s.cfg.Live()
			if !up {
				return nil, errDown
			}
			live = changed
		}
		select {
		case <-ch:
		case <-live:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, errNotYet
		}
	}
}

// publish makes st (nil: none) the current State and wakes its waiters.
func (s *Store) publish(st *State) {
	s.cur.Store(st)
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Run reads the auth data and follows it with a watch until ctx ends,
// reading it again (with a backoff) whenever the watch fails. No State is
// current from a failure until the data is read again.
func (s *Store) Run(ctx context.Context) {
	defer s.publish(nil)
	attempt := 0
	ctxsleep.RetryLive(ctx, s.cfg.Live, func(ctx context.Context) error {
		attempt++
		err := s.follow(ctx, attempt)
		s.publish(nil)
		return err
	}, func(err error) {
		s.cfg.Logger.Warn("auth: watch of the users and roles ended; reading them again", zap.Error(err))
	})
}

// follow reads the auth data, then applies the watch's events until it
// fails; attempt numbers its run (see the watch's stream below).
func (s *Store) follow(ctx context.Context, attempt int) error {
	// While no State is current every request waits on this read and
	// watch: each attempt gets a fifth of RequestTimeout (at least a
	// second), so that one sent to a silent member costs little before
	// the next tries another.
	short := max(s.cfg.RequestTimeout/5, time.Second)
	snap, err := s.read(ctx, short)
	if err != nil {
		return err
	}
	// Require a leader: a member cut off from the others refuses or ends
	// the watch instead of keeping it silent. The watch has a gRPC stream
	// of its own (its own metadata): etcd answers a progress request only
	// when every watch of the stream has reached its start revision. A new
	// stream for each attempt: clientv3 keeps a stream whose watch was
	// never created (one to a silent member) open, and would give the
	// next attempt's watch the same stream, and the same silent member,
	// again and again; a new stream is sent where the balancer picks.
	wctx, wcancel := context.WithCancel(metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx),
		"v2bridge-watch", "auth-"+strconv.Itoa(attempt)))
	defer wcancel()
	// The watch must be created within short, counted from now: clientv3
	// holds Watch itself until it has a stream to the member, which a
	// silent member never gives.
	var late atomic.Bool
	creating := time.AfterFunc(short, func() {
		late.Store(true)
		wcancel()
	})
	defer creating.Stop()
	// From the read's own revision, not the next: a watch starting past
	// the store's revision gets no progress answer until the next write
	// anywhere. Its events at that revision are in the State already, and
	// applying them again changes nothing.
	wch := s.cfg.Client.Watch(wctx, s.cfg.Keys.Prefix, clientv3.WithPrefix(), clientv3.WithRev(snap.st.Rev),
		clientv3.WithCreatedNotify())
	// A member that goes silent (cut off, frozen) ends no watch: the
	// State would go stale unnoticed. So the watch ends once it has said
	// nothing for a whole RequestTimeout, and a watch quiet for part of
	// that is asked for its progress: about every third of it while the
	// auth data is idle, twice at least before a silence ends it, and
	// never while events come. The State read is published once the
	// watch is created (within that fifth): one refused at once
	// publishes nothing.
	quiet := s.cfg.RequestTimeout / 3
	probe := time.NewTicker(quiet)
	defer probe.Stop()
	silence := time.NewTimer(s.cfg.RequestTimeout) // reset by every answer
	defer silence.Stop()
	heard := time.Now()
	created := false
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-silence.C:
			return fmt.Errorf("the watch said nothing for %v", s.cfg.RequestTimeout)
		case <-probe.C:
			if created && time.Since(heard) >= quiet/2 {
				pctx, cancel := context.WithTimeout(wctx, short)
				_ = s.cfg.Client.RequestProgress(pctx) // a failure shows as silence
				cancel()
			}
			continue
		case wr, ok = <-wch:
		}
		if !ok && !created && late.Load() {
			return fmt.Errorf("the watch was not created within %v", short)
		}
		if !ok {
			return errors.New("watch closed")
		}
		if err := wr.Err(); err != nil {
			return err
		}
		heard = time.Now()
		silence.Reset(s.cfg.RequestTimeout)
		if !created {
			if !creating.Stop() {
				return fmt.Errorf("the watch was not created within %v", short)
			}
			created = true
			s.publish(snap.st)
		}
		if len(wr.Events) == 0 {
			continue
		}
		old, _ := s.State()
		st := &State{Rev: old.Rev, Enabled: old.Enabled, Users: maps.Clone(old.Users), Roles: maps.Clone(old.Roles)}
		for _, ev := range wr.Events {
			st.apply(s.cfg.Keys, string(ev.Kv.Key), ev.Kv.Value, ev.Type == clientv3.EventTypeDelete)
			st.Rev = max(st.Rev, ev.Kv.ModRevision)
		}
		s.publish(st)
	}
}

// apply sets (or, for del, removes) what key holds in st. A value that does
// not decode is left out, as is a key of another key space.
func (st *State) apply(k Keys, key string, val []byte, del bool) {
	kind, name := k.parse(key)
	switch kind {
	case 'e':
		st.Enabled = !del && string(val) == "true"
	case 'u':
		var u User
		if del || json.Unmarshal(val, &u) != nil || u.User != name {
			delete(st.Users, name)
			return
		}
		if u.User == RootName && !slices.Contains(u.Roles, RootName) {
			u.Roles = append(u.Roles, RootName) // as v2: root always holds root
		}
		st.Users[name] = u
	case 'r':
		var r Role
		if del || name == RootName || json.Unmarshal(val, &r) != nil || r.Role != name {
			delete(st.Roles, name)
			return
		}
		st.Roles[name] = r
	}
}

// snapshot is the auth data read at one revision, with each key's
// ModRevision (absent: 0), to guard a write on what it decided on.
type snapshot struct {
	st  *State
	mod map[string]int64
}

// read reads the auth data.
func (s *Store) read(ctx context.Context, timeout time.Duration) (*snapshot, error) {
	// Require a leader: a member cut off from the others fails the read at
	// once (and clientv3 tries another) instead of holding it to the
	// timeout.
	cctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), timeout)
	resp, err := s.cfg.Client.Get(cctx, s.cfg.Keys.Prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return nil, err
	}
	snap := &snapshot{st: &State{Rev: resp.Header.Revision, Users: map[string]User{}, Roles: map[string]Role{}},
		mod: map[string]int64{}}
	for _, kv := range resp.Kvs {
		if s.cfg.Keys.Owns(string(kv.Key)) {
			snap.st.apply(s.cfg.Keys, string(kv.Key), kv.Value, false)
			snap.mod[string(kv.Key)] = kv.ModRevision
		}
	}
	return snap, nil
}

// errConflict: a write lost every race it ran.
var errConflict = errors.New("auth: the users and roles kept changing; try again")

// write reads the auth data, has decide make the writes from it and the
// keys it decided on, and commits them guarded on those keys being
// unchanged, trying again on a conflict. It returns once State shows the
// writes.
func (s *Store) write(ctx context.Context, decide func(snap *snapshot) (ops []clientv3.Op, on []string, err error)) error {
	for range 20 {
		snap, err := s.read(ctx, s.cfg.RequestTimeout)
		if err != nil {
			return err
		}
		ops, on, err := decide(snap)
		if err != nil {
			return err
		}
		if len(ops) == 0 {
			return nil
		}
		cmps := make([]clientv3.Cmp, 0, len(on))
		for _, k := range on {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", snap.mod[k]))
		}
		cctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		resp, err := s.cfg.Client.Txn(cctx).If(cmps...).Then(ops...).Commit()
		cancel()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return s.await(ctx, resp.Header.Revision)
		}
	}
	return errConflict
}

// await returns once State is at rev or later, or after RequestTimeout.
func (s *Store) await(ctx context.Context, rev int64) error {
	_, err := s.waitFor(ctx, s.cfg.RequestTimeout, func(st *State) bool { return st.Rev >= rev })
	if errors.Is(err, errNotYet) {
		return fmt.Errorf("auth: the change (revision %d) is made but not yet seen by this bridge", rev)
	}
	return err
}

// put is the Op storing v as JSON at key.
func put(key string, v any) clientv3.Op {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // User and Role always encode
	}
	return clientv3.OpPut(key, string(b))
}

func authErr(status int, format string, a ...any) *Error {
	return &Error{Status: status, Message: "auth: " + fmt.Sprintf(format, a...)}
}

// badName refuses a user or role name that cannot be one (the HTTP layer
// splits names out of paths, so none should get here).
func badName(name string) error {
	if name == "" || strings.Contains(name, "/") {
		return &Error{Status: http.StatusBadRequest, Message: "Invalid path"}
	}
	return nil
}

// hasher hashes one password at most once, however often a write is tried.
type hasher struct {
	cost     int
	password string
	hash     string
}

func (h *hasher) get() (string, error) {
	if h.hash == "" {
		b, err := bcrypt.GenerateFromPassword([]byte(h.password), h.cost)
		if errors.Is(err, bcrypt.ErrPasswordTooLong) {
			// v2's bcrypt refused it too, and v2 answered any such
			// failure so.
			return "", &Error{Status: http.StatusInternalServerError, Message: "Internal Server Error"}
		}
		if err != nil {
			return "", err
		}
		h.hash = string(b)
	}
	return h.hash, nil
}

// The auth API's writes, as v2 made them. Each returns an *Error for
// v2's refusals, and returns once State shows the change.

// PutUser creates u (Password and Roles) or updates it (Password, Grant,
// Revoke), as v2's PUT /v2/auth/users/name; out has no password.
//
// As v2: with Roles (and no Grant or Revoke) it only creates, and created
// stays false; with neither Roles, Grant nor Revoke it creates the user or
// sets its password.
func (s *Store) PutUser(ctx context.Context, u User) (out User, created bool, err error) {
	if err := badName(u.User); err != nil {
		return User{}, false, err
	}
	if len(u.Grant) > 0 || len(u.Revoke) > 0 {
		if len(u.Roles) != 0 {
			return User{}, false, &Error{Status: http.StatusBadRequest, Message: "User JSON contains both roles and grant/revoke"}
		}
	}
	h := &hasher{cost: s.cfg.HashCost, password: u.Password}
	key := s.cfg.Keys.User(u.User)
	err = s.write(ctx, func(snap *snapshot) ([]clientv3.Op, []string, error) {
		old, exists := snap.st.Users[u.User]
		if len(u.Grant) > 0 || len(u.Revoke) > 0 || (len(u.Roles) == 0 && exists) {
			if !exists {
				return nil, nil, authErr(http.StatusNotFound, "User %s does not exist.", u.User)
			}
			nu, err := mergeUser(old, u, h)
			if err != nil {
				return nil, nil, err
			}
			out, created = nu, false
			return []clientv3.Op{put(key, nu)}, []string{key}, nil
		}
		// Create.
		nu := User{User: u.User, Roles: u.Roles}
		if nu.User == RootName && !slices.Contains(nu.Roles, RootName) {
			nu.Roles = append(nu.Roles, RootName)
		}
		if u.Password == "" {
			return nil, nil, authErr(http.StatusBadRequest, "Cannot create user %s with an empty password", u.User)
		}
		if exists {
			return nil, nil, authErr(http.StatusConflict, "User %s already exists.", u.User)
		}
		hash, err := h.get()
		if err != nil {
			return nil, nil, err
		}
		nu.Password = hash
		out, created = nu, len(u.Roles) == 0
		return []clientv3.Op{put(key, nu)}, []string{key}, nil
	})
	if err != nil {
		return User{}, false, err
	}
	out.Password = ""
	return out, created, nil
}

// mergeUser is old with u's password, grants and revokes applied; v2's
// refusals of a duplicate grant, an ungranted revoke and no change at all.
func mergeUser(old, u User, h *hasher) (User, error) {
	nu := User{User: old.User, Password: old.Password}
	if u.Password != "" {
		hash, err := h.get()
		if err != nil {
			return User{}, err
		}
		nu.Password = hash
	}
	roles := slices.Clone(old.Roles)
	for _, g := range u.Grant {
		if slices.Contains(roles, g) {
			return User{}, authErr(http.StatusConflict, "Granting duplicate role %s for user %s", g, u.User)
		}
		roles = append(roles, g)
	}
	for _, r := range u.Revoke {
		i := slices.Index(roles, r)
		if i < 0 {
			return User{}, authErr(http.StatusConflict, "Revoking ungranted role %s for user %s", r, u.User)
		}
		roles = slices.Delete(roles, i, i+1)
	}
	nu.Roles = setOf(roles)
	if reflect.DeepEqual(old, nu) {
		return User{}, authErr(http.StatusBadRequest, "User not updated. Use grant/revoke/password to update the user.")
	}
	return nu, nil
}

// setOf is list sorted without duplicates, never nil (v2 encodes a merged
// list as [], a list it never merged as given).
func setOf(list []string) []string {
	out := slices.Clone(list)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// DeleteUser deletes the user name, as v2's DELETE /v2/auth/users/name.
func (s *Store) DeleteUser(ctx context.Context, name string) error {
	if err := badName(name); err != nil {
		return err
	}
	key := s.cfg.Keys.User(name)
	return s.write(ctx, func(snap *snapshot) ([]clientv3.Op, []string, error) {
		if name == RootName && snap.st.Enabled {
			return nil, nil, authErr(http.StatusForbidden, "Cannot delete root user while auth is enabled.")
		}
		if _, ok := snap.st.Users[name]; !ok {
			return nil, nil, authErr(http.StatusNotFound, "User %s does not exist", name)
		}
		return []clientv3.Op{clientv3.OpDelete(key)}, []string{key, s.cfg.Keys.Enabled()}, nil
	})
}

// PutRole creates r (Role, Permissions) or updates it (Grant, Revoke), as
// v2's PUT /v2/auth/roles/name.
func (s *Store) PutRole(ctx context.Context, r Role) (out Role, created bool, err error) {
	if err := badName(r.Role); err != nil {
		return Role{}, false, err
	}
	update := !r.Grant.isEmpty() || !r.Revoke.isEmpty()
	if update && !(&r.Permissions).isEmpty() {
		return Role{}, false, &Error{Status: http.StatusBadRequest, Message: "Role JSON contains both permissions and grant/revoke"}
	}
	if r.Role == RootName {
		return Role{}, false, authErr(http.StatusForbidden, "Cannot modify role %s: is root role.", r.Role)
	}
	key := s.cfg.Keys.Role(r.Role)
	err = s.write(ctx, func(snap *snapshot) ([]clientv3.Op, []string, error) {
		old, exists := snap.st.Roles[r.Role]
		if !update {
			if exists {
				return nil, nil, authErr(http.StatusConflict, "Role %s already exists.", r.Role)
			}
			out, created = r, true
			return []clientv3.Op{put(key, r)}, []string{key}, nil
		}
		if !exists {
			return nil, nil, authErr(http.StatusNotFound, "Role %s does not exist.", r.Role)
		}
		nr := Role{Role: old.Role, Permissions: old.Permissions}
		if r.Grant != nil {
			kv, err := grant(old.Permissions.KV, r.Grant.KV)
			if err != nil {
				return nil, nil, err
			}
			nr.Permissions.KV = kv
		}
		if r.Revoke != nil {
			nr.Permissions.KV = revoke(nr.Permissions.KV, r.Revoke.KV)
		}
		if reflect.DeepEqual(old, nr) {
			return nil, nil, authErr(http.StatusBadRequest, "Role not updated. Use grant/revoke to update the role.")
		}
		out, created = nr, false
		return []clientv3.Op{put(key, nr)}, []string{key}, nil
	})
	if err != nil {
		return Role{}, false, err
	}
	return out, created, nil
}

func (p *Permissions) isEmpty() bool {
	return p == nil || (len(p.KV.Read) == 0 && len(p.KV.Write) == 0)
}

// grant is p with n's patterns added; a pattern p has already is v2's 409.
func grant(p, n RWPermission) (RWPermission, error) {
	for _, r := range n.Read {
		if slices.Contains(p.Read, r) {
			return p, authErr(http.StatusConflict, "Granting duplicate read permission %s", r)
		}
	}
	for _, w := range n.Write {
		if slices.Contains(p.Write, w) {
			return p, authErr(http.StatusConflict, "Granting duplicate write permission %s", w)
		}
	}
	return RWPermission{Read: setOf(append(slices.Clone(p.Read), n.Read...)),
		Write: setOf(append(slices.Clone(p.Write), n.Write...))}, nil
}

// revoke is p without n's patterns; one p lacks is passed over, as in v2.
func revoke(p, n RWPermission) RWPermission {
	drop := func(have, gone []string) []string {
		return setOf(slices.DeleteFunc(slices.Clone(have), func(s string) bool { return slices.Contains(gone, s) }))
	}
	return RWPermission{Read: drop(p.Read, n.Read), Write: drop(p.Write, n.Write)}
}

// DeleteRole deletes the role name, as v2's DELETE /v2/auth/roles/name.
func (s *Store) DeleteRole(ctx context.Context, name string) error {
	if err := badName(name); err != nil {
		return err
	}
	if name == RootName {
		return authErr(http.StatusForbidden, "Cannot modify role %s: is root role.", name)
	}
	key := s.cfg.Keys.Role(name)
	return s.write(ctx, func(snap *snapshot) ([]clientv3.Op, []string, error) {
		if _, ok := snap.st.Roles[name]; !ok {
			return nil, nil, authErr(http.StatusNotFound, "Role %s doesn't exist.", name)
		}
		return []clientv3.Op{clientv3.OpDelete(key)}, []string{key}, nil
	})
}

// Enable turns auth on, as v2's PUT /v2/auth/enable: it needs the root
// user, and creates the guest role (full access) if there is none.
func (s *Store) Enable(ctx context.Context) error {
	k := s.cfg.Keys
	return s.write(ctx, func(snap *snapshot) ([]clientv3.Op, []string, error) {
		if snap.st.Enabled {
			return nil, nil, authErr(http.StatusConflict, "already enabled")
		}
		if _, ok := snap.st.Users[RootName]; !ok {
			return nil, nil, authErr(http.StatusConflict, "No root user available, please create one")
		}
		ops := []clientv3.Op{clientv3.OpPut(k.Enabled(), "true")}
		if _, ok := snap.st.Roles[GuestName]; !ok {
			ops = append(ops, put(k.Role(GuestName), guestRole))
		}
		return ops, []string{k.Enabled(), k.User(RootName), k.Role(GuestName)}, nil
	})
}

// Disable turns auth off, as v2's DELETE /v2/auth/enable.
func (s *Store) Disable(ctx context.Context) error {
	k := s.cfg.Keys
	return s.write(ctx, func(snap *snapshot) ([]clientv3.Op, []string, error) {
		if !snap.st.Enabled {
			return nil, nil, authErr(http.StatusConflict, "already disabled")
		}
		return []clientv3.Op{clientv3.OpPut(k.Enabled(), "false")}, []string{k.Enabled()}, nil
	})
}

// maxTxnOps bounds the operations of one transaction, well below etcd's
// default limit (128).
const maxTxnOps = 64

// Replace makes the stored auth data st's (users with their hashes as
// given; one given without a hash keeps the one stored, so a password
// learned meanwhile is not lost): migrate's copy. The writes go in transactions of at most
// maxTxnOps operations, each guarded on nothing under the prefix having
// changed since the read (or the previous one of them), so a concurrent
// change makes Replace start again; turning auth on comes last, turning it
// off first.
func (s *Store) Replace(ctx context.Context, st *State) error {
	k := s.cfg.Keys
	for range 20 {
		snap, err := s.read(ctx, s.cfg.RequestTimeout)
		if err != nil {
			return err
		}
		var ops []clientv3.Op
		want := map[string]bool{}
		for name, u := range st.Users {
			u.User, u.Grant, u.Revoke = name, nil, nil
			if u.Password == "" {
				u.Password = snap.st.Users[name].Password
			}
			want[k.User(name)] = true
			ops = append(ops, put(k.User(name), u))
		}
		for name, r := range st.Roles {
			if name == RootName {
				continue
			}
			r.Role, r.Grant, r.Revoke = name, nil, nil
			want[k.Role(name)] = true
			ops = append(ops, put(k.Role(name), r))
		}
		for key := range snap.mod {
			if key != k.Enabled() && !want[key] {
				ops = append(ops, clientv3.OpDelete(key))
			}
		}
		flag := clientv3.OpPut(k.Enabled(), fmt.Sprint(st.Enabled))
		if st.Enabled {
			ops = append(ops, flag)
		} else {
			ops = append([]clientv3.Op{flag}, ops...)
		}
		rev, ok, err := s.commitGuarded(ctx, snap.st.Rev, ops)
		if err != nil {
			return err
		}
		if ok {
			return s.await(ctx, rev)
		}
	}
	return errConflict
}

// commitGuarded commits ops in transactions of at most maxTxnOps, each
// guarded on no key under the prefix having changed after rev (then after
// the previous transaction); ok is false if one lost that race.
func (s *Store) commitGuarded(ctx context.Context, rev int64, ops []clientv3.Op) (last int64, ok bool, err error) {
	last = rev
	for chunk := range slices.Chunk(ops, maxTxnOps) {
		cmp := clientv3.Compare(clientv3.ModRevision(s.cfg.Keys.Prefix), "<", last+1).WithPrefix()
		cctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		resp, err := s.cfg.Client.Txn(cctx).If(cmp).Then(chunk...).Commit()
		cancel()
		if err != nil {
			return 0, false, err
		}
		if !resp.Succeeded {
			return 0, false, nil
		}
		last = resp.Header.Revision
	}
	return last, true, nil
}

// Learn stores bcrypt(password) as user name's hash if the user exists and
// its stored hash does not verify password: dual mode's adoption of a
// password the v2 server accepted. changed reports whether it stored
// one.
func (s *Store) Learn(ctx context.Context, name, password string) (changed bool, err error) {
	h := &hasher{cost: s.cfg.HashCost, password: password}
	key := s.cfg.Keys.User(name)
	err = s.write(ctx, func(snap *snapshot) ([]clientv3.Op, []string, error) {
		changed = false
		u, ok := snap.st.Users[name]
		if !ok || bcrypt.CompareHashAndPassword([]byte(u.Password), []byte(password)) == nil {
			return nil, []string{key}, nil
		}
		hash, err := h.get()
		if err != nil {
			return nil, nil, err
		}
		u.Password = hash
		changed = true
		return []clientv3.Op{put(key, u)}, []string{key}, nil
	})
	return changed, err
}
