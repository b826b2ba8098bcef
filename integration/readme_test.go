// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// docCurls are the curl command lines of a doc's code blocks, verbatim, in
// order: the whole doc's, or (after, non-empty) those after its first line
// starting with after.
func docCurls(t *testing.T, file, after string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", file))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if after != "" {
		i := strings.Index(text, "\n"+after)
		if i < 0 {
			t.Fatalf("%s has no line starting %q", file, after)
		}
		text = text[i:]
	}
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "curl ") {
			out = append(out, line)
		}
	}
	return out
}

// quickStart is README.md's quick start: the commands of its first block
// (make run, make test) and the lines of its first fenced block (what to
// type against make run's bridge), verbatim but for trailing comments.
func quickStart(t *testing.T) (makes, tries []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	i := 0
	for i < len(lines) && !strings.HasPrefix(lines[i], "    ") {
		i++
	}
	for ; i < len(lines) && strings.HasPrefix(lines[i], "    "); i++ {
		cmd, _, _ := strings.Cut(strings.TrimSpace(lines[i]), "#")
		makes = append(makes, strings.TrimSpace(cmd))
	}
	for i < len(lines) && lines[i] != "```" {
		i++
	}
	for i++; i < len(lines) && lines[i] != "```"; i++ {
		tries = append(tries, lines[i])
	}
	return makes, tries
}

// TestReadmeQuickStart runs README.md's quick start as a newcomer does:
// make run, from the module's root, with the Makefile's own build (only
// ARGS is this test's: free ports, a private data directory), then each
// line the README types against it (curl, and etcdctl v2 when installed),
// the watch first, so that the write answers it. make test itself is this
// suite: the test checks that the README names it beside make run.
func TestReadmeQuickStart(t *testing.T) {
	makes, tries := quickStart(t)
	if !slices.Equal(makes, []string{"make run", "make test"}) {
		t.Fatalf("README's quick start is %q, want make run and make test", makes)
	}
	if len(tries) != 3 || !strings.HasPrefix(tries[0], "curl -XPUT ") || !strings.HasPrefix(tries[1], "curl ") ||
		!strings.HasPrefix(tries[2], "ETCDCTL_API=2 etcdctl ") {
		t.Fatalf("README's first example block is %q: this test knows a write, a watch and an etcdctl listing", tries)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		missingClient(t, "curl is not installed")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	url := v2bridgetest.FreeURL(t)
	dataDir := t.TempDir()
	var logs syncBuffer
	var mk *exec.Cmd
	var done chan error
	v2bridgetest.RetryPortTaken(t, "make run", func() error {
		done = make(chan error, 1)
		url = v2bridgetest.FreeURL(t)
		args := strings.Join([]string{"--listen-client-urls", url, "--embedded-client-urls", v2bridgetest.FreeURL(t),
			"--embedded-peer-urls", v2bridgetest.FreeURL(t), "--data-dir", dataDir}, " ")
		mk = exec.Command("make", "--no-print-directory", "run", "ARGS="+args)
		mk.Dir = ".."
		mk.Env = childEnv()
		mk.Stdout, mk.Stderr = &logs, &logs
		mk.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // make and the bridge it runs: one group to stop
		if err := mk.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- mk.Wait() }()
		// make builds first: minutes on a cold cache and a busy machine.
		p := &proc{cmd: mk, logs: &bytes.Buffer{}, done: done}
		err := p.healthy(url, 10*time.Minute)
		if err != nil {
			_ = syscall.Kill(-mk.Process.Pid, syscall.SIGKILL)
			err = fmt.Errorf("%w\n%s", err, logs.String())
		}
		return err
	})
	t.Cleanup(func() {
		_ = syscall.Kill(-mk.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-mk.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	if !strings.Contains(logs.String(), "serving a PRIVATE EMBEDDED etcd") {
		t.Errorf("make run did not say it serves a private embedded etcd:\n%s", logs.String())
	}

	host := strings.TrimPrefix(url, "http://")
	local := strings.NewReplacer("127.0.0.1:2379", host)
	run := func(ctx context.Context, line string) (string, error) {
		cmd := exec.CommandContext(ctx, "sh", "-c", local.Replace(line))
		cmd.Env = childEnv()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, stderr.String())
		}
		return string(out), err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watched := make(chan string, 1)
	go func() {
		out, err := run(ctx, tries[1])
		if err != nil {
			out += " (" + err.Error() + ")"
		}
		watched <- out
	}()
	waitFor(t, 10*time.Second, "the README's watch to wait", func() bool {
		return scrapeMetric(t, url, "v2bridge_v2_watchers") == 1
	})
	out, err := run(ctx, tries[0])
	if err != nil {
		t.Fatalf("%s: %v\n%s", tries[0], err, out)
	}
	set := decodeEvent(t, tries[0], out)
	if set.Action != "set" || set.Node.Key != "/foo" || set.Node.Value != "bar" || set.Node.ModifiedIndex == 0 ||
		set.Node.CreatedIndex != set.Node.ModifiedIndex || set.PrevNode != nil {
		t.Fatalf("%s: %+v", tries[0], set)
	}
	select {
	case out := <-watched:
		if got := decodeEvent(t, tries[1], out); got.Action != "set" || got.Node != set.Node {
			t.Fatalf("%s: %+v, want the write's event %+v", tries[1], got, set)
		}
	case <-ctx.Done():
		t.Fatalf("%s: no answer", tries[1])
	}
	if path, err := exec.LookPath("etcdctl"); err != nil || etcdctlLacksV2(path) != "" {
		missingClient(t, "no etcdctl with v2 commands (Debian package etcd-client; .ci/run installs it)")
	}
	out, err = run(ctx, tries[2])
	if err != nil || out != "/foo\n" {
		t.Fatalf("%s: %q (%v), want /foo", tries[2], out, err)
	}
}

// TestTLSExampleCurls runs every curl line of docs/operations.md's TLS
// example as written, with curl's defaults, against a bridge started as the
// example starts it (client-certificate auth, a plain metrics listener):
// only the addresses are this test's own, and the certificate files are
// those the example names, in the directory curl runs in.
func TestTLSExampleCurls(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		missingClient(t, "curl is not installed")
	}
	curls := docCurls(t, "docs/operations.md", "**Against a cluster**")
	if len(curls) < 2 {
		t.Fatalf("docs/operations.md's TLS example has %d curl lines, this test knows 2: %q", len(curls), curls)
	}
	curls = curls[:2]
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
	if r := do(t, "PUT", plain, "/v2/keys/foo", form("value", "bar")); r.status != 201 {
		t.Fatalf("PUT /foo: %d %s", r.status, r.body)
	}
	local := strings.NewReplacer(
		"https://10.0.0.5:2379", tlsURL,
		"http://127.0.0.1:9379", metrics,
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

	out, err := run(ctx, curls[0])
	if err != nil {
		t.Fatalf("%s: %v\n%s", curls[0], err, out)
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
		t.Fatalf("%s: %q (%v)", curls[0], out, err)
	}

	out, err = run(ctx, curls[1])
	if err != nil {
		t.Fatalf("%s: %v\n%s", curls[1], err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	metric := regexp.MustCompile(`^v2bridge_[a-z0-9_]+({.*})? [-+0-9.eEInfNa]+$`)
	for _, l := range lines {
		if !metric.MatchString(l) {
			t.Fatalf("%s: line %q is not a v2bridge metric", curls[1], l)
		}
	}
	if !strings.Contains(out, "\nv2bridge_backend_up 1\n") {
		t.Fatalf("%s: no v2bridge_backend_up 1 in %d lines", curls[1], len(lines))
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
