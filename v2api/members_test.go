// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeMembers is a registry's list, as given.
type fakeMembers []Member

func (f fakeMembers) Members() []Member { return f }

func TestMemberIDIsTheHashOfTheAdvertisedURLs(t *testing.T) {
	// FNV-1a, 64 bits, of the URLs joined by commas (the value computed
	// independently): the same URLs give the same ID on every bridge and
	// across restarts.
	if got, want := MemberID([]string{"http://a:2379", "http://b:2379"}), uint64(0x46131e3b24209ab0); got != want {
		t.Fatalf("MemberID = %x, want %x", got, want)
	}
	if MemberID([]string{"http://a:2379"}) == MemberID([]string{"http://b:2379"}) {
		t.Fatal("different URLs, same ID")
	}
}

// statsSelf is /v2/stats/self as v2 clients read it.
type statsSelf struct {
	Name       string `json:"name"`
	ID         string `json:"id"`
	State      string `json:"state"`
	StartTime  string `json:"startTime"`
	LeaderInfo struct {
		Leader    string `json:"leader"`
		Uptime    string `json:"uptime"`
		StartTime string `json:"startTime"`
	} `json:"leaderInfo"`
	RecvAppendRequestCnt *uint64 `json:"recvAppendRequestCnt"`
	SendAppendRequestCnt *uint64 `json:"sendAppendRequestCnt"`
}

