// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/bridge/auth"
	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/bridge/membership"
	"github.com/v2bridge/v2bridge/translate"
)

// Options configure the cutover and rollback commands.
type Options struct {
	Client   Etcd
	Keys     Keys
	Layout   translate.Layout
	V2Server *V2Server
	// V3Index is the v2 index the v3 side gives clients now (a
	// linearizable read through the bridge's own read path): the cutover
	// compares and records indexes in the numbering clients see. Default:
	// that of the revision a count-only linearizable read of Client sees.
	V3Index func(ctx context.Context) (uint64, error)
	// Auth are the keys of the key space's users, roles and enabled flag:
	// a change of them through etcd v3 since the cutover is a write a
	// rollback discards.
	Auth auth.Keys
	// CopyAuth, if set, copies the v2 server's users, roles and enabled
	// flag into etcd v3 (with dryRun: only reads and reports): the cutover
	// makes its last copy once the v2 server no longer changes.
	CopyAuth func(ctx context.Context, dryRun bool) (AuthCopy, error)
	// AllowUnknownPasswords lets the cutover go on while the v2 server
	// has auth enabled and users whose password the bridges do not know
	// (they cannot log in once etcd v3 serves).
	AllowUnknownPasswords bool
	// V2ServerPadKey is the hidden key a rollback rewrites on the v2 server
	// to raise its index past every v3 index, then deletes.
	V2ServerPadKey string

	AckTimeout    time.Duration // for the bridges' acknowledgements (default 30s)
	FollowTimeout time.Duration // for the follower to catch up (default 1m)
	// IndexMargin is how far the side taking over must be ahead of the
	// other's index (default 1000): the other side's index still moves by
	// TTL expiries while the bridges switch.
	IndexMargin uint64
	// Force lets a rollback discard writes made through etcd v3 since the
	// cutover.
	Force bool
	// By names who runs the command (user@host), for the record.
	By string
	// Log receives one line per step.
	Log func(string)
	// RequestTimeout bounds every call the command makes; it is also taken
	// for the bridges' own (the same --request-timeout): how long a write a
	// bridge forwarded may still take to land after its registration
	// dropped out (at most maxSettle).
	RequestTimeout time.Duration
	Poll           time.Duration
	Now            func() time.Time

	// covered is the follower's prefix a fenced cutover found to hold
	// everything the bridges serve (checkCoverage).
	covered string
}

func (o *Options) setDefaults() {
	if o.AckTimeout <= 0 {
		o.AckTimeout = 30 * time.Second
	}
	if o.FollowTimeout <= 0 {
		o.FollowTimeout = time.Minute
	}
	if o.IndexMargin == 0 {
		o.IndexMargin = 1000
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 5 * time.Second
	}
	if o.Poll <= 0 {
		o.Poll = 100 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = func(string) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.V3Index == nil {
		o.V3Index = countIndex(o.Client, o.Layout, o.RequestTimeout)
	}
}

// AuthCopy is what a copy of the v2 server's auth data found.
type AuthCopy struct {
	Enabled          bool     `json:"enabled"`
	Users            int      `json:"users"`
	Roles            int      `json:"roles"`
	UnknownPasswords []string `json:"unknownPasswords,omitempty"` // users whose password the bridges do not know
}

// checkAuth copies the auth data (dryRun: reads it) and refuses while
// auth is on and some user's password is unknown, unless allowed.
func (o *Options) checkAuth(ctx context.Context, dryRun bool) (*AuthCopy, error) {
	if o.CopyAuth == nil {
		return nil, nil
	}
	ac, err := o.CopyAuth(ctx, dryRun)
	if err != nil {
		return nil, fmt.Errorf("copying the users and roles: %w", err)
	}
	if ac.Enabled && len(ac.UnknownPasswords) > 0 {
		msg := fmt.Sprintf("auth is enabled on the v2 server and the bridges know no password for %s: "+
			"once etcd v3 serves they cannot log in (each password is learned from a request a dual-mode bridge "+
			"forwards with it)", strings.Join(ac.UnknownPasswords, ", "))
		if !o.AllowUnknownPasswords {
			return nil, errors.New(msg + "; --allow-unknown-passwords goes on anyway")
		}
		o.logf("--allow-unknown-passwords: %s", msg)
	}
	if !dryRun {
		o.logf("step 2/3: copied the users and roles one last time: %d users, %d roles, auth enabled: %t",
			ac.Users, ac.Roles, ac.Enabled)
	}
	return &ac, nil
}

// Result is what a command did.
type Result struct {
	// Changed is false when the record already said what was asked.
	Changed bool
	Record  *Record
	// Bridges is the number of bridges that acknowledged the last record.
	Bridges int
	// Padded is the number of writes made to raise the index of the side
	// taking over.
	Padded int
	// V3Writes (rollback) is the number of v2 nodes written through etcd
	// v3 since the cutover, Discarded each of them as it is now.
	V3Writes  int
	Discarded []Discarded
	// Auth (cutover) is the last copy of the users and roles.
	Auth     *AuthCopy
	Duration time.Duration
}

func (o *Options) logf(format string, a ...any) { o.Log(fmt.Sprintf(format, a...)) }

func (o *Options) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, o.RequestTimeout)
}

