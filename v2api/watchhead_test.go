// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"bufio"
	"bytes"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// netHTTPWatch is what net/http makes of head: the request http.ReadRequest
// parses, as net/http's server hands it to a handler (Host out of the
// header), and whether it is a one-shot watch a detached reader may serve
// (a bodiless HTTP/1.1 GET of /v2/keys with wait=true and no stream that
// keeps its connection and that net/http's server would not refuse), head
// being exactly one request's head.
func netHTTPWatch(head []byte) (*http.Request, bool) {
	rd := bytes.NewReader(head)
	br := bufio.NewReader(rd)
	r, err := http.ReadRequest(br)
	if err != nil || br.Buffered() > 0 || rd.Len() > 0 {
		return nil, false
	}
	if r.Method != http.MethodGet || r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.Close || r.Host == "" ||
		r.ContentLength != 0 || len(r.TransferEncoding) > 0 || r.Header.Get("Expect") != "" ||
		!isKeysPath(r.URL.Path) || r.URL.Host != "" || !httpguts.ValidHostHeader(r.Host) {
		return nil, false
	}
	for k, vs := range r.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, false
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, false
			}
		}
	}
	if r.ParseForm() != nil || r.Form.Get("wait") != "true" || r.Form.Get("stream") == "true" {
		return nil, false
	}
	delete(r.Header, "Host")
	return r, true
}

// parseWatchHead is parseHead under the rules of a Home that serves only
// watches (its keys kept in net/http): a bodiless one-shot HTTP/1.1 GET of
// /v2/keys with wait=true that keeps its connection, in the plain form v2
// clients send; nil for anything else.
func parseWatchHead(head []byte) *http.Request {
	if r, _ := parseHead(head, headRules{watches: true}); r != nil {
		return &r.req
	}
	return nil
}

// checkAgainstNetHTTP fails t when parseWatchHead takes head and net/http
// would not, or would hand the handler a different request.
func checkAgainstNetHTTP(t *testing.T, head []byte) *http.Request {
	t.Helper()
	got := parseWatchHead(head)
	if got == nil {
		return nil
	}
	want, ok := netHTTPWatch(head)
	if !ok {
		t.Fatalf("%q: taken by parseWatchHead, not a watch net/http would serve", head)
	}
	if name, g, w, same := sameRequest(got, want); !same {
		t.Fatalf("%q: %s %#v, net/http's %#v", head, name, g, w)
	}
	if got.Body != want.Body {
		t.Fatalf("%q: body %#v, net/http's %#v", head, got.Body, want.Body)
	}
	return got
}

// sameRequest compares what parseHead sets of a request (the body aside)
// with net/http's reading of it, and names the first field that differs.
func sameRequest(got, want *http.Request) (field string, g, w any, same bool) {
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"method", got.Method, want.Method},
		{"URL", *got.URL, *want.URL},
		{"proto", [3]any{got.Proto, got.ProtoMajor, got.ProtoMinor}, [3]any{want.Proto, want.ProtoMajor, want.ProtoMinor}},
		{"header", got.Header, want.Header},
		{"host", got.Host, want.Host},
		{"request URI", got.RequestURI, want.RequestURI},
		{"form", got.Form, want.Form},
		{"post form", got.PostForm, want.PostForm},
		{"content length", got.ContentLength, want.ContentLength},
		{"transfer encoding", len(got.TransferEncoding), len(want.TransferEncoding)},
		{"close", got.Close, want.Close},
		{"trailer", len(got.Trailer), len(want.Trailer)},
	} {
		if !reflect.DeepEqual(f.got, f.want) {
			return f.name, f.got, f.want, false
		}
	}
	return "", nil, nil, true
}

