// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/translate"
)

// ServedOnly serves through h only the v2 keys in the served subtrees
// (--serve-prefix, as translate.ParseServed returns them); any other key
// gets v2's "Key not found" naming them, whether read, written or watched,
// in every mode, so the part of the key space a bridge does not serve
// (another tenant's, or what the bridges do not migrate of a v2 server's
// tree) is never answered from either side. Everything but /v2/keys passes.
//
// With a (the auth the v3 side enforces; nil: none), a request the guest
// role or its credentials may not make gets v2's refusal first, as etcd v2
// refused a key it lacked before it looked for it. (Without current auth
// data, the key is not found, as before.)
func ServedOnly(served []string, a Auth, h http.Handler) http.Handler {
	layout := translate.Layout{}.WithServed(served)
	if !layout.Scoped() {
		return h
	}
	list := strings.Join(served, ",")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/v2/keys")
		if !ok || rest != "" && rest[0] != '/' {
			h.ServeHTTP(w, r)
			return
		}
		if key := path.Join("/", rest); !layout.Serves(key) {
			if a != nil && slices.Contains(keysMethods, r.Method) {
				if kr := parseKeys(r); kr.err == nil && keysDecision(a, r, kr) == auth.Deny {
					writeError(w, errDenied())
					return
				}
			}
			writeError(w, translate.NewError(translate.EcodeKeyNotFound,
				key+" is outside the served prefix "+list+" (--serve-prefix)", 0))
			return
		}
		h.ServeHTTP(w, r)
	})
}