func decodeStatsSelf(t *testing.T, s *Server) statsSelf {
	t.Helper()
	w := serve(s, "GET", "/v2/stats/self", "")
	if w.Code != 200 {
		t.Fatalf("stats/self: status %d", w.Code)
	}
	var raw map[string]any
	decodeJSON(t, w, &raw)
	var keys []string
	for k := range raw {
		keys = append(keys, k)
	}
	if len(raw) != 7 {
		t.Fatalf("stats/self fields %v, want name id state startTime leaderInfo recvAppendRequestCnt sendAppendRequestCnt", keys)
	}
	var got statsSelf
	dec := json.NewDecoder(strings.NewReader(w.Body.String()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	start, _ := json.Marshal(s.started)
	if got.StartTime != strings.Trim(string(start), `"`) || got.LeaderInfo.StartTime != got.StartTime {
		t.Fatalf("stats/self start times %q, %q, want %s", got.StartTime, got.LeaderInfo.StartTime, start)
	}
	if up, err := time.ParseDuration(got.LeaderInfo.Uptime); err != nil || up < 0 || up > time.Since(s.started) {
		t.Fatalf("stats/self uptime %q: %v", got.LeaderInfo.Uptime, err)
	}
	if got.RecvAppendRequestCnt == nil || *got.RecvAppendRequestCnt != 0 ||
		got.SendAppendRequestCnt == nil || *got.SendAppendRequestCnt != 0 {
		t.Fatalf("stats/self append counts %v %v, want 0 and 0", got.RecvAppendRequestCnt, got.SendAppendRequestCnt)
	}
	return got
}

// TestMembersListEveryBridge: with a registry, /v2/members lists every
// bridge by ascending ID, the bridge itself once (its own registration, or
// a stale one under its ID, does not repeat it); the lowest ID is the
// leader every stats answer names.
func TestMembersListEveryBridge(t *testing.T) {
	selfID := MemberID(testURLs)
	low := Member{ID: 1, Name: "bridge-0", ClientURLs: []string{"http://10.0.0.9:2379"}}
	high := Member{ID: math.MaxUint64, Name: "bridge-2", ClientURLs: []string{"https://10.0.0.3:2379", "https://b3:2379"}}
	bare := Member{ID: selfID + 1, Name: "bare"} // registered without URLs
	reg := fakeMembers{high, {ID: selfID, Name: "stale name", ClientURLs: []string{"http://old:1"}}, low, bare, low}
	s := newTestServer(t, &fakeStore{storeMeta: Meta{ClusterID: 0xc1}}, func(c *Config) { c.Members = reg })
	selfJSON := map[string]any{"id": formatID(selfID), "name": "bridge-1", "peerURLs": []any{},
		"clientURLs": []any{testURLs[0], testURLs[1]}}
	lowJSON := map[string]any{"id": "1", "name": "bridge-0", "peerURLs": []any{},
		"clientURLs": []any{"http://10.0.0.9:2379"}}
	bareJSON := map[string]any{"id": formatID(selfID + 1), "name": "bare", "peerURLs": []any{}, "clientURLs": []any{}}
	highJSON := map[string]any{"id": "ffffffffffffffff", "name": "bridge-2", "peerURLs": []any{},
		"clientURLs": []any{"https://10.0.0.3:2379", "https://b3:2379"}}

	w := serve(s, "GET", "/v2/members", "")
	var got map[string]any
	decodeJSON(t, w, &got)
	if want := map[string]any{"members": []any{lowJSON, selfJSON, bareJSON, highJSON}}; w.Code != 200 || !reflect.DeepEqual(got, want) {
		t.Fatalf("members: %d %v\nwant %v", w.Code, got, want)
	}
	if c := w.Header().Get("X-Etcd-Cluster-Id"); c != "c1" {
		t.Fatalf("X-Etcd-Cluster-Id %q, want c1", c)
	}

	w = serve(s, "GET", "/v2/machines", "")
	if want := "http://10.0.0.9:2379, " + testURLs[0] + ", " + testURLs[1] + ", https://10.0.0.3:2379, https://b3:2379"; w.Code != 200 || w.Body.String() != want {
		t.Fatalf("machines: %d %q, want %q", w.Code, w.Body.String(), want)
	}

	var leader map[string]any
	decodeJSON(t, serve(s, "GET", "/v2/members/leader", ""), &leader)
	if !reflect.DeepEqual(leader, lowJSON) {
		t.Fatalf("members/leader %v, want %v", leader, lowJSON)
	}

	st := decodeStatsSelf(t, s)
	if st.Name != "bridge-1" || st.ID != formatID(selfID) || st.State != "StateFollower" || st.LeaderInfo.Leader != "1" {
		t.Fatalf("stats/self %+v: want bridge-1, %x, a follower of 1", st, selfID)
	}

	var sl map[string]any
	decodeJSON(t, serve(s, "GET", "/v2/stats/leader", ""), &sl)
	if want := map[string]any{"leader": "1", "followers": map[string]any{}}; !reflect.DeepEqual(sl, want) {
		t.Fatalf("stats/leader %v, want %v", sl, want)
	}

	// Changing a listed bridge is refused as changing the bridge itself
	// is; an unlisted one is unknown.
	for _, c := range []struct {
		method, id string
		status     int
		message    string
	}{
		{"DELETE", "1", 405, membershipRefused},
		{"PUT", "ffffffffffffffff", 405, membershipRefused},
		{"DELETE", formatID(selfID), 405, membershipRefused},
		{"DELETE", "2", 404, "No such member: 2"},
	} {
		w := serve(s, c.method, "/v2/members/"+c.id, "")
		var m map[string]string
		decodeJSON(t, w, &m)
		if w.Code != c.status || !reflect.DeepEqual(m, map[string]string{"message": c.message}) {
			t.Fatalf("%s /v2/members/%s: %d %v, want %d %q", c.method, c.id, w.Code, m, c.status, c.message)
		}
	}
}

// TestMembersWithoutRegistryIsTheBridgeAlone: no registry (the
// --advertise-only-self answer), or an empty one, lists the bridge alone,
// and it leads.
func TestMembersWithoutRegistryIsTheBridgeAlone(t *testing.T) {
	for name, reg := range map[string]Members{"none": nil, "empty": fakeMembers{}} {
		t.Run(name, func(t *testing.T) {
			s := newTestServer(t, &fakeStore{}, func(c *Config) { c.Members = reg })
			id := formatID(MemberID(testURLs))
			self := map[string]any{"id": id, "name": "bridge-1", "peerURLs": []any{},
				"clientURLs": []any{testURLs[0], testURLs[1]}}
			var got map[string]any
			decodeJSON(t, serve(s, "GET", "/v2/members", ""), &got)
			if want := map[string]any{"members": []any{self}}; !reflect.DeepEqual(got, want) {
				t.Fatalf("members %v, want %v", got, want)
			}
			if got := serve(s, "GET", "/v2/machines", "").Body.String(); got != testURLs[0]+", "+testURLs[1] {
				t.Fatalf("machines %q", got)
			}
			st := decodeStatsSelf(t, s)
			if st.Name != "bridge-1" || st.ID != id || st.State != "StateLeader" || st.LeaderInfo.Leader != id {
				t.Fatalf("stats/self %+v: want the bridge leading itself", st)
			}
			var sl map[string]any
			decodeJSON(t, serve(s, "GET", "/v2/stats/leader", ""), &sl)
			if want := map[string]any{"leader": id, "followers": map[string]any{}}; !reflect.DeepEqual(sl, want) {
				t.Fatalf("stats/leader %v, want %v", sl, want)
			}
		})
	}
}
