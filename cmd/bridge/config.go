package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"
)

// config is every setting of the bridge; each flag can also be set as
// V2BRIDGE_<FLAG_IN_UPPER_SNAKE>, and a flag on the command line wins.
type config struct {
	listenClientURLs    string
	advertiseClientURLs string

	endpoints             string
	dialTimeout           time.Duration
	cacert, cert, key     string
	insecureSkipTLSVerify bool
	user                  string

	dialKeepAliveTime    time.Duration
	dialKeepAliveTimeout time.Duration
	heartbeatInterval    time.Duration
	heartbeatTimeout     time.Duration
	heartbeatFailures    int
	requestTimeout       time.Duration

	dataDir            string
	embeddedClientURLs string
	embeddedPeerURLs   string
	autoCompaction     string

	dataPrefix string
	metaPrefix string

	name        string
	logLevel    string
	showVersion bool
}

func newFlagSet(c *config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("bridge", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.listenClientURLs, "listen-client-urls", "http://127.0.0.1:2379", "comma-separated URLs to serve the v2 API on (http://host:port)")
	fs.StringVar(&c.advertiseClientURLs, "advertise-client-urls", "", "URLs reported by /v2/members and /v2/machines (default: the listen URLs)")
	fs.StringVar(&c.endpoints, "endpoints", "", "comma-separated etcd v3 endpoints; empty runs an embedded etcd")
	fs.DurationVar(&c.dialTimeout, "dial-timeout", 5*time.Second, "timeout for connecting to an etcd v3 endpoint")
	fs.StringVar(&c.cacert, "cacert", "", "CA bundle to verify the etcd v3 endpoints")
	fs.StringVar(&c.cert, "cert", "", "client certificate for the etcd v3 endpoints")
	fs.StringVar(&c.key, "key", "", "client key for the etcd v3 endpoints")
	fs.BoolVar(&c.insecureSkipTLSVerify, "insecure-skip-tls-verify", false, "do not verify the etcd v3 endpoints' certificates")
	fs.StringVar(&c.user, "user", "", "etcd v3 user as name:password")
	fs.DurationVar(&c.dialKeepAliveTime, "dial-keepalive-time", 10*time.Second, "gRPC keepalive ping interval to the backend (grpc-go raises values below 10s)")
	fs.DurationVar(&c.dialKeepAliveTimeout, "dial-keepalive-timeout", 3*time.Second, "gRPC keepalive ping timeout")
	fs.DurationVar(&c.heartbeatInterval, "heartbeat-interval", time.Second, "interval of the backend liveness heartbeat (gRPC health check)")
	fs.DurationVar(&c.heartbeatTimeout, "heartbeat-timeout", time.Second, "deadline of one heartbeat")
	fs.IntVar(&c.heartbeatFailures, "heartbeat-failures", 2, "missed heartbeats in a row that declare the backend lost")
	fs.DurationVar(&c.requestTimeout, "request-timeout", 5*time.Second, "deadline of every backend call made for a v2 request")
	fs.StringVar(&c.dataDir, "data-dir", "default.v2bridge", "embedded etcd's data directory")
	fs.StringVar(&c.embeddedClientURLs, "embedded-client-urls", "http://127.0.0.1:22379", "embedded etcd's v3 client URL (v3 clients share the data here)")
	fs.StringVar(&c.embeddedPeerURLs, "embedded-peer-urls", "http://127.0.0.1:22380", "embedded etcd's peer URL")
	fs.StringVar(&c.autoCompaction, "embedded-auto-compaction-retention", "1h", "embedded etcd's periodic auto-compaction retention (bounds watch history)")
	fs.StringVar(&c.dataPrefix, "data-prefix", "", "v3 key prefix of the v2 key space ('' or /something)")
	fs.StringVar(&c.metaPrefix, "meta-prefix", "_v2bridge/", "v3 key prefix of the bridge's bookkeeping (no leading slash)")
	fs.StringVar(&c.name, "name", "v2bridge", "member name reported by /v2/members")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&c.showVersion, "version", false, "print the version and exit")
	return fs
}

// parseConfig applies, in order of precedence: command-line flags, then
// V2BRIDGE_* environment variables, then defaults.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (*config, error) {
	c := &config{}
	fs := newFlagSet(c, out)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		env := "V2BRIDGE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if c.advertiseClientURLs == "" {
		c.advertiseClientURLs = c.listenClientURLs
	}
	for _, list := range []string{c.listenClientURLs, c.advertiseClientURLs} {
		for _, u := range splitList(list) {
			pu, err := url.Parse(u)
			if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
				return nil, fmt.Errorf("bad client URL %q: want http://host:port", u)
			}
		}
	}
	if c.user != "" && !strings.Contains(c.user, ":") {
		return nil, fmt.Errorf("--user must be name:password")
	}
	return c, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func getenv(k string) string { return os.Getenv(k) }
