// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/v2bridge/v2bridge/bridge/core"
	"github.com/v2bridge/v2bridge/migrate/shadow"
	"github.com/v2bridge/v2bridge/translate"
	"github.com/v2bridge/v2bridge/v3backend"
	"sigs.k8s.io/yaml"
)

// config is every setting of the bridge; each flag can also be set as
// V2BRIDGE_<FLAG_IN_UPPER_SNAKE>, and a flag on the command line wins.
type config struct {
	listenClientURLs    string
	advertiseClientURLs string
	advertiseOnlySelf   bool

	endpoints             string
	v2Server              string
	modeLeaseTTL          time.Duration
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
	startTimeout         time.Duration

	watchHistoryEvents      int
	watchDetach             bool
	watchReplayMaxRevisions int64
	writeBatch              int
	httpIdleTimeout         time.Duration
	httpBodyReadTimeout     time.Duration
	maxConnections          int
	keysDetach              optionalBool // deprecated: no effect
	autoSyncInterval        time.Duration
	discoverySRV            string
	discoverySRVName        string

	embedded           optionalBool
	dataDir            string
	embeddedClientURLs string
	embeddedInProcess  bool
	embeddedPeerURLs   string
	autoCompaction     string

	dataPrefix     string
	metaPrefix     string
	servePrefix    string   // the served subtrees, as ParseServed returns them, joined with ","
	served         []string // the same, as a list
	servePrefixSet bool     // given by a flag, V2BRIDGE_SERVE_PREFIX or --config-file

	name        string
	logLevel    string
	logFormat   string
	showVersion bool
	configFile  string

	// Served-side TLS, as etcd's client listener.
	certFile, keyFile, trustedCAFile, clientCRLFile string
	clientCertAuth                                  bool
	tlsMinVersion                                   string

	listenMetricsURLs string
	clientMetrics     bool
	enablePprof       bool

	// The shadow comparison of passthrough mode (shadow.go).
	shadowSampleRate float64
	shadowQueue      int
	shadowPrefix     string

	// embeddedMode is how validate decided the backend: "" (--endpoints or
	// --discovery-srv), "explicit" (--embedded) or "implicit" (no backend
	// settings at all: the make run case).
	embeddedMode string

	// deprecated warns of each deprecated flag name used (alias.go).
	deprecated []string
}

// passthrough reports whether the bridge forwards the v2 API to --v2-server.
func (c *config) passthrough() bool { return c.v2Server != "" }

// dual reports whether the bridge has both sides: a --v2-server and an
// etcd v3 cluster, of which the mode record in etcd v3 names the one served.
func (c *config) dual() bool {
	return c.passthrough() && (c.endpoints != "" || c.discoverySRV != "")
}

// trackedString is a string flag that remembers whether any source set it.
type trackedString struct {
	value *string
	set   *bool
}

func (t *trackedString) Set(s string) error {
	*t.value, *t.set = s, true
	return nil
}

func (t *trackedString) String() string {
	if t == nil || t.value == nil {
		return ""
	}
	return *t.value
}

// optionalBool is a boolean flag that remembers whether any source set it.
type optionalBool struct{ value, set bool }

func (b *optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.value, b.set = v, true
	return nil
}

func (b *optionalBool) String() string {
	if b == nil {
		return "false"
	}
	return strconv.FormatBool(b.value)
}

func (b *optionalBool) IsBoolFlag() bool { return true }

