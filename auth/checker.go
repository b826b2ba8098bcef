// SPDX-License-Identifier: Apache-2.0

package auth

import (
	"go.uber.org/zap"
	"net/http"
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
