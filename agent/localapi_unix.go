//go:build unix

package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"time"
)

// listenLocal listens on a Unix domain socket at path, mode 0600. A
// socket left there by an agent that died is removed; one an agent still
// answers on is an error. check accepts every request: the socket's mode
// is the access control.
func listenLocal(path string) (ln net.Listener, check func(*http.Request) bool, cleanup func(), err error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, nil, nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, nil, nil, fmt.Errorf("another agent serves at %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, nil, nil, err
		}
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, nil, nil, err
	}
	ul.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ul.Close()
		return nil, nil, nil, err
	}
	return ul, func(*http.Request) bool { return true }, func() { ul.Close() }, nil
}

// dialLocal returns how to reach the local API at path.
func dialLocal(path string) (base string, header map[string]string, dial func(context.Context, string, string) (net.Conn, error), err error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil, nil, errors.New("no agent runs (no socket)")
		}
		return "", nil, nil, err
	}
	var d net.Dialer
	return "http://agent", nil, func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", path)
	}, nil
}
