// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/v2bridge/v2bridge/bridge/auth"
)

// AuthTarget is where the auth data goes: the bridges' auth.Store.
type AuthTarget interface {
	// State is the newest auth data read from etcd v3.
	State() (*auth.State, bool)
	// Replace makes the stored auth data st's.
	Replace(ctx context.Context, st *auth.State) error
}

// AuthSummary is the outcome of CopyAuth.
type AuthSummary struct {
	Enabled bool     // the v2 server has auth enabled
	Users   []string // the v2 server's users, sorted
	Roles   []string // the v2 server's roles (root, built in, left out), sorted
	// UnknownPasswords are the users the bridges cannot check a password
	// of: none was learned yet (a dual-mode bridge learns one from a
	// request the v2 server accepted) and migrate was not given it.
	UnknownPasswords []string
	Changed          bool // etcd v3 was written (with DryRun: would be)
	DryRun           bool
}

// AuthDifference is one way the v2 server's and the bridges' auth data differ.
type AuthDifference struct {
	What   string // "enabled", "user NAME", "role NAME"
	Detail string
}

func (d AuthDifference) String() string { return "auth " + d.What + ": " + d.Detail }

// AuthReport is the outcome of VerifyAuth.
type AuthReport struct {
	Differences      []AuthDifference
	UnknownPasswords []string // users of the v2 server whose password the bridges do not know
}

// authState reads the v2 server's auth data: the enabled flag, every user
// with its roles and every role but root. nil: the v2 server has no auth API.
func (s *v2Server) authState(ctx context.Context) (*auth.State, error) {
	var en struct {
		Enabled bool `json:"enabled"`
	}
	found, err := s.authGet(ctx, "enable", &en)
	if err != nil || !found {
		return nil, err
	}
	var us struct {
		Users []struct {
			User  string            `json:"user"`
			Roles []json.RawMessage `json:"roles"`
		} `json:"users"`
	}
	if _, err := s.authGet(ctx, "users", &us); err != nil {
		return nil, err
	}
	var rs struct {
		Roles []auth.Role `json:"roles"`
	}
	if _, err := s.authGet(ctx, "roles", &rs); err != nil {
		return nil, err
	}
	st := &auth.State{Enabled: en.Enabled, Users: map[string]auth.User{}, Roles: map[string]auth.Role{}}
	for _, r := range rs.Roles {
		if r.Role != auth.RootName {
			st.Roles[r.Role] = auth.Role{Role: r.Role, Permissions: r.Permissions}
		}
	}
	for _, u := range us.Users {
		names := []string{}
		for _, raw := range u.Roles {
			// etcd 3.x lists a user's roles whole, older servers by name.
			var r auth.Role
			var name string
			if json.Unmarshal(raw, &name) != nil {
				if err := json.Unmarshal(raw, &r); err != nil {
					return nil, fmt.Errorf("the v2 server %s: user %q: bad role %s", s, u.User, raw)
				}
				name = r.Role
			}
			names = append(names, name)
		}
		st.Users[u.User] = auth.User{User: u.User, Roles: names}
	}
	return st, nil
}

