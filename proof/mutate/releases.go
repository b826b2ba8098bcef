// SPDX-License-Identifier: Apache-2.0

package main

// The etcd releases the bridge serves from, the liveness of what follows
// etcd beside the hub, TTLs on v2's clock and tenants' auth apart.
func init() { mutations = append(mutations, releaseMutations...) }

var releaseMutations = []Mutation{
	{
		Name: "progress-bug-ignored", File: "v3backend/version.go",
		What: "a member of etcd 3.4.23 is asked for watch progress, whose early answers skip events",
		Find: "return ok && v[2] < fixed", Replace: "return ok && v[2] < fixed && false",
		Test: "go test -short -count=1 -run ^(TestReleaseProgressBug|TestProgressBugWorkaround)$ ./v3backend/",
	},
	{
		Name: "old-release-quorum-by-member-list", File: "v3backend/version.go",
		What: "a member of etcd 3.4, which answers its member list from memory, is checked by it: cut off, it looks quorate",
		Find: "b.listsFromMemory.Store(ep, v.less(release{3, 5, 0}))", Replace: "b.listsFromMemory.Store(ep, false)",
		Test: "go test -short -count=1 -run ^TestAnOldMemberCutOffHasNoQuorumElsewhere$ ./v3backend/",
	},
	{
		Name: "expired-node-served", File: "translate/expiry.go",
		What: "a node whose expiration passed is still read, listed and found by a write",
		Find: "return ok && !exp.After(now)", Replace: "return ok && !exp.After(now) && false",
		Test: "go test -short -count=1 ./translate/",
	},
	{
		Name: "auth-waits-while-lost", File: "bridge/auth/store.go",
		What: "a request waits for auth data while the backend is known lost, then fails late",
		Find: "\t\t\tif !up {\n\t\t\t\treturn nil, errDown", Replace: "\t\t\tif !up && false {\n\t\t\t\treturn nil, errDown",
		Test: "go test -count=1 -run ^TestStoreOnALostSessionAnswersAtOnce$ ./bridge/auth/",
	},
	{
		Name: "auth-watch-stream-reused", File: "bridge/auth/store.go",
		What: "every attempt's watch shares one stream, which stays on a silent member once a watch there was not created",
		Find: "\"auth-\"+strconv.Itoa(attempt)", Replace: "\"auth\"+strconv.Itoa(0*attempt)",
		Test: "go test -count=1 -run ^TestStoreWatchLeavesASilentMember$ ./bridge/auth/",
	},
	{
		Name: "tenants-share-auth", File: "bridge/auth/auth.go",
		What: "every bridge of a data prefix shares one auth key space, whatever it serves",
		Find: "if all && dataPrefix == \"\" {", Replace: "if dataPrefix == \"\" {",
		Test: "go test -short -count=1 ./bridge/auth/",
	},
}
