// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"context"
	"net/http"

	"github.com/v2bridge/v2bridge/auth"
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
