// SPDX-License-Identifier: Apache-2.0

package passthrough

import (
	"net"
	"net/http"
	"time"
)

// maxConnsPerHost caps the connections to one v2 server: every parked watch
// holds one, so the cap is sized for many of them, and the same number is
// kept idle so that the re-watch after each event reuses a connection.
const maxConnsPerHost = 32768

// newTransport is the keep-alive transport of forwarded requests. A watch's
// response headers come at once from a v2 server, so waiting for them is
// bounded by requestTimeout like everything that is not a watch's body.
func newTransport(requestTimeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: requestTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		MaxIdleConns:          maxConnsPerHost,
		MaxIdleConnsPerHost:   maxConnsPerHost,
		MaxConnsPerHost:       maxConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   requestTimeout,
		ResponseHeaderTimeout: requestTimeout,
		ExpectContinueTimeout: time.Second,
		// Bodies are relayed as the v2 server sent them; the client's
		// Accept-Encoding is forwarded, so none is added here.
		DisableCompression: true,
	}
}

// newProbeTransport is the heartbeat's own transport: a probe never waits
// behind forwarded requests, and a connection it gave up on is not reused.
func newProbeTransport(timeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:               nil,
		DialContext:         d.DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: timeout,
		DisableCompression:  true,
	}
}
