// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/v2bridge/v2bridge/translate"
)

// TestAMissNamesTheRevisionItsReadSaw: a plain GET that found nothing in
// the bridge's copy answers 100 with the index of that copy, even when the
// copy catches up with a write of the key before the error is made (an
// error at the write's index would say the key was missing there).
func TestAMissNamesTheRevisionItsReadSaw(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an etcd member")
	}
	ep := startMember(t, nil)
	var gate sync.RWMutex // held for writing: the bridge's watch receives nothing
	b := newBackendWith(t, ep, func(c *Config) {
		c.DialOptions = []grpc.DialOption{grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc,
			cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || method != "/etcdserverpb.Watch/Watch" {
				return cs, err
			}
			return gatedStream{cs, &gate}, nil
		})}
	})
	other, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gate.Lock()
	held := true
	defer func() {
		if held {
			gate.Unlock()
		}
	}()
	put, err := other.Put(ctx, "/late", "1")
	if err != nil {
		t.Fatal(err)
	}
	afterMissTest = func() {
		gate.Unlock()
		held = false
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if rev, ok := b.mirror.Rev(); ok && rev >= put.Header.Revision {
				return
			}
			if time.Now().After(deadline) {
				t.Error("the copy did not catch up with the write")
				return
			}
		}
	}
	defer func() { afterMissTest = nil }()
	_, _, err = b.Get(ctx, request(t, "GET", "/late", nil))
	var terr *translate.Error
	if !errors.As(err, &terr) || terr.Code != translate.EcodeKeyNotFound || terr.Cause != "/late" ||
		terr.Index >= translate.Index(put.Header.Revision) {
		t.Fatalf("GET of a key the copy had not seen: %v; want 100 for /late at an index below %d, the write's",
			err, translate.Index(put.Header.Revision))
	}
}
