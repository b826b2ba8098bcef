// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The direct-v3-hop system measures a bound of the bridge as deployed: what
// any process between a client and etcd costs on this machine, with no
// translation at all. It is clientv3 talking to a child that forwards each
// gRPC call, unchanged, over one connection to the etcd 3.5 behind it (as
// the bridge holds one), so hop ÷ direct-v3-ext is the ratio a v3 client
// gets from the extra process alone: a decode, an encode and a loopback
// round trip per call, and a third process sharing the cores.

// serveGRPCHop runs in the child: a gRPC server for the KV and Lease
// services that forwards every call to up. It prints "READY <url> <url>"
// once it serves and stops when stdin reaches EOF.
func serveGRPCHop(up string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cc, err := grpc.NewClient(hostPort(up), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		cancel()
		return fmt.Errorf("dialing %s: %w", up, err)
	}
	defer func() { _ = cc.Close() }()
	// One call proves the upstream serves before READY.
	_, err = pb.NewKVClient(cc).Range(ctx, &pb.RangeRequest{Key: []byte("hop-probe")}, grpc.WaitForReady(true))
	cancel()
	if err != nil {
		return fmt.Errorf("probing %s: %w", up, err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(16<<20), grpc.MaxSendMsgSize(64<<20))
	pb.RegisterKVServer(srv, kvHop{kv: pb.NewKVClient(cc)})
	pb.RegisterLeaseServer(srv, leaseHop{lease: pb.NewLeaseClient(cc)})
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	u := "http://" + ln.Addr().String()
	fmt.Printf("READY %s %s\n", u, u)
	_, _ = io.Copy(io.Discard, os.Stdin)

	srv.Stop()
	return <-errc
}

// hostPort strips the scheme from a client URL, as gRPC dials host:port.
func hostPort(u string) string {
	for _, p := range []string{"http://", "https://"} {
		if len(u) > len(p) && u[:len(p)] == p {
			return u[len(p):]
		}
	}
	return u
}

// kvHop forwards the KV service.
type kvHop struct {
	pb.UnimplementedKVServer
	kv pb.KVClient
}

func (h kvHop) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	return h.kv.Range(ctx, r)
}

func (h kvHop) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	return h.kv.Put(ctx, r)
}

func (h kvHop) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return h.kv.DeleteRange(ctx, r)
}

func (h kvHop) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	return h.kv.Txn(ctx, r)
}

func (h kvHop) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return h.kv.Compact(ctx, r)
}

// leaseHop forwards the Lease service; clientv3's KeepAliveOnce uses the
// keep-alive stream.
type leaseHop struct {
	pb.UnimplementedLeaseServer
	lease pb.LeaseClient
}

func (h leaseHop) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return h.lease.LeaseGrant(ctx, r)
}

func (h leaseHop) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return h.lease.LeaseRevoke(ctx, r)
}

func (h leaseHop) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return h.lease.LeaseTimeToLive(ctx, r)
}

func (h leaseHop) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	return h.lease.LeaseLeases(ctx, r)
}

// LeaseKeepAlive pairs the client's stream with one upstream stream. The
// goroutine pumping client → upstream ends with the client's stream: when
// the client closes it, or at the latest when this handler returns and gRPC
// ends the stream (a Recv cannot be interrupted sooner).
func (h leaseHop) LeaseKeepAlive(s pb.Lease_LeaseKeepAliveServer) error {
	ctx, cancel := context.WithCancel(s.Context())
	defer cancel()
	up, err := h.lease.LeaseKeepAlive(ctx)
	if err != nil {
		return err
	}
	go func() {
		for {
			req, err := s.Recv()
			if err != nil {
				_ = up.CloseSend()
				return
			}
			if err := up.Send(req); err != nil {
				return
			}
		}
	}()
	for {
		resp, err := up.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
}
