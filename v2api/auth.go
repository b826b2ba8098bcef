// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/gorilla/mux"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/translate"
)

// Auth is what the HTTP layer needs from etcd v2's auth (auth.Service
// satisfies it): the auth data to show, v2's mutations of it, and the
// decision on each request.
type Auth interface {
	State() (*auth.State, bool)
	PutUser(ctx context.Context, u auth.User) (auth.User, bool, error)
	DeleteUser(ctx context.Context, name string) error
	PutRole(ctx context.Context, r auth.Role) (auth.Role, bool, error)
	DeleteRole(ctx context.Context, name string) error
	Enable(ctx context.Context) error
	Disable(ctx context.Context) error
	Keys(r *http.Request, key string, recursive, write bool) auth.Decision
	Root(r *http.Request) auth.Decision
}

var _ Auth = auth.Service{}

const authPrefix = "/v2/auth"

// maxAuthBody bounds the JSON of a user or role read from a request: one
// larger is invalid JSON. It is etcd's default --max-request-bytes: a user
// or role that large could not be stored in etcd v3 anyway.
const maxAuthBody = 3 << 19

// addAuth mounts the auth API as v2 routed it: /enable exactly, /users and
// /roles with or without a name below them; anything else under /v2/auth is
// not found.
func (s *Server) addAuth(r *mux.Router) {
	r.HandleFunc(authPrefix+"/enable", s.authEnable)
	r.HandleFunc(authPrefix+"/users", s.authUsers)
	r.PathPrefix(authPrefix + "/users/").HandlerFunc(s.authUsers)
	r.HandleFunc(authPrefix+"/roles", s.authRoles)
	r.PathPrefix(authPrefix + "/roles/").HandlerFunc(s.authRoles)
}

// authUnavailable is the cause of v2's 300 while no auth data is current.
const authUnavailable = "auth data not loaded yet"

// authStep decides each request before its handler, as v2 did: a
// /v2/keys request by the permissions on its key as sent (a GET or HEAD a
// read, anything else a write), once parsed; a request that needs root by
// root's. A request its handler refuses first (a path it redirects, a method
// it does not allow, a key request that does not parse, with the parse
// carried to it) goes on unchecked, for the handler to refuse as v2 did.
func (s *Server) authStep(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case !isCleanPath(p):
		case isKeysPath(p) && slices.Contains(keysMethods, r.Method):
			kr := parseKeys(r)
			if kr.err == nil && !s.checkKeys(w, r, kr) {
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), parsedKeys{}, kr))
		case needsRoot(p, r.Method) && !s.checkRoot(w, r):
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkKeys lets a parsed /v2/keys request go on (true) or writes and
// counts v2's refusal.
func (s *Server) checkKeys(w http.ResponseWriter, r *http.Request, kr *keysRequest) bool {
	var refusal *translate.Error
	switch keysDecision(s.cfg.Auth, r, kr) {
	case auth.Allow:
		return true
	case auth.Deny:
		refusal = errDenied()
	default:
		refusal = translate.NewError(translate.EcodeRaftInternal, authUnavailable, 0)
	}
	setHeader(w.Header(), "X-Etcd-Cluster-Id", s.clusterIDHeader(s.cfg.Store.Meta().ClusterID))
	s.observe(r.Method, "error", writeError(w, refusal), kr.start)
	return false
}

// keysDecision is a's decision on a parsed /v2/keys request: a GET or
// HEAD reads, anything else writes.
func keysDecision(a Auth, r *http.Request, kr *keysRequest) auth.Decision {
	return a.Keys(r, kr.key, kr.req.Recursive, r.Method != "GET" && r.Method != "HEAD")
}

// errDenied is v2's refusal of a key the credentials do not reach.
func errDenied() *translate.Error {
	return translate.NewError(translate.EcodeUnauthorized, "Insufficient credentials", 0)
}

// needsRoot reports whether the handler a clean path p routes to asks root
// of method (after its own checks of the path and method, as v2's did):
// changes of the auth flag or membership, anything of users and roles.
func needsRoot(p, method string) bool {
	change := method == "PUT" || method == "DELETE"
	switch {
	case p == authPrefix+"/enable":
		return change
	case p == "/v2/members":
		return method == "POST"
	case strings.HasPrefix(p, "/v2/members/"):
		id := p[len("/v2/members/"):] // the route's {id}: one name
		return change && id != "" && !strings.Contains(id, "/")
	}
	for _, kind := range []string{"users", "roles"} {
		if base := authPrefix + "/" + kind; p == base || strings.HasPrefix(p, base+"/") {
			name, ok := authName(p, kind)
			return ok && (method == "GET" || name != "" && change)
		}
	}
	return false
}

// checkRoot lets a request that needs root go on (true) or writes v2's
// refusal: 401 for a request without root, 300 while no auth data is
// current.
func (s *Server) checkRoot(w http.ResponseWriter, r *http.Request) bool {
	switch s.cfg.Auth.Root(r) {
	case auth.Allow:
		return true
	case auth.Deny:
		writeMessage(w, http.StatusUnauthorized, "Insufficient credentials")
	default:
		writeError(w, translate.NewError(translate.EcodeRaftInternal, authUnavailable, 0))
	}
	return false
}

