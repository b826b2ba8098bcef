// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/v2bridge/v2bridge/migrate/engine"
)

// row is one line of the table: a workload's metric.
type row struct {
	workload, metric, unit string
	lowerBetter            bool
}

type cellKey struct{ workload, metric, system string }

// results collects every run's figure and the cells a system cannot fill.
type results struct {
	mu    sync.Mutex
	rows  []row
	seen  map[[2]string]bool
	vals  map[cellKey][]float64
	na    map[cellKey]string
	notes []string
	// tables are sections with columns of their own, rendered after the
	// main table.
	tables []*table
}

func newResults() *results {
	return &results{seen: map[[2]string]bool{}, vals: map[cellKey][]float64{}, na: map[cellKey]string{}}
}

func (r *results) addRow(workload, metric, unit string, lowerBetter bool) {
	k := [2]string{workload, metric}
	if !r.seen[k] {
		r.seen[k] = true
		r.rows = append(r.rows, row{workload, metric, unit, lowerBetter})
	}
}

// add records one run's figure.
func (r *results) add(workload, system, metric, unit string, lowerBetter bool, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addRow(workload, metric, unit, lowerBetter)
	k := cellKey{workload, metric, system}
	r.vals[k] = append(r.vals[k], v)
	logf("    %-22s %-10s %-26s %12s %s", workload, system, metric, fmtNum(v), unit)
}

// unsupported marks every metric of the workload for this system as n/a.
func (r *results) unsupported(workload, system, why string, metrics ...row) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range metrics {
		r.addRow(workload, m.metric, m.unit, m.lowerBetter)
		r.na[cellKey{workload, m.metric, system}] = why
	}
	logf("    %-22s %-10s n/a: %s", workload, system, why)
}

// addTable adds a section with columns of its own (rendered, and written
// to the jsonl, after the main table).
func (r *results) addTable(t *table) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tables = append(r.tables, t)
}

func (r *results) note(format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprintf(format, a...)
	for _, n := range r.notes {
		if n == s {
			return
		}
	}
	r.notes = append(r.notes, s)
	warnf("%s", s)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "—"
	case a == 0:
		return "0"
	case a >= 1000:
		return commas(int64(math.Round(v)))
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// commas formats n with thousands separators, as migrate's progress does.
func commas(n int64) string { return engine.Count(int(n)) }

// ratioCols are the ratio columns, numerator ÷ denominator: the bridge over
// its embedded member against the others, then the bridge in its own
// process against the same external etcd's v3 and v2 APIs, then the bridge
// in passthrough mode against that etcd's v2 API it forwards to.
var ratioCols = []struct{ title, num, den string }{
	{"bridge/direct-v3", sysBridge, sysV3},
	{"bridge/etcd-v2", sysBridge, sysV2},
	{"bridge/v2v3", sysBridge, sysV2V3},
	{"bridge-ext/direct-v3-ext", sysBridgeExt, sysV3Ext},
	{"bridge-ext/etcd-v2", sysBridgeExt, sysV2},
	{"passthrough/etcd-v2", sysPassthrough, sysV2},
	{"v3-hop/direct-v3-ext", sysV3Hop, sysV3Ext},
}

// markdown renders the table: each cell the median of its runs, then the
// ratio columns.
func (r *results) markdown(header string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString(header)
	if len(r.rows) > 0 {
		r.mainTable(&b)
	}
	for _, t := range r.tables {
		b.WriteString(t.markdown())
	}
	return b.String()
}

// mainTable renders the systems side by side; r.mu is held.
func (r *results) mainTable(b *strings.Builder) {
	b.WriteString("\n| workload | metric | unit | v2bridge | direct clientv3 | etcd v2 | etcd v2v3 | v2bridge-ext | direct-v3-ext | v2bridge-passthrough | direct-v3-hop |")
	for _, rc := range ratioCols {
		b.WriteString(" " + rc.title + " |")
	}
	b.WriteString("\n|---|---|---|" + strings.Repeat("--:|", len(allSystems)+len(ratioCols)) + "\n")
	for _, rw := range r.rows {
		med := map[string]float64{}
		cells := make([]string, 0, len(allSystems))
		for _, sys := range allSystems {
			k := cellKey{rw.workload, rw.metric, sys}
			if why, ok := r.na[k]; ok {
				cells = append(cells, "n/a: "+why)
				continue
			}
			vs := r.vals[k]
			if len(vs) == 0 {
				cells = append(cells, "")
				continue
			}
			m := median(vs)
			med[sys] = m
			c := fmtNum(m)
			if len(vs) > 1 {
				c += fmt.Sprintf(" <sub>(%d)</sub>", len(vs))
			}
			cells = append(cells, c)
		}
		var ratios []string
		for _, rc := range ratioCols {
			bv, ok1 := med[rc.num]
			ov, ok2 := med[rc.den]
			switch {
			case !ok1 || !ok2:
				ratios = append(ratios, "")
			case ov == 0 && bv == 0:
				ratios = append(ratios, "=")
			case ov == 0:
				ratios = append(ratios, "∞")
			default:
				ratios = append(ratios, fmt.Sprintf("%.2f×", bv/ov))
			}
		}
		unit := rw.unit
		if rw.lowerBetter {
			unit += " ↓"
		} else {
			unit += " ↑"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", rw.workload, rw.metric, unit,
			strings.Join(cells, " | "), strings.Join(ratios, " | "))
	}
	if len(r.notes) > 0 {
		b.WriteString("\nNotes:\n")
		for _, n := range r.notes {
			b.WriteString("- " + n + "\n")
		}
	}
}

type jsonFigure struct {
	Workload string   `json:"workload"`
	System   string   `json:"system"`
	Metric   string   `json:"metric"`
	Value    *float64 `json:"value"`
	Unit     string   `json:"unit"`
	Note     string   `json:"note,omitempty"`
}

// writeFiles writes the markdown and one JSON object per figure (the
// median; n/a cells with a null value and a note).
func (r *results) writeFiles(dir, mdName, jsonlName, md string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	// The reports are committed with the sources: world-readable like them.
	//nolint:gosec // G306: 0o644 is meant (a committed report).
	if err := os.WriteFile(filepath.Join(dir, mdName), []byte(md), 0o644); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, rw := range r.rows {
		for _, sys := range allSystems {
			k := cellKey{rw.workload, rw.metric, sys}
			f := jsonFigure{Workload: rw.workload, System: sys, Metric: rw.metric, Unit: rw.unit}
			if why, ok := r.na[k]; ok {
				f.Note = why
			} else if vs := r.vals[k]; len(vs) > 0 {
				m := median(vs)
				f.Value = &m
			} else {
				continue
			}
			j, _ := json.Marshal(f)
			b.Write(j)
			b.WriteByte('\n')
		}
	}
	for _, t := range r.tables {
		b.WriteString(t.jsonl())
	}
	//nolint:gosec // G306: 0o644 is meant (a committed report).
	return os.WriteFile(filepath.Join(dir, jsonlName), []byte(b.String()), 0o644)
}

// ---------------------------------------------------------------- latency

// lat collects operation latencies.
type lat []time.Duration

func (l lat) pct(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := append(lat(nil), l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(q*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ---------------------------------------------------------------- logging

var logStart = time.Now()

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(logStart).Seconds(), fmt.Sprintf(format, a...))
}

func warnf(format string, a ...any) { logf("WARNING: "+format, a...) }

func fatalf(format string, a ...any) {
	logf("FATAL: "+format, a...)
	os.Exit(1)
}