func newFlagSet(c *config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(progName, flag.ContinueOnError)
	fs.SetOutput(out)
	d, h := v3backend.Defaults, core.DefaultHTTPLimits
	fs.StringVar(&c.listenClientURLs, "listen-client-urls", "http://127.0.0.1:2379", "comma-separated URLs to serve the v2 API on (http://host:port)")
	fs.StringVar(&c.advertiseClientURLs, "advertise-client-urls", "", "this bridge's URLs in /v2/members and /v2/machines (default: the listen URLs)")
	fs.BoolVar(&c.advertiseOnlySelf, "advertise-only-self", false, "/v2/members and /v2/machines list this bridge alone, and no other bridge lists it: for a bridge per node whose clients must stay on their node (default: every live bridge of the same cluster and --data-prefix, from their registrations in etcd v3)")
	fs.StringVar(&c.endpoints, "endpoints", "", "comma-separated etcd v3 endpoints (without them, and without any other backend setting, a private embedded etcd runs)")
	fs.StringVar(&c.v2Server, "v2-server", "", "passthrough mode: comma-separated client URLs of the etcd v2 server being migrated from (the v2 server), which answers every v2 request (failover in list order); with --endpoints or --discovery-srv too, dual mode: the mode record in etcd v3 says which side serves, and 'migrate cutover' switches every bridge at once")
	fs.DurationVar(&c.modeLeaseTTL, "mode-lease-ttl", 10*time.Second, "TTL of the lease on the bridge's registration in etcd v3: a bridge that dies leaves the other bridges' /v2/members within it; in dual mode, a bridge that cannot renew it that long refuses writes, since a cutover may have fenced without it")
	fs.DurationVar(&c.dialTimeout, "dial-timeout", d.DialTimeout, "timeout for connecting to an etcd v3 endpoint")
	fs.StringVar(&c.cacert, "cacert", "", "CA bundle to verify the etcd v3 endpoints")
	fs.StringVar(&c.cert, "cert", "", "client certificate for the etcd v3 endpoints")
	fs.StringVar(&c.key, "key", "", "client key for the etcd v3 endpoints")
	fs.BoolVar(&c.insecureSkipTLSVerify, "insecure-skip-tls-verify", false, "do not verify the etcd v3 endpoints' certificates")
	fs.StringVar(&c.user, "user", "", "etcd v3 user as name:password")
	fs.DurationVar(&c.dialKeepAliveTime, "dial-keepalive-time", d.KeepAliveTime, "gRPC keepalive ping interval to the backend (grpc-go raises values below 10s)")
	fs.DurationVar(&c.dialKeepAliveTimeout, "dial-keepalive-timeout", d.KeepAliveTimeout, "gRPC keepalive ping timeout")
	fs.DurationVar(&c.heartbeatInterval, "heartbeat-interval", d.HeartbeatInterval, "interval of the backend liveness heartbeat (a read a quorum confirms; GET /health of a --v2-server)")
	fs.DurationVar(&c.heartbeatTimeout, "heartbeat-timeout", d.HeartbeatTimeout, "deadline of one heartbeat")
	fs.IntVar(&c.heartbeatFailures, "heartbeat-failures", d.HeartbeatFailures, "missed heartbeats in a row that declare the backend lost")
	fs.DurationVar(&c.requestTimeout, "request-timeout", d.RequestTimeout, "deadline of every backend call made for a v2 request (of every request forwarded to a --v2-server but watches)")
	fs.DurationVar(&c.startTimeout, "start-timeout", time.Minute, "how long a bridge serving the whole key space by default (no --serve-prefix) waits at start for etcd to show it holds nothing of another tenant; past it, the bridge exits")
	fs.IntVar(&c.writeBatch, "write-batch", d.WriteBatch, "concurrent v2 writes one v3 transaction may carry, each guarded on its own (1: every write in a transaction of its own)")
	fs.DurationVar(&c.autoSyncInterval, "endpoints-auto-sync-interval", 0, "refresh the backend endpoints from the cluster's member list at this interval (0: never)")
	fs.StringVar(&c.discoverySRV, "discovery-srv", "", "domain whose DNS SRV records (_etcd-client-ssl._tcp, _etcd-client._tcp) list the backend endpoints")
	fs.StringVar(&c.discoverySRVName, "discovery-srv-name", "", "suffix of the SRV service name, as etcd's --discovery-srv-name")
	fs.Var(&c.embedded, "embedded", "serve a private embedded etcd instead of --endpoints (data in --data-dir; nothing else shares it)")
	fs.StringVar(&c.dataDir, "data-dir", "default.v2bridge", "embedded etcd's data directory (one bridge at a time: v2bridge.lock in it holds that bridge's PID)")
	fs.StringVar(&c.embeddedClientURLs, "embedded-client-urls", "http://127.0.0.1:22379", "embedded etcd's v3 client URL (v3 clients share the data here)")
	fs.StringVar(&c.embeddedPeerURLs, "embedded-peer-urls", "http://127.0.0.1:22380", "embedded etcd's peer URL")
	fs.BoolVar(&c.embeddedInProcess, "embedded-in-process", true, "the bridge calls its embedded etcd's v3 services in its own process instead of over gRPC on --embedded-client-urls, at about half the CPU per write (false, or with --user: over gRPC, as with --endpoints)")
	fs.StringVar(&c.autoCompaction, "embedded-auto-compaction-retention", v3backend.DefaultAutoCompaction, "embedded etcd's periodic auto-compaction retention (bounds watch history)")
	fs.StringVar(&c.dataPrefix, "data-prefix", "", "v3 key prefix of the v2 key space ('' or /something)")
	fs.StringVar(&c.metaPrefix, "meta-prefix", "_v2bridge/", "v3 key prefix of the bridge's bookkeeping (no leading slash)")
	c.servePrefix = "/"
	fs.Var(&trackedString{value: &c.servePrefix, set: &c.servePrefixSet}, "serve-prefix",
		"v2 subtrees served, comma-separated (e.g. /coreos.com/network): a key outside them gets error 100 (Key not found) in every mode, "+
			"and the bridge reads, watches and mirrors only them; / serves everything; bridges serving the same subtrees share v2 users and roles, "+
			"others have their own; migrate, verify and cutover take it for --v2-server-prefix's default and the users' key space")
	fs.StringVar(&c.name, "name", "v2bridge", "member name reported by /v2/members")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "json", "json or console")
	fs.StringVar(&c.configFile, "config-file", "", "YAML file of settings named like the flags")
	fs.StringVar(&c.certFile, "cert-file", "", "server certificate for https listen URLs (re-read on every new connection, so rotation needs no restart)")
	fs.StringVar(&c.keyFile, "key-file", "", "server key for https listen URLs")
	fs.StringVar(&c.trustedCAFile, "trusted-ca-file", "", "CA bundle to verify client certificates")
	fs.BoolVar(&c.clientCertAuth, "client-cert-auth", false, "require client certificates signed by --trusted-ca-file")
	fs.StringVar(&c.clientCRLFile, "client-crl-file", "", "certificate revocation list checked for client certificates")
	fs.StringVar(&c.tlsMinVersion, "tls-min-version", "TLS1.2", "minimum TLS version served: TLS1.2 or TLS1.3")
	fs.StringVar(&c.listenMetricsURLs, "listen-metrics-urls", "", "extra listeners serving only /metrics, /health, /readyz, /livez")
	fs.BoolVar(&c.clientMetrics, "client-metrics", true, "serve /metrics on the client URLs too (false: only on --listen-metrics-urls, which may listen where only the monitoring reaches)")
	fs.BoolVar(&c.enablePprof, "enable-pprof", false, "serve runtime profiles at /debug/pprof/ on the client URLs")
	fs.IntVar(&c.watchHistoryEvents, "watch-history-events", d.RingSize, "recent v2 events kept for re-watches: a waitIndex older than that many events gets error 401, as v2 kept its last 1000")
	fs.BoolVar(&c.watchDetach, "watch-detach", true, "a one-shot watch over HTTP/1.1 with nothing to send yet leaves net/http while it waits, and its connection goes back to net/http after the answer (false: every watch waits inside net/http, at more memory per watcher)")
	fs.Int64Var(&c.watchReplayMaxRevisions, "watch-replay-max-revisions", d.MaxReplayRevisions, "how far back (in revisions) a replay of v3 history may read for a waitIndex older than the kept events")
	fs.DurationVar(&c.httpIdleTimeout, "http-idle-timeout", h.IdleTimeout, "close a client's keep-alive connection idle this long between requests (a parked watch is not idle)")
	fs.DurationVar(&c.httpBodyReadTimeout, "http-body-read-timeout", h.BodyReadTimeout, "deadline for reading a request's body")
	fs.IntVar(&c.maxConnections, "max-connections", h.MaxConnections, "client connections served at once per listener; more wait to be accepted (0: no cap)")
	fs.Var(&c.keysDetach, "keys-detach", "deprecated, no effect: net/http reads every request; remove it")
	fs.Float64Var(&c.shadowSampleRate, "shadow-sample-rate", 1, "passthrough mode with --endpoints: share of forwarded reads compared with etcd v3, off the request path; every forwarded write is compared (0 disables both)")
	fs.IntVar(&c.shadowQueue, "shadow-queue", shadow.Defaults.Queue, "sampled requests waiting for a shadow comparison; more are dropped (counted), and the sample rate halves while it overflows")
	fs.StringVar(&c.shadowPrefix, "shadow-prefix", "", "v2 subtree the shadow comparison covers (default: --serve-prefix, all that is served)")
	fs.BoolVar(&c.showVersion, "version", false, "print the version and exit")
	addAlias(fs, "v2-upstream", "v2-server")
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
	if err := applySources(fs, getenv); err != nil {
		return nil, err
	}
	c.deprecated = deprecationWarnings(fs)
	if c.advertiseClientURLs == "" {
		c.advertiseClientURLs = advertiseDefault(c.listenClientURLs, os.Hostname)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// applySources fills the flags not given on the command line, first from
// V2BRIDGE_* environment variables, then from --config-file: one rule,
// command line > environment > config file > default. A deprecated flag
// name, from any of them, sets the flag that replaced it (resolveAliases).
func applySources(fs *flag.FlagSet, getenv func(string) string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		env := envName(f.Name)
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			}
			set[f.Name] = true
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	cf := fs.Lookup("config-file")
	if cf == nil || cf.Value.String() == "" {
		return resolveAliases(fs, set)
	}
	vals, err := readConfigFile(cf.Value.String())
	if err != nil {
		return err
	}
	for name, v := range vals {
		f := fs.Lookup(name)
		if f == nil || name == "config-file" {
			errs = append(errs, fmt.Errorf("%s: unknown setting %q", cf.Value.String(), name))
			continue
		}
		if set[name] {
			continue
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", cf.Value.String(), name, err))
		}
		set[name] = true
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return resolveAliases(fs, set)
}

// readConfigFile reads a YAML map of flag names to values; lists become
// comma-separated values.
func readConfigFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator's own --config-file
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	// Through JSON with UseNumber, so numbers keep the digits the user wrote
	// (1000000, not 1e+06).
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	var raw map[string]any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("config file %s: want a map of settings named like the flags: %w", path, err)
	}
	out := map[string]string{}
	for k, v := range raw {
		switch t := v.(type) {
		case []any:
			parts := make([]string, len(t))
			for i, p := range t {
				parts[i] = fmt.Sprint(p)
			}
			out[k] = strings.Join(parts, ",")
		case nil:
			out[k] = ""
		default:
			out[k] = fmt.Sprint(t)
		}
	}
	return out, nil
}

