// SPDX-License-Identifier: Apache-2.0

package passthrough

import (
	"context"
	"errors"
	"time"

	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v2api"
)

// localStore is what the locally answered part of the surface (membership,
// /readyz, /livez) needs from the passthrough. The keys never reach it:
// ServeHTTP forwards them.
type localStore struct{ p *Passthrough }

var _ v2api.Store = localStore{}

var errForwarded = errors.New("passthrough mode: the keys are served by the v2 server")

func (s localStore) Get(context.Context, *translate.Request) (*translate.Event, v2api.Meta, error) {
	return nil, s.Meta(), errForwarded
}

func (s localStore) Write(context.Context, *translate.Request) (*translate.Event, v2api.Meta, error) {
	return nil, s.Meta(), errForwarded
}

func (s localStore) Watch(context.Context, *translate.Request) (v2api.Watch, v2api.Meta, error) {
	return nil, s.Meta(), errForwarded
}

func (s localStore) Health(context.Context) error {
	if !s.p.Ready() {
		return errors.New("v2 server unavailable")
	}
	return nil
}

func (s localStore) Version(context.Context) (string, error) { return "", errForwarded }

// Meta carries the v2 server's cluster id, so /v2/members answers with the
// cluster id the keys do.
func (s localStore) Meta() v2api.Meta { return v2api.Meta{ClusterID: s.p.clusterID.Load()} }

func (s localStore) Ready() bool { return s.p.Ready() }

// Alive reports whether the heartbeat loop went round within d (plus one
// heartbeat's worth): a wedged loop would leave a lost v2 server undetected.
func (s localStore) Alive(d time.Duration) bool {
	last := time.Unix(0, s.p.beat.Load())
	return time.Since(last) < d+s.p.cfg.HeartbeatInterval+s.p.cfg.HeartbeatTimeout
}

func (s localStore) Watchers() int { return s.p.Watchers() }
