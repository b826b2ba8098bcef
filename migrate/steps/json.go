// SPDX-License-Identifier: Apache-2.0

package steps

import (
	"encoding/json"
	"io"
	"strings"

	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/migrate/engine"
	"github.com/v2bridge/v2bridge/migrate/shadow"
)

// Summary is a command's --output json object: what it did, then, once it
// ends, its result.
type Summary interface{ setResult(error) }

// result is every summary's head; alone, the summary of migrate or verify
// failing before it counted anything (the v2 server or the cluster
// unreachable, a bad setting).
type result struct {
	Command string `json:"command"`
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
}

func (r *result) setResult(err error) {
	r.OK = err == nil
	if err != nil {
		r.Error = err.Error()
	}
}

// Failed is the summary of command ("migrate", "verify", "migrate
// cutover", "migrate rollback") failing before it started; cutover's and
// rollback's have all their fields.
func Failed(command string) Summary {
	if cmd, ok := strings.CutPrefix(command, "migrate "); ok {
		return switchSummary(cmd, nil)
	}
	return &result{Command: command}
}

// WriteJSON writes s with the command's result err, as one indented object.
func WriteJSON(w io.Writer, s Summary, err error) {
	s.setResult(err)
	writeJSON(w, s)
}

// jsonSwitch is the summary of cutover and rollback.
type jsonSwitch struct {
	result
	Changed  bool            `json:"changed"`
	Record   *cutover.Record `json:"record,omitempty"`
	Bridges  int             `json:"bridges"`
	Padded   int             `json:"padded"`
	V3Writes int             `json:"v3Writes,omitempty"`
	// Discarded (rollback) is every node written through etcd v3 since the
	// cutover, as it is now: what --force loses.
	Discarded []cutover.Discarded `json:"discarded,omitempty"`
	// Auth (cutover) is the last copy of the users and roles.
	Auth    *cutover.AuthCopy `json:"auth,omitempty"`
	Seconds float64           `json:"durationSeconds"`
}

// The JSON summaries of `migrate --output json` and `verify --output json`:
// one object on stdout when the command ends, for scripts; progress and
// notes stay on stderr.

type jsonTarget struct {
	Endpoints  []string `json:"endpoints"`
	DataPrefix string   `json:"dataPrefix"`
	MetaPrefix string   `json:"metaPrefix"`
}

type jsonIssue struct {
	Path   string `json:"path"`
	Kind   string `json:"kind,omitempty"`
	Detail string `json:"detail"`
	Below  int    `json:"below,omitempty"`
}

type jsonTree struct {
	Keys         int    `json:"keys"`
	Dirs         int    `json:"dirs"`
	EmptyDirs    int    `json:"emptyDirs"`
	TTLNodes     int    `json:"ttlNodes"`
	HiddenNodes  int    `json:"hiddenNodes"`
	Bytes        int64  `json:"bytes"`
	LargestValue int    `json:"largestValue"`
	LargestKey   string `json:"largestKey,omitempty"`
}

type jsonFollow struct {
	Events       int         `json:"events"`
	Applied      int         `json:"applied"`
	Unchanged    int         `json:"unchanged"`
	TTLRefreshed int         `json:"ttlRefreshed"`
	Resyncs      int         `json:"resyncs"`
	Index        uint64      `json:"index"`
	Conflicts    []jsonIssue `json:"conflicts"`
	Failures     []jsonIssue `json:"failures"`
}

type jsonMigrate struct {
	result
	DryRun          bool        `json:"dryRun"`
	Source          string      `json:"source"`
	Prefix          string      `json:"prefix"`
	Index           uint64      `json:"index"`
	Target          jsonTarget  `json:"target"`
	Tree            jsonTree    `json:"tree"`
	HiddenNamed     []string    `json:"hiddenNamed"`
	HiddenFound     []string    `json:"hiddenFound"`
	Created         int         `json:"created"`
	Updated         int         `json:"updated"`
	Unchanged       int         `json:"unchanged"`
	Expired         int         `json:"expired"`
	Extra           int         `json:"extra"`
	Deleted         int         `json:"deleted"`
	Conflicts       []jsonIssue `json:"conflicts"`
	Failures        []jsonIssue `json:"failures"`
	Complete        bool        `json:"complete"`
	DurationSeconds float64     `json:"durationSeconds"`
	Follow          *jsonFollow `json:"follow,omitempty"`
	Auth            *jsonAuth   `json:"auth,omitempty"`
}