// What v2 clients send is read by the detached reader itself, as net/http
// would read it.
func TestParseWatchHeadTakesTheWatchesV2ClientsSend(t *testing.T) {
	for _, head := range []string{
		"GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n",
		// etcd's v2 Go client
		"GET /v2/keys/coreos.com/network/subnets?recursive=true&wait=true&waitIndex=1234 HTTP/1.1\r\n" +
			"Host: 10.0.0.1:2379\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\r\n",
		// curl
		"GET /v2/keys/foo?wait=true&waitIndex=7 HTTP/1.1\r\nHost: 127.0.0.1:2379\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n",
		// python-etcd (urllib3)
		"GET /v2/keys/a/b?wait=true&recursive=false HTTP/1.1\r\nHost: localhost:4001\r\nAccept-Encoding: identity\r\n" +
			"Connection: keep-alive\r\n\r\n",
		"GET /v2/keys?wait=true&recursive=true HTTP/1.1\r\nhost: [::1]:2379\r\nx-a:  spaced\t \r\nX-A: twice\r\n\r\n",
		"GET /v2/keys/a%20b?wait=true&waitIndex=%31 HTTP/1.1\r\nHost: x\r\n\r\n", // escapes: url.ParseQuery's
		"GET /v2/keys/a?wait=true&x=a+b&stream=false&&=v HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		if strings.Contains(head, "%20") { // an escaped path goes back to net/http
			if parseWatchHead([]byte(head)) != nil {
				t.Errorf("%q: taken, want it handed back", head)
			}
			continue
		}
		if checkAgainstNetHTTP(t, []byte(head)) == nil {
			t.Errorf("%q: handed back, want it read on the detached connection", head)
		}
	}
}

// Anything else goes back to net/http, which answers it as it always has.
func TestParseWatchHeadLeavesTheRestToNetHTTP(t *testing.T) {
	for _, tc := range []struct{ name, head string }{
		{"not a watch", "GET /v2/keys/dir HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"a stream", "GET /v2/keys/dir?wait=true&stream=true HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"wait not true", "GET /v2/keys/dir?wait=1 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"not GET", "PUT /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"HEAD", "HEAD /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"HTTP/1.0", "GET /v2/keys/dir?wait=true HTTP/1.0\r\nHost: x\r\n\r\n"},
		{"another path", "GET /v2/keysx?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"absolute form", "GET http://x/v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"no Host", "GET /v2/keys/dir?wait=true HTTP/1.1\r\n\r\n"},
		{"an empty Host", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: \r\n\r\n"},
		{"two Hosts", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n"},
		{"a bad Host", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: a b\r\n\r\n"},
		{"Connection: close", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"},
		{"a body", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"},
		{"chunked", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"Expect", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n"},
		{"Pragma", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nPragma: no-cache\r\n\r\n"},
		{"a folded line", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"},
		{"a bad header name", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nX A: a\r\n\r\n"},
		{"a control byte", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n"},
		{"a non-ASCII value", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\nX-A: \xc3\xa9\r\n\r\n"},
		{"bare LF", "GET /v2/keys/dir?wait=true HTTP/1.1\nHost: x\n\n"},
		{"a semicolon", "GET /v2/keys/dir?wait=true;x=1 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"a bad escape", "GET /v2/keys/dir?wait=true&x=%zz HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"a fragment", "GET /v2/keys/dir?wait=true#f HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"a space in the target", "GET /v2/keys/dir?wait=true x HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"an unclean path", "GET /v2/keys/a/../b?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"two heads", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\nGET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"no end", "GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "an unclean path" { // taken: the handler redirects it, as net/http would serve it
				checkAgainstNetHTTP(t, []byte(tc.head))
				return
			}
			if r := parseWatchHead([]byte(tc.head)); r != nil {
				t.Fatalf("taken as %s %s, want it handed back", r.Method, r.URL)
			}
		})
	}
}

// FuzzParseWatchHead holds the detached reader's parser to net/http's: a
// head it takes is a watch net/http would serve, parsed the same.
func FuzzParseWatchHead(f *testing.F) {
	for _, s := range []string{
		"GET /v2/keys/dir?wait=true HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v2/keys/coreos.com/network/subnets?recursive=true&wait=true&waitIndex=1234 HTTP/1.1\r\n" +
			"Host: 10.0.0.1:2379\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\r\n",
		"GET /v2/keys/a?wait=true&x=a+b%2F&stream=false&&=v&k HTTP/1.1\r\nhost: h\r\nx-a:  v \t\r\nX-A: w\r\nConnection: Keep-Alive\r\n\r\n",
		"GET /v2/keys/$&+,:;=@-._~?wait=true&q=!'()*/?:@ HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		checkAgainstNetHTTP(t, head)
	})
}
