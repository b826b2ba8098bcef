// SPDX-License-Identifier: Apache-2.0

// Package monitoring holds the Prometheus alerting rules and the Grafana
// dashboard shipped for v2bridge, and the tests that hold them to the bridge:
// they parse with Prometheus's own parser, name only metrics a running bridge
// exports, and alert as documented on scrapes taken during a real fault.
//
// It is a module of its own so that Prometheus's dependencies stay out of
// the bridge's go.mod; make test runs it.
package monitoring

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

const (
	rulesFile     = "v2bridge-alerts.yaml"
	dashboardFile = "v2bridge-dashboard.json"
	runbookFile   = "../../docs/operations.md"
)

var promParser = parser.NewParser(parser.Options{})

// loadRules parses the rules file with Prometheus's rule loader, which also
// parses every expression and checks every template.
func loadRules(t *testing.T) []rulefmt.Rule {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promParser, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", rulesFile, errs)
	}
	var out []rulefmt.Rule
	for _, g := range groups.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// dashboard is the part of a Grafana dashboard model the tests read.
type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Panels  []panel
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens rows' nested panels.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// grafanaVars are the dashboard's variables and Grafana's built-in ones,
// with values that make a query plain PromQL.
var grafanaVars = strings.NewReplacer(
	"${job}", "v2bridge", "$job", "v2bridge",
	"${instance}", "bridge-0", "$instance", "bridge-0",
	"$__rate_interval", "1m", "$__interval", "15s", "$__range", "1h",
)

// labelValues is Grafana's label_values(selector, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_]+\)$`)

// dashboardQueries is every PromQL query of the dashboard, its variables
// replaced, keyed by where it is.
func dashboardQueries(t *testing.T, d dashboard) map[string]string {
	t.Helper()
	qs := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(selector, label)", v.Name, q)
		}
		qs["variable "+v.Name] = grafanaVars.Replace(m[1])
	}
	for _, p := range allPanels(d.Panels) {
		for i, tg := range p.Targets {
			qs[p.Title+" #"+string(rune('A'+i))] = grafanaVars.Replace(tg.Expr)
		}
	}
	return qs
}

// metricNames is every metric an expression selects.
func metricNames(e parser.Expr) []string {
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					name = m.Value
				}
			}
			out = append(out, name)
		}
		return nil
	})
	slices.Sort(out)
	return slices.Compact(out)
}

