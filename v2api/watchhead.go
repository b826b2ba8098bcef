// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"

	"github.com/v2bridge/v2bridge/translate"
	"golang.org/x/net/http/httpguts"
)

// The Home's reader parses the heads of the requests it serves itself with
// parseHead rather than http.ReadRequest: a v2 client's request is a few
// short lines, and ReadRequest's general machinery (textproto, the URL
// parser, transfer codings) was a tenth of the CPU of a watch delivery. The
// parser takes only what it understands completely and builds the request
// http.ReadRequest would; any other head goes back to net/http untouched, so
// net/http's answers (its 400s included) stay its own. FuzzParseWatchHead
// and FuzzParseHead hold it to http.ReadRequest.

// headRules says which requests parseHead takes.
type headRules struct {
	// watches: one-shot watches, bodiless GETs of /v2/keys with wait=true.
	watches bool
	// keys: the other requests of /v2/keys — GET, PUT, POST and DELETE —
	// with a form body (PUT and POST) of at most maxBody bytes.
	keys    bool
	maxBody int
}

// formType is the one Content-Type the reader takes a body of.
const formType = "application/x-www-form-urlencoded"

// parseHead parses head, one whole request head through its blank line, as
// a request the Home's reader serves under rules: HTTP/1.1 that keeps its
// connection, in the plain form v2 clients send. It returns the request and
// the length of the body that follows the head (the request's Body and
// forms are set by setBody once it is read), or nil for anything else.
func parseHead(head []byte, rules headRules) (*request, int) {
	// One string holds the head: every string of the request is a part of it.
	if len(head) < 4 || !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		return nil, 0
	}
	s := string(head[:len(head)-2]) // each line keeps its CRLF
	line, rest, _ := strings.Cut(s, "\r\n")
	method, target, ok := strings.Cut(line, " ")
	switch {
	case !ok:
		return nil, 0
	case method == http.MethodGet:
	case !rules.keys:
		return nil, 0
	case method != http.MethodPut && method != http.MethodPost && method != http.MethodDelete:
		return nil, 0
	}
	target, ok = strings.CutSuffix(target, " HTTP/1.1")
	if !ok {
		return nil, 0
	}
	p, rawQuery, q := strings.Cut(target, "?")
	// A '?' with no query after it is a URL of its own (ForceQuery).
	if !isKeysPath(p) || !plainPath(p) || q && !plainQuery(rawQuery) {
		return nil, 0
	}
	query := watchForm(rawQuery)
	if query == nil || translate.FlagSet(query, "stream") {
		return nil, 0
	}
	if method == http.MethodGet {
		// A watch for the handler (translate.Request.IsWatch) is taken
		// under the watch rules, and only as v2 clients send it.
		watch := translate.FlagSet(query, "wait") && !translate.FlagSet(query, "quorum")
		if watch && !(rules.watches && query.Get("wait") == "true") || !watch && !rules.keys {
			return nil, 0
		}
	}
	f, ok := headerFields(rest, rules.keys)
	if !ok {
		return nil, 0
	}
	// ParseForm reads the body of a PUT or a POST only as a form.
	if f.length > 0 && (method != http.MethodPut && method != http.MethodPost || !f.form || f.length > rules.maxBody) {
		return nil, 0
	}
	// The request, its URL and its body in one allocation.
	r := &request{u: url.URL{Path: p, RawQuery: rawQuery}}
	r.req = http.Request{
		Method:        method,
		URL:           &r.u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        f.hdr,
		Body:          http.NoBody,
		Host:          f.host,
		Form:          query,
		PostForm:      url.Values{},
		RequestURI:    target,
		ContentLength: int64(f.length),
	}
	if method == http.MethodPut || method == http.MethodPost {
		// As ParseForm: the body's values, then the query's.
		r.req.Form = mergeForm(nil, query)
	}
	return r, f.length
}

// request is a request the Home's reader builds, with what it points to.
type request struct {
	req  http.Request
	u    url.URL
	body formBody
}

// formBody is the Body of a request whose form the reader has read.
type formBody struct{ strings.Reader }

func (*formBody) Close() error { return nil }

// setBody gives r, from parseHead with a body, its body and its forms: the
// body's values, then the query's in Form, as ParseForm sets them (which
// then has nothing left to do). It reports false when the body is not a form
// ParseForm takes; r is then not to be served.
func (r *request) setBody(body []byte) bool {
	s := string(body)
	post := watchForm(s)
	if post == nil {
		return false
	}
	r.body.Reset(s)
	r.req.Body = &r.body
	r.req.PostForm = post
	r.req.Form = mergeForm(post, watchForm(r.u.RawQuery))
	return true
}

