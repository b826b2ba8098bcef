// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/bridge/membership"
)

// treeServer is a v2 server holding dirs (each listed with its
// children) for the coverage check's non-recursive listings.
type treeServer struct {
	children map[string][]string // dir -> child keys; a key absent here is a file or missing
	files    map[string]bool
}

func (s treeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Etcd-Index", "27")
	w.Header().Set("Content-Type", "application/json")
	p := path.Join("/", strings.TrimPrefix(r.URL.Path, "/v2/keys"))
	kids, dir := s.children[p]
	if !dir && !s.files[p] {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"errorCode":100,"message":"Key not found","cause":"` + p + `","index":27}`))
		return
	}
	node := map[string]any{"key": p, "dir": dir}
	var nodes []map[string]any
	for _, k := range kids {
		_, isDir := s.children[k]
		nodes = append(nodes, map[string]any{"key": k, "dir": isDir})
	}
	node["nodes"] = nodes
	_ = json.NewEncoder(w).Encode(map[string]any{"action": "get", "node": node})
}

// newTree lays out files and their parent directories.
func newTree(files ...string) treeServer {
	s := treeServer{children: map[string][]string{"/": nil}, files: map[string]bool{}}
	for _, f := range files {
		s.files[f] = true
		for p := f; p != "/"; p = path.Dir(p) {
			parent := path.Dir(p)
			if _, ok := s.children[parent]; !ok || !contains(s.children[parent], p) {
				s.children[parent] = append(s.children[parent], p)
				sort.Strings(s.children[parent])
			}
		}
	}
	return s
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestCoverageNamesWhatTheCopyLeavesOut(t *testing.T) {
	flannel := newTree("/coreos.com/network/config", "/coreos.com/network/subnets/10.5.1.0-24",
		"/coreos.com/other/x", "/apps/a", "/apps/b", "/top")
	onlyFlannel := newTree("/coreos.com/network/config")
	for _, c := range []struct {
		name    string
		tree    treeServer
		served  []string // one registered bridge each; "" says nothing: the whole tree
		copied  string
		errText string // "" for none
	}{
		{"whole tree served, part copied", flannel, []string{""}, "/coreos.com/network",
			"the v2 server holds /apps, /coreos.com/other, /top outside the copy"},
		{"whole tree served and copied", flannel, []string{""}, "/", ""},
		{"the served prefix copied", flannel, []string{"/coreos.com/network"}, "/coreos.com/network", ""},
		{"a wider copy than served", flannel, []string{"/coreos.com/network"}, "/coreos.com", ""},
		{"a middle prefix served", flannel, []string{"/coreos.com"}, "/coreos.com/network",
			"the v2 server holds /coreos.com/other outside the copy"},
		{"served apart from the copy", flannel, []string{"/apps", "/coreos.com/network"}, "/coreos.com/network",
			"the v2 server holds /apps outside the copy"},
		{"served apart, nothing there", flannel, []string{"/nothing"}, "/coreos.com/network", ""},
		{"nothing outside the copy", onlyFlannel, []string{""}, "/coreos.com/network", ""},
		{"no bridge registered", flannel, nil, "/coreos.com/network", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeEtcd(testKeys)
			for i, p := range c.served {
				b, _ := json.Marshal(membership.Registration{Name: "b", Prefix: p})
				f.put(testKeys.Bridges+string(rune('a'+i)), string(b), 0)
			}
			srv := httptest.NewServer(c.tree)
			t.Cleanup(srv.Close)
			src, err := NewV2Server([]string{srv.URL}, nil, "", 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			o, log := testOptions(t, f, src)
			o.setDefaults()
			err = o.checkCoverage(context.Background(), c.copied)
			switch {
			case c.errText == "" && err != nil:
				t.Fatalf("checkCoverage: %v", err)
			case c.errText != "" && (err == nil || !strings.Contains(err.Error(), c.errText)):
				t.Fatalf("checkCoverage: %v; want an error with %q", err, c.errText)
			case c.errText != "" && !strings.Contains(err.Error(), "--serve-prefix "+c.copied):
				t.Fatalf("checkCoverage: %v; want it to name --serve-prefix %s", err, c.copied)
			}
			if c.name == "nothing outside the copy" && !strings.Contains(log.String(), "lists nothing else") {
				t.Errorf("no note that the v2 server lists nothing outside the copy:\n%s", log)
			}
		})
	}
}

func TestCutoverRefusesAPartialCopyBeforeFencing(t *testing.T) {
	f := newFakeEtcd(testKeys)
	b, _ := json.Marshal(membership.Registration{Name: "b", Mode: ModePassthrough})
	f.put(testKeys.Bridges+"a", string(b), 0)
	fr, _ := json.Marshal(FollowRecord{V2Server: "old", Prefix: "/coreos.com/network", Index: 27})
	f.put(testKeys.Follow, string(fr), 0)
	srv := httptest.NewServer(newTree("/coreos.com/network/config", "/apps/a"))
	t.Cleanup(srv.Close)
	src, err := NewV2Server([]string{srv.URL}, nil, "", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	o, log := testOptions(t, f, src)
	_, err = Cutover(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "the follower copies only /coreos.com/network, but bridges serve /") ||
		!strings.Contains(err.Error(), "holds /apps outside the copy") {
		t.Fatalf("cutover: %v; want a refusal naming /apps\n%s", err, log)
	}
	if r := modeRecord(t, f); r != nil {
		t.Fatalf("the mode record was written: %+v", r)
	}
}

func TestCutoverAbortsWhenThePartialCopyShowsUpWhileFenced(t *testing.T) {
	f := newFakeEtcd(testKeys)
	b, _ := json.Marshal(membership.Registration{Name: "b", Mode: ModeFencing, Generation: 9}) // acknowledges at once
	f.put(testKeys.Bridges+"a", string(b), 0)
	fr, _ := json.Marshal(FollowRecord{V2Server: "old", Prefix: "/coreos.com/network", Index: 27})
	var once sync.Once
	f.afterTxn = func() { // the follower records its progress only once the fence is written
		once.Do(func() { f.put(testKeys.Follow, string(fr), 0) })
	}
	srv := httptest.NewServer(newTree("/coreos.com/network/config", "/apps/a"))
	t.Cleanup(srv.Close)
	src, err := NewV2Server([]string{srv.URL}, nil, "", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	o, log := testOptions(t, f, src)
	_, err = Cutover(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "cutover aborted, the v2 server stays the authority") ||
		!strings.Contains(err.Error(), "holds /apps outside the copy") {
		t.Fatalf("cutover: %v; want an abort naming /apps\n%s", err, log)
	}
	if r := modeRecord(t, f); r == nil || r.Mode != ModePassthrough || r.Generation != 2 {
		t.Fatalf("the mode record afterwards: %+v, want passthrough at generation 2", r)
	}
}
