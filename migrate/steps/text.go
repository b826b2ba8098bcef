// SPDX-License-Identifier: Apache-2.0

package steps

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/migrate/engine"
	"github.com/v2bridge/v2bridge/migrate/shadow"
)

// The text summaries, on stdout.

func printSummary(w io.Writer, s *engine.Summary, target string) {
	would := func(done, will string) string {
		if s.DryRun {
			return will
		}
		return done
	}
	if s.DryRun {
		_, _ = fmt.Fprintln(w, "dry run: nothing was written")
	}
	_, _ = fmt.Fprintf(w, "source       %s %s (index %d)\n", s.V2Server, s.Prefix, s.Index)
	_, _ = fmt.Fprintf(w, "target       %s\n", target)
	_, _ = fmt.Fprintf(w, "tree         %s keys, %s directories (%s empty), %s TTL nodes, %s hidden nodes, %s",
		engine.Count(s.Keys), engine.Count(s.Dirs), engine.Count(s.EmptyDirs), engine.Count(s.TTLKeys),
		engine.Count(s.Hidden), engine.Bytes(s.Bytes))
	if s.LargestKey != "" {
		_, _ = fmt.Fprintf(w, " (largest value %s at %s)", engine.Bytes(int64(s.LargestValue)), s.LargestKey)
	}
	_, _ = fmt.Fprintln(w)
	if len(s.HiddenNamed)+len(s.HiddenFound) > 0 {
		_, _ = fmt.Fprintf(w, "hidden       named: %s; found in the v2 server's event history: %s\n", orNone(s.HiddenNamed), orNone(s.HiddenFound))
	}
	_, _ = fmt.Fprintf(w, "%s %s created, %s updated, %s already there, %s expired on the v2 server first\n",
		would("written     ", "would write "), engine.Count(s.Created), engine.Count(s.Updated),
		engine.Count(s.Unchanged), engine.Count(s.Expired))
	if s.Extra > 0 {
		_, _ = fmt.Fprintf(w, "extra        %s nodes on the bridge are not on the source; %s %s (--prune deletes the rest)\n",
			engine.Count(s.Extra), engine.Count(s.Deleted), would("deleted", "would be deleted"))
	}
	_, _ = fmt.Fprintf(w, "conflicts    %d\n", len(s.Conflicts))
	for _, c := range s.Conflicts {
		_, _ = fmt.Fprintln(w, "  "+c.String())
	}
	if len(s.Failures) > 0 {
		_, _ = fmt.Fprintf(w, "failed       %d\n", len(s.Failures))
		for _, f := range s.Failures {
			_, _ = fmt.Fprintln(w, "  "+f.String())
		}
	}
	_, _ = fmt.Fprintf(w, "duration     %s (%s nodes/s)\n", s.Duration.Round(time.Millisecond), engine.Count(int(s.Rate()+0.5)))
}

func printReport(w io.Writer, r *engine.Report, target string, maxDiffs int) {
	_, _ = fmt.Fprintf(w, "source       %s %s: %s nodes\n", r.V2Server, r.Prefix, engine.Count(r.V2ServerNodes))
	_, _ = fmt.Fprintf(w, "bridge       %s: %s nodes\n", target, engine.Count(r.BridgeNodes))
	if len(r.HiddenNamed)+len(r.HiddenFound) > 0 {
		_, _ = fmt.Fprintf(w, "hidden       named: %s; found in the v2 server's event history: %s\n", orNone(r.HiddenNamed), orNone(r.HiddenFound))
	}
	kinds := map[string]int{}
	for _, d := range r.Differences {
		kinds[d.Kind]++
	}
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(parts)
	_, _ = fmt.Fprintf(w, "differences  %d", len(r.Differences))
	if len(parts) > 0 {
		_, _ = fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	_, _ = fmt.Fprintln(w)
	for i, d := range r.Differences {
		if maxDiffs >= 0 && i >= maxDiffs {
			_, _ = fmt.Fprintf(w, "  ... and %d more\n", len(r.Differences)-i)
			break
		}
		_, _ = fmt.Fprintln(w, "  "+d.String())
	}
	_, _ = fmt.Fprintf(w, "duration     %s\n", r.Duration.Round(time.Millisecond))
}

func printFollowStats(w io.Writer, fst *engine.FollowStats) {
	_, _ = fmt.Fprintf(w, "followed     %s events up to source index %d: %s applied, %s already there, %d TTLs carried over, %d re-syncs, %d conflicts, %d failures\n",
		engine.Count(fst.Events), fst.Index, engine.Count(fst.Applied), engine.Count(fst.Unchanged),
		fst.TTLRefreshed, fst.Resyncs, len(fst.Conflicts), len(fst.Failures))
	for _, c := range fst.Conflicts {
		_, _ = fmt.Fprintln(w, "  conflict:", c)
	}
	for _, f := range fst.Failures {
		_, _ = fmt.Fprintln(w, "  failed:", f)
	}
}

func orNone(ps []string) string {
	if len(ps) == 0 {
		return "none"
	}
	return strings.Join(ps, ", ")
}

// printAuthSummary is migrate's line about the auth data.
func printAuthSummary(w io.Writer, s *engine.AuthSummary) {
	state := "disabled"
	if s.Enabled {
		state = "enabled"
	}
	what := "unchanged"
	switch {
	case s.Changed && s.DryRun:
		what = "would be written"
	case s.Changed:
		what = "written"
	}
	_, _ = fmt.Fprintf(w, "auth         %s on the source, %d users, %d roles: %s\n", state, len(s.Users), len(s.Roles), what)
	if len(s.UnknownPasswords) > 0 {
		_, _ = fmt.Fprintf(w, "passwords    unknown for %s: each is learned from its next request a dual-mode bridge forwards\n",
			strings.Join(s.UnknownPasswords, ", "))
	}
}

// printAuthReport is verify's lines about the auth data.
func printAuthReport(w io.Writer, r *engine.AuthReport) {
	_, _ = fmt.Fprintf(w, "auth         %d differences\n", len(r.Differences))
	for _, d := range r.Differences {
		_, _ = fmt.Fprintln(w, "  "+d.String())
	}
	if len(r.UnknownPasswords) > 0 {
		_, _ = fmt.Fprintf(w, "passwords    unknown to the bridges for %s\n", strings.Join(r.UnknownPasswords, ", "))
	}
}

// narrower names the bridges whose shadow comparison covers less than the
// followed copy: a divergence outside their prefix is never seen.
func narrower(recs []shadow.Record, followed string) []string {
	var out []string
	for _, r := range recs {
		if followed != "" && !cutover.Covers(r.Prefix, followed) {
			out = append(out, fmt.Sprintf("%s on %s (%s)", r.Name, r.Host, strings.Join(r.AdvertiseURLs, ",")))
		}
	}
	return out
}

// printShadow prints the shadow summary after verify's own, and a warning
// line for each bridge comparing less than the followed copy; a failure to
// read it is reported, and does not fail verify.
func printShadow(w io.Writer, recs []shadow.Record, followed string, err error) {
	if err != nil {
		_, _ = fmt.Fprintf(w, "shadow       could not read the bridges' shadow records: %v\n", err)
		return
	}
	shadow.WriteSummary(w, recs, time.Now())
	for _, b := range narrower(recs, followed) {
		_, _ = fmt.Fprintf(w, "  warning: %s compares less than the followed copy %s (its --shadow-prefix): "+
			"what lies outside is never checked\n", b, followed)
	}
}
