// SPDX-License-Identifier: Apache-2.0

package passthrough

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// heartbeat probes the v2 server in use until ctx ends: HeartbeatFailures
// misses in a row declare it lost (its watches end, new requests get a fast
// error 300) and move to the next v2 server of the list; while lost, every
// miss moves on again, and the first answer makes the one that answered the
// v2 server in use.
func (p *Passthrough) heartbeat(ctx context.Context) {
	t := time.NewTicker(p.cfg.HeartbeatInterval)
	defer t.Stop()
	misses := 0
	for {
		p.beat.Store(time.Now().UnixNano())
		i := int(p.current.Load())
		start := time.Now()
		err := p.probe(ctx, i)
		if ctx.Err() != nil {
			return
		}
		p.metrics.heartbeat.Observe(time.Since(start).Seconds())
		switch {
		case err == nil:
			misses = 0
			if !p.up.Load() {
				p.recovered(i)
			}
		case p.up.Load():
			misses++
			p.metrics.misses.Inc()
			p.lg.Debug("v2 server heartbeat missed", zap.String("v2-server", p.targets[i].String()),
				zap.Int("misses", misses), zap.Error(err))
			if misses >= p.cfg.HeartbeatFailures {
				misses = 0
				p.lost(i, err)
			}
		default:
			p.metrics.misses.Inc()
			p.current.Store(int64((i + 1) % len(p.targets)))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe is one heartbeat: GET /health on v2 server i within HeartbeatTimeout,
// answered 200.
func (p *Passthrough) probe(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.HeartbeatTimeout)
	defer cancel()
	u := *p.targets[i]
	u.Path += "/health"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("heartbeat request: %w", err)
	}
	resp, err := p.probeTr.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("heartbeat to %s: %w", p.targets[i], err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heartbeat to %s: %s", p.targets[i], resp.Status)
	}
	return nil
}

// lost declares v2 server i lost: new requests are refused at once, every
// watch in flight ends (its client re-issues it), every other request in
// flight gets error 300 without waiting out its deadline, and the heartbeat
// moves to the next v2 server of the list.
func (p *Passthrough) lost(i int, cause error) {
	p.up.Store(false)
	p.metrics.up.Set(0)
	p.metrics.losses.Inc()
	ended := p.end(fmt.Errorf("%w: %v", errLost, cause), true)
	p.tr.CloseIdleConnections()
	p.probeTr.CloseIdleConnections()
	next := (i + 1) % len(p.targets)
	p.current.Store(int64(next))
	p.lg.Warn("v2 server lost: its watches were ended, requests are refused until a v2 server answers",
		zap.String("v2-server", p.targets[i].String()), zap.Int("watches-ended", ended),
		zap.String("next", p.targets[next].String()), zap.Error(cause))
}

// recovered makes v2 server i, which answered, the one in use.
func (p *Passthrough) recovered(i int) {
	p.current.Store(int64(i))
	p.up.Store(true)
	p.metrics.up.Set(1)
	p.lg.Info("v2 server answers: serving through it", zap.String("v2-server", p.targets[i].String()))
}
