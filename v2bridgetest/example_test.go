// SPDX-License-Identifier: Apache-2.0

package v2bridgetest_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"go.etcd.io/etcd/client/v2"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// exampleT lets a program (or an Example) use the fixture without a
// *testing.T; in a test, pass t itself.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                      {}
func (*exampleT) Fatal(args ...any)            { log.Fatal(args...) }
func (*exampleT) Fatalf(f string, args ...any) { log.Fatalf(f, args...) }
func (*exampleT) Skip(args ...any)             { log.Fatal(args...) }
func (e *exampleT) Cleanup(f func())           { e.cleanups = append(e.cleanups, f) }
func (e *exampleT) TempDir() string {
	d, err := os.MkdirTemp("", "v2bridgetest-example")
	if err != nil {
		log.Fatal(err)
	}
	e.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}
func (e *exampleT) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// A v2 client keeps watching through the loss of the etcd member its bridge
// uses: the watch is ended within seconds, the client re-issues it, and the
// event written during the outage arrives.
func Example() {
	t := &exampleT{}
	defer t.done()
	cl := v2bridgetest.StartCluster(t, 3)
	br := v2bridgetest.StartBridge(t, cl.ProxiedEndpoints(), v2bridgetest.Options{})

	c, _ := client.New(client.Config{Endpoints: []string{br.URL}, Transport: client.DefaultTransport})
	kapi := client.NewKeysAPI(c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := kapi.Set(ctx, "/net/config", "v1", nil)
	if err != nil {
		log.Fatal(err)
	}
	w := kapi.Watcher("/net", &client.WatcherOptions{AfterIndex: r.Index, Recursive: true})

	lost := cl.Index(br.Backend.Endpoint())
	cl.Blackhole(lost) // the member loses power: no FIN, no RST
	defer cl.Heal(lost)

	// Write through a member that is still up (once the others have
	// elected a leader, if the lost member led).
	v3 := cl.MemberClient(t, (lost+1)%3)
	for {
		if _, err := v3.Put(ctx, "/net/config", "v2"); err == nil {
			break
		} else if ctx.Err() != nil {
			log.Fatal(err)
		}
	}
	// The v2 client re-issues its watch after the bridge ends it; on
	// another member, from the same index, the event is still there. Every
	// wait is bounded by ctx: past it, the example fails instead of hanging.
	for {
		ev, err := w.Next(ctx)
		if err == nil {
			fmt.Println(ev.Action, ev.Node.Key, ev.Node.Value)
			return
		}
		select {
		case <-ctx.Done():
			log.Fatalf("no event within a minute: %v", err)
		case <-time.After(time.Second): // what flannel does between watch errors
		}
	}
	// Output: set /net/config v2
}
