// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package v2api

import (
	"errors"
	"net"
	"syscall"
)

// directReader: only Unix sockets are read directly; the reader reads
// through the connection elsewhere.
func directReader(net.Conn) syscall.RawConn { return nil }

func (dc *detachedConn) readReady() (*[]byte, []byte, error) {
	return nil, nil, errors.New("direct reads are not supported on this system")
}

func (dc *detachedConn) writeNow([]byte) (int, error) {
	return 0, errors.New("direct writes are not supported on this system")
}