type jsonVerify struct {
	result
	Source      string      `json:"source"`
	Prefix      string      `json:"prefix"`
	Target      jsonTarget  `json:"target"`
	SourceNodes int         `json:"sourceNodes"`
	BridgeNodes int         `json:"bridgeNodes"`
	HiddenNamed []string    `json:"hiddenNamed"`
	HiddenFound []string    `json:"hiddenFound"`
	Differences []jsonIssue `json:"differences"`
	// NotCompared are the v2 server's nodes the bridges serve (--serve-prefix)
	// that lie outside --v2-server-prefix, so were not compared.
	NotCompared     []string    `json:"notCompared,omitempty"`
	DurationSeconds float64     `json:"durationSeconds"`
	Shadow          *jsonShadow `json:"shadow,omitempty"`
	// Auth compares the users, roles and enabled flag.
	Auth *jsonAuthReport `json:"auth,omitempty"`
}

func conflictsJSON(cs []engine.Conflict) []jsonIssue {
	out := []jsonIssue{}
	for _, c := range cs {
		out = append(out, jsonIssue{Path: c.Path, Kind: c.Kind, Detail: c.Detail, Below: c.Below})
	}
	return out
}

func failuresJSON(fs []engine.Failure) []jsonIssue {
	out := []jsonIssue{}
	for _, f := range fs {
		out = append(out, jsonIssue{Path: f.Path, Detail: f.Err.Error()})
	}
	return out
}