// read gets the record and its revision (0 when absent).
func (o *Options) read(ctx context.Context) (*Record, int64, error) {
	cctx, cancel := o.call(ctx)
	defer cancel()
	resp, err := o.Client.Get(cctx, o.Keys.Mode)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the mode record %s: %w", o.Keys.Mode, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	rec, err := Decode(resp.Kvs[0].Value)
	return rec, resp.Kvs[0].ModRevision, err
}

// cas writes r if the record is still at modRev, and returns its new
// revision.
func (o *Options) cas(ctx context.Context, modRev int64, r *Record) (int64, error) {
	cctx, cancel := o.call(ctx)
	defer cancel()
	resp, err := o.Client.Txn(cctx).
		If(clientv3.Compare(clientv3.ModRevision(o.Keys.Mode), "=", modRev)).
		Then(clientv3.OpPut(o.Keys.Mode, string(r.Encode()))).
		Else(clientv3.OpGet(o.Keys.Mode)).Commit()
	if err != nil {
		return 0, fmt.Errorf("writing the mode record: %w", err)
	}
	if !resp.Succeeded {
		now := "absent"
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			now = string(kvs[0].Value)
		}
		return 0, fmt.Errorf("the mode record changed under this command (another operator?); it is now %s: run the command again", now)
	}
	return resp.Header.Revision, nil
}

// direction is what the cutover and the rollback do not share: the side
// the authority leaves and the one it goes to. Their steps are the same,
// written once (run).
type direction struct {
	cmd, undo        string // the command, and the one that undoes it
	from, to         string // the modes of the side left and the side taking over
	fromName, toName string // the same sides, as the log names them
	// aborted adjusts the record an abort writes back (nil: none).
	aborted func(*Record)
}

var (
	cutoverDir = direction{cmd: "cutover", undo: "rollback", from: ModePassthrough, to: ModeV3,
		fromName: "the v2 server", toName: "etcd v3"}
	rollbackDir = direction{cmd: "rollback", undo: "cutover", from: ModeV3, to: ModePassthrough,
		fromName: "etcd v3", toName: "the v2 server",
		// The revision the rollback scans etcd v3 from is its fencing's.
		aborted: func(r *Record) { r.V3Revision = 0 }}
)

// run is one run of a command: the record it last read or wrote, that
// record's revision, and the result so far.
type run struct {
	o      *Options
	d      direction
	start  time.Time
	rec    *Record
	modRev int64
	res    *Result
}

// begin reads the record and plans the command's next step under it.
func begin(ctx context.Context, o *Options, d direction, plan func(*Record) (Step, string)) (*run, Step, string, error) {
	o.setDefaults()
	r := &run{o: o, d: d, start: o.Now(), res: &Result{}}
	var err error
	if r.rec, r.modRev, err = o.read(ctx); err != nil {
		return nil, 0, "", err
	}
	step, msg := plan(r.rec)
	return r, step, msg, nil
}

// done is the result of a command with nothing to do: msg says why.
func (r *run) done(msg string) *Result {
	r.o.Log(msg)
	r.res.Record, r.res.Duration = r.rec, r.o.Now().Sub(r.start)
	return r.res
}

// fence writes the fencing record (set adds the command's fields; detail
// ends the log line): bridges refuse writes, and serve reads from the side
// the authority leaves.
func (r *run) fence(ctx context.Context, detail string, set func(*Record)) error {
	next := Next(r.rec, ModeFencing, r.d.from, r.o.By, r.o.Now())
	set(&next)
	modRev, err := r.o.cas(ctx, r.modRev, &next)
	if err != nil {
		return err
	}
	r.rec, r.modRev = &next, modRev
	r.o.logf("step 1/3: fencing: mode record generation %d written; bridges refuse writes%s", next.Generation, detail)
	return nil
}

