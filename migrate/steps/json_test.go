// SPDX-License-Identifier: Apache-2.0

package steps

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/migrate/cutover"
	"github.com/v2bridge/v2bridge/migrate/engine"
)

func jsonOf(s Summary, err error) string {
	var b strings.Builder
	WriteJSON(&b, s, err)
	return b.String()
}

func TestASummaryBeforeAnythingRanNamesTheCommandAndItsResult(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		err  error
		want string
	}{
		{"migrate", errors.New("migrate: --from is required"),
			"{\n  \"command\": \"migrate\",\n  \"ok\": false,\n  \"error\": \"migrate: --from is required\"\n}\n"},
		{"verify", nil, "{\n  \"command\": \"verify\",\n  \"ok\": true\n}\n"},
		// cutover's and rollback's summary has every field from the start.
		{"migrate rollback", errors.New("no"), "{\n  \"command\": \"migrate rollback\",\n  \"ok\": false,\n  \"error\": \"no\",\n" +
			"  \"changed\": false,\n  \"bridges\": 0,\n  \"padded\": 0,\n  \"durationSeconds\": 0\n}\n"},
	} {
		if got := jsonOf(Failed(c.cmd), c.err); got != c.want {
			t.Errorf("%s: got\n%s\nwant\n%s", c.cmd, got, c.want)
		}
	}
}

func TestTheMigrateSummaryKeepsItsFieldOrder(t *testing.T) {
	s := &engine.Summary{V2Server: "http://old:2379", Prefix: "/a", Index: 7, Keys: 2, Dirs: 1, Created: 2,
		Conflicts: []engine.Conflict{{Path: "/a/x", Kind: engine.KindValue, Detail: "differs"}}, Duration: time.Second}
	js := migrateJSON(s, jsonTarget{Endpoints: []string{"http://m:2379"}, MetaPrefix: "_v2bridge/"}, &engine.FollowStats{Index: 9})
	want := `{
  "command": "migrate",
  "ok": false,
  "error": "migrate: 1 conflicting node(s) left unchanged; run again with --overwrite to replace them with the v2 server's",
  "dryRun": false,
  "source": "http://old:2379",
  "prefix": "/a",
  "index": 7,
  "target": {
    "endpoints": [
      "http://m:2379"
    ],
    "dataPrefix": "",
    "metaPrefix": "_v2bridge/"
  },
  "tree": {
    "keys": 2,
    "dirs": 1,
    "emptyDirs": 0,
    "ttlNodes": 0,
    "hiddenNodes": 0,
    "bytes": 0,
    "largestValue": 0
  },
  "hiddenNamed": [],
  "hiddenFound": [],
  "created": 2,
  "updated": 0,
  "unchanged": 0,
  "expired": 0,
  "extra": 0,
  "deleted": 0,
  "conflicts": [
    {
      "path": "/a/x",
      "kind": "value",
      "detail": "differs"
    }
  ],
  "failures": [],
  "complete": false,
  "durationSeconds": 1,
  "follow": {
    "events": 0,
    "applied": 0,
    "unchanged": 0,
    "ttlRefreshed": 0,
    "resyncs": 0,
    "index": 9,
    "conflicts": [],
    "failures": []
  }
}
`
	if got := jsonOf(js, conflictError(1, false)); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestTheSwitchSummaryCarriesTheResult(t *testing.T) {
	res := &cutover.Result{Changed: true, Record: &cutover.Record{Mode: "passthrough", Generation: 3, By: "op@host",
		At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, Bridges: 2, Padded: 1, V3Writes: 1,
		Discarded: []cutover.Discarded{{Path: "/a/x", Value: "v"}}, Duration: 1500 * time.Millisecond}
	want := `{
  "command": "migrate rollback",
  "ok": true,
  "changed": true,
  "record": {
    "mode": "passthrough",
    "generation": 3,
    "by": "op@host",
    "at": "2026-01-02T03:04:05Z"
  },
  "bridges": 2,
  "padded": 1,
  "v3Writes": 1,
  "discarded": [
    {
      "path": "/a/x",
      "value": "v"
    }
  ],
  "durationSeconds": 1.5
}
`
	if got := jsonOf(switchSummary("rollback", res), nil); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