func orEmpty(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

func migrateJSON(s *engine.Summary, t jsonTarget, fst *engine.FollowStats) *jsonMigrate {
	j := &jsonMigrate{
		result: result{Command: "migrate"}, DryRun: s.DryRun, Source: s.V2Server, Prefix: s.Prefix, Index: s.Index, Target: t,
		Tree: jsonTree{Keys: s.Keys, Dirs: s.Dirs, EmptyDirs: s.EmptyDirs, TTLNodes: s.TTLKeys, HiddenNodes: s.Hidden,
			Bytes: s.Bytes, LargestValue: s.LargestValue, LargestKey: s.LargestKey},
		HiddenNamed: orEmpty(s.HiddenNamed), HiddenFound: orEmpty(s.HiddenFound),
		Created: s.Created, Updated: s.Updated, Unchanged: s.Unchanged, Expired: s.Expired, Extra: s.Extra, Deleted: s.Deleted,
		Conflicts: conflictsJSON(s.Conflicts), Failures: failuresJSON(s.Failures),
		Complete: s.Complete, DurationSeconds: s.Duration.Seconds(),
	}
	if fst != nil {
		j.Follow = &jsonFollow{Events: fst.Events, Applied: fst.Applied, Unchanged: fst.Unchanged,
			TTLRefreshed: fst.TTLRefreshed, Resyncs: fst.Resyncs, Index: fst.Index,
			Conflicts: conflictsJSON(fst.Conflicts), Failures: failuresJSON(fst.Failures)}
	}
	return j
}

func verifyJSON(r *engine.Report, t jsonTarget) *jsonVerify {
	j := &jsonVerify{result: result{Command: "verify"}, Source: r.V2Server, Prefix: r.Prefix, Target: t,
		SourceNodes: r.V2ServerNodes, BridgeNodes: r.BridgeNodes,
		HiddenNamed: orEmpty(r.HiddenNamed), HiddenFound: orEmpty(r.HiddenFound),
		Differences: []jsonIssue{}, DurationSeconds: r.Duration.Seconds()}
	for _, d := range r.Differences {
		j.Differences = append(j.Differences, jsonIssue{Path: d.Path, Kind: d.Kind, Detail: d.Detail, Below: d.Below})
	}
	return j
}

// writeJSON prints v as one indented object.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

type jsonAuth struct {
	Enabled          bool     `json:"enabled"`
	Users            []string `json:"users"`
	Roles            []string `json:"roles"`
	UnknownPasswords []string `json:"unknownPasswords"`
	Changed          bool     `json:"changed"`
}

func authJSON(s *engine.AuthSummary) *jsonAuth {
	return &jsonAuth{Enabled: s.Enabled, Users: orEmpty(s.Users), Roles: orEmpty(s.Roles),
		UnknownPasswords: orEmpty(s.UnknownPasswords), Changed: s.Changed}
}

type jsonAuthReport struct {
	Differences      []jsonIssue `json:"differences"`
	UnknownPasswords []string    `json:"unknownPasswords"`
}

func authReportJSON(r *engine.AuthReport) *jsonAuthReport {
	j := &jsonAuthReport{Differences: []jsonIssue{}, UnknownPasswords: orEmpty(r.UnknownPasswords)}
	for _, d := range r.Differences {
		j.Differences = append(j.Differences, jsonIssue{Path: d.What, Kind: "auth", Detail: d.Detail})
	}
	return j
}

// jsonShadow is the shadow part of verify's JSON summary.
type jsonShadow struct {
	Bridges []shadow.Record `json:"bridges"`
	Total   shadow.Counts   `json:"total"`
	// Followed is the prefix `migrate --follow` copies; Narrower, the
	// bridges whose shadow prefix covers less of it.
	Followed string   `json:"followed,omitempty"`
	Narrower []string `json:"narrower,omitempty"`
	Error    string   `json:"error,omitempty"`
}

func shadowJSON(recs []shadow.Record, followed string, err error) *jsonShadow {
	j := &jsonShadow{Bridges: []shadow.Record{}, Total: shadow.Total(recs), Followed: followed,
		Narrower: narrower(recs, followed)}
	if err != nil {
		j.Error = err.Error()
	}
	j.Bridges = append(j.Bridges, recs...)
	return j
}

// OutputHelp is the part of command's usage text ("migrate", "verify",
// "migrate cutover", "migrate rollback") that describes its --output json
// object and exit status.
func OutputHelp(command string) string {
	switch command {
	case "migrate":
		return `
--output json prints one object on stdout however the command ends (only
command, ok and error if it fails before counting anything): command, ok,
error (the message on stderr), source, prefix, target (endpoints,
dataPrefix, metaPrefix), the tree counts, created, updated, unchanged,
expired, extra, deleted, conflicts and failures (each path, kind, detail),
complete, durationSeconds and, with --follow, follow.
Exit status: 0 when everything was copied; 1 on any error, conflict or
failed node, the reason on stderr. Progress and notes go to stderr.
`
	case "verify":
		return `
--output json prints one object on stdout however the command ends: command,
ok, error (the message on stderr), source, prefix, target (endpoints,
dataPrefix, metaPrefix), sourceNodes, bridgeNodes, every one of the
differences (each path, kind, detail; --max-differences limits only the
text), notCompared, and shadow: bridges (each record's name, host,
advertiseURLs, prefix, sampleRate, started, updated, counts, recent,
perSecond, pendingWrites, laggingWrites, followerIndex) and total.
Exit status: 0 when nothing differs; 1 on any error or difference, the
reason on stderr. Progress and notes go to stderr.
`
	}
	return `
--output json prints one object on stdout however the command ends, the
steps going to stderr: command, ok, error (the message on stderr), changed,
record, bridges, padded, v3Writes, discarded (a rollback's writes made
through etcd v3 since the cutover, each node once as it is now), auth and
durationSeconds.
Exit status: 0 when done; 1 on any error, the reason on stderr.
`
}
