// SPDX-License-Identifier: Apache-2.0

package core

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// Listen opens one listen URL: http://host:port, https://host:port or
// unix:///path.
func Listen(u string, ti *transport.TLSInfo) (net.Listener, error) {
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

// CheckFree fails if a URL's port is taken; the embedded etcd opens its own
// listeners, and reports a taken port only after many lines of startup logs.
func CheckFree(urls ...string) error {
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
