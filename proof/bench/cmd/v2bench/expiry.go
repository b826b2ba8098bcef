// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The TTL expiry section: when a key whose TTL ran out stops being served,
// and when its expire event reaches a watcher, measured against the
// expiration the write answered with, on the bridge and on etcd v2.
const (
	expiryKeys      = 200
	expiryAlone     = 100 // written one at a time, expiryGap apart; the rest in bursts
	expiryGap       = 20 * time.Millisecond
	expiryBurst     = 20 // concurrent writes per burst
	expiryBurstGap  = 200 * time.Millisecond
	expiryPoll      = 10 * time.Millisecond // a key is read this often from just before its expiration
	expiryPollAhead = 50 * time.Millisecond
	expiryWait      = 10 * time.Second // after the last expiration, at most
)

var expirySystems = []struct{ col, title string }{{sysBridge, "v2bridge"}, {sysV2, "etcd v2"}}

func runExpiry(cfg *config, res *results) {
	logf("TTL expiry")
	t := &table{title: "TTL expiry", workload: "ttl-expiry", ratio: [2]string{sysBridge, sysV2}, ratioTitle: "v2bridge ÷ etcd v2",
		intro: fmt.Sprintf("%d keys with TTLs of 1–5 s (key i: 1 + i mod 5), %d written one at a time %v apart, the rest in bursts "+
			"of %d concurrent writes %v apart; one stream watch (recursive) sees their events. Each key is read (GET, "+
			"raw HTTP/1.1) every %v from %v before the expiration its write answered with until a 404; first 404 = "+
			"the receipt of that answer. Expire event = its receipt by the watch. Both measured from the answered "+
			"expiration, on the one clock of this machine. Served after expiration counts reads sent after it that "+
			"still found the key; expiration after TTL is the answered expiration less (write sent + ttl). v2bridge: "+
			"a bridge child over its embedded member; etcd v2: etcd 3.5 with its v2 store. One system at a time.",
			expiryKeys, expiryAlone, expiryGap, expiryBurst, expiryBurstGap, expiryPoll, expiryPollAhead)}
	for _, s := range expirySystems {
		t.cols = append(t.cols, s.col)
		t.colTitles = append(t.colTitles, s.title)
	}
	res.addTable(t)
	for run := 1; run <= cfg.runs; run++ {
		for i := range expirySystems {
			sys := expirySystems[(i+run-1)%len(expirySystems)].col
			var in *instance
			var err error
			if sys == sysBridge {
				in, err = startBridgeChild("")
			} else {
				in, err = startV2Ref(false)
			}
			if err != nil {
				t.note("%s: cannot start: %s", sys, fmtErr(err))
				continue
			}
			if err := expiryRun(t, sys, in.v2URL, run); err != nil {
				t.note("%s run %d: %s", sys, run, fmtErr(err))
			}
			in.Stop()
		}
	}
}

// expiryKey is what one key's write answered and when it went.
type expiryKey struct {
	sent, exp  time.Time
	ttl        int
	gone, evAt time.Time // first 404 received; expire event received
}

