// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/v2bridge/v2bridge/bridge/ctxsleep"
	"github.com/v2bridge/v2bridge/translate"
)

// Difference is one node the v2 server and the bridge disagree on.
type Difference struct {
	Path   string
	Kind   string // KindMissing, KindExtra, KindType, KindValue, KindTTL or KindExpiry
	Detail string
	// Below counts the nodes under Path folded into this difference (the
	// contents of a missing or extra directory, or of a type mismatch).
	Below int
}

func (d Difference) String() string {
	s := fmt.Sprintf("%s: %s: %s", d.Path, d.Kind, d.Detail)
	if d.Below > 0 {
		s += fmt.Sprintf(" (and %d nodes below it)", d.Below)
	}
	return s
}

// Report is the outcome of a Verify.
type Report struct {
	V2Server                   string
	Prefix                     string
	V2ServerNodes, BridgeNodes int
	Differences                []Difference
	// HiddenNamed and HiddenFound are the hidden nodes compared besides the
	// listed tree.
	HiddenNamed, HiddenFound []string
	Duration                 time.Duration
}

// recheckMax bounds how many differences are read again one by one.
const recheckMax = 2000

// Verify compares the v2 server's tree below V2ServerPrefix (and the hidden nodes
// named or found) with the bridge's view of the same paths, node by node:
// kind, value, TTL presence, and with CompareExpiration expirations further
// apart than TTLTolerance.
// A difference is read again on both sides before it is reported, so a change
// in flight (a migrate --follow applying it) does not count.
func Verify(ctx context.Context, o Options) (*Report, error) {
	m, err := newMigrator(o)
	if err != nil {
		return nil, err
	}
	defer m.src.close()
	start := time.Now()
	m.progress(Progress{Phase: "reading the v2 server"}, true)
	st, err := m.readV2Server(ctx)
	if err != nil {
		return nil, err
	}
	m.progress(Progress{Phase: "reading bridge", Total: len(st.nodes)}, true)
	tt, err := m.readTarget(ctx, st.roots)
	if err != nil {
		return nil, err
	}
	rep := &Report{V2Server: m.src.String(), Prefix: m.o.V2ServerPrefix, V2ServerNodes: len(st.nodes), BridgeNodes: len(tt.nodes),
		HiddenNamed: st.named, HiddenFound: st.found}
	if !m.o.CompareExpiration {
		m.o.TTLTolerance = 0
	}
	diffs := compareTrees(st, tt, m.o.TTLTolerance)
	if len(diffs) > 0 && len(diffs) <= recheckMax {
		m.progress(Progress{Phase: "verifying", Total: len(diffs)}, true)
		if !ctxsleep.Sleep(ctx, 500*time.Millisecond) {
			return nil, ctx.Err()
		}
		var kept []Difference
		for i, d := range diffs {
			still, err := m.recheck(ctx, d)
			if err != nil {
				return nil, err
			}
			kept = append(kept, still...)
			m.progress(Progress{Phase: "verifying", Done: i + 1, Total: len(diffs)}, false)
		}
		diffs = kept
	}
	rep.Differences = diffs
	rep.Duration = time.Since(start)
	m.progress(Progress{Phase: "done", Done: len(st.nodes), Total: len(st.nodes), Elapsed: rep.Duration}, true)
	return rep, nil
}

// compareTrees lists the differences between two flattened trees; what lies
// below a missing, extra or mismatched node is folded into it.
func compareTrees(st, tt *tree, tol time.Duration) []Difference {
	all := map[string]bool{}
	for p := range st.nodes {
		all[p] = true
	}
	for p := range tt.nodes {
		all[p] = true
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var out []Difference
	folded := map[string]int{} // path of a folding difference -> index in out
	for _, p := range paths {
		if i, ok := blockedBy(folded, p); ok {
			out[i].Below++
			continue
		}
		kind, detail := diff(st.nodes[p], tt.nodes[p], tol)
		if kind == "" {
			continue
		}
		out = append(out, Difference{Path: p, Kind: kind, Detail: detail})
		if kind == KindMissing || kind == KindExtra || kind == KindType {
			folded[p] = len(out) - 1
		}
	}
	return out
}

// recheck reads both sides of d again: nothing when they now agree. A
// difference with nodes folded into it is compared again as a subtree.
func (m *migrator) recheck(ctx context.Context, d Difference) ([]Difference, error) {
	recursive := d.Below > 0
	sn, _, err := m.src.get(ctx, d.Path, recursive)
	if err != nil {
		return nil, err
	}
	tn, err := m.tgt.get(ctx, d.Path, recursive)
	if err != nil {
		return nil, err
	}
	if recursive {
		st, tt := newTree(), newTree()
		st.add(sn)
		tt.add(tn)
		return compareTrees(st, tt, m.o.TTLTolerance), nil
	}
	kind, detail := diff(strip(sn), strip(tn), m.o.TTLTolerance)
	if kind == "" {
		return nil, nil
	}
	d.Kind, d.Detail = kind, detail
	return []Difference{d}, nil
}

func strip(n *translate.Node) *translate.Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Nodes = nil
	return &c
}
