// SPDX-License-Identifier: Apache-2.0

package main

import (
	"crypto/tls"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/v2bridge/v2bridge/bridge/core"
	"github.com/v2bridge/v2bridge/bridge/modes"
)

// listeners are the bridge's open listeners, before they serve.
type listeners struct {
	client, metrics []modes.Listener
}

// openListeners opens every listen URL, and checks that the embedded etcd's
// ports are free, so that a taken port is one clear error before anything
// starts.
func openListeners(c *config) (*listeners, error) {
	l := &listeners{}
	tlsInfo := serverTLS(c)
	open := func(urls string) ([]modes.Listener, error) {
		var out []modes.Listener
		for _, u := range splitList(urls) {
			ln, err := core.Listen(u, tlsInfo)
			if err != nil {
				return out, err
			}
			out = append(out, modes.Listener{URL: u, Ln: ln})
		}
		return out, nil
	}
	var err error
	if l.client, err = open(c.listenClientURLs); err == nil {
		l.metrics, err = open(c.listenMetricsURLs)
	}
	if err == nil && c.embeddedMode != "" {
		err = core.CheckFree(c.embeddedClientURLs, c.embeddedPeerURLs)
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
