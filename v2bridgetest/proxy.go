// SPDX-License-Identifier: Apache-2.0

package v2bridgetest

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// faultProxy forwards TCP connections from a loopback port of its own to a
// target address. While its cut function says so, it reads and discards the
// bytes in both directions without closing anything: to either end the other
// end is silent, as a powered-off machine is (no FIN, no RST). A connection
// that lost bytes has a gap in its stream and cannot go on, so heal closes it
// (as a rebooted machine answers RST to an old connection).
//
// etcd's go.etcd.io/etcd/pkg/v3/proxy does much the same, but it listens on
// every interface (":port"), and the fixture serves on loopback only; it also
// cannot tell which member opened a peer connection, which a partition needs.
type faultProxy struct {
	ln     net.Listener
	url    string // http://127.0.0.1:port
	target string // host:port
	// peer proxies read the first HTTP request head of each connection to
	// learn which member opened it (etcd's rafthttp sends X-Server-From).
	peer bool
	// cut reports whether bytes must be dropped now on a connection opened
	// by member src (-1 when not known).
	cut func(src int) bool
	// lookup maps a hex member id to a member index (-1 when unknown).
	lookup func(hexID string) int

	mu     sync.RWMutex
	conns  map[*proxyConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

type proxyConn struct {
	in, out net.Conn
	from    string // X-Server-From of a peer connection
	src     atomic.Int64
	dropped atomic.Bool
	once    sync.Once
}

const srcUnresolved = -2

func (pc *proxyConn) close() {
	pc.once.Do(func() {
		_ = pc.in.Close()
		if pc.out != nil {
			_ = pc.out.Close()
		}
	})
}

func newFaultProxy(target string, peer bool, cut func(int) bool, lookup func(string) int) (*faultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &faultProxy{ln: ln, url: "http://" + ln.Addr().String(), target: target, peer: peer, cut: cut,
		lookup: lookup, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *faultProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return
		}
		pc := &proxyConn{in: in}
		pc.src.Store(srcUnresolved)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = in.Close()
			return
		}
		p.conns[pc] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.handle(pc)
	}
}

func (p *faultProxy) forget(pc *proxyConn) {
	pc.close()
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

func (p *faultProxy) handle(pc *proxyConn) {
	defer p.wg.Done()
	defer p.forget(pc)
	var head []byte
	if p.peer {
		head = readHead(pc.in)
		pc.from = headerValue(head, "x-server-from")
	}
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	p.mu.Lock()
	pc.out = out
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return
	}
	if len(head) > 0 && !p.pass(pc, head) {
		return
	}
	done := make(chan struct{})
	go func() {
		p.pipe(pc, out, pc.in)
		pc.close()
		close(done)
	}()
	p.pipe(pc, pc.in, out)
	pc.close()
	<-done
}

// srcOf resolves (once the cluster knows its member ids) which member opened
// the connection.
func (p *faultProxy) srcOf(pc *proxyConn) int {
	s := pc.src.Load()
	if s != srcUnresolved {
		return int(s)
	}
	if pc.from == "" {
		pc.src.Store(-1)
		return -1
	}
	i := p.lookup(pc.from)
	if i >= 0 {
		pc.src.Store(int64(i))
	}
	return i
}

// dropNow reports whether bytes on pc must be dropped now, and remembers
// that it lost some. It holds p.mu (read) so that heal, which takes it to
// write, sees every drop made before the fault was lifted.
func (p *faultProxy) dropNow(pc *proxyConn) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	// A connection that lost bytes carries a broken stream: it keeps
	// dropping until heal closes it, even once the fault is lifted.
	if pc.dropped.Load() || p.cut(p.srcOf(pc)) {
		pc.dropped.Store(true)
		return true
	}
	return false
}

// pass writes b to the member unless the connection is cut now; it reports
// false when the write failed.
func (p *faultProxy) pass(pc *proxyConn, b []byte) bool {
	if p.dropNow(pc) {
		return true
	}
	_, err := pc.out.Write(b)
	return err == nil
}

// pipe copies src to dst until either fails. A write to a frozen member
// blocks once the kernel's buffers are full, as it would for the real
// sender; it is never done under p.mu.
func (p *faultProxy) pipe(pc *proxyConn, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.dropNow(pc) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// heal closes the connections that lost bytes and are no longer cut.
func (p *faultProxy) heal() {
	p.mu.Lock()
	var stale []*proxyConn
	for pc := range p.conns {
		if pc.dropped.Load() && !p.cut(p.srcOf(pc)) {
			stale = append(stale, pc)
		}
	}
	p.mu.Unlock()
	for _, pc := range stale {
		pc.close()
	}
}

func (p *faultProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, pc := range conns {
		pc.close()
	}
	p.wg.Wait()
}

// readHead reads up to the end of the first HTTP request head (or what came
// within a few seconds).
func readHead(c net.Conn) []byte {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	var head []byte
	buf := make([]byte, 4096)
	for len(head) < 64<<10 && !bytes.Contains(head, []byte("\r\n\r\n")) {
		n, err := c.Read(buf)
		head = append(head, buf[:n]...)
		if err != nil {
			break
		}
	}
	return head
}

func headerValue(head []byte, name string) string {
	for _, line := range strings.Split(string(head), "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
