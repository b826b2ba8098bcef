// SPDX-License-Identifier: Apache-2.0

// Command v2ref runs a single-member etcd 3.5 server with the v2 API enabled.
//
// It is the conformance reference and benchmark peer for the v2bridge
// etcd-v2-over-v3 bridge: tests start it as a child process, wait for the
// "READY <client-url>" line on stdout and then talk plain etcd v2 HTTP to it.
//
// Usage:
//
//	v2ref --data-dir DIR [--listen-client-url http://127.0.0.1:0]
//	      [--listen-peer-url http://127.0.0.1:0] [--v2v3] [--v2v3-prefix /v2v3]
//	      [--auto-compaction-retention 1h] [--auto-compaction-mode periodic]
//	      [--cert-file F --key-file F [--trusted-ca-file F --client-cert-auth]]
//	      [--exit-on-stdin-eof]
//
// A port of 0 in a listen URL means "pick a free port". The only thing written
// to stdout is the READY line; etcd's own logs go to stderr at --log-level
// (default warn).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

type options struct {
	dataDir                 string
	name                    string
	listenClientURL         string
	listenPeerURL           string
	v2v3                    bool
	v2v3Prefix              string
	autoCompactionRetention string
	autoCompactionMode      string
	logLevel                string
	startTimeout            time.Duration
	exitOnStdinEOF          bool
	tls                     transport.TLSInfo // the client listener's; empty: http
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	var o options
	fs := flag.NewFlagSet("v2ref", flag.ContinueOnError)
	fs.StringVar(&o.dataDir, "data-dir", "", "etcd data directory (required)")
	fs.StringVar(&o.name, "name", "v2ref", "etcd member name")
	fs.StringVar(&o.listenClientURL, "listen-client-url", "http://127.0.0.1:0", "client URL to listen on (port 0 = pick a free port)")
	fs.StringVar(&o.listenPeerURL, "listen-peer-url", "http://127.0.0.1:0", "peer URL to listen on (port 0 = pick a free port)")
	fs.BoolVar(&o.v2v3, "v2v3", false, "serve the v2 API through etcd 3.5's experimental v2-over-v3 emulation instead of the v2 store")
	fs.StringVar(&o.v2v3Prefix, "v2v3-prefix", "/v2v3", "v3 key prefix used by --v2v3")
	fs.StringVar(&o.autoCompactionRetention, "auto-compaction-retention", "", "etcd auto compaction retention (e.g. 1h, or a revision count with --auto-compaction-mode=revision)")
	fs.StringVar(&o.autoCompactionMode, "auto-compaction-mode", "periodic", "etcd auto compaction mode: periodic or revision")
	fs.StringVar(&o.logLevel, "log-level", "warn", "etcd log level (written to stderr)")
	fs.DurationVar(&o.startTimeout, "start-timeout", 60*time.Second, "give up if the server is not ready within this time")
	fs.StringVar(&o.tls.CertFile, "cert-file", "", "server certificate: the client URL is https://")
	fs.StringVar(&o.tls.KeyFile, "key-file", "", "the server certificate's key")
	fs.StringVar(&o.tls.TrustedCAFile, "trusted-ca-file", "", "CA bundle to verify client certificates")
	fs.BoolVar(&o.tls.ClientCertAuth, "client-cert-auth", false, "require client certificates signed by --trusted-ca-file (v2 then takes a request without credentials as the user its certificate's common name names)")
	fs.BoolVar(&o.exitOnStdinEOF, "exit-on-stdin-eof", false, "shut down when stdin reaches EOF (lets a parent process tie the server's life to its own)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "v2ref: unexpected arguments: %q\n", fs.Args())
		return 2
	}
	if o.dataDir == "" {
		fmt.Fprintln(os.Stderr, "v2ref: --data-dir is required")
		return 2
	}
	if (o.tls.CertFile == "") != (o.tls.KeyFile == "") || o.tls.ClientCertAuth && o.tls.TrustedCAFile == "" {
		fmt.Fprintln(os.Stderr, "v2ref: --cert-file and --key-file go together; --client-cert-auth needs --trusted-ca-file")
		return 2
	}
	if o.v2v3 && o.v2v3Prefix == "" {
		fmt.Fprintln(os.Stderr, "v2ref: --v2v3-prefix must not be empty")
		return 2
	}
	if err := serve(o); err != nil {
		fmt.Fprintf(os.Stderr, "v2ref: %v\n", err)
		return 1
	}
	return 0
}

