// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"
)

// Member is a bridge as /v2/members lists it.
type Member struct {
	ID         uint64
	Name       string
	ClientURLs []string
}

// Members is the list of the live bridges serving the same key space: v2
// clients that sync their endpoint list move between them, and never to the
// v3 members.
type Members interface {
	// Members returns the bridges known now, in any order; the bridge's
	// own entry may be among them or not. It must not block: it is called
	// on every /v2/members, /v2/machines and /v2/stats request.
	Members() []Member
}

// MemberID is the member ID of a bridge advertising clientURLs: every bridge
// computes the same ID for the same URLs, across restarts.
func MemberID(clientURLs []string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(strings.Join(clientURLs, ",")))
	return h.Sum64()
}

// memberJSON is a member in v2's JSON.
type memberJSON struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
}

func (m Member) json() memberJSON {
	urls := m.ClientURLs
	if urls == nil {
		urls = []string{}
	}
	return memberJSON{ID: formatID(m.ID), Name: m.Name, PeerURLs: []string{}, ClientURLs: urls}
}

func formatID(id uint64) string { return strconv.FormatUint(id, 16) }

// self is the bridge's own entry.
func (s *Server) self() Member {
	return Member{ID: s.id, Name: s.cfg.Name, ClientURLs: s.cfg.AdvertiseURLs}
}

// memberList is every bridge listed, by ascending ID, the bridge itself
// always among them (whatever the registry says, even while etcd v3 is out
// of reach), one entry per ID. The first is the leader the stats name: every
// bridge with the same list names the same one.
func (s *Server) memberList() []Member {
	list := []Member{s.self()}
	if s.cfg.Members != nil {
		for _, m := range s.cfg.Members.Members() {
			if m.ID != s.id {
				list = append(list, m)
			}
		}
	}
	slices.SortStableFunc(list, func(a, b Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return slices.CompactFunc(list, func(a, b Member) bool { return a.ID == b.ID })
}

const membershipRefused = "membership is managed on the etcd v3 cluster behind v2bridge"

func (s *Server) members(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r.Method, "GET", "POST") {
		return
	}
	w.Header().Set("X-Etcd-Cluster-Id", formatID(s.cfg.Store.Meta().ClusterID))
	if r.Method == "POST" {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"message": membershipRefused})
		return
	}
	list := s.memberList()
	out := make([]memberJSON, len(list))
	for i, m := range list {
		out[i] = m.json()
	}
	writeJSON(w, http.StatusOK, map[string][]memberJSON{"members": out})
}

func (s *Server) member(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r.Method, "GET", "DELETE", "PUT") {
		return
	}
	w.Header().Set("X-Etcd-Cluster-Id", formatID(s.cfg.Store.Meta().ClusterID))
	id := mux.Vars(r)["id"]
	list := s.memberList()
	switch {
	case r.Method == "GET" && id == "leader":
		writeJSON(w, http.StatusOK, list[0].json())
	case r.Method == "GET":
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not found"})
	case slices.ContainsFunc(list, func(m Member) bool { return formatID(m.ID) == id }):
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"message": membershipRefused})
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "No such member: " + id})
	}
}

// machines is every listed bridge's client URLs, as v2's plain text.
func (s *Server) machines(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r.Method, "GET", "HEAD") {
		return
	}
	var urls []string
	for _, m := range s.memberList() {
		urls = append(urls, m.ClientURLs...)
	}
	_, _ = fmt.Fprint(w, strings.Join(urls, ", "))
}

// statsSelf is the bridge itself, following the listed leader.
func (s *Server) statsSelf(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r.Method, "GET") {
		return
	}
	leader := s.memberList()[0].ID
	state := "StateFollower"
	if leader == s.id {
		state = "StateLeader"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"name": s.cfg.Name, "id": formatID(s.id), "state": state, "startTime": s.started,
		"leaderInfo": map[string]any{"leader": formatID(leader), "uptime": time.Since(s.started).String(),
			"startTime": s.started},
		"recvAppendRequestCnt": 0, "sendAppendRequestCnt": 0,
	})
}

// statsLeader names the listed leader on every bridge (bridges replicate
// nothing to each other: no followers to report).
func (s *Server) statsLeader(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r.Method, "GET") {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"leader": formatID(s.memberList()[0].ID), "followers": map[string]any{}})
}