// authGet reads /v2/auth/what into v; found is false when the v2 server
// serves no auth API (404).
func (s *v2Server) authGet(ctx context.Context, what string, v any) (found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, body, err := s.do(ctx, "/v2/auth/"+what, nil)
	if err != nil {
		return false, err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && what == "enable":
		return false, nil
	case resp.StatusCode == http.StatusUnauthorized:
		return false, fmt.Errorf("the v2 server %s refused to list its auth data (GET /v2/auth/%s: %s): "+
			"pass --v2-server-user root:PASSWORD", s, what, strings.TrimSpace(string(body)))
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("the v2 server %s: GET /v2/auth/%s answered %s: %s", s, what, resp.Status,
			strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return false, fmt.Errorf("the v2 server %s: GET /v2/auth/%s: %w", s, what, err)
	}
	return true, nil
}

// ErrStopFollowing ends FollowAuth when its allowed answers an error matching it.
var ErrStopFollowing = errors.New("stop following")

var errNoAuthState = errors.New("the bridges' auth data in etcd v3 is not read yet")

// ErrNoAuthTarget is returned by the auth steps without Options.Auth.
var ErrNoAuthTarget = errors.New("migrate: no auth target")

// CopyAuth copies the v2 server's auth data (enabled flag, roles, users and
// their roles) into Options.Auth. The v2 API never shows password hashes:
// a user keeps the hash the bridges already hold for it (learned from a
// request the v2 server accepted, or copied before), and the user of
// V2ServerUser gets the hash of the password given there. Nothing is written
// when etcd v3 already holds the same.
func CopyAuth(ctx context.Context, o Options) (*AuthSummary, error) {
	if o.Auth == nil {
		return nil, ErrNoAuthTarget
	}
	src, err := newV2Server(&o)
	if err != nil {
		return nil, err
	}
	defer src.close()
	_, pass := src.c.User()
	return copyAuth(ctx, o, src, pass)
}

// VerifyAuth compares the v2 server's auth data with the bridges': the flag,
// the roles and their permissions, the users and their roles, and names the
// users whose password the bridges do not know.
func VerifyAuth(ctx context.Context, o Options) (*AuthReport, error) {
	if o.Auth == nil {
		return nil, ErrNoAuthTarget
	}
	src, err := newV2Server(&o)
	if err != nil {
		return nil, err
	}
	defer src.close()
	from, cur, err := bothAuth(ctx, o, src)
	if err != nil {
		return nil, err
	}
	rep := &AuthReport{Differences: authDiff(from, cur, false)}
	for _, name := range sortedKeys(from.Users) {
		if u, ok := cur.Users[name]; !ok || u.Password == "" {
			rep.UnknownPasswords = append(rep.UnknownPasswords, name)
		}
	}
	return rep, nil
}

// FollowAuth copies the v2 server's auth data every interval until ctx ends
// (v2 has no watch on it), calling changed after each copy that wrote and
// failed after a copy that failed (once while the same error repeats).
// Hashes are only kept, never made. Before each copy it asks allowed, if
// set: an error matching ErrStopFollowing (the cutover is done) ends it,
// returned; another skips the copy, reported as failed.
func FollowAuth(ctx context.Context, o Options, interval time.Duration, allowed func(context.Context) error,
	changed func(*AuthSummary), failed func(error)) error {
	src, err := newV2Server(&o)
	if err != nil {
		return err
	}
	defer src.close()
	t := time.NewTicker(interval)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var sum *AuthSummary
		err := error(nil)
		if allowed != nil {
			err = allowed(ctx)
		}
		if errors.Is(err, ErrStopFollowing) {
			return err
		}
		if err == nil {
			sum, err = copyAuth(ctx, o, src, "")
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if err.Error() != last {
				failed(err)
			}
			last = err.Error()
			continue
		case sum.Changed:
			changed(sum)
		}
		last = ""
	}
}

// bothAuth is the auth data of src (empty if it has none) and of the
// bridges.
func bothAuth(ctx context.Context, o Options, src *v2Server) (from, cur *auth.State, err error) {
	from, err = src.authState(ctx)
	if err != nil {
		return nil, nil, err
	}
	if from == nil {
		from = &auth.State{}
	}
	cur, ok := o.Auth.State()
	if !ok {
		return nil, nil, errNoAuthState
	}
	return from, cur, nil
}

// copyAuth copies the auth data of src into o.Auth; pass, if not empty, is
// the password of src's user, whose hash it becomes.
func copyAuth(ctx context.Context, o Options, src *v2Server, pass string) (*AuthSummary, error) {
	from, cur, err := bothAuth(ctx, o, src)
	if err != nil {
		return nil, err
	}
	user, _ := src.c.User()
	want := planAuth(from, cur, user, pass, o.HashCost)
	sum := &AuthSummary{Enabled: from.Enabled, Users: sortedKeys(from.Users), Roles: sortedKeys(from.Roles),
		UnknownPasswords: unknownPasswords(want), DryRun: o.DryRun}
	if len(authDiff(want, cur, true)) == 0 {
		return sum, nil
	}
	sum.Changed = true
	if o.DryRun {
		return sum, nil
	}
	if err := o.Auth.Replace(ctx, want); err != nil {
		return nil, fmt.Errorf("writing the auth data to etcd v3: %w", err)
	}
	return sum, nil
}

