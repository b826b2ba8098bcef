// SPDX-License-Identifier: Apache-2.0

package v2diff

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// Side names one of the two servers of a comparison.
type Side int

const (
	// Ref is the real etcd v2 server.
	Ref Side = iota
	// Bridge is v2bridge.
	Bridge
)

func (s Side) String() string {
	if s == Ref {
		return "ref"
	}
	return "bridge"
}

// Request is one v2 HTTP request. Form goes in the body for PUT and POST and
// in the query string otherwise; Query always goes in the query string.
type Request struct {
	Method string
	Path   string // e.g. "/v2/keys/a"; may carry a raw query
	Form   url.Values
	Query  url.Values
	// RawBody, if set, is sent as the body instead of Form.
	RawBody string
	// ContentType overrides the body's content type.
	ContentType string
	// Authorization, if set, is sent as the Authorization header (v2
	// auth's HTTP basic credentials, or anything else a client may send).
	Authorization string
}

// Params is the request's parameters as v2 sees them: body values first,
// then the query.
func (r *Request) Params() url.Values {
	out := url.Values{}
	add := func(v url.Values) {
		for k, vs := range v {
			out[k] = append(out[k], vs...)
		}
	}
	if r.Method == "PUT" || r.Method == "POST" {
		add(r.Form)
	}
	if i := strings.IndexByte(r.Path, '?'); i >= 0 {
		if q, err := url.ParseQuery(r.Path[i+1:]); err == nil {
			add(q)
		}
	}
	add(r.Query)
	if r.Method != "PUT" && r.Method != "POST" {
		add(r.Form)
	}
	return out
}

// Param is the first value of a parameter and whether it was given.
func (r *Request) Param(name string) (string, bool) {
	vs, ok := r.Params()[name]
	if !ok || len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// BoolParam reports whether a parameter is given and true.
func (r *Request) BoolParam(name string) bool {
	v, _ := r.Param(name)
	switch v {
	case "1", "t", "T", "TRUE", "true", "True":
		return true
	}
	return false
}

func (r *Request) String() string {
	var b strings.Builder
	b.WriteString(r.Method)
	b.WriteByte(' ')
	b.WriteString(r.Path)
	if len(r.Query) > 0 {
		if strings.Contains(r.Path, "?") {
			b.WriteByte('&')
		} else {
			b.WriteByte('?')
		}
		b.WriteString(encodeSorted(r.Query))
	}
	if r.Authorization != "" {
		fmt.Fprintf(&b, " authorization=%q", r.Authorization)
	}
	switch {
	case r.RawBody != "":
		fmt.Fprintf(&b, " body=%q", r.RawBody)
	case len(r.Form) > 0:
		fmt.Fprintf(&b, " form=%s", encodeSorted(r.Form))
	}
	return b.String()
}

func encodeSorted(v url.Values) string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		for _, x := range v[k] {
			parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(x))
		}
	}
	return strings.Join(parts, "&")
}

// Response is what one server answered. For a watch, Lines holds the
// events read so far (one JSON object per line).
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// Sent and At are when the request was sent and its answer received
	// (zero: unknown): the answer was made between them, and expirations
	// are judged against that window.
	Sent, At time.Time
}

func (r *Response) String() string {
	if r == nil {
		return "<none>"
	}
	var hs []string
	for _, h := range []string{"Content-Type", "X-Etcd-Index", "X-Etcd-Cluster-Id", "X-Raft-Index", "X-Raft-Term",
		"Allow", "Location"} {
		if v := r.Header.Values(h); len(v) > 0 {
			hs = append(hs, h+"="+strings.Join(v, ","))
		}
	}
	return fmt.Sprintf("%d [%s] %q", r.Status, strings.Join(hs, " "), r.Body)
}
