// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/v2bridge/v2bridge/migrate"
)

// authFollowInterval is how often `migrate --follow` reads the old server's
// auth data again: v2 has no watch on it.
const authFollowInterval = 5 * time.Second

// printAuthSummary is migrate's line about the auth data.
func printAuthSummary(w io.Writer, s *migrate.AuthSummary) {
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
func printAuthReport(w io.Writer, r *migrate.AuthReport) {
	_, _ = fmt.Fprintf(w, "auth         %d differences\n", len(r.Differences))
	for _, d := range r.Differences {
		_, _ = fmt.Fprintln(w, "  "+d.String())
	}
	if len(r.UnknownPasswords) > 0 {
		_, _ = fmt.Fprintf(w, "passwords    unknown to the bridges for %s\n", strings.Join(r.UnknownPasswords, ", "))
	}
}

type jsonAuth struct {
	Enabled          bool     `json:"enabled"`
	Users            []string `json:"users"`
	Roles            []string `json:"roles"`
	UnknownPasswords []string `json:"unknownPasswords"`
	Changed          bool     `json:"changed"`
}

func authJSON(s *migrate.AuthSummary) *jsonAuth {
	return &jsonAuth{Enabled: s.Enabled, Users: orEmpty(s.Users), Roles: orEmpty(s.Roles),
		UnknownPasswords: orEmpty(s.UnknownPasswords), Changed: s.Changed}
}

type jsonAuthReport struct {
	Differences      []jsonIssue `json:"differences"`
	UnknownPasswords []string    `json:"unknownPasswords"`
}

func authReportJSON(r *migrate.AuthReport) *jsonAuthReport {
	j := &jsonAuthReport{Differences: []jsonIssue{}, UnknownPasswords: orEmpty(r.UnknownPasswords)}
	for _, d := range r.Differences {
		j.Differences = append(j.Differences, jsonIssue{Path: d.What, Kind: "auth", Detail: d.Detail})
	}
	return j
}
