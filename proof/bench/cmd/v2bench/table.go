// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// table is a section of the report whose columns are not the systems of
// the main table (the shared-cluster section compares one bridge under
// two settings): a title, a paragraph saying what was measured, its own
// columns, and rows of figures, each cell the median of its runs.
type table struct {
	title, intro string
	workload     string   // the jsonl objects' workload
	cols         []string // column keys, in order (the jsonl objects' system)
	colTitles    []string // their headings
	ratio        [2]string
	ratioTitle   string // "" for no ratio column; else cols ratio[0] ÷ ratio[1]
	rows         []*tableRow
	notes        []string
}

type tableRow struct {
	metric, unit string
	lowerBetter  bool
	goal         string // what the figure should be (the goal column), or ""
	vals         map[string][]float64
}

// declare adds a row with no figures yet, so that rows keep the order
// they are declared in whichever column fills them first.
func (t *table) declare(metric, unit string, lowerBetter bool) {
	t.rows = append(t.rows, &tableRow{metric: metric, unit: unit, lowerBetter: lowerBetter, vals: map[string][]float64{}})
}

// add records one run's figure in column col. Callers hold no lock: the
// shared section fills its tables from one goroutine.
func (t *table) add(col, metric, unit string, lowerBetter bool, v float64) {
	t.addGoal(col, metric, unit, "", lowerBetter, v)
}

// addGoal is add for a row with a goal.
func (t *table) addGoal(col, metric, unit, goal string, lowerBetter bool, v float64) {
	var rw *tableRow
	for _, r := range t.rows {
		if r.metric == metric {
			rw = r
			break
		}
	}
	if rw == nil {
		rw = &tableRow{metric: metric, unit: unit, lowerBetter: lowerBetter, vals: map[string][]float64{}}
		t.rows = append(t.rows, rw)
	}
	if goal != "" {
		rw.goal = goal
	}
	rw.vals[col] = append(rw.vals[col], v)
	logf("    %-12s %-60s %12s %s", col, metric, fmtNum(v), unit)
}

// note records a problem (also logged as a warning).
func (t *table) note(format string, a ...any) {
	t.fact(format, a...)
	warnf(format, a...)
}

// fact records something the reader should know about the run.
func (t *table) fact(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	for _, n := range t.notes {
		if n == s {
			return
		}
	}
	t.notes = append(t.notes, s)
}

func (t *table) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## %s\n\n%s\n\n| metric | unit |", t.title, t.intro)
	for _, c := range t.colTitles {
		b.WriteString(" " + c + " |")
	}
	n := len(t.cols)
	if t.ratioTitle != "" {
		b.WriteString(" " + t.ratioTitle + " |")
		n++
	}
	goals := false
	for _, r := range t.rows {
		goals = goals || r.goal != ""
	}
	if goals {
		b.WriteString(" goal |")
		n++
	}
	b.WriteString("\n|---|---|" + strings.Repeat("--:|", n) + "\n")
	for _, r := range t.rows {
		unit := r.unit + " ↑"
		if r.lowerBetter {
			unit = r.unit + " ↓"
		}
		fmt.Fprintf(&b, "| %s | %s |", r.metric, unit)
		for _, c := range t.cols {
			vs := r.vals[c]
			cell := ""
			if len(vs) > 0 {
				cell = fmtCell(median(vs))
				if len(vs) > 1 {
					cell += fmt.Sprintf(" <sub>(%d)</sub>", len(vs))
				}
			}
			b.WriteString(" " + cell + " |")
		}
		if t.ratioTitle != "" {
			cell := ""
			num, den := r.vals[t.ratio[0]], r.vals[t.ratio[1]]
			if len(num) > 0 && len(den) > 0 && median(den) != 0 {
				cell = fmt.Sprintf("%.3g", median(num)/median(den))
			}
			b.WriteString(" " + cell + " |")
		}
		if goals {
			b.WriteString(" " + r.goal + " |")
		}
		b.WriteString("\n")
	}
	if len(t.notes) > 0 {
		b.WriteString("\nNotes:\n")
		for _, n := range t.notes {
			b.WriteString("- " + n + "\n")
		}
	}
	return b.String()
}

// fmtCell is fmtNum, but a whole number (a count) shows as one.
func fmtCell(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return commas(int64(v))
	}
	return fmtNum(v)
}

// jsonl is one object per cell (the median of its runs).
func (t *table) jsonl() string {
	var b strings.Builder
	for _, r := range t.rows {
		for _, c := range t.cols {
			vs := r.vals[c]
			if len(vs) == 0 {
				continue
			}
			m := median(vs)
			j, _ := json.Marshal(jsonFigure{Workload: t.workload, System: c, Metric: r.metric, Value: &m, Unit: r.unit})
			b.Write(j)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
