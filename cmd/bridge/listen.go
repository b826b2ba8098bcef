// SPDX-License-Identifier: Apache-2.0

package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/v2bridge/v2bridge/assemble"
	"net"
	"net/url"
	"os"
	"syscall"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// listeners are the bridge's open listeners, before they serve.
type listeners struct {
	client, metrics []assemble.Listener
}

// openListeners opens every listen URL, and checks that the embedded etcd's
// ports are free, so that a taken port is one clear error before anything
// starts.
func openListeners(c *config) (*listeners, error) {
	l := &listeners{}
	tlsInfo := serverTLS(c)
	open := func(urls string) ([]assemble.Listener, error) {
		var out []assemble.Listener
		for _, u := range splitList(urls) {
			ln, err := listen(u, tlsInfo)
			if err != nil {
				return out, err
			}
			out = append(out, assemble.Listener{URL: u, Ln: ln})
		}
		return out, nil
	}
	var err error
	if l.client, err = open(c.listenClientURLs); err == nil {
		l.metrics, err = open(c.listenMetricsURLs)
	}
	if err == nil && c.embeddedMode != "" {
		err = checkFree(c.embeddedClientURLs, c.embeddedPeerURLs)
	}
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// close closes the listeners, which never served.
func (l *listeners) close() {
	for _, ul := range append(l.client, l.metrics...) {
		_ = ul.Ln.Close()
	}
}

// checkFree fails if a URL's port is taken; the embedded etcd opens its own
// listeners, and reports a taken port only after many lines of startup logs.
func checkFree(urls ...string) error {
	for _, u := range urls {
		pu, err := url.Parse(u)
		if err != nil {
			return fmt.Errorf("bad embedded URL %q: %w", u, err)
		}
		ln, err := net.Listen("tcp", pu.Host)
		if err != nil {
			return listenError(u, err)
		}
		_ = ln.Close()
	}
	return nil
}

// serverTLS is the served-side TLS of https listeners. etcd's transport
// re-reads the certificate files on every new connection, so a rotated
// certificate is picked up without a restart, and checks the CRL.
func serverTLS(c *config) *transport.TLSInfo {
	if c.certFile == "" {
		return nil
	}
	ti := &transport.TLSInfo{CertFile: c.certFile, KeyFile: c.keyFile, TrustedCAFile: c.trustedCAFile,
		ClientCertAuth: c.clientCertAuth, CRLFile: c.clientCRLFile, MinVersion: tls.VersionTLS12}
	if c.tlsMinVersion == "TLS1.3" {
		ti.MinVersion = tls.VersionTLS13
	}
	return ti
}

// listen opens one listen URL: http://host:port, https://host:port or
// unix:///path.
func listen(u string, ti *transport.TLSInfo) (net.Listener, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	switch pu.Scheme {
	case "unix":
		_ = os.Remove(pu.Path) // a stale socket from an earlier run
		ln, err = net.Listen("unix", pu.Path)
	case "https":
		ln, err = transport.NewListenerWithOpts(pu.Host, "https", transport.WithTLSInfo(ti))
	default:
		ln, err = net.Listen("tcp", pu.Host)
	}
	if err != nil {
		return nil, listenError(u, err)
	}
	return ln, nil
}

// listenError names the URL and, for the common case, the likely cause.
func listenError(u string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("cannot listen on %s: address already in use (is another v2bridge or etcd running?)", u)
	}
	return fmt.Errorf("cannot listen on %s: %w", u, err)
}
