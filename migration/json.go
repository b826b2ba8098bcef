// SPDX-License-Identifier: Apache-2.0

package migration

import (
	"encoding/json"
	"io"

	"github.com/v2bridge/v2bridge/cutover"
)

// Summary is a command's --output json object: what it did, then, once it
// ends, its result.
type Summary interface{ setResult(error) }

// result is every summary's head; alone, the summary of migrate or verify
// failing before it counted anything (the source or the cluster
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
	if command == "migrate cutover" || command == "migrate rollback" {
		return &jsonSwitch{result: result{Command: command}}
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

// writeJSON prints v as one indented object.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