// fenced waits until every bridge has applied the fencing record, and for
// the writes of those that dropped out instead to land on the side left.
func (r *run) fenced(ctx context.Context) error {
	n, dropped, err := r.o.waitAcks(ctx, r.rec.Generation, r.o.AckTimeout, true)
	if err != nil {
		return err
	}
	if err := r.o.settle(ctx, dropped, r.d.fromName); err != nil {
		return err
	}
	r.o.logf("step 1/3: fenced: %d bridge(s) acknowledged generation %d, no write reaches %s", n, r.rec.Generation,
		r.d.fromName)
	return nil
}

// abort puts the record back to the side the authority was leaving, which
// stays the authority, after a fenced step failed with cause.
func (r *run) abort(ctx context.Context, cause error) (*Result, error) {
	d := r.d
	back := Next(r.rec, d.from, "", r.o.By, r.o.Now())
	if d.aborted != nil {
		d.aborted(&back)
	}
	if _, err := r.o.cas(ctx, r.modRev, &back); err != nil {
		return nil, fmt.Errorf("%w; and putting the record back to %s failed too: %v "+
			"(writes stay fenced: run `migrate %s` or `migrate %s` again)", cause, d.from, err, d.cmd, d.undo)
	}
	r.o.logf("%s aborted: mode record generation %d says %s again; writes go to %s", d.cmd, back.Generation, d.from,
		d.fromName)
	return nil, fmt.Errorf("%s aborted, %s stays the authority: %w", d.cmd, d.fromName, cause)
}

// switchOver writes the record that hands the authority to the side taking
// over (set adds the command's fields), which serves from index.
func (r *run) switchOver(ctx context.Context, index uint64, set func(*Record)) (*Result, error) {
	next := Next(r.rec, r.d.to, "", r.o.By, r.o.Now())
	set(&next)
	return r.finish(ctx, next, fmt.Sprintf("step 3/3: switched: mode record generation %d says %s; %s serves from "+
		"index %d (a waitIndex at or below it gets 401 and clients re-list)", next.Generation, r.d.to, r.d.toName, index))
}

// finish writes next, the command's last record, says line, and waits for
// the bridges to apply it (a bridge that does not is only said).
func (r *run) finish(ctx context.Context, next Record, line string) (*Result, error) {
	if _, err := r.o.cas(ctx, r.modRev, &next); err != nil {
		return nil, err
	}
	r.res.Changed, r.res.Record = true, &next
	r.o.Log(line)
	r.res.Bridges, _, _ = r.o.waitAcks(ctx, next.Generation, r.o.AckTimeout, false)
	r.res.Duration = r.o.Now().Sub(r.start)
	return r.res, nil
}

// Cutover moves every dual-mode bridge from the v2 server to etcd v3:
// (1) fence writes and wait for every live bridge to acknowledge, (2) wait
// until the follower has applied everything the v2 server holds, (3) raise
// the v3 index past the v2 server's if it is not already, then switch to
// v3. A failure before (3) puts the record back to passthrough, so writes
// go to the v2 server again. Already in v3 mode, it does nothing.
func Cutover(ctx context.Context, o Options) (*Result, error) {
	r, step, msg, err := begin(ctx, &o, cutoverDir, PlanCutover)
	if err != nil {
		return nil, err
	}
	switch step {
	case StepDone:
		return r.done(msg), nil
	case StepConflict:
		return nil, errors.New(msg)
	case StepResume:
		o.Log(msg)
	case StepFence:
		// A copy that cannot hold what the bridges serve is refused before
		// anything is fenced; checked again once fenced, when the v2
		// server no longer changes.
		if fr, err := o.readFollow(ctx); err != nil {
			return nil, err
		} else if fr != nil && fr.Stopped == "" {
			if err := o.checkCoverage(ctx, fr.Prefix); err != nil {
				return nil, err
			}
		}
		if _, err := o.checkAuth(ctx, true); err != nil {
			return nil, err
		}
		idx, cid, err := o.V2Server.Index(ctx)
		if err != nil {
			return nil, fmt.Errorf("the v2 server must answer before writes are fenced: %w", err)
		}
		if err := r.fence(ctx, fmt.Sprintf(" (v2 server %s at index %d)", o.V2Server, idx), func(n *Record) {
			n.V2Server, n.V2ServerClusterID = o.V2Server.String(), cid
		}); err != nil {
			return nil, err
		}
	}
	if err := r.fenced(ctx); err != nil {
		return r.abort(ctx, err)
	}
	caught, err := o.waitFollower(ctx, r.rec, 0)
	if err != nil {
		return r.abort(ctx, err)
	}
	if r.res.Auth, err = o.checkAuth(ctx, false); err != nil {
		return r.abort(ctx, err)
	}
	c3, s2, padded, err := o.raiseV3(ctx, r.rec, caught)
	if err != nil {
		return r.abort(ctx, err)
	}
	r.res.Padded = padded
	return r.switchOver(ctx, c3, func(n *Record) {
		n.V2ServerIndex, n.CutoverIndex, n.WatchFloor, n.WatchCeiling, n.V3Writes = s2, c3, c3, 0, 0
	})
}