func TestAlertRulesParseAndHaveRunbooks(t *testing.T) {
	doc, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	anchors := headingAnchors(string(doc))
	rules := loadRules(t)
	if len(rules) == 0 {
		t.Fatal("no rules")
	}
	for _, r := range rules {
		if r.Alert == "" {
			t.Errorf("a recording rule (%s): the file holds alerts only", r.Record)
			continue
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
		}
		if r.Annotations["summary"] == "" {
			t.Errorf("%s: no summary", r.Alert)
		}
		if old, ok := r.Annotations["runbook"]; ok {
			t.Errorf("%s: a runbook annotation (%q): the name alert templates read is runbook_url", r.Alert, old)
		}
		// The runbook's URL: the one base every alert shares, and the
		// anchor GitHub gives the alert's section.
		if want := runbookBase + "#" + headingAnchor(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		if _, frag, _ := strings.Cut(r.Annotations["runbook_url"], "#"); !anchors[frag] {
			t.Errorf("%s: runbook_url %q: no heading of %s has the anchor %q", r.Alert, r.Annotations["runbook_url"], runbookFile, frag)
		}
		// The runbook: a heading of the alert's name with what it means,
		// what to check and what to do.
		sec := section(string(doc), "### "+r.Alert)
		if sec == "" {
			t.Errorf("%s: no '### %s' section in %s", r.Alert, r.Alert, runbookFile)
			continue
		}
		for _, part := range []string{"**Meaning.**", "**Check.**", "**Act.**"} {
			if !strings.Contains(sec, part) {
				t.Errorf("%s: its runbook section has no %s", r.Alert, part)
			}
		}
		// What the fault test holds the alert to, the runbook says.
		says := strings.Contains(sec, frozenMemberSentence)
		if fires := slices.Contains(firesOnFrozenMember, r.Alert); says != fires {
			t.Errorf("%s: in firesOnFrozenMember: %v; its runbook says %q: %v", r.Alert, fires, frozenMemberSentence, says)
		}
	}
}

// runbookBase is the runbooks' URL that every alert's runbook_url starts
// with: the one string an operator replaces to serve them elsewhere.
const runbookBase = "https://github.com/v2bridge/v2bridge/blob/main/docs/operations.md"

// headingAnchor is the anchor GitHub gives a markdown heading's text:
// lower case, punctuation but '-' and '_' dropped, spaces made '-'.
func headingAnchor(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// headingAnchors is the anchor of every heading of a markdown document
// (a repeated one also gets GitHub's "-1", "-2", ...).
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if inCode || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		a := headingAnchor(text)
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestRunbookBaseIsSetOnce: the command docs/operations.md gives to move
// the runbooks elsewhere changes every alert's runbook_url, and nothing
// else of the rules.
func TestRunbookBaseIsSetOnce(t *testing.T) {
	doc, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	sed := regexp.MustCompile(`sed (?:-i )?'s\|([^|]+)\|([^|]+)\|' ` + regexp.QuoteMeta(rulesFile)).FindStringSubmatch(string(doc))
	if sed == nil {
		t.Fatalf("%s shows no sed 's|base|yours|' %s: how an operator sets the runbooks' base URL", runbookFile, rulesFile)
	}
	if sed[1] != runbookBase {
		t.Fatalf("%s: its sed replaces %q, but the rules' base is %q", runbookFile, sed[1], runbookBase)
	}
	orig, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), rulesFile)
	if err := os.WriteFile(moved, []byte(strings.ReplaceAll(string(orig), sed[1], sed[2])), 0o600); err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.ParseFile(moved, false, model.UTF8Validation, promParser, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("the rules after the sed: %v", errs)
	}
	before := loadRules(t)
	var after []rulefmt.Rule
	for _, g := range groups.Groups {
		after = append(after, g.Rules...)
	}
	if len(after) != len(before) {
		t.Fatalf("%d rules after the sed, %d before", len(after), len(before))
	}
	for i, r := range after {
		want := sed[2] + "#" + headingAnchor(r.Alert)
		if r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url after the sed %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		r.Annotations["runbook_url"] = before[i].Annotations["runbook_url"]
		if !reflect.DeepEqual(r, before[i]) {
			t.Errorf("%s: the sed changed more than its runbook_url", r.Alert)
		}
	}
}

// section is the text of a markdown section from its heading to the next
// heading of the same or a higher level.
func section(doc, heading string) string {
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := doc[i+len(heading)+2:]
	if j := regexp.MustCompile(`(?m)^#{1,3} `).FindStringIndex(rest); j != nil {
		rest = rest[:j[0]]
	}
	return rest
}

func TestDashboardParses(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 { // 36: Grafana 9.0
		t.Errorf("uid %q, title %q, schemaVersion %d: want a uid, a title and a Grafana 9+ schema", d.UID, d.Title, d.SchemaVersion)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	for _, want := range []string{"datasource", "job", "instance"} {
		if !slices.Contains(vars, want) {
			t.Errorf("no %s variable (has %v)", want, vars)
		}
	}
	qs := dashboardQueries(t, d)
	if len(qs) < 20 {
		t.Errorf("%d queries: the dashboard lost its panels", len(qs))
	}
	ids := map[int]string{}
	for _, p := range allPanels(d.Panels) {
		if prev, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `instance=~"$instance"`) || !strings.Contains(tg.Expr, `job=~"$job"`) {
				t.Errorf("panel %q: %s does not select $job and $instance", p.Title, tg.Expr)
			}
		}
	}
	for where, q := range qs {
		if _, err := promParser.ParseExpr(q); err != nil {
			t.Errorf("%s: %s: %v", where, q, err)
		}
	}
}
