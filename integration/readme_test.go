// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// readmeCurls are the curl command lines of README.md's examples, verbatim.
func readmeCurls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "curl ") {
			out = append(out, line)
		}
	}
	return out
}

// TestReadmeCurlExamples runs every curl line of README.md as written, with
// curl's defaults, against a bridge started as the README's TLS example
// starts it (client-certificate auth, a plain metrics listener): only the
// addresses are this test's own, and the certificate files are those the
// example names, in the directory curl runs in.
func TestReadmeCurlExamples(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		missingClient(t, "curl is not installed")
	}
	curls := readmeCurls(t)
	if len(curls) != 4 {
		t.Fatalf("README has %d curl lines, this test knows 4: %q", len(curls), curls)
	}
	p := newPKI(t) // ca.pem
	scert, skey := p.issue("bridge", "bridge", true)
	p.issue("flannel", "flannel", false) // flannel.pem, flannel-key.pem
	var plain, tlsURL, metrics string
	startHealthyBridge(t, func() (string, []string, []string) {
		_, args := embeddedArgs(t)
		plain, metrics = v2bridgetest.FreeURL(t), v2bridgetest.FreeURL(t)
		tlsURL = "https://" + strings.TrimPrefix(v2bridgetest.FreeURL(t), "http://")
		return metrics, nil, append(args, "--listen-client-urls", plain+","+tlsURL, "--cert-file", scert,
			"--key-file", skey, "--trusted-ca-file", filepath.Join(p.dir, "ca.pem"), "--client-cert-auth",
			"--listen-metrics-urls", metrics)
	})
	host := func(u string) string { return u[strings.Index(u, "//")+2:] }
	local := strings.NewReplacer(
		"https://10.0.0.5:2379", tlsURL,
		"http://127.0.0.1:9379", metrics,
		"127.0.0.1:2379", host(plain),
	)
	run := func(ctx context.Context, line string) (string, error) {
		cmd := exec.CommandContext(ctx, "sh", "-c", local.Replace(line))
		cmd.Dir = p.dir
		var stderr strings.Builder
		cmd.Stderr = &stderr // curl's progress meter, and its errors
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, stderr.String())
		}
		return string(out), err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The watch waits first; the write answers it.
	watched := make(chan string, 1)
	go func() {
		out, err := run(ctx, curls[1])
		if err != nil {
			out += " (" + err.Error() + ")"
		}
		watched <- out
	}()
	waitFor(t, 10*time.Second, "the README's watch to wait", func() bool {
		return scrapeMetric(t, metrics, "v2bridge_v2_watchers") == 1
	})
	out, err := run(ctx, curls[0])
	if err != nil {
		t.Fatalf("%s: %v\n%s", curls[0], err, out)
	}
	set := decodeEvent(t, curls[0], out)
	if set.Action != "set" || set.Node.Key != "/foo" || set.Node.Value != "bar" || set.Node.ModifiedIndex == 0 ||
		set.Node.CreatedIndex != set.Node.ModifiedIndex || set.PrevNode != nil {
		t.Fatalf("%s: %+v", curls[0], set)
	}
	select {
	case out := <-watched:
		if got := decodeEvent(t, curls[1], out); got.Action != "set" || got.Node != set.Node {
			t.Fatalf("%s: %+v, want the write's event %+v", curls[1], got, set)
		}
	case <-ctx.Done():
		t.Fatalf("%s: no answer", curls[1])
	}

	out, err = run(ctx, curls[2])
	if err != nil {
		t.Fatalf("%s: %v\n%s", curls[2], err, out)
	}
	var list struct {
		Action string `json:"action"`
		Node   struct {
			Dir   bool `json:"dir"`
			Nodes []struct {
				Key   string `json:"key"`
				Value string `json:"value"`
			} `json:"nodes"`
		} `json:"node"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || list.Action != "get" || !list.Node.Dir ||
		len(list.Node.Nodes) != 1 || list.Node.Nodes[0].Key != "/foo" || list.Node.Nodes[0].Value != "bar" {
		t.Fatalf("%s: %q (%v)", curls[2], out, err)
	}

	out, err = run(ctx, curls[3])
	if err != nil {
		t.Fatalf("%s: %v\n%s", curls[3], err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	metric := regexp.MustCompile(`^v2bridge_[a-z0-9_]+({.*})? [-+0-9.eEInfNa]+$`)
	for _, l := range lines {
		if !metric.MatchString(l) {
			t.Fatalf("%s: line %q is not a v2bridge metric", curls[3], l)
		}
	}
	if !strings.Contains(out, "\nv2bridge_backend_up 1\n") {
		t.Fatalf("%s: no v2bridge_backend_up 1 in %d lines", curls[3], len(lines))
	}
}

// readmeEvent is a v2 answer with one node.
type readmeEvent struct {
	Action string `json:"action"`
	Node   struct {
		Key           string `json:"key"`
		Value         string `json:"value"`
		ModifiedIndex uint64 `json:"modifiedIndex"`
		CreatedIndex  uint64 `json:"createdIndex"`
	} `json:"node"`
	PrevNode *json.RawMessage `json:"prevNode"`
}

func decodeEvent(t *testing.T, cmd, out string) readmeEvent {
	t.Helper()
	var ev readmeEvent
	if err := json.Unmarshal([]byte(out), &ev); err != nil {
		t.Fatalf("%s: %q is not a v2 answer: %v", cmd, out, err)
	}
	return ev
}
