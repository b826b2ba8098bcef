// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// probeEvery and probeSlow: the etcd probe writes every probeEvery, and a
// write that fails or takes longer than probeSlow was not served promptly.
const (
	probeEvery = 100 * time.Millisecond
	probeSlow  = 250 * time.Millisecond
)

// span is a stretch of time.
type span struct{ from, to time.Time }

// etcdProbe measures etcd's own unavailability beside a bridge: it writes
// directly to one member (around the proxies, one that is not faulted, as
// the bridge's writes would be served) every probeEvery, and keeps the
// spans during which etcd served no write promptly (an election, which no
// bridge can shorten).
type etcdProbe struct {
	clis []*clientv3.Client
	via  atomic.Int64

	mu   sync.Mutex // guards down
	down []span

	stop chan struct{}
	done chan struct{}
	once sync.Once // closes stop
}

func startEtcdProbe(t *testing.T, c *v2bridgetest.Cluster, via int) *etcdProbe {
	p := &etcdProbe{stop: make(chan struct{}), done: make(chan struct{})}
	for i := range c.Members {
		p.clis = append(p.clis, c.MemberClient(t, i))
	}
	p.via.Store(int64(via))
	go p.run()
	t.Cleanup(p.halt)
	return p
}

func (p *etcdProbe) run() {
	defer close(p.done)
	for {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.clis[p.via.Load()].Put(ctx, "v2bridgetest-etcd-probe", start.String())
		cancel()
		if end := time.Now(); err != nil || end.Sub(start) > probeSlow {
			p.mu.Lock()
			// A failure right after another is one span: the pause
			// between the writes is part of it.
			if n := len(p.down); n > 0 && start.Sub(p.down[n-1].to) <= 2*probeEvery {
				p.down[n-1].to = end
			} else {
				p.down = append(p.down, span{start, end})
			}
			p.mu.Unlock()
		}
		select {
		case <-p.stop:
			return
		case <-time.After(probeEvery):
		}
	}
}

// through moves the probe to member i.
func (p *etcdProbe) through(i int) { p.via.Store(int64(i)) }

func (p *etcdProbe) halt() {
	p.once.Do(func() { close(p.stop) })
	<-p.done
}

// unavailable is every span so far during which etcd served no write
// promptly.
func (p *etcdProbe) unavailable() []span {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]span(nil), p.down...)
}

// overlap is how much of [from, to] lies in spans (which do not overlap).
func overlap(from, to time.Time, spans []span) time.Duration {
	var d time.Duration
	for _, s := range spans {
		a, b := from, to
		if s.from.After(a) {
			a = s.from
		}
		if s.to.Before(b) {
			b = s.to
		}
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}
