// SPDX-License-Identifier: Apache-2.0

package main

// The boundaries and filters of a bridge serving some subtrees of a shared
// cluster (--serve-prefix): what it watches, decodes and mirrors, how its
// watches' revisions are merged, what it refuses.
func init() { mutations = append(mutations, scopeMutations...) }

var scopeMutations = []Mutation{
	{
		Name: "scope-misses-its-journal-records", File: "translate/scope.go",
		What: "a bridge serving subtrees does not watch their journal records (decodes bridges' writes by rule)",
		Find: "subtree(l.TTLDirKey(p)), subtree(l.RecordKey(p)))", Replace: "subtree(l.TTLDirKey(p)))",
		Test: "go test -count=1 -run ^TestScopedAndWholeTreeBridgesShareTheData$ ./integration/",
	},
	{
		Name: "scope-mirrors-other-tenants-leases", File: "translate/layout.go",
		What: "a bridge serving subtrees mirrors every tenant's lease records",
		Find: "return !l.Scoped() // other tenants' too", Replace: "return true // other tenants' too",
		Test: "go test -short -count=1 ./translate/",
	},
	{
		Name: "scope-expirer-idle", File: "v3backend/expiry.go",
		What: "a bridge serving subtrees revokes no lease: its keys go at etcd's expiry, a second late",
		Find: "return b.dueServedLeases(s, now)", Replace: "return nil",
		Test: "go test -count=1 -run ^TestSharedLeasesKeepEveryKeysExpiry$ ./integration/",
	},
	{
		Name: "journal-records-kept", File: "translate/write.go",
		What: "journal records go on no lease: one is kept for every path ever written",
		Find: "Value: b, Lease: p.journalLease})", Replace: "Value: b})",
		Test: "go test -short -count=1 ./translate/",
	},
	{
		Name: "feed-resolves-journal-leases", File: "v3backend/feed.go",
		What: "the feed looks up the lease of every leased key of a revision, journal records' too (round trips per write)",
		Find: "return data || marker", Replace: "return data || marker || kv.Lease != 0",
		Test: "go test -count=1 -run ^TestDecodingABridgeWriteLooksUpNoJournalLease$ ./v3backend/",
	},
	{
		Name: "scope-serves-siblings", File: "translate/scope.go",
		What: "a served /coreos.com/network also serves /coreos.com/network-backup (a plain string prefix)",
		Find: "return dir == \"/\" || p == dir || strings.HasPrefix(p, dir+\"/\")", Replace: "return dir == \"/\" || strings.HasPrefix(p, dir)",
		Test: "go test -short -count=1 ./translate/ ./v2api/ ./migrate/cutover/",
	},
	{
		Name: "scope-decodes-other-tenants", File: "translate/events.go",
		What: "a v3 change outside the served subtrees reaches its v2 watchers (as an event of the revision)",
		Find: "underAny(p, expiredDirs) || !l.Serves(p) {", Replace: "underAny(p, expiredDirs) {",
		Test: "go test -short -count=1 ./translate/",
	},
	{
		Name: "scope-record-of-other-subtree-forged", File: "translate/events.go",
		What: "another subtree's journal record is counted as forged (and logged) by a bridge serving this one",
		Find: "case j.DataPrefix != l.DataPrefix || !l.Serves(j.Node.Key):", Replace: "case j.DataPrefix != l.DataPrefix:",
		Test: "go test -short -count=1 ./translate/",
	},
	{
		Name: "scope-binary-value-replaced", File: "translate/write.go",
		What: "a v2 set replaces a value that is not valid UTF-8 (a v3 client's protobuf) with what JSON showed of it",
		Find: "if err == nil && !r.Refresh && s.File != nil && !utf8.Valid(s.File.Value) {", Replace: "if err == nil && !r.Refresh && s.File != nil && utf8.Valid(nil) && false {",
		Test: "go test -short -count=1 ./translate/",
	},
	{
		Name: "merge-hands-on-incomplete-revisions", File: "v3backend/merge.go",
		What: "a revision is handed on before every range's watch has shown it (half a write decoded)",
		Find: "if rev < 0 || rev > m.complete() {", Replace: "if rev < 0 {",
		Test: "go test -short -count=1 ./v3backend/",
	},
	{
		Name: "foreign-never-found", File: "v3backend/foreign.go",
		What: "a bridge serving / over a Kubernetes registry finds no keys no v2 client wrote, and starts",
		Find: "*out = append(*out, ForeignDir{Path: p, Keys: n.Count})", Replace: "_ = n.Count",
		Test: "go test -count=1 -run ^TestBridgeServingEverythingRefusesAnotherTenantsCluster$ ./integration/",
	},
	{
		Name: "foreign-refused-when-asked", File: "bridge/modes/v3.go",
		What: "a bridge asked for --serve-prefix / by name refuses to start anyway",
		Find: "if !cfg.ServePrefixSet {", Replace: "if true {",
		Test: "go test -count=1 -run ^TestBridgeServingEverythingRefusesAnotherTenantsCluster$ ./integration/",
	},
}
