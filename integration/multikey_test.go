// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v2"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// TestV3MultiKeyTransactionsReachEveryV2WatchLoop runs the watch loops of
// the real v2 clients — client/v2's Watcher, python-etcd's eternal_watch and
// etcdctl's watch --forever, each resuming at modifiedIndex + 1 on its own —
// while v3 clients change several keys per revision: a transaction of three
// puts, a prefix delete of three keys, and a transaction mixing a put and a
// delete. Every watch loop must see every v2 event, in order.
func TestV3MultiKeyTransactionsReachEveryV2WatchLoop(t *testing.T) {
	etcdctl := etcdctlV2(t)
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import etcd").Run(); err != nil {
		missingClient(t, "python3-etcd not installed (Debian package python3-etcd; .ci/run installs it)")
	}
	e := newEnv(t, v2bridgetest.Options{})
	v3 := e.cluster.Client(t)
	k := v2client(t, e.url)
	ctx := ctxT(t, 90*time.Second)

	start, err := k.Set(ctx, "/mk/start", "0", nil)
	if err != nil {
		t.Fatal(err)
	}
	after := start.Node.ModifiedIndex
	want := []string{
		"set /mk/a", "set /mk/b", "set /mk/c", // one transaction
		"delete /mk/a", "delete /mk/b", "delete /mk/c", // one prefix delete
		"set /mk/d", "delete /mk/start", // one transaction
		"set /mk/end", // a v2 write: every loop has caught up
	}
	// v2 reports a create as "set" for a v3 put: normalise to the pair the
	// three clients all print.
	norm := func(action, key string) string {
		if action == "create" {
			action = "set"
		}
		return action + " " + key
	}

	loops := map[string]func(ctx context.Context, out chan<- string) error{
		"client/v2 Watcher": func(ctx context.Context, out chan<- string) error {
			w := k.Watcher("/mk", &client.WatcherOptions{AfterIndex: after, Recursive: true})
			for {
				r, err := w.Next(ctx)
				if err != nil {
					return err
				}
				out <- norm(r.Action, r.Node.Key)
			}
		},
		"python-etcd eternal_watch": func(ctx context.Context, out chan<- string) error {
			port := e.url[strings.LastIndex(e.url, ":")+1:]
			script := fmt.Sprintf(`
import etcd, sys
c = etcd.Client(host="127.0.0.1", port=%s, protocol="http")
for r in c.eternal_watch("/mk", index=%d, recursive=True):
    print(r.action, r.key, flush=True)
`, port, after+1)
			return lines(ctx, exec.CommandContext(ctx, py, "-c", script), func(l string) {
				f := strings.Fields(l)
				if len(f) == 2 {
					out <- norm(f[0], f[1])
				}
			})
		},
		"etcdctl watch --forever": func(ctx context.Context, out chan<- string) error {
			cmd := exec.CommandContext(ctx, etcdctl, "--endpoints", e.url, "-o", "json",
				"watch", "--forever", "--recursive", "--after-index", strconv.FormatUint(after, 10), "/mk")
			cmd.Env = append(os.Environ(), "ETCDCTL_API=2")
			return lines(ctx, cmd, func(l string) {
				var r struct {
					Action string `json:"action"`
					Node   struct {
						Key string `json:"key"`
					} `json:"node"`
				}
				if json.Unmarshal([]byte(l), &r) == nil && r.Action != "" {
					out <- norm(r.Action, r.Node.Key)
				}
			})
		},
	}

	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	got := map[string]chan string{}
	for name, loop := range loops {
		ch := make(chan string, 64)
		got[name] = ch
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = loop(lctx, ch) // ends with lctx
		}()
	}
	defer func() { stop(); wg.Wait() }()

	// The loops start from `after`: what follows is history to each of
	// them or live, depending on how fast it started; both must hold.
	if _, err := v3.Txn(ctx).Then(clientv3.OpPut("/mk/a", "1"), clientv3.OpPut("/mk/b", "2"), clientv3.OpPut("/mk/c", "3")).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := v3.Delete(ctx, "/mk/", clientv3.WithRange("/mk/c\x00")); err != nil {
		t.Fatal(err)
	}
	if _, err := v3.Txn(ctx).Then(clientv3.OpPut("/mk/d", "4"), clientv3.OpDelete("/mk/start")).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Set(ctx, "/mk/end", "5", nil); err != nil {
		t.Fatal(err)
	}

	for name, ch := range got {
		var seen []string
		for len(seen) < len(want) {
			select {
			case ev := <-ch:
				seen = append(seen, ev)
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: after 30 s saw %q, want %q", name, seen, want)
			}
		}
		if strings.Join(seen, ", ") != strings.Join(want, ", ") {
			t.Errorf("%s saw\n  %q\nwant\n  %q", name, seen, want)
		}
	}
}

// lines runs cmd until ctx ends, handing each line of its stdout to f.
func lines(ctx context.Context, cmd *exec.Cmd, f func(string)) error {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		f(sc.Text())
	}
	return cmd.Wait()
}
