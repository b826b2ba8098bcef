// SPDX-License-Identifier: Apache-2.0

package main

import (
	"net/http"
	"path"
	"strings"

	"github.com/v2bridge/v2bridge/cutover"
	"github.com/v2bridge/v2bridge/translate"
)

// servePrefixOnly serves through h only the v2 keys at or below prefix
// (--serve-prefix); any other key gets v2's "Key not found" naming the
// served prefix, whether read, written or watched, in every mode, so the
// part of an old server's tree the bridges do not serve is never answered
// from either side. Everything but /v2/keys passes.
func servePrefixOnly(prefix string, h http.Handler) http.Handler {
	if prefix == "/" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/v2/keys")
		if !ok || rest != "" && rest[0] != '/' {
			h.ServeHTTP(w, r)
			return
		}
		if key := path.Join("/", rest); !cutover.Covers(prefix, key) {
			ve := translate.NewError(translate.EcodeKeyNotFound, key+" is outside the served prefix "+prefix+
				" (--serve-prefix)", 0)
			w.Header().Set("X-Etcd-Index", "0")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(ve.StatusCode())
			_, _ = w.Write(ve.JSON())
			return
		}
		h.ServeHTTP(w, r)
	})
}