func serve(o options) error {
	clientURL, err := parseListenURL(o.listenClientURL, o.tls.CertFile != "")
	if err != nil {
		return fmt.Errorf("--listen-client-url: %w", err)
	}
	peerURL, err := parseListenURL(o.listenPeerURL, false)
	if err != nil {
		return fmt.Errorf("--listen-peer-url: %w", err)
	}

	// Signals are watched from the very start so that a SIGTERM during
	// startup still leads to a clean shutdown.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)

	stdinEOF := make(chan struct{})
	if o.exitOnStdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(stdinEOF)
		}()
	}

	// etcd's embed package only accepts concrete ports and opens its
	// listeners itself, so a port of 0 is resolved by asking the OS for a
	// free port and releasing it again. Another process could grab the port
	// in between; in that case (and only for ports we picked) try again.
	const attempts = 5
	var e *embed.Etcd
	for i := 0; ; i++ {
		cu, err := resolvePort(clientURL)
		if err != nil {
			return fmt.Errorf("picking client port: %w", err)
		}
		pu, err := resolvePort(peerURL)
		if err != nil {
			return fmt.Errorf("picking peer port: %w", err)
		}
		cfg := newConfig(o, cu, pu)
		e, err = embed.StartEtcd(cfg)
		if err == nil {
			clientURL = cu
			break
		}
		picked := clientURL.Port() == "0" || peerURL.Port() == "0"
		if i+1 < attempts && picked && isAddrInUse(err) {
			continue
		}
		return fmt.Errorf("starting etcd: %w", err)
	}
	defer e.Close()

	timer := time.NewTimer(o.startTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("etcd failed during startup: %w", err)
	case <-e.Server.StopNotify():
		return errors.New("etcd stopped during startup")
	case <-timer.C:
		return fmt.Errorf("etcd not ready after %v", o.startTimeout)
	case s := <-sigc:
		fmt.Fprintf(os.Stderr, "v2ref: got %v during startup, shutting down\n", s)
		return nil
	case <-stdinEOF:
		fmt.Fprintln(os.Stderr, "v2ref: stdin closed during startup, shutting down")
		return nil
	}

	// os.Stdout is unbuffered: this single write is the whole line.
	if _, err := fmt.Fprintf(os.Stdout, "READY %s\n", advertiseURL(clientURL)); err != nil {
		return fmt.Errorf("writing READY line: %w", err)
	}
	_ = os.Stdout.Sync() // a no-op error on pipes; the write above is already done

	select {
	case s := <-sigc:
		fmt.Fprintf(os.Stderr, "v2ref: got %v, shutting down\n", s)
		return nil
	case <-stdinEOF:
		fmt.Fprintln(os.Stderr, "v2ref: stdin closed, shutting down")
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd failed: %w", err)
	case <-e.Server.StopNotify():
		return errors.New("etcd stopped unexpectedly")
	}
}

func newConfig(o options, clientURL, peerURL *url.URL) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = o.name
	cfg.Dir = o.dataDir
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*advertiseURL(clientURL)}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*advertiseURL(peerURL)}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.EnableV2 = true
	cfg.ClientTLSInfo = o.tls
	if o.v2v3 {
		cfg.ExperimentalEnableV2V3 = o.v2v3Prefix
	}
	if o.autoCompactionRetention != "" {
		cfg.AutoCompactionMode = o.autoCompactionMode
		cfg.AutoCompactionRetention = o.autoCompactionRetention
	}
	cfg.Logger = "zap"
	cfg.LogLevel = o.logLevel
	cfg.LogOutputs = []string{"stderr"}
	return cfg
}

// parseListenURL checks a listen URL: https:// with a certificate, else
// http://.
func parseListenURL(s string, tls bool) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	if u.Scheme != scheme {
		return nil, fmt.Errorf("%q: want a %s:// URL", s, scheme)
	}
	if u.Hostname() == "" || u.Port() == "" {
		return nil, fmt.Errorf("%q: want %s://HOST:PORT", s, scheme)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%q: must not have a path", s)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// resolvePort returns u unchanged unless its port is 0, in which case it
// returns a copy with a port that was free a moment ago.
func resolvePort(u *url.URL) (*url.URL, error) {
	if u.Port() != "0" {
		return u, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(u.Hostname(), "0"))
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return nil, err
	}
	c := *u
	c.Host = net.JoinHostPort(u.Hostname(), fmt.Sprint(port))
	return &c, nil
}

// advertiseURL turns a listen URL into one a client can dial: an unspecified
// address (0.0.0.0 or ::) is replaced by the matching loopback address.
func advertiseURL(u *url.URL) *url.URL {
	c := *u
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		lo := "127.0.0.1"
		if ip.To4() == nil {
			lo = "::1"
		}
		c.Host = net.JoinHostPort(lo, u.Port())
	}
	return &c
}

func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}
