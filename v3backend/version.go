// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// MinVersion is the oldest etcd release the bridge serves from: the oldest
// it is tested on (Debian's etcd-server). Older 3.4 releases are untested;
// 3.3 and before lack the watch progress requests the bridge relies on.
const MinVersion = "3.4.23"

// ErrUnsupportedVersion marks a member whose etcd release is older than
// MinVersion: the bridge does not use it.
var ErrUnsupportedVersion = errors.New("etcd release not supported")

// progressBugFixed lists, per minor release, the first patch release whose
// answer to a watch progress request waits for the stream's watches to
// catch up. Before it, the answer carries the store's current revision at
// once: a watch still replaying history, or with events still queued, has
// not received everything up to it.
var progressBugFixed = map[[2]int]int{{3, 4}: 25, {3, 5}: 8}

// checkVersion reads the member's release (Maintenance Status) and refuses
// one older than MinVersion. It reports whether the member answers progress
// requests early (progressBugFixed): its feeds then never ask. It notes
// whether the member answers a linearizable member list from memory
// (before 3.5), which quorumCheck then asks by a read of a key. The first
// time it sees a member whose known bug the bridge works around, it says so
// at info.
func (b *Backend) checkVersion(ctx context.Context, cli *clientv3.Client, ep string) (progressBug bool, err error) {
	st, err := etcdserverpb.NewMaintenanceClient(cli.ActiveConnection()).Status(ctx, &etcdserverpb.StatusRequest{})
	if err != nil {
		return false, fmt.Errorf("reading the member's version: %w", err)
	}
	v, err := parseVersion(st.Version)
	if err != nil {
		// Not an etcd release (a proxy, say): assume the progress bug,
		// which costs speed, not correctness; the heartbeat stays the
		// member list, as before the release was read.
		if _, seen := b.bugsLogged.LoadOrStore(ep+" "+st.Version, true); !seen {
			b.lg.Warn("the member's etcd release is unknown; the bridge works around the known bugs of older releases",
				zap.String("endpoint", ep), zap.Error(err))
		}
		b.listsFromMemory.Store(ep, false)
		return true, nil
	}
	if minV, _ := parseVersion(MinVersion); v.less(minV) {
		return false, fmt.Errorf("%w: the member runs etcd %s; the oldest supported is %s",
			ErrUnsupportedVersion, st.Version, MinVersion)
	}
	b.listsFromMemory.Store(ep, v.less(release{3, 5, 0}))
	if v.hasProgressBug() {
		if _, seen := b.bugsLogged.LoadOrStore(ep+" "+st.Version, true); !seen {
			b.lg.Info("this etcd release answers watch progress requests before its watches catch up "+
				"(fixed in etcd 3.4.25 and 3.5.8): the bridge does not ask it for progress and "+
				"learns its watches' progress from their events; quorum reads of an idle key space go to the member",
				zap.String("endpoint", ep), zap.String("version", st.Version))
		}
	}
	return v.hasProgressBug(), nil
}

// release is a release number, major.minor.patch.
type release [3]int

// parseVersion reads "3.4.23" (a pre-release or build suffix is ignored).
func parseVersion(s string) (release, error) {
	var v release
	core, _, _ := strings.Cut(s, "-")
	core, _, _ = strings.Cut(core, "+")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return v, fmt.Errorf("unreadable etcd version %q", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, fmt.Errorf("unreadable etcd version %q", s)
		}
		v[i] = n
	}
	return v, nil
}

func (v release) less(o release) bool {
	for i := range v {
		if v[i] != o[i] {
			return v[i] < o[i]
		}
	}
	return false
}

func (v release) hasProgressBug() bool {
	fixed, ok := progressBugFixed[[2]int{v[0], v[1]}]
	return ok && v[2] < fixed
}