// planAuth is the auth data to store: from's, with the hashes cur holds for
// the same users, and for user (if from has it) the hash of pass, kept from
// cur when it is already pass's.
func planAuth(from, cur *auth.State, user, pass string, cost int) *auth.State {
	want := &auth.State{Enabled: from.Enabled, Users: map[string]auth.User{}, Roles: map[string]auth.Role{}}
	for name, r := range from.Roles {
		want.Roles[name] = r
	}
	for name, u := range from.Users {
		u.Password = cur.Users[name].Password
		if name == user && pass != "" &&
			(u.Password == "" || bcrypt.CompareHashAndPassword([]byte(u.Password), []byte(pass)) != nil) {
			if cost == 0 {
				cost = bcrypt.DefaultCost
			}
			h, err := bcrypt.GenerateFromPassword([]byte(pass), cost)
			if err == nil { // only a password over 72 bytes fails: then it stays unknown
				u.Password = string(h)
			}
		}
		want.Users[name] = u
	}
	return want
}

func unknownPasswords(st *auth.State) []string {
	var out []string
	for _, name := range sortedKeys(st.Users) {
		if st.Users[name].Password == "" {
			out = append(out, name)
		}
	}
	return out
}

// authDiff lists how b differs from a; hashes counts the users' password
// hashes too.
func authDiff(a, b *auth.State, hashes bool) []AuthDifference {
	var out []AuthDifference
	if a.Enabled != b.Enabled {
		out = append(out, AuthDifference{What: "enabled", Detail: fmt.Sprintf("v2 server %t, bridge %t", a.Enabled, b.Enabled)})
	}
	out = append(out, diffItems("role", a.Roles, b.Roles, func(ra, rb auth.Role) string {
		if reflect.DeepEqual(normPerm(ra.Permissions), normPerm(rb.Permissions)) {
			return ""
		}
		return fmt.Sprintf("permissions: v2 server %s, bridge %s", permString(ra.Permissions), permString(rb.Permissions))
	})...)
	return append(out, diffItems("user", a.Users, b.Users, func(ua, ub auth.User) string {
		switch {
		case !slices.Equal(norm(ua.Roles), norm(ub.Roles)):
			return fmt.Sprintf("roles: v2 server [%s], bridge [%s]", strings.Join(norm(ua.Roles), " "), strings.Join(norm(ub.Roles), " "))
		case hashes && ua.Password != ub.Password:
			return "password"
		}
		return ""
	})...)
}

// diffItems lists, by name, the items (of kind what) missing from b, extra
// in b, or differing as differ says ("": alike).
func diffItems[T any](what string, a, b map[string]T, differ func(x, y T) string) []AuthDifference {
	var out []AuthDifference
	for _, name := range union(sortedKeys(a), sortedKeys(b)) {
		x, inA := a[name]
		y, inB := b[name]
		d := KindMissing
		switch {
		case !inA:
			d = KindExtra
		case inB:
			d = differ(x, y)
		}
		if d != "" {
			out = append(out, AuthDifference{What: what + " " + name, Detail: d})
		}
	}
	return out
}

func norm(ss []string) []string {
	out := append([]string{}, ss...)
	sort.Strings(out)
	return slices.Compact(out)
}

func normPerm(p auth.Permissions) auth.Permissions {
	return auth.Permissions{KV: auth.RWPermission{Read: norm(p.KV.Read), Write: norm(p.KV.Write)}}
}

func permString(p auth.Permissions) string {
	p = normPerm(p)
	return fmt.Sprintf("read [%s] write [%s]", strings.Join(p.KV.Read, " "), strings.Join(p.KV.Write, " "))
}

func union(a, b []string) []string {
	return norm(append(append([]string{}, a...), b...))
}

// sortedKeys are m's keys in order, never nil: a JSON summary shows none
// as [].
func sortedKeys[V any](m map[string]V) []string {
	return append([]string{}, slices.Sorted(maps.Keys(m))...)
}