// validate refuses malformed and conflicting settings, naming the offender.
func (c *config) validate() error {
	https := false
	for _, list := range []string{c.listenClientURLs, c.listenMetricsURLs} {
		for _, u := range splitList(list) {
			pu, err := url.Parse(u)
			switch {
			case err != nil:
				return fmt.Errorf("bad listen URL %q: %v", u, err)
			case pu.Scheme == "unix" && pu.Path != "":
			case (pu.Scheme == "http" || pu.Scheme == "https") && pu.Host != "":
				https = https || pu.Scheme == "https"
			default:
				return fmt.Errorf("bad listen URL %q: want http://host:port, https://host:port or unix:///path", u)
			}
		}
	}
	for _, u := range splitList(c.advertiseClientURLs) {
		if pu, err := url.Parse(u); err != nil || pu.Host == "" && pu.Scheme != "unix" {
			return fmt.Errorf("bad advertise URL %q", u)
		}
	}
	switch {
	case c.discoverySRV != "" && c.endpoints != "":
		return fmt.Errorf("--discovery-srv and --endpoints conflict: give one")
	case c.user != "" && !strings.Contains(c.user, ":"):
		return fmt.Errorf("--user must be name:password")
	case (c.certFile == "") != (c.keyFile == ""):
		return fmt.Errorf("--cert-file and --key-file go together")
	case https && c.certFile == "":
		return fmt.Errorf("https listen URLs need --cert-file and --key-file")
	case c.certFile != "" && !https:
		return fmt.Errorf("--cert-file is set but no listen URL is https")
	case c.clientCertAuth && c.trustedCAFile == "":
		return fmt.Errorf("--client-cert-auth needs --trusted-ca-file")
	case c.clientCRLFile != "" && !c.clientCertAuth:
		return fmt.Errorf("--client-crl-file needs --client-cert-auth")
	case c.tlsMinVersion != "TLS1.2" && c.tlsMinVersion != "TLS1.3":
		return fmt.Errorf("--tls-min-version %q: want TLS1.2 or TLS1.3", c.tlsMinVersion)
	case c.logFormat != "json" && c.logFormat != "console":
		return fmt.Errorf("--log-format %q: want json or console", c.logFormat)
	case c.writeBatch < 1 || c.writeBatch > 128:
		return fmt.Errorf("--write-batch %d: want 1 to 128 (etcd's default --max-txn-ops)", c.writeBatch)
	}
	served, err := translate.ParseServed(c.servePrefix)
	if err != nil {
		return usageErrorf("--serve-prefix: %v", err)
	}
	if len(served) > 1 && c.passthrough() {
		return usageErrorf("--serve-prefix %s: a bridge with --v2-server serves one subtree (its migration covers one)", c.servePrefix)
	}
	c.served, c.servePrefix = served, strings.Join(served, ",")
	if err := c.checkShadow(); err != nil {
		return err
	}
	return c.decideBackend()
}