// writeMessage writes v2's {"message": ...} error body (no newline, as v2
// wrote it).
func writeMessage(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeAuthError writes a refusal of the auth store (*auth.Error) as v2
// did; anything else is v2's 300, retried elsewhere.
func writeAuthError(w http.ResponseWriter, err error) {
	var ae *auth.Error
	if errors.As(err, &ae) {
		writeMessage(w, ae.Status, ae.Message)
		return
	}
	writeError(w, err)
}

// authHeaders are the headers of an auth answer past the method and root
// checks.
func (s *Server) authHeaders(w http.ResponseWriter) {
	w.Header().Set("X-Etcd-Cluster-Id", s.clusterIDHeader(s.cfg.Store.Meta().ClusterID))
	w.Header().Set("Content-Type", "application/json")
}

// authState is the current auth data, or false after writing v2's 300.
func (s *Server) authState(w http.ResponseWriter) (*auth.State, bool) {
	st, ok := s.cfg.Auth.State()
	if !ok || st == nil {
		writeError(w, translate.NewError(translate.EcodeRaftInternal, authUnavailable, 0))
		return nil, false
	}
	return st, true
}

// encodeJSON writes v as v2 did: json.Encoder, a trailing newline.
func encodeJSON(w http.ResponseWriter, v any) {
	_ = json.NewEncoder(w).Encode(v)
}

// authName splits the path below /v2/auth/<kind> as v2 did: "" for the
// collection itself, the one name below it, or ok false for a deeper path.
func authName(p, kind string) (name string, ok bool) {
	sub := strings.TrimPrefix(path.Clean(strings.TrimPrefix(p, authPrefix)), "/"+kind)
	switch {
	case sub == "":
		return "", true
	case strings.Count(sub, "/") == 1:
		return sub[1:], true
	}
	return "", false
}

func (s *Server) authEnable(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r.Method, "GET", "PUT", "DELETE") {
		return
	}
	// A write's outcome is seen through even if its client leaves.
	ctx := context.WithoutCancel(r.Context())
	switch r.Method {
	case "GET":
		st, ok := s.shown(w)
		if !ok {
			return
		}
		encodeJSON(w, struct {
			Enabled bool `json:"enabled"`
		}{st.Enabled})
	case "PUT":
		s.authHeaders(w)
		if err := s.cfg.Auth.Enable(ctx); err != nil {
			writeAuthError(w, err)
		}
	case "DELETE":
		s.authHeaders(w)
		if err := s.cfg.Auth.Disable(ctx); err != nil {
			writeAuthError(w, err)
		}
	}
}

// userWithRoles is a user as v2 shows it: its roles in full, never its
// password.
type userWithRoles struct {
	User  string      `json:"user"`
	Roles []auth.Role `json:"roles,omitempty"`
}

// roleNames are the names of a user's roles; the root user holds the root
// role whether or not it is stored.
func roleNames(u auth.User) []string {
	if u.User == auth.RootName && !slices.Contains(u.Roles, auth.RootName) {
		return append(slices.Clip(u.Roles), auth.RootName)
	}
	return u.Roles
}

func (s *Server) authUsers(w http.ResponseWriter, r *http.Request) {
	name := s.authItem(w, r, "users", s.listUsers)
	if name == "" {
		return
	}
	switch r.Method {
	case "GET":
		st, ok := s.shown(w)
		if !ok {
			return
		}
		u, ok := st.Users[name]
		if !ok {
			writeMessage(w, http.StatusNotFound, "auth: User "+name+" does not exist.")
			return
		}
		if err := r.ParseForm(); err != nil {
			writeMessage(w, http.StatusInternalServerError, "Internal Server Error")
			return
		}
		out := userWithRoles{User: u.User}
		for _, rn := range roleNames(u) {
			role, ok := st.Role(rn)
			if !ok {
				writeMessage(w, http.StatusNotFound, "auth: Role "+rn+" does not exist.")
				return
			}
			out.Roles = append(out.Roles, role)
		}
		encodeJSON(w, out)
	case "PUT":
		s.authHeaders(w)
		var in auth.User
		if !readAuthBody(w, r, &in, "User", name, func() string { return in.User }) {
			return
		}
		update := len(in.Grant) > 0 || len(in.Revoke) > 0
		if update && len(in.Roles) > 0 {
			writeMessage(w, http.StatusBadRequest, "User JSON contains both roles and grant/revoke")
			return
		}
		out, created, err := s.cfg.Auth.PutUser(context.WithoutCancel(r.Context()), in)
		if err != nil {
			writeAuthError(w, err)
			return
		}
		// v2 answered 201 only to a create that named no roles.
		status := http.StatusOK
		if created && !update && len(in.Roles) == 0 {
			status = http.StatusCreated
		}
		out.Password, out.Grant, out.Revoke = "", nil, nil
		if created { // v2 showed a new root user with its role, an updated one as stored
			out.Roles = roleNames(out)
		}
		w.WriteHeader(status)
		encodeJSON(w, out)
	case "DELETE":
		s.authHeaders(w)
		if err := s.cfg.Auth.DeleteUser(context.WithoutCancel(r.Context()), name); err != nil {
			writeAuthError(w, err)
		}
	}
}

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request) {
	st, ok := s.listing(w, r)
	if !ok {
		return
	}
	var out struct {
		Users []userWithRoles `json:"users"`
	}
	for _, name := range slices.Sorted(maps.Keys(st.Users)) {
		u := st.Users[name]
		uwr := userWithRoles{User: u.User}
		for _, rn := range roleNames(u) {
			if role, ok := st.Role(rn); ok { // a role deleted since is left out
				uwr.Roles = append(uwr.Roles, role)
			}
		}
		out.Users = append(out.Users, uwr)
	}
	encodeJSON(w, out)
}

