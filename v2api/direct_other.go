// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package v2api

import (
	"errors"
	"net"
)

// directIO: only Unix sockets are read and written directly; elsewhere the
// reader reads through the connection, and heads go out at once.
type directIO struct{}

func newDirectIO(net.Conn) *directIO { return nil }

var errNoDirectIO = errors.New("direct reads and writes are not supported on this system")

func (*directIO) readReady() (*[]byte, []byte, error) { return nil, nil, errNoDirectIO }

func (*directIO) writeNow([]byte) (int, error) { return 0, errNoDirectIO }
