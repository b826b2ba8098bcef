// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The -auth rows: put-64 and get-64 again, each request with HTTP basic
// auth of a user whose role may read and write /bench/*, on the v2 systems
// that serve the v2 auth API. Auth is enabled for that load only, so every
// other row runs as before; each -auth row's ratios divide by the same
// run's unauthenticated row, side by side on the same server.

const (
	benchRootPass = "bench-r00t-Pa55"
	benchUser     = "bench"
	benchPass     = "bench-Pa55"
)

// benchAuth is the auth API of one system and its bench user's client.
type benchAuth struct {
	root *v2kv // root's client, for the auth API
	user *v2kv // the bench user's client, for the load
	why  string
}

// authRows are the metrics of an -auth row.
var authRows = []row{
	{metric: "throughput", unit: "ops/s"},
	{metric: "server CPU per op", unit: "µs", lowerBetter: true},
	{metric: "throughput ÷ unauthenticated", unit: "×"},
	{metric: "CPU per op ÷ unauthenticated", unit: "×", lowerBetter: true},
}

func (b *kvBench) put64Auth(ns string) {
	b.authLoad("put-64-auth", "put-64", func(k *v2kv) loadResult {
		return runLoad(b.in, 64, b.cfg.warm, b.cfg.dur, func(ctx context.Context, w, i int) (bool, error) {
			_, err := k.put(ctx, fmt.Sprintf("%s/put64auth/c%d/k%d", ns, w, i%16), value64)
			return true, err
		})
	})
}

func (b *kvBench) get64Auth(string) {
	b.authLoad("get-64-auth", "get-64", func(k *v2kv) loadResult {
		return runLoad(b.in, 64, b.cfg.warm, b.cfg.dur, func(ctx context.Context, w, i int) (bool, error) {
			return true, k.get(ctx, fmt.Sprintf("/bench/get/k%04d", (w*7+i)%100), false)
		})
	})
}

// authLoad runs load as the bench user with auth enabled, and reports it
// next to plain, this run's unauthenticated row.
func (b *kvBench) authLoad(name, plain string, load func(*v2kv) loadResult) {
	switch b.sys {
	case sysBridge, sysBridgeExt, sysV2:
	default:
		return // no v2 auth API (v3, v2v3), or another's (passthrough)
	}
	a := b.authSetup()
	if a.why != "" {
		b.res.unsupported(name, b.sys, a.why, authRows...)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.root.auth(ctx, "PUT", "/enable", ""); err != nil {
		b.res.unsupported(name, b.sys, "enabling auth: "+fmtErr(err), authRows...)
		return
	}
	// One request first: the credential verified (and, where the server
	// keeps them, cached) before the load, as for a long-running client.
	err := a.user.get(ctx, "/bench/get/k0000", false)
	var r loadResult
	var took time.Duration
	if err == nil {
		start := time.Now()
		r = load(a.user)
		took = time.Since(start)
	}
	if derr := a.root.auth(ctx, "DELETE", "/enable", ""); derr != nil {
		fatalf("%s on %s: disabling auth: %s", name, b.sys, fmtErr(derr))
	}
	if err != nil {
		b.res.unsupported(name, b.sys, "the bench user's first read: "+fmtErr(err), authRows...)
		return
	}
	b.report(name, r)
	p, ok := b.plain[plain]
	tput := r.perSec(r.ops - r.errs)
	if tput == 0 && r.all > 0 {
		// Not one request both started and ended inside the window: a
		// server that runs bcrypt on every request (v2 did). Count the
		// whole load instead.
		tput = float64(r.all) / took.Seconds()
		b.res.note("%s on %s: no request started and ended within the %v window; throughput is all %d requests "+
			"over the whole load's %v, warm-up and stragglers included", name, b.sys, b.cfg.dur, r.all, took.Round(time.Millisecond))
	}
	b.res.add(name, b.sys, "throughput", "ops/s", false, tput)
	b.res.add(name, b.sys, "server CPU per op", "µs", true, r.cpuPerOp())
	if ok && p.ops > p.errs && p.cpuPerOp() > 0 {
		b.res.add(name, b.sys, "throughput ÷ unauthenticated", "×", false, tput/p.perSec(p.ops-p.errs))
		b.res.add(name, b.sys, "CPU per op ÷ unauthenticated", "×", true, r.cpuPerOp()/p.cpuPerOp())
	}
}

// authSetup makes, once per system, the root user and the bench user with
// its role through the v2 auth API (auth stays disabled).
func (b *kvBench) authSetup() *benchAuth {
	if b.auth != nil {
		return b.auth
	}
	k, ok := b.k.(*v2kv)
	if !ok {
		b.auth = &benchAuth{why: "not a v2 system"}
		return b.auth
	}
	as := func(user, pass string) *v2kv {
		return &v2kv{base: k.base, root: k.root, hc: k.hc, user: user, pass: pass}
	}
	a := &benchAuth{root: as("root", benchRootPass), user: as(benchUser, benchPass)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, st := range []struct{ path, body string }{
		{"/users/root", `{"user":"root","password":"` + benchRootPass + `"}`},
		{"/roles/bench", `{"role":"bench","permissions":{"kv":{"read":["/bench/*"],"write":["/bench/*"]}}}`},
		{"/users/" + benchUser, `{"user":"` + benchUser + `","password":"` + benchPass + `","roles":["bench"]}`},
	} {
		if err := a.root.auth(ctx, "PUT", st.path, st.body); err != nil {
			a.why = fmt.Sprintf("PUT /v2/auth%s: %s", st.path, fmtErr(err))
			break
		}
	}
	b.auth = a
	return a
}

// auth sends a JSON request to the v2 auth API (path after /v2/auth).
func (c *v2kv) auth(ctx context.Context, method, path, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+"/v2/auth"+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.send(req, nil)
}