// Rollback moves every dual-mode bridge back to the v2 server while it is
// intact. Writes made through etcd v3 since the cutover are not copied back:
// it refuses when it finds any, unless Force. Steps: fence writes and wait
// for the bridges, raise the v2 server's index past every v3 index, switch
// to passthrough. Already in passthrough mode, it does nothing.
func Rollback(ctx context.Context, o Options) (*Result, error) {
	r, step, msg, err := begin(ctx, &o, rollbackDir, PlanRollback)
	if err != nil {
		return nil, err
	}
	switch step {
	case StepDone:
		return r.done(msg), nil
	case StepRestore:
		o.Log(msg)
		next := Next(r.rec, ModePassthrough, "", o.By, o.Now())
		return r.finish(ctx, next, fmt.Sprintf("switched: mode record generation %d says passthrough", next.Generation))
	case StepFence, StepResume:
	}
	res := r.res
	since := r.modRev // the v3 record's own revision
	if step == StepResume {
		since = r.rec.V3Revision
		o.Log(msg)
	}
	first, err := o.v3ChangesSince(ctx, since)
	writes := len(first)
	res.V3Writes, res.Discarded = writes, first
	switch {
	case err != nil && !o.Force:
		return res, fmt.Errorf("cannot tell whether etcd v3 was written since the cutover (%v); "+
			"rollback with --force discards any such writes", err)
	case writes > 0 && !o.Force:
		o.listDiscarded("written through etcd v3 since the cutover, as they are now", first)
		return res, fmt.Errorf("writes to %d node(s) were made through etcd v3 since the cutover (%s); they are not copied "+
			"back to the v2 server, which does not have them: rollback with --force discards them", writes, names(first))
	case err != nil || writes > 0:
		o.listDiscarded(fmt.Sprintf("--force: discarding %d write(s) made through etcd v3 since the cutover; each node "+
			"once, as it is now (the v2 server keeps its own)", writes), first)
	}
	if step == StepFence {
		if err := r.fence(ctx, "", func(n *Record) { n.V3Revision, n.V3Writes = since, writes }); err != nil {
			return nil, err
		}
	}
	if err := r.fenced(ctx); err != nil {
		return r.abort(ctx, err)
	}
	// The first scan ran before the fence: a write that landed between
	// the two would be lost without a word. Fenced, nothing more lands.
	again, err := o.v3ChangesSince(ctx, since)
	more := newer(first, again)
	switch {
	case err != nil && !o.Force:
		return r.abort(ctx, fmt.Errorf("cannot tell whether etcd v3 was written since the cutover (%v); "+
			"rollback with --force discards any such writes", err))
	case len(more) > 0 && !o.Force:
		o.listDiscarded("written through etcd v3 while the rollback fenced", more)
		return r.abort(ctx, fmt.Errorf("%d write(s) were made through etcd v3 while the rollback fenced (%s); they are not "+
			"copied back to the v2 server: rollback with --force discards them", len(more), names(more)))
	case err != nil:
		o.logf("--force: cannot tell whether etcd v3 was written while fencing (%v); discarding any such writes", err)
	case len(more) > 0:
		o.listDiscarded(fmt.Sprintf("--force: discarding %d more write(s) made through etcd v3 while fencing", len(more)), more)
	}
	if err == nil {
		res.V3Writes, res.Discarded = len(again), again
	}
	s2, ceiling, padded, err := o.raiseV2Server(ctx, r.rec)
	if err != nil {
		return r.abort(ctx, err)
	}
	res.Padded = padded
	return r.switchOver(ctx, s2, func(n *Record) {
		n.RollbackIndex, n.WatchFloor, n.WatchCeiling, n.V3Revision = s2, s2, ceiling, 0
	})
}

