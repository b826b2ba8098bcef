// SPDX-License-Identifier: Apache-2.0

package main

// The boundaries and filters of the code added in the last round (the
// shadow's comparison of writes, the member list, the mirror's reload, the
// follow loop, the connection cap, lease records), each with a bug planted
// that a test catches. RESULTS.md lists those planted but left out, with why.
func init() { mutations = append(mutations, auditMutations...) }

var auditMutations = []Mutation{
	// shadow: the comparison of forwarded writes.
	{
		Name: "shadow-write-at-applied-index-waits", File: "migrate/shadow/writes.go",
		What: "a write at exactly the follower's applied index is not compared, and ages out as dropped",
		Find: "if p.done || p.index > s.w.applied {", Replace: "if p.done || p.index >= s.w.applied {",
		Test: "go test -short -count=1 -run ^TestAWriteAtTheFollowersIndexIsCompared$ ./migrate/shadow/",
	},
	{
		Name: "shadow-write-ttl-one-way", File: "migrate/shadow/writes.go",
		What: "a v3 expiration later than the v2 server's is not a divergence (only an earlier one is)",
		Find: "want.exp.Sub(have.exp).Abs() > s.cfg.TTLTolerance", Replace: "want.exp.Sub(have.exp) > s.cfg.TTLTolerance",
		Test: "go test -short -count=1 -run ^TestAWritesTTLIsComparedInBothDirections$ ./migrate/shadow/",
	},

	// detach: the connection cap.
	{
		Name: "failed-accept-keeps-its-place", File: "bridge/detach/detach.go",
		What:    "a failed Accept (EMFILE) keeps its place under --max-connections, so the bridge stops accepting",
		Find:    "\t\tif err != nil {\n\t\t\tif l.sem != nil {\n\t\t\t\t<-l.sem\n\t\t\t}\n\t\t} else {",
		Replace: "\t\tif err != nil {\n\t\t} else {",
		Test:    "go test -short -count=1 -run ^TestFailedAcceptsGiveBackTheirPlace$ ./bridge/detach/",
	},
	// v3backend: the mirror's reload and rewrites, expired leases' records.
	{
		Name: "mirror-reload-created-index-only-if-unchanged", File: "v3backend/mirror.go",
		What: "a reload shows a key created in a several-event revision, changed while the mirror was invalid, with its revision's createdIndex",
		Find: "\t\t\tif mk.ModRevision == kv.ModRevision {\n\t\t\t\tkv.ModIndex = mk.ModIndex\n\t\t\t}\n" +
			"\t\t\tif mk.CreateRevision == kv.CreateRevision {\n\t\t\t\tkv.CreateIndex = mk.CreateIndex\n\t\t\t}\n\t\t}\n\t\treturn true",
		Replace: "\t\t\tif mk.ModRevision == kv.ModRevision {\n\t\t\t\tkv.ModIndex = mk.ModIndex\n" +
			"\t\t\t\tif mk.CreateRevision == kv.CreateRevision {\n\t\t\t\t\tkv.CreateIndex = mk.CreateIndex\n\t\t\t\t}\n\t\t\t}\n\t\t}\n\t\treturn true",
		Test: "go test -short -count=1 -run ^TestMirrorReloadKeepsEveryKeysIndexes$ ./v3backend/",
	},
	{
		Name: "mirror-rewrite-forgets-created-index", File: "v3backend/mirror.go",
		What: "a key created in a several-event revision, then rewritten, reads with its revision's createdIndex",
		Find: "old.CreateRevision == kv.CreateRevision && kv.CreateIndex == 0 {", Replace: "false {",
		Test: "go test -short -count=1 -run ^TestMirrorReloadKeepsEveryKeysIndexes$ ./v3backend/",
	},
	{
		Name: "expired-lease-record-at-wrong-rev-unit", File: "v3backend/leases.go",
		What: "(make unit) an expired lease's record is looked up at the expiry's revision, where it is gone",
		Find: "b.goneLeaseRecords(ctx, s, gone, rev-1, out)", Replace: "b.goneLeaseRecords(ctx, s, gone, rev, out)",
		Test: "go test -short -count=1 -run ^TestAnExpiredLeasesRecordIsReadAsOfTheRevisionBefore$ ./v3backend/",
	},
	{
		Name: "mirror-ttl-dir-records-never-read", File: "v3backend/mirror.go",
		What: "a GET reads the TTL directory records around its path only when the first key after their prefix is not one",
		Find: "found = strings.HasPrefix(kv.Key, m.ttlDirPrefix)", Replace: "found = !strings.HasPrefix(kv.Key, m.ttlDirPrefix)",
		Test: "go test -short -count=1 -run ^TestGetFromMirrorHidesAnExpiredTTLDirectorysRemains$ ./v3backend/",
	},
	// cutover: the member list's filters and the registrations they read.
	{
		Name: "members-other-serve-prefix-listed", File: "bridge/membership/members.go",
		What: "/v2/members lists bridges of another --serve-prefix, which answer \"Key not found\"",
		Find: "g.DataPrefix != l.cfg.DataPrefix || g.Served() != served ||", Replace: "g.DataPrefix != l.cfg.DataPrefix || served == \"\" ||",
		Test: "go test -short -count=1 -run ^TestMembersListOnlyBridgesOfTheSameKeySpace$ ./migrate/cutover/",
	},
	{
		Name: "members-other-data-prefix-listed", File: "bridge/membership/members.go",
		What: "/v2/members lists bridges of another --data-prefix",
		Find: "g.DataPrefix != l.cfg.DataPrefix || g.Served() != served ||", Replace: "g.Served() != served ||",
		Test: "go test -short -count=1 -run ^TestMembersListOnlyBridgesOfTheSameKeySpace$ ./migrate/cutover/",
	},
	{
		Name: "members-served-not-normalised", File: "bridge/membership/members.go",
		What: "a bridge started with --serve-prefix \"\" does not list those with \"/\" (both: everything)",
		Find: "served := Registration{Prefix: l.cfg.Prefix}.Served()", Replace: "served := l.cfg.Prefix",
		Test: "go test -short -count=1 -run ^TestMembersListOnlyBridgesOfTheSameKeySpace$ ./migrate/cutover/",
	},
	{
		Name: "registrar-omits-serve-prefix", File: "bridge/membership/members.go",
		What: "a v3-mode bridge registers without its --serve-prefix, so it is listed as serving everything",
		Find: "reg.Mode, reg.DataPrefix, reg.Prefix, reg.Static = staticMode, cfg.DataPrefix, cfg.Prefix, true", Replace: "reg.Mode, reg.DataPrefix, reg.Static = staticMode, cfg.DataPrefix, true",
		Test: "go test -short -count=1 -run ^TestMembersListOnlyBridgesOfTheSameKeySpace$ ./migrate/cutover/",
	},
	{
		Name: "agent-omits-serve-prefix", File: "migrate/cutover/agent.go",
		What: "a dual-mode bridge registers without its --serve-prefix, so it is listed as serving everything",
		Find: "reg.DataPrefix, reg.OnlySelf, reg.Prefix = cfg.DataPrefix, cfg.OnlySelf, cfg.Prefix", Replace: "reg.DataPrefix, reg.OnlySelf = cfg.DataPrefix, cfg.OnlySelf",
		Test: "go test -short -count=1 -run ^TestMembersListOnlyBridgesOfTheSameKeySpace$ ./migrate/cutover/",
	},
	// migrate: the follow loop's per-key order.
	{
		Name: "follow-held-event-jumps-its-key", File: "migrate/engine/follow.go",
		What: "migrate --follow starts a held event when any slot frees, while an earlier event on its key is in flight",
		Find: "if held != nil && !pl.blocked(held.Node.Key) {", Replace: "if held != nil {",
		Test: "go test -count=1 -run ^TestFollowAppliesEachKeysEventsInOrder$ ./migrate/engine/",
	},
	{
		Name: "follow-parent-not-held-by-child", File: "migrate/engine/follow.go",
		What: "migrate --follow deletes a directory while a write below it is in flight",
		Find: "if under(k, key) || under(key, k) {", Replace: "if under(key, k) {",
		Test: "go test -count=1 -run ^TestFollowAppliesEachKeysEventsInOrder$ ./migrate/engine/",
	},
	{
		Name: "follow-child-not-held-by-parent", File: "migrate/engine/follow.go",
		What: "migrate --follow writes below a directory while its delete is in flight",
		Find: "if under(k, key) || under(key, k) {", Replace: "if under(k, key) {",
		Test: "go test -count=1 -run ^TestFollowAppliesEachKeysEventsInOrder$ ./migrate/engine/",
	},
	// cmd/bridge and cutover against a real etcd: the registration's lease
	// and what each mode registers and lists (the integration tests build
	// the bridge binary with the bug: make mutate passes the overlay in
	// GOFLAGS).
	{
		Name: "registrar-keeps-no-lease-alive", File: "bridge/membership/members.go",
		What: "a v3-mode bridge keeps alive no lease of its registration, so each lapses and it registers again and again",
		Find: "kept, err := r.cfg.Client.KeepAlive(kctx, r.lease)", Replace: "kept, err := r.cfg.Client.KeepAlive(kctx, 0)",
		Test: "go test -count=1 -run ^TestRegistrarRegistersRenewsAndRevokes$ ./bridge/membership/",
	},
	{
		Name: "registrar-lease-too-long", File: "bridge/membership/registration.go",
		What: "a v3-mode bridge's registration is on a lease ten times its TTL, so a dead bridge stays listed",
		Find: "int64((ttl+time.Second-1)/time.Second)", Replace: "int64(10*(ttl+time.Second-1)/time.Second)",
		Test: "go test -count=1 -run ^TestRegistrationOutlivesManyLeaseTTLs$ ./integration/",
	},
	{
		Name: "cmd-registrar-ttl-not-given", File: "bridge/modes/members.go",
		What:    "--mode-lease-ttl does not reach a v3-mode bridge's registration",
		Find:    "\t\t\tTTL: c.ModeLeaseTTL, RequestTimeout: c.RequestTimeout, Name: c.Name,\n",
		Replace: "\t\t\tRequestTimeout: c.RequestTimeout, Name: c.Name,\n",
		Test:    "go test -count=1 -run ^TestRegistrationOutlivesManyLeaseTTLs$ ./integration/",
	},
	{
		Name: "cmd-member-list-without-serve-prefix", File: "bridge/modes/members.go",
		What:    "a bridge's member list ignores its --serve-prefix",
		Find:    "DataPrefix: layout.DataPrefix, Prefix: c.ServePrefix, RequestTimeout: c.RequestTimeout,",
		Replace: "DataPrefix: layout.DataPrefix, RequestTimeout: c.RequestTimeout,",
		Test:    "go test -count=1 -run ^TestMembersOfTheSameKeySpaceInEveryMode$ ./integration/",
	},
	{
		Name: "cmd-registrar-without-serve-prefix", File: "bridge/modes/members.go",
		What:    "a v3-mode bridge registers without its --serve-prefix",
		Find:    "DataPrefix: layout.DataPrefix, Prefix: c.ServePrefix,\n\t\t\tLogger",
		Replace: "DataPrefix: layout.DataPrefix,\n\t\t\tLogger",
		Test:    "go test -count=1 -run ^TestMembersOfTheSameKeySpaceInEveryMode$ ./integration/",
	},
	{
		Name: "dual-mode-never-hands-over", File: "bridge/modes/dual.go",
		What:    "a dual-mode bridge's auth, member list and agent stay on the control client once its v3 side connects",
		Find:    "\t\t\th.to(s.br.Backend.Conn())\n",
		Replace: "",
		Test:    "go test -count=1 -run ^TestDualModeMovesWithTheSession$/^from_the_v2_server$ ./integration/",
	},
	{
		Name: "cmd-agent-without-serve-prefix", File: "bridge/modes/dual.go",
		What:    "a dual-mode bridge registers without its --serve-prefix",
		Find:    "DataPrefix: cfg.Layout.DataPrefix, Prefix: cfg.ServePrefix,",
		Replace: "DataPrefix: cfg.Layout.DataPrefix,",
		Test:    "go test -count=1 -run ^TestMembersOfTheSameKeySpaceInEveryMode$ ./integration/",
	},

	// The audit: the boundaries and filters the packages changed in the last
	// round rely on, each planted and run against its package's tests.
	{
		Name: "detach-parked-not-counted", File: "bridge/detach/detach.go",
		What: "a parked connection is released when net/http hands it over, so the cap does not count it",
		Find: "if s == http.StateClosed {", Replace: "if s == http.StateClosed || s == http.StateHijacked {",
		Test: "go test -short -count=1 ./bridge/detach/",
	},
	{
		Name: "detach-parks-other-methods", File: "bridge/detach/detach.go",
		What: "a request other than GET is parked",
		Find: "r.Method != http.MethodGet || r.ProtoMajor != 1", Replace: "r.ProtoMajor != 1",
		Test: "go test -short -count=1 ./bridge/detach/",
	},
	{
		Name: "detach-parks-closing-request", File: "bridge/detach/detach.go",
		What: "a request that asked to close its connection is parked and its connection handed back",
		Find: "r.ProtoMinor != 1 || r.Close ||", Replace: "r.ProtoMinor != 1 ||",
		Test: "go test -short -count=1 ./bridge/detach/",
	},
	{
		Name: "detach-parks-http10", File: "bridge/detach/detach.go",
		What: "an HTTP/1.0 request is parked (answered chunked, which it cannot read)",
		Find: "r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.Close", Replace: "r.ProtoMajor != 1 || r.Close",
		Test: "go test -short -count=1 -run ^TestAnHTTP10RequestIsNotParked$ ./bridge/detach/",
	},
	{
		Name: "detach-pipelined-request-lost", File: "bridge/detach/detach.go",
		What: "a request pipelined behind a parked one, read by net/http before the park, is lost",
		Find: "if n := rw.Reader.Buffered(); n > 0 {", Replace: "if n := rw.Reader.Buffered(); n < 0 {",
		Test: "go test -short -count=1 ./bridge/detach/",
	},
	{
		Name: "detach-gone-client-handed-back", File: "bridge/detach/detach.go",
		What: "the connection of a client that left is handed back to net/http instead of closed",
		Find: "gone := p.headLost || p.saw == left || err != nil", Replace: "gone := p.headLost || err != nil",
		Test: "go test -short -count=1 ./bridge/detach/",
	},
	{
		Name: "shadow-unreadable-at-index-taken-for-lag", File: "migrate/shadow/writes.go",
		What: "a write at the follower's index whose v3 node cannot be read ages out as lagging, not dropped",
		Find: "\t\tif p.index > s.w.applied {\n\t\t\ts.finishLagging(p)", Replace: "\t\tif p.index >= s.w.applied {\n\t\t\ts.finishLagging(p)",
		Test: "go test -short -count=1 -run ^TestAnUnreadableV3SideAtTheFollowersIndexDropsTheWrite$ ./migrate/shadow/",
	},
	{
		Name: "shadow-stale-v3-read-judged", File: "migrate/shadow/writes.go",
		What: "a v3 read older than the follower's progress record decides a write (a false divergence)",
		Find: "if idx < uint64(max(s.w.appliedRev, 0))*translate.IndexesPerRevision {", Replace: "if false && idx < uint64(max(s.w.appliedRev, 0))*translate.IndexesPerRevision {",
		Test: "go test -short -count=1 -run ^TestAV3ReadOlderThanTheFollowersRecordDecidesNothing$ ./migrate/shadow/",
	},
	{
		Name: "shadow-change-matches-without-ttl", File: "migrate/shadow/writes.go",
		What: "a follower's change without the write's TTL counts as the write made",
		Find: "return c.Dir == w.dir && c.TTL == w.ttl && (w.dir || c.Sum == w.sum)", Replace: "return c.Dir == w.dir && (w.dir || c.Sum == w.sum)",
		Test: "go test -short -count=1 -run ^TestAFollowersChangeMatchesAWriteOnlyWithItsTTL$ ./migrate/shadow/",
	},
	{
		Name: "shadow-expired-since-divergent", File: "migrate/shadow/writes.go",
		What: "a TTL write whose node expired before the comparison is counted missing",
		Find: "case !have.exists && p.want.ttl && !p.want.exp.IsZero() && p.want.exp.Before(now.Add(s.cfg.TTLTolerance)):", Replace: "case false:",
		Test: "go test -short -count=1 -run ^TestATTLWriteWhoseNodeExpiredSinceMatches$ ./migrate/shadow/",
	},
	{
		Name: "shadow-read-ttl-one-way", File: "migrate/shadow/compare.go",
		What:    "a read's v3 TTL and expiration later than the v2 server's are within the tolerance (only earlier ones count)",
		Find:    "math.Abs(float64(ri-bi)) <= math.Ceil(s.cfg.TTLTolerance.Seconds())\n\tcase \"expiration\":\n\t\tr, rok := d.Ref.(string)\n\t\tb, bok := d.Bridge.(string)\n\t\tif !rok || !bok {\n\t\t\treturn false\n\t\t}\n\t\trt, err1 := time.Parse(time.RFC3339Nano, r)\n\t\tbt, err2 := time.Parse(time.RFC3339Nano, b)\n\t\treturn err1 == nil && err2 == nil && rt.Sub(bt).Abs() <= s.cfg.TTLTolerance",
		Replace: "float64(ri-bi) <= math.Ceil(s.cfg.TTLTolerance.Seconds())\n\tcase \"expiration\":\n\t\tr, rok := d.Ref.(string)\n\t\tb, bok := d.Bridge.(string)\n\t\tif !rok || !bok {\n\t\t\treturn false\n\t\t}\n\t\trt, err1 := time.Parse(time.RFC3339Nano, r)\n\t\tbt, err2 := time.Parse(time.RFC3339Nano, b)\n\t\treturn err1 == nil && err2 == nil && rt.Sub(bt) <= s.cfg.TTLTolerance",
		Test:    "go test -short -count=1 -run ^TestAReadsTTLIsComparedInBothDirections$ ./migrate/shadow/",
	},
	{
		Name: "shadow-pending-bound-off-by-one", File: "migrate/shadow/writes.go",
		What: "one write more than --shadow-max-pending awaits the follower",
		Find: "if s.w.live >= s.cfg.MaxPending {", Replace: "if s.w.live > s.cfg.MaxPending {",
		Test: "go test -short -count=1 ./migrate/shadow/",
	},
	{
		Name: "shadow-early-change-never-moved", File: "migrate/shadow/writes.go",
		What: "a TTL write the follower made before its answer came, the key changed since, is judged by the later value",
		Find: "p.seen, p.moved = true, i < len(rs)-1", Replace: "p.seen, p.moved = true, false",
		Test: "go test -short -count=1 -run ^TestATTLWriteTheFollowerMadeBeforeItsAnswerThenChangedMatches$ ./migrate/shadow/",
	},
	{
		Name: "auth-guest-recursive", File: "bridge/auth/auth.go",
		What: "the guest role is matched recursively (v2 matched it as for a single key)",
		Find: "return ok && g.Permissions.KV.allows(key, false, write)", Replace: "return ok && g.Permissions.KV.allows(key, recursive, write)",
		Test: "go test -short -count=1 ./bridge/auth/",
	},
	{
		Name: "auth-writes-by-read-patterns", File: "bridge/auth/auth.go",
		What: "a write is allowed by a role's read patterns",
		Find: "\tif write {\n\t\tpats = p.Write\n\t}\n", Replace: "\tif write {\n\t\tpats = p.Read\n\t}\n",
		Test: "go test -short -count=1 ./bridge/auth/",
	},
	{
		Name: "auth-guest-is-root", File: "bridge/auth/auth.go",
		What: "a request without credentials holds the root role",
		Find: "return user != nil && slices.Contains(user.Roles, RootName)", Replace: "return user == nil || slices.Contains(user.Roles, RootName)",
		Test: "go test -short -count=1 ./bridge/auth/",
	},
	{
		Name: "auth-nested-key-is-a-user", File: "bridge/auth/auth.go",
		What: "a key below another data prefix's auth data is read as a user or role of this one",
		Find: "ok && n != \"\" && !strings.Contains(n, \"/\")", Replace: "ok && n != \"\"",
		Test: "go test -short -count=1 ./bridge/auth/",
	},
	{
		Name: "auth-certificate-of-the-ca", File: "bridge/auth/checker.go",
		What: "a client certificate's user is named by the last certificate of its chain (the CA), not its own",
		Find: "r.TLS.VerifiedChains[0][0].Subject.CommonName", Replace: "r.TLS.VerifiedChains[0][len(r.TLS.VerifiedChains[0])-1].Subject.CommonName",
		Test: "go test -short -count=1 ./bridge/auth/",
	},
	{
		Name: "auth-store-root-without-root-role", File: "bridge/auth/store.go",
		What: "a stored root user without the root role is read as it is (v2: root always holds root)",
		Find: "if u.User == RootName && !slices.Contains(u.Roles, RootName) {\n\t\t\tu.Roles = append(u.Roles, RootName)", Replace: "if false {\n\t\t\tu.Roles = append(u.Roles, RootName)",
		Test: "go test -count=1 ./bridge/auth/",
	},
	{
		Name: "auth-store-revoke-ungranted", File: "bridge/auth/store.go",
		What: "revoking a role the user does not hold succeeds (v2: 409)",
		Find: "\t\tif i < 0 {\n\t\t\treturn User{}, authErr(http.StatusConflict, \"Revoking ungranted role", Replace: "\t\tif i < -1 {\n\t\t\treturn User{}, authErr(http.StatusConflict, \"Revoking ungranted role",
		Test: "go test -count=1 ./bridge/auth/",
	},
	{
		Name: "auth-store-deletes-root-while-enabled", File: "bridge/auth/store.go",
		What: "root is deleted while auth is enabled (v2: 403)",
		Find: "if name == RootName && snap.st.Enabled {\n\t\t\treturn nil, nil, authErr(http.StatusForbidden, \"Cannot delete root", Replace: "if false {\n\t\t\treturn nil, nil, authErr(http.StatusForbidden, \"Cannot delete root",
		Test: "go test -count=1 ./bridge/auth/",
	},
	{
		Name: "cutover-list-ignores-deletes", File: "bridge/membership/members.go",
		What: "a registration that went (lease expired or revoked) stays in the member list",
		Find: "\t\t\tif ev.Type == clientv3.EventTypeDelete {\n\t\t\t\tdelete(l.regs, id)\n\t\t\t} else {", Replace: "\t\t\tif ev.Type == clientv3.EventTypeDelete {\n\t\t\t} else {",
		Test: "go test -count=1 ./bridge/membership/ ./migrate/cutover/",
	},
	{
		Name: "cutover-registrar-keeps-lost-lease", File: "bridge/membership/members.go",
		What:    "a v3-mode bridge whose lease etcd lost never registers again",
		Find:    "\t\tr.cfg.Logger.Warn(\"member registration in etcd v3: trying again\", zap.Error(err))\n",
		Replace: "\t\tr.cfg.Logger.Warn(\"member registration in etcd v3: trying again\", zap.Error(err))\n\t\t<-ctx.Done()\n",
		Test:    "go test -count=1 ./bridge/membership/ ./migrate/cutover/",
	},
	{
		Name: "cutover-registrar-never-revokes", File: "bridge/membership/members.go",
		What: "a v3-mode bridge that stops leaves its registration to expire",
		Find: "\tdefer r.revoke()\n", Replace: "",
		Test: "go test -count=1 ./bridge/membership/ ./migrate/cutover/",
	},
	{
		Name: "migrate-follow-hidden-twice", File: "migrate/engine/follow.go",
		What: "a hidden node below a followed root is applied by the root's watch too",
		Find: "\t\tif hiddenBelow(root, k) {\n\t\t\treturn nil\n\t\t}\n", Replace: "",
		Test: "go test -short -count=1 ./migrate/engine/",
	},
	{
		Name: "migrate-follow-rereads-event", File: "migrate/engine/follow.go",
		What: "a stream watch is made again at the index of the event it got, not after it",
		Find: "\t\t\tnext = idx + 1\n", Replace: "\t\t\tnext = idx\n",
		Test: "go test -short -count=1 ./migrate/engine/",
	},
	{
		Name: "migrate-follow-limit-off-by-one", File: "migrate/engine/follow.go",
		What: "one event more than the limit is applied at once",
		Find: "if len(p.running) >= p.limit ||", Replace: "if len(p.running) > p.limit ||",
		Test: "go test -short -count=1 ./migrate/engine/",
	},
	{
		Name: "v3backend-mirror-resumes-across-a-gap", File: "v3backend/mirror.go",
		What: "a mirror behind the feed's start resumes, missing the revisions between",
		Find: "if m.rev == 0 || m.rev != from-1 {", Replace: "if m.rev == 0 || m.rev > from-1 {",
		Test: "go test -short -count=1 ./v3backend/",
	},
	{
		Name: "v3backend-mirror-loads-one-page", File: "v3backend/mirror.go",
		What: "the mirror loads only the first page of the key space",
		Find: "if !resp.More || len(resp.Kvs) == 0 {", Replace: "if true {",
		Test: "go test -count=1 -run ^TestMirrorLoadsAKeySpaceOfManyPages$ ./v3backend/",
	},
	{
		Name: "v3backend-mirror-dir-index-as-file", File: "v3backend/mirror.go",
		What: "a directory made in a revision of several events reads with the revision's index",
		Find: "\t\t\tidx[m.layout.MarkerKey(p)] = i\n\t\t} else {", Replace: "\t\t\tidx[m.layout.DataKey(p)] = i\n\t\t} else {",
		Test: "go test -short -count=1 ./v3backend/",
	},
	{
		Name: "v3backend-mirror-wait-one-too-many", File: "v3backend/mirror.go",
		What: "a read waits for the mirror to pass the revision it needs, not reach it",
		Find: "ok, ch := m.valid && m.rev >= rev, m.changed", Replace: "ok, ch := m.valid && m.rev > rev, m.changed",
		Test: "go test -short -count=1 -run ^TestMirrorServesAReadThatNeedsItsOwnRevision$ ./v3backend/",
	},
	{
		Name: "v3backend-native-lease-trusted-forever", File: "v3backend/leases.go",
		What: "a v3 client's lease expiration, which keep-alives move, is cached for good",
		Find: "if !ok || (!e.fixed && time.Since(e.fetched) > nativeLeaseTrust) {", Replace: "if !ok {",
		Test: "go test -short -count=1 -run ^TestAV3ClientsLeaseIsAskedAgainAfterABriefTrust$ ./v3backend/",
	},
}
