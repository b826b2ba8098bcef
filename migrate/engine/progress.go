// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ProgressPrinter renders Progress: on a terminal as one line rewritten in
// place (carriage return), otherwise as a plain line at most every Interval
// and at each change of phase, which suits logs and CI output.
type ProgressPrinter struct {
	W        io.Writer
	TTY      bool
	Interval time.Duration // for non-terminals; default 5s

	mu        sync.Mutex
	last      time.Time
	lastPhase string
	width     int
}

// Update renders p (use it as Options.Progress).
func (pp *ProgressPrinter) Update(p Progress) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	line := FormatProgress(p)
	if pp.TTY {
		pad := ""
		if n := pp.width - len(line); n > 0 {
			pad = strings.Repeat(" ", n)
		}
		_, _ = fmt.Fprint(pp.W, "\r"+line+pad)
		pp.width = len(line)
		return
	}
	every := pp.Interval
	if every == 0 {
		every = 5 * time.Second
	}
	if p.Phase == pp.lastPhase && time.Since(pp.last) < every {
		return
	}
	pp.last, pp.lastPhase = time.Now(), p.Phase
	_, _ = fmt.Fprintln(pp.W, line)
}

// Println prints a message without garbling the progress line.
func (pp *ProgressPrinter) Println(msg string) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.TTY && pp.width > 0 {
		_, _ = fmt.Fprint(pp.W, "\r"+strings.Repeat(" ", pp.width)+"\r")
		pp.width = 0
	}
	_, _ = fmt.Fprintln(pp.W, msg)
}

// Finish ends the terminal line.
func (pp *ProgressPrinter) Finish() {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.TTY && pp.width > 0 {
		_, _ = fmt.Fprintln(pp.W)
		pp.width = 0
	}
}

// FormatProgress is the one-line text of p.
func FormatProgress(p Progress) string {
	switch p.Phase {
	case "copying", "verifying":
		s := fmt.Sprintf("%s: %s/%s nodes", p.Phase, Count(p.Done), Count(p.Total))
		if p.Total > 0 {
			s += fmt.Sprintf(" (%d%%)", p.Done*100/p.Total)
		}
		if p.Phase == "copying" {
			s += fmt.Sprintf(", %s writes, %s", Count(p.Written), Bytes(p.Bytes))
		}
		if p.Rate > 0 {
			s += fmt.Sprintf(", %s nodes/s, ETA %s", Count(int(p.Rate+0.5)), p.ETA.Round(time.Second))
		}
		return s
	case "following":
		s := fmt.Sprintf("following: %s events, v2 server index %d, %d conflicts", Count(p.Events), p.Index, p.Conflicts)
		if p.Resyncs > 0 {
			s += fmt.Sprintf(", %d re-syncs", p.Resyncs)
		}
		return s
	case "done":
		return fmt.Sprintf("done: %s nodes in %s", Count(p.Total), p.Elapsed.Round(time.Millisecond))
	default:
		if p.Total > 0 {
			return fmt.Sprintf("%s (%s nodes on the v2 server)...", p.Phase, Count(p.Total))
		}
		return p.Phase + "..."
	}
}

// Count formats n with thousands separators.
func Count(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Bytes formats a byte count.
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