func (s *Server) authRoles(w http.ResponseWriter, r *http.Request) {
	name := s.authItem(w, r, "roles", s.listRoles)
	if name == "" {
		return
	}
	switch r.Method {
	case "GET":
		st, ok := s.shown(w)
		if !ok {
			return
		}
		role, ok := st.Role(name)
		if !ok {
			writeMessage(w, http.StatusNotFound, "auth: Role "+name+" does not exist.")
			return
		}
		encodeJSON(w, role)
	case "PUT":
		s.authHeaders(w)
		var in auth.Role
		if !readAuthBody(w, r, &in, "Role", name, func() string { return in.Role }) {
			return
		}
		create := emptyPermissions(in.Grant) && emptyPermissions(in.Revoke)
		if !create && !emptyPermissions(&in.Permissions) {
			writeMessage(w, http.StatusBadRequest, "Role JSON contains both permissions and grant/revoke")
			return
		}
		out, _, err := s.cfg.Auth.PutRole(context.WithoutCancel(r.Context()), in)
		if err != nil {
			writeAuthError(w, err)
			return
		}
		if create {
			// v2 answered a create with the role as it was sent.
			w.WriteHeader(http.StatusCreated)
			encodeJSON(w, in)
			return
		}
		out.Grant, out.Revoke = nil, nil
		w.WriteHeader(http.StatusOK)
		encodeJSON(w, out)
	case "DELETE":
		s.authHeaders(w)
		if err := s.cfg.Auth.DeleteRole(context.WithoutCancel(r.Context()), name); err != nil {
			writeAuthError(w, err)
		}
	}
}

// authItem routes a request below /v2/auth/<kind>: the collection's to
// list; for one item, its name once the method is checked. ""
// once the request is answered.
func (s *Server) authItem(w http.ResponseWriter, r *http.Request, kind string, list http.HandlerFunc) string {
	name, ok := authName(r.URL.Path, kind)
	if !ok {
		writeMessage(w, http.StatusBadRequest, "Invalid path")
		return ""
	}
	if name == "" {
		list(w, r)
		return ""
	}
	if !allowMethod(w, r.Method, "GET", "PUT", "DELETE") {
		return ""
	}
	return name
}

// shown is the auth data an answer shows, its headers set; or false once
// v2's 300 is written.
func (s *Server) shown(w http.ResponseWriter) (*auth.State, bool) {
	st, ok := s.authState(w)
	if ok {
		s.authHeaders(w)
	}
	return st, ok
}

// listing is the auth data a listing (a GET of root's) shows, or false
// once the refusal is written.
func (s *Server) listing(w http.ResponseWriter, r *http.Request) (*auth.State, bool) {
	if !allowMethod(w, r.Method, "GET") {
		return nil, false
	}
	st, ok := s.shown(w)
	if !ok {
		return nil, false
	}
	if err := r.ParseForm(); err != nil {
		writeMessage(w, http.StatusInternalServerError, "Internal Server Error")
		return nil, false
	}
	return st, true
}

func (s *Server) listRoles(w http.ResponseWriter, r *http.Request) {
	st, ok := s.listing(w, r)
	if !ok {
		return
	}
	names := append(slices.Sorted(maps.Keys(st.Roles)), auth.RootName)
	sort.Strings(names)
	var out struct {
		Roles []auth.Role `json:"roles"`
	}
	for _, name := range slices.Compact(names) {
		if role, ok := st.Role(name); ok {
			out.Roles = append(out.Roles, role)
		}
	}
	encodeJSON(w, out)
}

// readAuthBody reads a PUT's JSON into v, a user or role (kind) that must
// be the one the URL names: false once v2's refusal is written.
func readAuthBody(w http.ResponseWriter, r *http.Request, v any, kind, name string, named func() string) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, maxAuthBody)).Decode(v); err != nil {
		writeMessage(w, http.StatusBadRequest, "Invalid JSON in request body.")
		return false
	}
	if named() != name {
		writeMessage(w, http.StatusBadRequest, kind+" JSON name does not match the name in the URL")
		return false
	}
	return true
}

// emptyPermissions is v2's test of a grant or revoke: absent, or naming no
// pattern.
func emptyPermissions(p *auth.Permissions) bool {
	return p == nil || (len(p.KV.Read) == 0 && len(p.KV.Write) == 0)
}