// mergeForm is a new url.Values with a's values, then b's, as ParseForm
// merges a body's form and the query.
func mergeForm(a, b url.Values) url.Values {
	m := make(url.Values, len(a)+len(b))
	for k, vs := range a {
		m[k] = vs[:len(vs):len(vs)]
	}
	for k, vs := range b {
		if cur, ok := m[k]; ok {
			m[k] = append(cur, vs...)
		} else {
			m[k] = vs[:len(vs):len(vs)]
		}
	}
	return m
}

// fields is what headerFields makes of a head's header lines.
type fields struct {
	hdr    http.Header
	host   string
	length int  // Content-Length
	form   bool // Content-Type is the form's
}

// headerFields parses the header lines of a head (each ending in CRLF) into
// a header, the Host and, with bodies (the key rules), the body's length. It
// reports false for any field the reader leaves to net/http: a field that is
// not a plain token, a colon and a printable ASCII value; a folded line;
// anything but exactly one valid Host; a transfer coding; Connection (but
// keep-alive), Expect, Upgrade, Pragma or Trailer; and, without bodies, a
// Content-Length; with them, more than one Content-Length, one that is not
// plain digits, or a Content-Type but the form's.
func headerFields(lines string, bodies bool) (fields, bool) {
	n := strings.Count(lines, "\r\n")
	hdr := make(http.Header, n)
	values := make([]string, n) // one allocation for every field's value
	host, hosts, lengths, types := "", 0, 0, 0
	length := 0
	for i := 0; lines != ""; i++ {
		line, rest, _ := strings.Cut(lines, "\r\n")
		lines = rest
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" || !isToken(name) || !plainValue(value) {
			return fields{}, false
		}
		value = strings.Trim(value, " \t")
		key := http.CanonicalHeaderKey(name)
		switch key {
		case "Host":
			host, hosts = value, hosts+1
			continue // net/http keeps Host out of the header
		case "Connection":
			if !strings.EqualFold(value, "keep-alive") {
				return fields{}, false
			}
		case "Content-Length":
			l, ok := plainLength(value)
			if !bodies || !ok || lengths > 0 {
				return fields{}, false
			}
			length, lengths = l, lengths+1
		case "Content-Type":
			if !bodies || value != formType || types > 0 {
				return fields{}, false
			}
			types++
		case "Transfer-Encoding", "Expect", "Upgrade", "Pragma", "Trailer":
			return fields{}, false
		}
		values[i] = value
		if vs, ok := hdr[key]; ok {
			hdr[key] = append(vs, value)
		} else {
			hdr[key] = values[i : i+1 : i+1]
		}
	}
	if hosts != 1 || !httpguts.ValidHostHeader(host) || host == "" {
		return fields{}, false
	}
	return fields{hdr: hdr, host: host, length: length, form: types > 0}, true
}

// plainLength parses a Content-Length of at most 9 digits with no leading
// zero (or "0").
func plainLength(v string) (int, bool) {
	if v == "" || len(v) > 9 || v[0] == '0' && v != "0" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n = n*10 + int(v[i]-'0')
	}
	return n, true
}

// watchForm parses a query as url.ParseQuery does, or returns nil when it
// is not one the fast path takes (escapes, '+', ';') and url.ParseQuery
// refuses it. The fast path shares one string and one slice between the
// values.
func watchForm(q string) url.Values {
	if strings.ContainsAny(q, "%+;") {
		form, err := url.ParseQuery(q)
		if err != nil {
			return nil
		}
		return form
	}
	n := strings.Count(q, "&") + 1
	form := make(url.Values, n)
	values := make([]string, n)
	for i := 0; q != ""; i++ {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		values[i] = v
		if vs, ok := form[k]; ok {
			form[k] = append(vs, v)
		} else {
			form[k] = values[i : i+1 : i+1]
		}
	}
	return form
}

// plainPath reports whether p is a path url.ParseRequestURI takes as it is:
// no escapes and nothing it would escape back (so its Path is p and its
// RawPath empty).
func plainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		if c := p[i]; !isAlnum(c) && !strings.ContainsRune("-._~/$&+,:;=@", rune(c)) {
			return false
		}
	}
	return true
}

// plainQuery reports whether q is a non-empty query of visible ASCII
// without a fragment mark.
func plainQuery(q string) bool {
	for i := 0; i < len(q); i++ {
		if c := q[i]; c <= ' ' || c > '~' || c == '#' {
			return false
		}
	}
	return q != ""
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// isToken reports whether s is an HTTP token (a valid field name).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return true
}

// plainValue reports whether v is printable ASCII, spaces and tabs.
func plainValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' || c > '~') && c != '\t' {
			return false
		}
	}
	return true
}