// maxSettle bounds how long a command waits for writes of bridges that
// dropped out (settle).
const maxSettle = 30 * time.Second

// settle waits, when a registration dropped out instead of acknowledging,
// for a request timeout's worth (at most maxSettle): the bridge refused
// writes by then, but a write it sent before may still land on side.
func (o *Options) settle(ctx context.Context, dropped int, side string) error {
	if dropped == 0 {
		return nil
	}
	d := min(o.RequestTimeout, maxSettle)
	o.logf("  %d bridge(s) dropped out without acknowledging: waiting %v for writes they sent to land on %s", dropped, d, side)
	if !ctxsleep.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// registrations lists the dual-mode bridges registered now (not the static
// ones: they never serve the v2 server).
func (o *Options) registrations(ctx context.Context) (map[string]membership.Registration, error) {
	cctx, cancel := o.call(ctx)
	defer cancel()
	regs, _, err := membership.Read(cctx, o.Client, o.Keys.Bridges)
	if err != nil {
		return nil, fmt.Errorf("listing the bridges: %w", err)
	}
	for id, g := range regs {
		if g.Static {
			delete(regs, id)
		}
	}
	return regs, nil
}

func describe(id string, g membership.Registration) string {
	return fmt.Sprintf("%s (%s on %s, pid %d, %s)", g.Name, id, g.Host, g.PID, strings.Join(g.Advertise, ","))
}

// waitAcks waits until every registered bridge has applied generation gen
// (a bridge that dies or loses etcd v3 drops out when its lease expires);
// it returns how many did, and how many registrations it saw drop out
// without acknowledging. With must, a timeout is an error naming the
// bridges that did not; without, it is only said.
func (o *Options) waitAcks(ctx context.Context, gen uint64, timeout time.Duration, must bool) (int, int, error) {
	deadline := o.Now().Add(timeout)
	said := map[string]bool{}
	unacked := map[string]membership.Registration{} // seen, not (yet) acknowledging
	dropped := 0
	for {
		regs, err := o.registrations(ctx)
		if err != nil && must {
			return 0, dropped, err
		}
		if err == nil {
			for id, g := range unacked {
				if _, ok := regs[id]; !ok {
					dropped++
					delete(unacked, id)
					o.logf("  bridge %s dropped out without acknowledging generation %d", describe(id, g), gen)
				}
			}
		}
		var waiting []string
		acked := 0
		ids := make([]string, 0, len(regs))
		for id := range regs {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			g := regs[id]
			if g.Acked(gen) {
				acked++
				if !said[id] {
					said[id] = true
					o.logf("  bridge %s: generation %d applied (%s)", describe(id, g), g.Generation, g.Mode)
				}
				delete(unacked, id)
				continue
			}
			unacked[id] = g
			waiting = append(waiting, fmt.Sprintf("%s at generation %d (%s)", describe(id, g), g.Generation, g.Mode))
		}
		if err == nil && len(waiting) == 0 {
			if acked == 0 {
				o.Log("  no bridge is registered in dual mode (is any bridge started with both --v2-server and --endpoints?)")
			}
			return acked, dropped, nil
		}
		if o.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("%d bridge(s) did not acknowledge generation %d within %v: %s",
					len(waiting), gen, timeout, strings.Join(waiting, "; "))
			}
			if !must {
				o.logf("  %v", err)
			}
			return acked, dropped, err
		}
		if !ctxsleep.Sleep(ctx, o.Poll) {
			return acked, dropped, ctx.Err()
		}
	}
}