// decideBackend applies the one rule for the embedded etcd: it runs when
// asked for (--embedded), or when no backend setting is given at all — no
// --endpoints, --discovery-srv, --embedded or --config-file — which is what
// `make run` does. A configured deployment (a config file, or
// V2BRIDGE_EMBEDDED=false as the Docker image sets) must name its backend,
// so a typo never turns into a bridge serving an empty private store.
func (c *config) decideBackend() error {
	if c.passthrough() {
		return c.checkV2Server()
	}
	remote := c.endpoints != "" || c.discoverySRV != ""
	switch {
	case c.embedded.value && remote:
		return errors.New("--embedded conflicts with --endpoints and --discovery-srv: give one backend")
	case remote:
		c.embeddedMode = ""
	case c.embedded.value:
		c.embeddedMode = "explicit"
	case !c.embedded.set && c.configFile == "":
		c.embeddedMode = "implicit"
	default:
		return errors.New("no etcd v3 backend: give --endpoints (V2BRIDGE_ENDPOINTS) or --discovery-srv, " +
			"or --embedded (V2BRIDGE_EMBEDDED=true) to serve a private embedded etcd with its data in --data-dir")
	}
	return nil
}

// advertiseDefault is the listen URLs, with an unspecified host (0.0.0.0,
// [::]) replaced by this machine's name: a wildcard address is useless to the
// v2 clients that read /v2/members.
func advertiseDefault(listen string, hostname func() (string, error)) string {
	var out []string
	for _, u := range splitList(listen) {
		pu, err := url.Parse(u)
		if err == nil && (pu.Scheme == "http" || pu.Scheme == "https") {
			if h := pu.Hostname(); h == "" || net.ParseIP(h) != nil && net.ParseIP(h).IsUnspecified() {
				if name, err := hostname(); err == nil && name != "" {
					pu.Host = net.JoinHostPort(name, pu.Port())
					u = pu.String()
				}
			}
		}
		out = append(out, u)
	}
	return strings.Join(out, ",")
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

// checkV2Server validates passthrough mode: --v2-server is a list of
// http(s) URLs, and no embedded etcd goes with it.
func (c *config) checkV2Server() error {
	if c.embedded.value {
		return errors.New("--embedded conflicts with --v2-server: passthrough mode serves the v2 server, not an etcd")
	}
	if c.discoverySRV != "" && c.endpoints != "" {
		return errors.New("--discovery-srv and --endpoints conflict: give one")
	}
	if c.modeLeaseTTL < 2*time.Second {
		return fmt.Errorf("--mode-lease-ttl %v: at least 2s (etcd's shortest lease)", c.modeLeaseTTL)
	}
	for _, u := range splitList(c.v2Server) {
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return fmt.Errorf("bad --v2-server URL %q: want http://host:port or https://host:port", u)
		}
	}
	if len(splitList(c.v2Server)) == 0 {
		return errors.New("--v2-server: no URL")
	}
	c.embeddedMode = ""
	return nil
}