func expiryRun(t *table, sys, base string, run int) error {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer hc.CloseIdleConnections()
	dir := fmt.Sprintf("/expiry/r%d", run)
	start, err := v2Index(base, "/")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := make([]*expiryKey, expiryKeys)
	var mu sync.Mutex // guards keys' gone and evAt, served, negative
	events := make(chan error, 1)
	go func() { events <- expiryWatch(ctx, base, dir, start+1, keys, &mu) }()

	// Each key is polled from just before its expiration until a 404.
	var served, negative int
	var polls sync.WaitGroup
	defer polls.Wait()
	poll := func(i int, k *expiryKey) {
		defer polls.Done()
		time.Sleep(time.Until(k.exp.Add(-expiryPollAhead)))
		deadline := k.exp.Add(expiryWait)
		for time.Now().Before(deadline) {
			sent := time.Now()
			r, err := hc.Get(base + "/v2/keys" + dir + "/k" + strconv.Itoa(i))
			if err == nil {
				var a struct {
					Node struct {
						TTL int64 `json:"ttl"`
					} `json:"node"`
				}
				_ = json.NewDecoder(r.Body).Decode(&a)
				_ = r.Body.Close()
				got := time.Now()
				mu.Lock()
				if r.StatusCode == http.StatusNotFound {
					k.gone = got
					mu.Unlock()
					return
				}
				if !sent.Before(k.exp) {
					served++
				}
				if a.Node.TTL < 0 {
					negative++
				}
				mu.Unlock()
			}
			time.Sleep(expiryPoll)
		}
	}
	write := func(i int) error {
		k := &expiryKey{ttl: 1 + i%5, sent: time.Now()}
		f := url.Values{"value": {"x"}, "ttl": {strconv.Itoa(k.ttl)}}
		req, _ := http.NewRequest("PUT", base+"/v2/keys"+dir+"/k"+strconv.Itoa(i), strings.NewReader(f.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = r.Body.Close() }()
		var a struct {
			Node struct {
				Expiration time.Time `json:"expiration"`
			} `json:"node"`
		}
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil || r.StatusCode/100 != 2 {
			return fmt.Errorf("write %d: %d %v", i, r.StatusCode, err)
		}
		k.exp = a.Node.Expiration
		mu.Lock()
		keys[i] = k
		mu.Unlock()
		polls.Add(1)
		go poll(i, k)
		return nil
	}
	for i := 0; i < expiryAlone; i++ {
		if err := write(i); err != nil {
			return err
		}
		time.Sleep(expiryGap)
	}
	for b := expiryAlone; b < expiryKeys; b += expiryBurst {
		var wg sync.WaitGroup
		errs := make(chan error, expiryBurst)
		for i := b; i < min(b+expiryBurst, expiryKeys); i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- write(i)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
		time.Sleep(expiryBurstGap)
	}

	polls.Wait()
	// The events: all in, or the wait is over.
	last := keys[0].exp
	for _, k := range keys {
		if k.exp.After(last) {
			last = k.exp
		}
	}
	for time.Now().Before(last.Add(expiryWait)) {
		mu.Lock()
		n := 0
		for _, k := range keys {
			if !k.evAt.IsZero() {
				n++
			}
		}
		mu.Unlock()
		if n == len(keys) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-events; err != nil && ctx.Err() == nil {
		return err
	}

	mu.Lock()
	defer mu.Unlock()
	var gone, ev, after lat
	for _, k := range keys {
		after = append(after, k.exp.Sub(k.sent.Add(time.Duration(k.ttl)*time.Second)))
		if !k.gone.IsZero() {
			gone = append(gone, k.gone.Sub(k.exp))
		}
		if !k.evAt.IsZero() {
			ev = append(ev, k.evAt.Sub(k.exp))
		}
	}
	// A run that lost some (a stream watch cut off) reports none of that
	// figure rather than a part.
	for _, f := range []struct {
		name string
		l    lat
	}{{"first 404", gone}, {"expire event", ev}} {
		if len(f.l) < len(keys) {
			t.note("%s run %d: %d of %d keys without a %s within %v of their expiration", sys, run,
				len(keys)-len(f.l), len(keys), f.name, expiryWait)
			continue
		}
		for _, q := range []struct {
			name string
			p    float64
		}{{"p50", 0.5}, {"p99", 0.99}, {"max", 1}} {
			t.add(sys, f.name+" − expiration "+q.name, "ms", true, ms(f.l.pct(q.p)))
		}
	}
	t.add(sys, "expiration after TTL, min", "ms", true, ms(after.pct(0)))
	t.add(sys, "expiration after TTL, max", "ms", true, ms(after.pct(1)))
	t.add(sys, "reads served after expiration", "reads", true, float64(served))
	t.add(sys, "answers with a negative ttl", "answers", true, float64(negative))
	return nil
}

// expiryWatch streams the events below dir from index from, noting when
// each key's expire event arrives, until ctx ends.
func expiryWatch(ctx context.Context, base, dir string, from uint64, keys []*expiryKey, mu *sync.Mutex) error {
	u := fmt.Sprintf("%s/v2/keys%s?wait=true&recursive=true&stream=true&waitIndex=%d", base, dir, from)
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = r.Body.Close() }()
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		at := time.Now()
		var ev struct {
			Action string `json:"action"`
			Node   struct {
				Key string `json:"key"`
			} `json:"node"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Action != "expire" {
			continue
		}
		i, err := strconv.Atoi(strings.TrimPrefix(ev.Node.Key, dir+"/k"))
		if err != nil || i < 0 || i >= len(keys) {
			continue
		}
		mu.Lock()
		if k := keys[i]; k != nil && k.evAt.IsZero() {
			k.evAt = at
		}
		mu.Unlock()
	}
	return sc.Err()
}
