//go:build !unix && !windows

package agent

import (
	"context"
	"errors"
	"net"
	"net/http"
)

// listenLocal is not implemented on this platform.
func listenLocal(string) (net.Listener, func(*http.Request) bool, func(), error) {
	return nil, nil, nil, errors.ErrUnsupported
}

// dialLocal is not implemented on this platform.
func dialLocal(string) (string, map[string]string, func(context.Context, string, string) (net.Conn, error), error) {
	return "", nil, nil, errors.ErrUnsupported
}
