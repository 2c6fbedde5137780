//go:build unix

package app

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// listenInstance listens on <dir>/<name>.sock, mode 0600, replacing a
// socket nobody answers on; errInUse when another instance listens.
func listenInstance(dir, name string) (ln net.Listener, token string, cleanup func(), err error) {
	path := filepath.Join(dir, name+".sock")
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, "", nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, "", nil, errInUse
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, "", nil, err
		}
	}
	// The data directory is the user's own (mode 0700), so nobody else
	// reaches the socket between bind and chmod.
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, "", nil, errInUse
	}
	if err != nil {
		return nil, "", nil, err
	}
	ul.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ul.Close()
		return nil, "", nil, err
	}
	return ul, "", func() { ul.Close() }, nil
}

// dialInstance connects to the instance called name listening in dir.
func dialInstance(dir, name string) (net.Conn, string, error) {
	c, err := net.DialTimeout("unix", filepath.Join(dir, name+".sock"), time.Second)
	return c, "", err
}
