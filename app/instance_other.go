//go:build !unix && !windows

package app

import (
	"errors"
	"net"
)

// listenInstance: no single-instance check here.
func listenInstance(string, string) (net.Listener, string, func(), error) {
	return nil, "", nil, errors.ErrUnsupported
}

// dialInstance: no single-instance check here.
func dialInstance(string, string) (net.Conn, string, error) { return nil, "", errors.ErrUnsupported }
