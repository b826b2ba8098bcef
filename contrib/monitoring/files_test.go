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
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

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
		for _, n := range g.Rules {
			out = append(out, n)
		}
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
		anchor := strings.ToLower(r.Alert)
		if want := "docs/operations.md#" + anchor; r.Annotations["runbook"] != want {
			t.Errorf("%s: runbook annotation %q, want %q", r.Alert, r.Annotations["runbook"], want)
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
