// SPDX-License-Identifier: Apache-2.0

package core

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/bridge/detach"
)

// Servers is the HTTP lifecycle every mode shares: one http.Server per
// listener (NewHTTPServer), all shut down together.
type Servers struct {
	limits HTTPLimits
	lg     *zap.Logger

	mu        sync.Mutex // guards servers, listeners and closed
	servers   []*http.Server
	listeners []*detach.Listener // one per Serve: where its detached watches wait
	closed    bool
	wg        sync.WaitGroup // one per Serve goroutine
}

// NewServers serves within the limits l (defaults for zero values); lg
// (nil: none) logs net/http's errors.
func NewServers(l HTTPLimits, lg *zap.Logger) *Servers {
	if lg == nil {
		lg = zap.NewNop()
	}
	l.setDefaults()
	return &Servers{limits: l, lg: lg}
}

// Serve serves h on ln until Shutdown; errors other than a normal close go
// to errc when it is not nil. ln may be a TLS listener: its connections
// reach net/http as they are, so HTTP/2 is served where ALPN chose it.
func (s *Servers) Serve(ln net.Listener, h http.Handler, errc chan<- error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return
	}
	srv, dl := NewHTTPServer(ln, h, s.limits, zap.NewStdLog(s.lg.Named("http")))
	s.servers = append(s.servers, srv)
	s.listeners = append(s.listeners, dl)
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(dl); err != nil && !errors.Is(err, http.ErrServerClosed) && errc != nil {
			errc <- err
		}
	}()
}

// Parked is the number of watches parked on the servers' listeners now.
func (s *Servers) Parked() int {
	s.mu.Lock()
	ls := s.listeners
	s.mu.Unlock()
	n := 0
	for _, l := range ls {
		n += l.Parked()
	}
	return n
}

// Shutdown lets the requests in flight finish within ctx, closes every
// server, waits for their Serve goroutines and for the watches parked on
// their listeners.
func (s *Servers) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	servers, listeners := s.servers, s.listeners
	s.mu.Unlock()
	var errs []error
	for _, srv := range servers {
		errs = append(errs, srv.Shutdown(ctx))
	}
	s.wg.Wait()
	for _, l := range listeners {
		_ = l.Close() // Serve has closed it; a Serve that failed early may not have
		errs = append(errs, l.Wait(ctx))
	}
	return errors.Join(errs...)
}

// Run tells systemd when the bridge is ready, then waits for the end (a
// signal: ctx, or a listener failing: errc) and shuts down.
func Run(ctx context.Context, lg *zap.Logger, ready func() bool, errc <-chan error, shutdown func() error) error {
	nctx, ncancel := context.WithCancel(ctx)
	notified := make(chan struct{})
	go func() {
		defer close(notified)
		notifyReady(nctx, ready, lg)
	}()
	defer func() {
		ncancel()
		<-notified
	}()
	select {
	case <-ctx.Done():
		lg.Info("shutting down")
		notifyStopping(lg)
	case err := <-errc:
		_ = shutdown()
		return err
	}
	return shutdown()
}

// notifyReady tells systemd (Type=notify) the bridge is ready once the
// backend answers and the shared watch exists — what /readyz reports — so
// units ordered after it (flanneld) start against a working bridge. Without
// NOTIFY_SOCKET it does nothing.
func notifyReady(ctx context.Context, ready func() bool, lg *zap.Logger) {
	const poll = 50 * time.Millisecond
	start := time.Now()
	warned := false
	t := time.NewTicker(poll)
	defer t.Stop()
	for !ready() {
		if !warned && time.Since(start) > 10*time.Second {
			lg.Warn("backend or its watch not ready yet; readiness not reported to systemd until it is")
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	sent, err := daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS=serving the v2 API")
	switch {
	case err != nil:
		lg.Warn("sd_notify READY=1 failed", zap.Error(err))
	case sent:
		lg.Info("readiness reported to systemd", zap.Duration("after", time.Since(start)))
	}
}

// notifyStopping tells systemd the bridge is shutting down.
func notifyStopping(lg *zap.Logger) {
	if _, err := daemon.SdNotify(false, daemon.SdNotifyStopping); err != nil {
		lg.Warn("sd_notify STOPPING=1 failed", zap.Error(err))
	}
}