// readFollow reads the follower's progress record.
func (o *Options) readFollow(ctx context.Context) (*FollowRecord, error) {
	cctx, cancel := o.call(ctx)
	defer cancel()
	resp, err := o.Client.Get(cctx, o.Keys.Follow)
	if err != nil {
		return nil, fmt.Errorf("reading the follower's progress: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var fr FollowRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &fr); err != nil {
		return nil, fmt.Errorf("the follower's progress record: %w", err)
	}
	return &fr, nil
}

// waitFollower waits until the follower has applied every event of the v2
// server up to its current index (at least atLeast), and returns the index
// it is proven caught up to.
func (o *Options) waitFollower(ctx context.Context, rec *Record, atLeast uint64) (uint64, error) {
	deadline := o.Now().Add(o.FollowTimeout)
	s, cid, err := o.V2Server.Index(ctx)
	if err != nil {
		return 0, err
	}
	if rec.V2ServerClusterID != "" && cid != "" && cid != rec.V2ServerClusterID {
		return 0, fmt.Errorf("the v2 server %s is cluster %s, but the cutover began against cluster %s", o.V2Server, cid, rec.V2ServerClusterID)
	}
	s = max(s, atLeast)
	var last string
	say := func(m string) {
		if m != last {
			o.Log(m)
			last = m
		}
	}
	for {
		fr, err := o.readFollow(ctx)
		switch {
		case err != nil:
			return 0, err
		case fr == nil:
			say("  waiting for `migrate --follow` to record its progress (is it running?)")
		case fr.ClusterID != "" && cid != "" && fr.ClusterID != cid:
			return 0, fmt.Errorf("the follower follows cluster %s at %s, not the v2 server %s (cluster %s)", fr.ClusterID, fr.V2Server, o.V2Server, cid)
		case fr.Stopped != "":
			return 0, fmt.Errorf("the follower stopped (%s) at v2 server index %d; start `migrate --follow` again", fr.Stopped, fr.Index)
		case o.covered != fr.Prefix:
			if err := o.checkCoverage(ctx, fr.Prefix); err != nil {
				return 0, err
			}
			o.covered = fr.Prefix
			continue
		default:
			ok, at, err := o.V2Server.Caught(ctx, fr.Prefix, fr.Index+1)
			var ve *translate.Error
			switch {
			case errors.As(err, &ve) && ve.Code == translate.EcodeEventIndexCleared:
				say(fmt.Sprintf("  the v2 server's history no longer reaches the follower's index %d; waiting for it to record newer progress", fr.Index))
			case err != nil:
				say(fmt.Sprintf("  probing the v2 server: %v", err))
			case ok && at >= s:
				o.logf("step 2/3: the follower has applied every change of %s below %s up to index %d (v2 server at %d)",
					o.V2Server, fr.Prefix, at, s)
				return at, nil
			case ok:
				say(fmt.Sprintf("  the follower is caught up to index %d; the v2 server is at %d", at, s))
			default:
				say(fmt.Sprintf("  the follower has applied up to index %d; the v2 server holds a change at %d it has not applied yet (v2 server at %d)",
					fr.Index, at, s))
			}
		}
		if o.Now().After(deadline) {
			return 0, fmt.Errorf("the follower did not apply the v2 server's changes up to index %d within %v "+
				"(is `migrate --follow` running against %s?)", s, o.FollowTimeout, o.V2Server)
		}
		if !ctxsleep.Sleep(ctx, o.Poll) {
			return 0, ctx.Err()
		}
	}
}

// raiseV3 makes the v3 side's index larger than the v2 server's plus the
// margin, so no index a client got from the v2 server can be taken for
// one of etcd v3 (both count from their own start), writing the pad key as
// often as it takes. It returns the v3 index and the v2 server's index it
// was compared with.
func (o *Options) raiseV3(ctx context.Context, rec *Record, caught uint64) (c3, s2 uint64, padded int, err error) {
	for {
		s2, _, err = o.V2Server.Index(ctx)
		if err != nil {
			return 0, 0, padded, err
		}
		if s2 > caught {
			// TTL expiries moved the v2 server: the follower must have them.
			if caught, err = o.waitFollower(ctx, rec, s2); err != nil {
				return 0, 0, padded, err
			}
		}
		if c3, err = o.V3Index(ctx); err != nil {
			return 0, 0, padded, fmt.Errorf("reading the v3 index: %w", err)
		}
		target := s2 + o.IndexMargin
		if c3 > target {
			return c3, s2, padded, nil
		}
		o.logf("  raising the v3 index from %d past %d (the v2 server's index %d + margin %d): writing %s",
			c3, target, s2, o.IndexMargin, o.Keys.Pad)
		// In batches, reading the index between them: how far one write
		// moves it is the v3 side's numbering's business.
		n, err := o.pad(ctx, int(min(target-c3+1, padBatch)), func(ctx context.Context, i int) error {
			cctx, cancel := o.call(ctx)
			defer cancel()
			_, err := o.Client.Put(cctx, o.Keys.Pad, strconv.Itoa(i))
			return err
		})
		padded += n
		if err != nil {
			return 0, 0, padded, fmt.Errorf("raising the v3 index: %w", err)
		}
	}
}

// raiseV2Server keeps the two index spaces apart for a rollback. When the
// v2 server's index plus the margin is below the cutover's index, every
// index etcd v3 gave clients since the cutover is above both, and the
// cutover's index becomes a ceiling (returned) above which a waitIndex gets
// 401 on the v2 server. Otherwise it makes the v2 server's index larger
// than the v3 side's plus the margin (the mirror of raiseV3), then deletes
// the pad key. It returns the v2 server's index after that.
func (o *Options) raiseV2Server(ctx context.Context, rec *Record) (uint64, uint64, int, error) {
	if s, _, err := o.V2Server.Index(ctx); err != nil {
		return 0, 0, 0, err
	} else if c := rec.CutoverIndex; c > 0 && s+o.IndexMargin < c {
		o.logf("step 2/3: the v2 server's index %d + margin %d is below the cutover's index %d: "+
			"a waitIndex above %d (issued by etcd v3) will get 401 from the v2 server's side", s, o.IndexMargin, c, c)
		return s, c, 0, nil
	}
	s, padded, err := o.padV2Server(ctx)
	return s, 0, padded, err
}

// padV2Server raises the v2 server's index past the v3 side's plus the
// margin by rewriting a hidden pad key, then deletes it.
func (o *Options) padV2Server(ctx context.Context) (uint64, int, error) {
	padded := 0
	for {
		v, err := o.V3Index(ctx)
		if err != nil {
			return 0, padded, fmt.Errorf("reading the v3 index: %w", err)
		}
		s, _, err := o.V2Server.Index(ctx)
		if err != nil {
			return 0, padded, err
		}
		target := v + o.IndexMargin
		if s > target {
			if padded > 0 {
				if s, err = o.V2Server.Delete(ctx, o.V2ServerPadKey); err != nil {
					return 0, padded, fmt.Errorf("deleting %s on the v2 server: %w", o.V2ServerPadKey, err)
				}
			}
			o.logf("step 2/3: the v2 server's index %d is past etcd v3's %d + margin %d", s, v, o.IndexMargin)
			return s, padded, nil
		}
		if need := target - s + 2; need > maxV2ServerPad && padded == 0 {
			return 0, padded, fmt.Errorf("the v2 server's index %d is %d below etcd v3's %d + margin %d: raising it "+
				"would take %d writes to the v2 server (more than %d), so the two index spaces cannot be told apart "+
				"after a rollback", s, target-s, v, o.IndexMargin, need, maxV2ServerPad)
		}
		o.logf("  raising the v2 server's index from %d past %d (etcd v3's index %d + margin %d): writing %s there",
			s, target, v, o.IndexMargin, o.V2ServerPadKey)
		n, err := o.pad(ctx, int(min(target-s+2, padBatch)), func(ctx context.Context, i int) error {
			_, err := o.V2Server.Put(ctx, o.V2ServerPadKey, strconv.Itoa(i))
			return err
		})
		padded += n
		if err != nil {
			return 0, padded, fmt.Errorf("raising the v2 server's index: %w", err)
		}
	}
}

// padBatch is how many pad writes go between two reads of the index.
const padBatch = 4096

// maxV2ServerPad bounds the writes a rollback makes to the v2 server to
// raise its index; beyond it the rollback stops.
const maxV2ServerPad = 1_000_000

// pad runs write n times, eight at a time, and returns how many succeeded.
func (o *Options) pad(ctx context.Context, n int, write func(context.Context, int) error) (int, error) {
	const workers = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards done and errs
		done int
		errs []error
	)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				err := write(ctx, i)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					done++
				}
				mu.Unlock()
			}
		}()
	}
	lastSaid := o.Now()
feed:
	for i := 0; i < n; i++ {
		mu.Lock()
		failed := len(errs) > 0
		mu.Unlock()
		if failed {
			break
		}
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
		if o.Now().Sub(lastSaid) > 5*time.Second {
			lastSaid = o.Now()
			o.logf("  %d of %d writes", i, n)
		}
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return done, errs[0]
	}
	return done, ctx.Err()
}
