// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/cutover"
	"github.com/v2bridge/v2bridge/shadow"
	"github.com/v2bridge/v2bridge/translate"
)

// checkShadow validates the --shadow-* settings.
func (c *config) checkShadow() error {
	switch {
	case math.IsNaN(c.shadowSampleRate) || c.shadowSampleRate < 0 || c.shadowSampleRate > 1:
		return fmt.Errorf("--shadow-sample-rate %v: want a share from 0 (off) to 1 (every request)", c.shadowSampleRate)
	case c.shadowQueue <= 0:
		return fmt.Errorf("--shadow-queue %d: want at least 1", c.shadowQueue)
	}
	if _, verr := translate.CleanPath(c.shadowPrefix); verr != nil {
		return fmt.Errorf("--shadow-prefix %q: %s", c.shadowPrefix, verr.Cause)
	}
	return nil
}

// newV3Client is a plain v3 client of the cluster the settings name, with
// the backend's TLS, auth and dial timeout.
func newV3Client(c *config, endpoints []string, layout translate.Layout) (*clientv3.Client, error) {
	bcfg, err := backendConfig(c, endpoints, layout)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: bcfg.Endpoints, TLS: bcfg.TLS, Username: bcfg.Username,
		Password: bcfg.Password, DialTimeout: bcfg.DialTimeout, DialKeepAliveTime: bcfg.KeepAliveTime,
		DialKeepAliveTimeout: bcfg.KeepAliveTimeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("connecting to the etcd v3 cluster at %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

// readShadowAndFollowed reads the bridges' shadow records, and the prefix
// `migrate --follow` copies ("" without its record).
func readShadowAndFollowed(ctx context.Context, c *config, endpoints []string, layout translate.Layout) ([]shadow.Record, string, error) {
	cli, err := newV3Client(c, endpoints, layout)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = cli.Close() }()
	rctx, cancel := context.WithTimeout(ctx, max(c.requestTimeout, time.Second))
	defer cancel()
	recs, err := shadow.ReadRecords(rctx, cli, layout)
	if err != nil {
		return nil, "", err
	}
	resp, err := cli.Get(rctx, cutover.KeysFor(layout.MetaPrefix).Follow)
	if err != nil {
		return recs, "", fmt.Errorf("reading the follower's record: %w", err)
	}
	var fr cutover.FollowRecord
	if len(resp.Kvs) == 0 || json.Unmarshal(resp.Kvs[0].Value, &fr) != nil {
		return recs, "", nil
	}
	return recs, fr.Prefix, nil
}

// narrower names the bridges whose shadow comparison covers less than the
// followed copy: a divergence outside their prefix is never seen.
func narrower(recs []shadow.Record, followed string) []string {
	var out []string
	for _, r := range recs {
		if followed != "" && !cutover.Covers(r.Prefix, followed) {
			out = append(out, fmt.Sprintf("%s on %s (%s)", r.Name, r.Host, strings.Join(r.AdvertiseURLs, ",")))
		}
	}
	return out
}

// printShadow prints the shadow summary after verify's own, and a warning
// line for each bridge comparing less than the followed copy; a failure to
// read it is reported, and does not fail verify.
func printShadow(w io.Writer, recs []shadow.Record, followed string, err error) {
	if err != nil {
		_, _ = fmt.Fprintf(w, "shadow       could not read the bridges' shadow records: %v\n", err)
		return
	}
	shadow.WriteSummary(w, recs, time.Now())
	for _, b := range narrower(recs, followed) {
		_, _ = fmt.Fprintf(w, "  warning: %s compares less than the followed copy %s (its --shadow-prefix): "+
			"what lies outside is never checked\n", b, followed)
	}
}

// jsonShadow is the shadow part of verify's JSON summary.
type jsonShadow struct {
	Bridges []shadow.Record `json:"bridges"`
	Total   shadow.Counts   `json:"total"`
	// Followed is the prefix `migrate --follow` copies; Narrower, the
	// bridges whose shadow prefix covers less of it.
	Followed string   `json:"followed,omitempty"`
	Narrower []string `json:"narrower,omitempty"`
	Error    string   `json:"error,omitempty"`
}

func shadowJSON(recs []shadow.Record, followed string, err error) *jsonShadow {
	j := &jsonShadow{Bridges: []shadow.Record{}, Total: shadow.Total(recs), Followed: followed,
		Narrower: narrower(recs, followed)}
	if err != nil {
		j.Error = err.Error()
	}
	j.Bridges = append(j.Bridges, recs...)
	return j
}
