// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The detached reader parses the heads of the requests it serves itself with
// parseWatchHead rather than http.ReadRequest: a v2 client's re-watch is a
// few short lines, and ReadRequest's general machinery (textproto, the URL
// parser, transfer codings) was a tenth of the CPU of a delivery. The parser
// takes only what it understands completely and builds the request
// http.ReadRequest would; any other head goes back to net/http untouched, so
// net/http's answers (its 400s included) stay its own. FuzzParseWatchHead
// holds it to http.ReadRequest.

// parseWatchHead parses head, one whole request head through its blank
// line, as a request the detached reader serves: a bodiless one-shot
// HTTP/1.1 GET of /v2/keys with wait=true that keeps its connection, in the
// plain form v2 clients send. It returns nil for anything else.
func parseWatchHead(head []byte) *http.Request {
	// One string holds the head: every string of the request is a part of it.
	if len(head) < 4 || !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		return nil
	}
	s := string(head[:len(head)-2]) // each line keeps its CRLF
	line, rest, _ := strings.Cut(s, "\r\n")
	target, ok := strings.CutPrefix(line, "GET ")
	if !ok {
		return nil
	}
	target, ok = strings.CutSuffix(target, " HTTP/1.1")
	if !ok {
		return nil
	}
	p, rawQuery, _ := strings.Cut(target, "?")
	if !isKeysPath(p) || !plainPath(p) || !plainQuery(rawQuery) {
		return nil
	}
	form := watchForm(rawQuery)
	if form == nil || form.Get("wait") != "true" || form.Get("stream") == "true" {
		return nil
	}
	hdr, host := headerFields(rest)
	if hdr == nil {
		return nil
	}
	// The request and its URL in one allocation.
	r := &struct {
		req http.Request
		u   url.URL
	}{u: url.URL{Path: p, RawQuery: rawQuery}}
	r.req = http.Request{
		Method:     http.MethodGet,
		URL:        &r.u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     hdr,
		Body:       http.NoBody,
		Host:       host,
		Form:       form,
		PostForm:   url.Values{},
		RequestURI: target,
	}
	return &r.req
}

// headerFields parses the header lines of a head (each ending in CRLF) into
// a header and the Host. It returns a nil header for any field the detached
// reader leaves to net/http: a field that is not a plain token, a colon and
// a printable ASCII value; a folded line; anything but exactly one valid
// Host; a body or a transfer coding; Connection (but keep-alive), Expect,
// Upgrade, Pragma or Trailer.
func headerFields(lines string) (http.Header, string) {
	n := strings.Count(lines, "\r\n")
	hdr := make(http.Header, n)
	values := make([]string, n) // one allocation for every field's value
	host, hosts := "", 0
	for i := 0; lines != ""; i++ {
		line, rest, _ := strings.Cut(lines, "\r\n")
		lines = rest
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" || !isToken(name) || !plainValue(value) {
			return nil, ""
		}
		value = strings.Trim(value, " \t")
		key := http.CanonicalHeaderKey(name)
		switch key {
		case "Host":
			host, hosts = value, hosts+1
			continue // net/http keeps Host out of the header
		case "Connection":
			if !strings.EqualFold(value, "keep-alive") {
				return nil, ""
			}
		case "Content-Length", "Transfer-Encoding", "Expect", "Upgrade", "Pragma", "Trailer":
			return nil, ""
		}
		values[i] = value
		if vs, ok := hdr[key]; ok {
			hdr[key] = append(vs, value)
		} else {
			hdr[key] = values[i : i+1 : i+1]
		}
	}
	if hosts != 1 || !httpguts.ValidHostHeader(host) || host == "" {
		return nil, ""
	}
	return hdr, host
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
