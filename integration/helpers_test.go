// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v2"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// env is one bridge over a one-member embedded etcd.
type env struct {
	cluster *v2bridgetest.Cluster
	bridge  *v2bridgetest.Bridge
	url     string
}

func newEnv(t *testing.T, o v2bridgetest.Options) *env {
	t.Helper()
	cl := v2bridgetest.StartCluster(t, 1)
	br := v2bridgetest.StartBridge(t, cl.Endpoints(), o)
	return &env{cluster: cl, bridge: br, url: br.URL}
}

// resp is a raw HTTP answer.
type resp struct {
	status int
	header http.Header
	body   string
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.body, err)
	}
	return m
}

var httpClient = &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

// do sends method to base+path; form goes in the body for PUT/POST and in the
// query otherwise.
func do(t *testing.T, method, base, path string, form url.Values) resp {
	t.Helper()
	u := base + path
	var body io.Reader
	if form != nil {
		if method == "PUT" || method == "POST" {
			body = strings.NewReader(form.Encode())
		} else {
			sep := "?"
			if strings.Contains(u, "?") {
				sep = "&"
			}
			u += sep + form.Encode()
		}
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	r, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{status: r.StatusCode, header: r.Header, body: string(b)}
}

func v2client(t *testing.T, urls ...string) client.KeysAPI {
	t.Helper()
	c, err := client.New(client.Config{Endpoints: urls, Transport: client.DefaultTransport,
		HeaderTimeoutPerRequest: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return client.NewKeysAPI(c)
}

// v2clientWith is v2client over a given transport (TLS).
func v2clientWith(t *testing.T, tr client.CancelableTransport, urls ...string) client.KeysAPI {
	t.Helper()
	c, err := client.New(client.Config{Endpoints: urls, Transport: tr, HeaderTimeoutPerRequest: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return client.NewKeysAPI(c)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}
