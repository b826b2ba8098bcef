// SPDX-License-Identifier: Apache-2.0

package main

// Mutation is one plausible bug: Find (which must occur exactly once in
// File) replaced by Replace. Test is the narrowest go test command that
// should catch it.
type Mutation struct {
	Name, File, What string
	Find, Replace    string
	Test             string
}

// translateTests are translate's unit tests, all of them: new tests of its
// rules catch what no named one does yet.
const translateTests = "go test -short -count=1 ./translate/"

var mutations = []Mutation{
	// translate: what v2 means.
	{
		Name: "ttl-clamp-removed", File: "translate/write.go",
		What: "ttl=0 is sent to etcd as a 0 s lease instead of its 1 s minimum",
		Find: "\t\tif p.TTL < 1 {\n\t\t\tp.TTL = 1 // v2's ttl=0 expires at once; v3 rounds to its minimum lease\n\t\t}\n",
		Test: translateTests,
	},
	{
		Name: "delete-dir-not-empty-without-recursive", File: "translate/write.go",
		What: "dir=true deletes a non-empty directory without recursive (no error 108)",
		Find: "if s.hasChildren() && !r.Recursive {", Replace: "if s.hasChildren() && !dir {",
		Test: translateTests,
	},
	{
		Name: "create-over-directory", File: "translate/write.go",
		What: "prevExist=false over an existing directory creates instead of error 105",
		Find: "\t\tif s.exists() {\n\t\t\treturn NewError(EcodeNodeExist", Replace: "\t\tif s.fileExists() {\n\t\t\treturn NewError(EcodeNodeExist",
		Test: translateTests,
	},
	{
		Name: "cas-prev-index-loose", File: "translate/write.go",
		What: "compare-and-swap accepts a prevIndex older than the node's",
		Find: "Revision(prevIndex) == kv.ModRevision", Replace: "Revision(prevIndex) <= kv.ModRevision",
		Test: translateTests,
	},
	{
		Name: "delete-drops-sequence-keys", File: "translate/write.go",
		What:    "a directory delete removes its in-order sequence key, so a late POST's guard passes again",
		Find:    "\t\tOp{Type: OpDelete, Key: mc, End: PrefixEnd(mc)},\n\t)",
		Replace: "\t\tOp{Type: OpDelete, Key: mc, End: PrefixEnd(mc)},\n\t\tOp{Type: OpDelete, Key: l.SeqKey(s.Path)},\n\t)",
		Test:    translateTests,
	},
	{
		Name: "failed-compare-answered-from-copy", File: "v3backend/request.go",
		What: "a failed compare is answered from the bridge's copy without a linearizable read",
		Find: "\t\t\tif present == 0 {\n", Replace: "\t\t\tif present == 0 && verr.Code != translate.EcodeTestFailed {\n",
		Test: "go test -count=1 -run ^TestACompareOnAPassedIndexIsAnsweredFromThePresent$ ./v3backend/",
	},
	{
		Name: "miss-error-from-a-moved-copy", File: "v3backend/request.go",
		What: "a GET that found nothing names the copy's newer revision, where the key may exist",
		Find: "if snap == nil || snap.Rev != rev {", Replace: "if snap == nil {",
		Test: "go test -count=1 -run ^TestAMissNamesTheRevisionItsReadSaw$ ./v3backend/",
	},
	{
		Name: "delete-drops-prev-node", File: "translate/write.go",
		What: "a delete's answer and event lose prevNode",
		Find: "p.event = Event{Action: action, PrevNode: prev,", Replace: "p.event = Event{Action: action,",
		Test: "go test -short -count=1 -run ^TestEveryWriteDecodesToItsAnswer$ ./translate/",
	},
	{
		Name: "update-loses-created-index", File: "translate/write.go",
		What: "prevExist=true answers with the update's index as createdIndex",
		Find: "\tp.event.Node.CreatedIndex = p.event.PrevNode.CreatedIndex\n",
		Test: "go test -short -count=1 -run ^TestUpdateKeepsTheNodesCreatedIndex$ ./translate/",
	},
	{
		Name: "event-index-off-by-one", File: "translate/index.go",
		What: "the events of a revision are numbered one lower than they should be",
		Find: "back := n - 1 - pos", Replace: "back := n - pos",
		Test: "go test -short -count=1 -run ^TestEveryWriteDecodesToItsAnswer$ ./translate/",
	},
	{
		Name: "revision-of-index-off-by-one", File: "translate/index.go",
		What:    "an event's index is taken for the revision before its own",
		Find:    "return int64(index/IndexesPerRevision) + int64(min(index%IndexesPerRevision, 1))",
		Replace: "return int64(index / IndexesPerRevision)",
		Test:    "go test -short -count=1 -run ^TestIndexesNumberEventsWithinTheirRevision$ ./translate/",
	},
	{
		Name: "refresh-without-ttl-accepted", File: "translate/request.go",
		What: "refresh=true without a ttl is accepted (no error 212)",
		Find: "\t\t\tif r.TTL == nil {\n\t\t\t\treturn nil, NewError(EcodeRefreshTTLRequired, \"No TTL value set\", 0)\n\t\t\t}\n",
		Test: "go test -short -count=1 -run ^TestParseRequest$ ./translate/",
	},
	{
		Name: "recursive-watch-sees-hidden", File: "translate/events.go",
		What: "a live recursive watch is told of hidden nodes below it",
		Find: "strings.HasPrefix(k, key+\"/\")) && !isHiddenBelow(key, k) {", Replace: "strings.HasPrefix(k, key+\"/\")) {",
		Test: "go test -short -count=1 -run ^TestWatchMatchesPastAndLiveEventsByDifferentRules$ ./translate/",
	},

	// v3backend/hub: the ring, the watchers, the replays.
	{
		Name: "ring-from-off-by-one", File: "v3backend/hub/ring.go",
		What: "a re-watch from the ring skips the event at its waitIndex",
		Find: "return r.at(i).Index() >= index", Replace: "return r.at(i).Index() > index",
		Test: "go test -short -count=1 -run ^TestWaitIndexInRingIsAnsweredFromMemory$ ./v3backend/hub/",
	},
	{
		Name: "watcher-wants-off-by-one", File: "v3backend/hub/watcher.go",
		What: "a watcher does not want the event at its waitIndex",
		Find: "return ev.Index() >= w.next &&", Replace: "return ev.Index() > w.next &&",
		Test: "go test -short -count=1 -run ^TestWaitIndexInRingIsAnsweredFromMemory$ ./v3backend/hub/",
	},
	{
		Name: "stream-next-not-advanced", File: "v3backend/hub/hub.go",
		What: "a stream watcher's next index stays at the event it got",
		Find: "\t\tw.next = ev.Index() + 1\n", Replace: "\t\tw.next = ev.Index()\n",
		Test: "go test -short -count=1 -run ^TestWalkerFarBehindPacesTheReplayAndIsAnsweredFromMemory$ ./v3backend/hub/",
	},
	{
		Name: "floor-not-raised", File: "v3backend/hub/hub.go",
		What: "the ring's floor stays put when it evicts an event (no 401 for a waitIndex it lost)",
		Find: "\t\t\th.floor = old.Index()\n", Replace: "\t\t\t_ = old\n",
		Test: "go test -short -count=1 -run ^TestWaitIndexBeyondTheHorizonGets401BeforeRegistering$ ./v3backend/hub/",
	},
	{
		Name: "slow-reader-not-cut-off", File: "v3backend/hub/hub.go",
		What: "a stream watcher whose buffer is full silently misses the event",
		Find: "\t\tw.finish(\"fell behind\")\n\t\treturn false\n", Replace: "\t\treturn true\n",
		Test: "go test -short -count=1 -run ^TestSlowStreamReaderIsCutOffWithoutBlockingOthers$ ./v3backend/hub/",
	},
	{
		Name: "loss-leaves-watchers", File: "v3backend/hub/hub.go",
		What: "the end of the shared feed leaves its watchers waiting",
		Find: "\t\th.endAllLocked(\"backend watch ended\")\n",
		Test: "go test -short -count=1 -run ^TestLossEndsEveryWatcher$ ./v3backend/hub/",
	},
	{
		Name: "root-watchers-not-candidates", File: "v3backend/hub/hub.go",
		What: "a recursive watch on / is not told of events below it",
		Find: "\tif k != \"/\" {\n\t\tadd(\"/\")\n\t}\n",
		Test: "go test -short -count=1 -run ^TestWatchGetsTheFirstMatchingEvent$ ./v3backend/hub/",
	},
	{
		Name: "keeper-lo-off-by-one", File: "v3backend/hub/keeper.go",
		What: "a replay's memory claims the event it just dropped",
		Find: "k.raise(k.evs[over-1].Index() + 1)", Replace: "k.raise(k.evs[over-1].Index())",
		Test: "go test -short -count=1 -run ^TestKeeperCoversOnlyWhatItKeptForTheKey$ ./v3backend/hub/",
	},
	{
		Name: "replay-not-paced", File: "v3backend/hub/replay.go",
		What: "a replay reads on without bound ahead of its walkers",
		Find: "if ahead >= r.kept.max || (r.paused && ahead > r.kept.max/2) {", Replace: "if ahead >= r.kept.max*1000 {",
		Test: "go test -short -count=1 -run ^TestWalkerFarBehindPacesTheReplayAndIsAnsweredFromMemory$ ./v3backend/hub/",
	},

	// auth: v2's users, roles and their checks.
	{
		Name: "unknown-user-as-guest", File: "bridge/auth/checker.go",
		What:    "credentials naming no user are served as the guest instead of refused",
		Find:    "\tu, ok := st.Users[name]\n\tif !ok {\n\t\treturn nil, Deny, \"deny\"\n",
		Replace: "\tu, ok := st.Users[name]\n\tif !ok {\n\t\treturn nil, Allow, \"\"\n",
		Test:    "go test -short -count=1 ./bridge/auth/",
	},
	{
		Name: "cached-credential-outlives-its-hash", File: "bridge/auth/checker.go",
		What: "a verified credential stays good after the user's password changed",
		Find: "if cached && subtle.ConstantTimeCompare([]byte(verified), []byte(hash)) == 1 {", Replace: "if cached && subtle.ConstantTimeCompare([]byte(verified), []byte(verified)) == 1 {",
		Test: "go test -short -count=1 ./bridge/auth/",
	},
	{
		Name: "wrong-passwords-never-held-off", File: "bridge/auth/checker.go",
		What: "a run of wrong passwords is never held off",
		Find: "\tif held {\n", Replace: "\tif held && hash == \"\" {\n",
		Test: "go test -short -count=1 ./bridge/auth/",
	},
	{
		Name: "recursive-on-an-exact-key", File: "bridge/auth/auth.go",
		What: "an exact-key permission grants a recursive read or watch of everything below the key",
		Find: "} else if !recursive && key == pat {", Replace: "} else if key == pat {",
		Test: "go test -short -count=1 ./bridge/auth/",
	},
	{
		Name: "replace-forgets-learned-hash", File: "bridge/auth/store.go",
		What: "migrate's copy puts a password learned meanwhile back to unknown",
		Find: "\t\t\tif u.Password == \"\" {\n\t\t\t\tu.Password = snap.st.Users[name].Password\n\t\t\t}\n",
		Test: "go test -count=1 -run ^TestStoreReplaceLearn$ ./bridge/auth/",
	},
	{
		Name: "watch-unchecked", File: "v2api/auth.go",
		What: "a watch is served without checking the user may read what it watches",
		Find: "if kr.err == nil && !s.checkKeys(w, r, kr) {", Replace: "if kr.err == nil && !kr.req.IsWatch() && !s.checkKeys(w, r, kr) {",
		Test: "go test -short -count=1 ./v2api/",
	},
	{
		Name: "post-checked-as-read", File: "v2api/auth.go",
		What: "an in-order POST needs only read permission",
		Find: "kr.req.Recursive, r.Method != \"GET\" && r.Method != \"HEAD\")", Replace: "kr.req.Recursive, r.Method != \"GET\" && r.Method != \"HEAD\" && r.Method != \"POST\")",
		Test: "go test -short -count=1 ./v2api/",
	},
	{
		Name: "auth-writes-not-fenced", File: "migrate/cutover/switch.go",
		What: "changes to users and roles go through while the cutover is fenced",
		Find: "\tif authAPI && r.Method != http.MethodGet && r.Method != http.MethodHead {", Replace: "\tif false {",
		Test: "go test -short -count=1 ./migrate/cutover/",
	},
	// v3backend: the mirror, the feeds, leases, the session.
	{
		Name: "mirror-ignores-deletes", File: "v3backend/mirror.go",
		What:    "the mirror does not apply deletes",
		Find:    "\t\t\tif old, ok := m.kvs.Delete(&translate.KV{Key: e.KV.Key}); ok {\n",
		Replace: "\t\t\tif old, ok := m.kvs.Get(&translate.KV{Key: e.KV.Key}); ok {\n",
		Test:    "go test -short -count=1 ./v3backend/",
	},
	{
		Name: "mirror-range-read-first-only", File: "v3backend/mirror.go",
		What: "a range read from the mirror stops after the first key",
		Find: "\t\t\treturn !first\n", Replace: "\t\t\treturn first\n",
		Test: "go test -short -count=1 ./v3backend/",
	},
	{
		Name: "mirror-keeps-revision-index", File: "v3backend/mirror.go",
		What: "a key written in a revision of several events reads with the revision's index, not its event's",
		Find: "\t\t\tkv.ModIndex = i\n",
		Test: "go test -short -count=1 ./v3backend/",
	},
	{
		Name: "mirror-reload-forgets-indexes", File: "v3backend/mirror.go",
		What: "a reload of the mirror shows keys of a several-event revision with the revision's index",
		Find: "\tm.keepIndexes(t)\n",
		Test: "go test -count=1 -run ^TestMirrorReloadKeepsEventIndexes$ ./v3backend/",
	},
	{
		Name: "backend-read-forgets-indexes", File: "v3backend/request.go",
		What: "a read the mirror cannot answer shows keys of a several-event revision with the revision's index",
		Find: "\tb.fillIndexes(ctx, lists)\n\treturn lists, rev, nil\n", Replace: "\treturn lists, rev, nil\n",
		Test: "go test -count=1 -run ^TestABackendReadShowsTheMirrorsEventIndexes$ ./v3backend/",
	},
	{
		Name: "history-feed-without-prevkv", File: "v3backend/feed.go",
		What: "the history (replay) feed is opened without previous values",
		Find: "\t\topts = append(opts, clientv3.WithPrevKV())\n",
		Test: "go test -count=1 -run ^TestReplayedHistoryShowsPreviousNodesAndExpirations$ ./v3backend/",
	},
	{
		Name: "shared-feed-without-prev", File: "v3backend/feed.go",
		What: "the shared feed's events get no previous values from the mirror",
		Find: "\tif f.shared {\n\t\tf.b.mirror.fillPrev(v3evs)\n\t}\n",
		Test: "go test -count=1 -run ^TestWritesDecidedOnAReadOfTheMemberKeepTheBatchedIndexes$ ./v3backend/",
	},
	{
		Name: "expired-lease-record-at-wrong-rev", File: "v3backend/leases.go",
		What: "an expired lease's record is looked up at the expiry's revision, where it is gone",
		Find: "b.goneLeaseRecords(ctx, s, gone, rev-1, out)", Replace: "b.goneLeaseRecords(ctx, s, gone, rev, out)",
		Test: "go test -count=1 -run ^TestReplayedHistoryShowsPreviousNodesAndExpirations$ ./v3backend/",
	},
	{
		Name: "heartbeat-failures-x1000", File: "v3backend/session.go",
		What: "the heartbeat failure threshold is multiplied by 1,000",
		Find: "if misses < b.cfg.HeartbeatFailures {", Replace: "if misses < b.cfg.HeartbeatFailures*1000 {",
		Test: "go test -short -count=1 ./v3backend/",
	},
	{
		Name: "no-election-deferral", File: "v3backend/session.go",
		What: "a member without a quorum is left though no other member has one (an election)",
		Find: "case quorumSeen > 0 || b.mayDefer(s):", Replace: "case false:",
		Test: "go test -count=1 -run ^TestNoMemberWithAQuorumDefersTheLoss$ ./v3backend/",
	},
	{
		Name: "applying-is-a-miss", File: "v3backend/session.go",
		What: "a heartbeat timed out while the member applies behind its commits (a defrag) counts as a miss",
		Find: "\t\t\tif v == applying && b.silentFor(s) < applyingLimit {\n", Replace: "\t\t\tif false {\n",
		Test: "go test -count=1 -run ^TestAMemberBehindInApplyingIsExcused$ ./v3backend/",
	},
	{
		Name: "applying-excused-for-good", File: "v3backend/session.go",
		What: "a member whose storage never catches up is excused as applying for good",
		Find: "\t\t\tif v == applying && b.silentFor(s) < applyingLimit {\n", Replace: "\t\t\tif v == applying {\n",
		Test: "go test -count=1 -run ^TestAMemberStuckApplyingIsLeft$ ./v3backend/",
	},
	{
		Name: "lag-ignores-queued-goroutines", File: "v3backend/session.go",
		What:    "a heartbeat held behind this process's queue of runnable goroutines is not excused",
		Find:    "\t\t\treturn max(late, time.Since(due), longestWait(waits, read()))\n",
		Replace: "\t\t\treturn max(late, time.Since(due), 0*longestWait(waits, read()))\n",
		Test:    "go test -count=1 -run ^TestPacedMeterSeesGoroutinesQueued$ ./v3backend/",
	},
	{
		Name: "held-check-gets-no-extra-time", File: "v3backend/session.go",
		What: "a check on a bridge held longer than the timeout gets only the timeout, so its answer is never read in time",
		Find: "\treturn max(timeout, min(timeout+held, left))\n", Replace: "\treturn timeout\n",
		Test: "go test -count=1 -run ^TestALateBridgeReadsALateAnswer$ ./v3backend/",
	},
	{
		Name: "held-check-outlasts-excuses", File: "v3backend/session.go",
		What: "a check on a held bridge gets extra time beyond the end of the excuses",
		Find: "\treturn max(timeout, min(timeout+held, left))\n", Replace: "\treturn timeout + held\n",
		Test: "go test -count=1 -run ^TestCheckTimeout$ ./v3backend/",
	},
	{
		Name: "stepped-down-leader-polled", File: "v3backend/session.go",
		What:    "a leader found cut off, stepped down by its next miss, is kept while the majority elects another",
		Find:    "polled := v == noQuorum && !deposedSeen && b.cfg.Member == nil",
		Replace: "polled := v == noQuorum && b.cfg.Member == nil",
		Test:    "go test -count=1 -run ^TestACutOffLeaderThatStepsDownIsLeft$ ./v3backend/",
	},
	{
		Name: "members-timeout-is-silence", File: "v3backend/session.go",
		What: "etcd 3.4's own answer to a passed deadline (codes.Unknown) is taken for a silent member, its status unread",
		Find: "\t\t\tif deadlinePassed(err) {\n", Replace: "\t\t\tif false && deadlinePassed(err) {\n",
		Test: "go test -count=1 -run ^TestAMembersOwnTimeoutIsATimeout$ ./v3backend/",
	},
	{
		Name: "lose-does-not-cancel", File: "v3backend/session.go",
		What: "a lost session's requests and watches are not cancelled",
		Find: "\ts.cancel()\n\tb.wg.Add(1)\n", Replace: "\tb.wg.Add(1)\n",
		Test: "go test -count=1 -run ^TestSessionLostDuringAWriteIsUnavailableAtOnce$ ./v3backend/",
	},

	// v2api: the HTTP surface.
	{
		Name: "create-answers-200", File: "v2api/server.go",
		What: "a create is answered 200 instead of 201",
		Find: "\tif ev.IsCreated() {\n\t\tcode = http.StatusCreated\n\t}\n",
		Test: "go test -short -count=1 -run ^TestWriteOfAClientThatHalfClosesIsAnsweredWithItsOutcome$ ./v2api/",
	},
	{
		Name: "error-without-etcd-index", File: "translate/errors.go",
		What:    "a v2 error is sent without X-Etcd-Index",
		Find:    "\th.Set(\"X-Etcd-Index\", strconv.FormatUint(e.Index, 10))\n",
		Replace: "\t_ = strconv.FormatUint(e.Index, 10)\n",
		Test:    "go test -short -count=1 -run ^TestKeysRequestErrorsAnswerV2ErrorJSONWithoutTheStore$ ./v2api/",
	},
	{
		Name: "no-value-on-success-ignored-for-create", File: "v2api/server.go",
		What:    "noValueOnSuccess=true still sends a create's node",
		Find:    "\t\tev.Action == translate.ActionCreate || ev.Action == translate.ActionUpdate) {",
		Replace: "\t\tev.Action == translate.ActionUpdate) {",
		Test:    "go test -short -count=1 -run ^TestKeysNoValueOnSuccessKeepsOnlyTheActionOfWrites$ ./v2api/",
	},

	// shadow: passthrough mode's comparison.
	{
		Name: "shadow-overflow-not-shed", File: "migrate/shadow/shadow.go",
		What: "a full shadow queue does not lower the sample rate",
		Find: "\t\ts.drop(reasonQueueFull)\n\t\ts.overflowed()\n", Replace: "\t\ts.drop(reasonQueueFull)\n",
		Test: "go test -short -count=1 -run ^TestAFullQueueDropsWithoutBlocking$ ./migrate/shadow/",
	},
	{
		Name: "shadow-samples-outside-prefix", File: "migrate/shadow/shadow.go",
		What: "requests outside --shadow-prefix are sampled",
		Find: "p != s.keys && !strings.HasPrefix(p, s.keysDir)", Replace: "p != s.keys && strings.HasPrefix(p, s.keysDir)",
		Test: "go test -short -count=1 -run ^TestSampleDecides$ ./migrate/shadow/",
	},
	{
		Name: "shadow-divergence-taken-for-lag", File: "migrate/shadow/compare.go",
		What: "a read the v3 side answers differently, while the v2 server's answer stands, is counted as lagging",
		Find: "\tif s.same(q, ref, again) {\n\t\treturn res\n\t}\n",
		Test: "go test -short -count=1 -run ^TestDivergencesAreCountedByKind$ ./migrate/shadow/",
	},

	// cutover: dual mode.
	{
		Name: "agent-never-acknowledges", File: "migrate/cutover/agent.go",
		What:    "a bridge's agent applies mode records but never acknowledges them",
		Find:    "\tif _, err := membership.Put(cctx, a.cfg.Client, a.cfg.Keys.Bridges, a.lease, a.reg); err != nil {",
		Replace: "\tif _, err := a.cfg.Client.Get(cctx, membership.Key(a.cfg.Keys.Bridges, a.lease)); err != nil {",
		Test:    "go test -short -count=1 -run ^TestAgentKeepsItsSideWhenTheRecordIsDeleted$ ./migrate/cutover/",
	},
	{
		Name: "fence-leaves-gate-open", File: "migrate/cutover/switch.go",
		What:    "leaving a state that writes does not close the write gate while in-flight writes drain",
		Find:    "\ts.open = false\n\twait := s.drainedLocked()\n\ts.mu.Unlock()\n\tif wait != nil {",
		Replace: "\twait := s.drainedLocked()\n\ts.mu.Unlock()\n\tif wait != nil {",
		Test:    "go test -short -count=1 -run ^TestSwitchFencesOnlyAfterTheWritesInFlight$ ./migrate/cutover/",
	},
	{
		Name: "write-not-counted-in-flight", File: "migrate/cutover/switch.go",
		What: "a write is served without being counted in flight, so a fence does not wait for it",
		Find: "\tif ok {\n\t\ts.inflight++\n\t}\n", Replace: "",
		Test: "go test -short -count=1 -run ^TestSwitchFencesOnlyAfterTheWritesInFlight$ ./migrate/cutover/",
	},
	{
		Name: "side-change-keeps-watches", File: "migrate/cutover/switch.go",
		What: "a change of side ends the watches of the new side instead of the old",
		Find: "if w.side != st.Side {", Replace: "if w.side == st.Side {",
		Test: "go test -short -count=1 -run ^TestSwitchEndsWatchesWhenTheSideChanges$ ./migrate/cutover/",
	},
	{
		Name: "agent-ignores-liveness", File: "migrate/cutover/agent.go",
		What: "the agent retries on a lost session on its own back-off instead of waiting for the next",
		Find: "ctxsleep.RetryLive(ctx, a.cfg.Live, a.session,", Replace: "ctxsleep.RetryLive(ctx, nil, a.session,",
		Test: "go test -short -count=1 -run ^TestAgentWaitsForTheSessionAndRenewsItsLeaseFirst$ ./migrate/cutover/",
	},
	{
		Name: "agent-kept-lease-renewed-late", File: "migrate/cutover/agent.go",
		What: "a new session of the agent renews the lease it kept only a quarter TTL later, leaving writes refused",
		Find: "\tif a.lease != 0 {\n\t\t// The lease kept", Replace: "\tif false {\n\t\t// The lease kept",
		Test: "go test -short -count=1 -run ^TestAgentWaitsForTheSessionAndRenewsItsLeaseFirst$ ./migrate/cutover/",
	},
	{
		Name: "write-window-past-lease", File: "migrate/cutover/agent.go",
		What: "writes are allowed past the registration lease's TTL instead of short of it",
		Find: "time.Duration(a.renewedTTL)*time.Second - safety", Replace: "time.Duration(a.renewedTTL)*time.Second + safety",
		Test: "go test -short -count=1 -run ^TestAgentClosesTheWriteWindowShortOfTheLease$ ./migrate/cutover/",
	},
	{
		Name: "migration-auth-copy-past-refusal", File: "migrate/steps/switch.go",
		What:    "the cutover's auth copy asks the next v2 server URL after one refused it, not only after one was unreachable",
		Find:    "\t\t\tif !errors.Is(err, engine.ErrUnreachable) {\n",
		Replace: "\t\t\tif !errors.Is(err, engine.ErrUnreachable) && false {\n",
		Test:    "go test -count=1 -run ^TestTheCutoversAuthCopyTriesTheV2ServersURLsInOrder$ ./migrate/steps/",
	},
	{
		Name: "authstep-member-delete-without-root", File: "v2api/auth.go",
		What:    "the auth step lets DELETE /v2/members/{id} through without root",
		Find:    "\t\treturn change && id != \"\" && !strings.Contains(id, \"/\")\n",
		Replace: "\t\treturn method == \"PUT\" && id != \"\" && !strings.Contains(id, \"/\")\n",
		Test:    "go test -count=1 -run ^TestAuthStep ./v2api/",
	},
}
