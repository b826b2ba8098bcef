// SPDX-License-Identifier: Apache-2.0

package cutover

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// maxUncoveredNamed bounds the paths an uncovered error names.
const maxUncoveredNamed = 10

// checkCoverage refuses a copy that does not hold everything the bridges
// serve: after the switch, a bridge answers from etcd v3 every path it
// serves, so a node of the v2 server in a served subtree outside the
// follower's prefix (copied) would answer "Key not found". It lists the v2
// server from each registered bridge's served prefix down to copied and
// names every node it finds outside the copy. Hidden nodes are never
// listed by v2: a copy of a narrower prefix than the bridges serve cannot
// be proven to miss none of them, so the message says so.
func (o *Options) checkCoverage(ctx context.Context, copied string) error {
	if copied == "/" {
		return nil // the whole tree: whatever is served
	}
	regs, err := o.registrations(ctx)
	if err != nil {
		return err
	}
	served := map[string][]string{} // served prefix -> bridges serving it
	for id, g := range regs {
		for _, p := range strings.Split(g.Served(), ",") { // a v3-mode bridge may serve several
			if !Covers(copied, p) {
				served[p] = append(served[p], describe(id, g))
			}
		}
	}
	if len(served) == 0 {
		return nil
	}
	prefixes := make([]string, 0, len(served))
	for p := range served {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes)
	var outside []string
	for _, p := range prefixes {
		if outside, err = Outside(ctx, o.V2Server, p, copied, outside); err != nil {
			return fmt.Errorf("listing what the v2 server holds outside the followed copy %s: %w", copied, err)
		}
	}
	if len(outside) == 0 {
		o.logf("  the follower copies %s; bridges serve %s, where the v2 server lists nothing else "+
			"(hidden nodes outside %s, which v2 never lists, are not copied)", copied, strings.Join(prefixes, ", "), copied)
		return nil
	}
	named := outside
	if len(named) > maxUncoveredNamed {
		named = append(named[:maxUncoveredNamed:maxUncoveredNamed], fmt.Sprintf("and %d more", len(outside)-maxUncoveredNamed))
	}
	return fmt.Errorf("the follower copies only %s, but bridges serve %s (%s): the v2 server holds %s outside the copy, "+
		"which etcd v3 would answer as missing after the switch; follow the whole served tree "+
		"(`migrate --follow --v2-server-prefix %s`), or start the bridges with --serve-prefix %s",
		copied, strings.Join(prefixes, ", "), strings.Join(served[prefixes[0]], "; "), strings.Join(named, ", "),
		prefixes[0], copied)
}

// Outside appends to out the v2 server's nodes in the served subtree that
// lie outside copied: the siblings met on the way down to copied, or served
// itself when the two are apart. Hidden nodes, which v2 never lists, are
// not found.
func Outside(ctx context.Context, src *V2Server, served, copied string, out []string) ([]string, error) {
	if Covers(copied, served) {
		return out, nil
	}
	if served != "/" && !strings.HasPrefix(copied, served+"/") {
		_, exists, err := src.List(ctx, served)
		if exists {
			out = append(out, served)
		}
		return out, err
	}
	children, _, err := src.List(ctx, served)
	if err != nil {
		return out, err
	}
	for _, c := range children {
		switch {
		case c == copied:
		case strings.HasPrefix(copied, c+"/"):
			if out, err = Outside(ctx, src, c, copied, out); err != nil {
				return out, err
			}
		default:
			out = append(out, c)
		}
	}
	return out, nil
}
