// SPDX-License-Identifier: Apache-2.0

package v2client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// deadURL is a loopback URL nothing listens on.
func deadURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	_ = ln.Close()
	return u
}

// A request goes to the first URL that answers, below its path, with the
// query, the form, its content type and the credentials.
func TestDoTriesTheURLsInTurn(t *testing.T) {
	type seen struct {
		method, path, query, body, ctype, user, pass string
		authOK                                       bool
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u, p, ok := r.BasicAuth()
		got <- seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, string(b), r.Header.Get("Content-Type"), u, p, ok}
		w.Header().Set("X-Etcd-Index", "3")
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	c, err := New(Config{URLs: []string{deadURL(t), srv.URL + "/base/"}, User: "root:pw", HeaderTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := c.String(); !strings.HasSuffix(s, ","+srv.URL+"/base") {
		t.Errorf("String %q", s)
	}
	if u, p := c.User(); u != "root" || p != "pw" {
		t.Errorf("User %q %q", u, p)
	}
	resp, err := c.Do(context.Background(), http.MethodPut, "/v2/keys/a b", url.Values{"prevExist": {"false"}},
		url.Values{"value": {"x&y"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	want := seen{"PUT", "/base/v2/keys/a%20b", "prevExist=false", "value=x%26y", "application/x-www-form-urlencoded",
		"root", "pw", true}
	if s := <-got; resp.StatusCode != 201 || resp.Header.Get("X-Etcd-Index") != "3" || s != want {
		t.Fatalf("answer %d, server saw %+v; want 201 and %+v", resp.StatusCode, s, want)
	}
}

func TestDoWithNoURLAnsweringIsUnreachable(t *testing.T) {
	dead := deadURL(t)
	c, err := New(Config{URLs: []string{dead}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(context.Background(), http.MethodGet, "/v2/keys/", nil, nil)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "cannot reach the v2 server "+dead) {
		t.Fatalf("%v, want unreachable naming %s", err, dead)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Do(ctx, http.MethodGet, "/v2/keys/", nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled request: %v", err)
	}
}

func TestNewRefusesBadConfigs(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{URLs: []string{"localhost:2379"}},
		{URLs: []string{"ftp://h:1"}},
		{URLs: []string{"http://h:1"}, User: "root"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
