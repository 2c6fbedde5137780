//go:build windows

package app

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// listenInstance listens on 127.0.0.1 at a random port and writes
// "ADDRESS TOKEN" to <dir>/<name>.addr (mode 0600, in the user's own data
// directory), replacing a file nobody answers at.
func listenInstance(dir, name string) (ln net.Listener, token string, cleanup func(), err error) {
	path := filepath.Join(dir, name+".addr")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	token = hex.EncodeToString(b[:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(l.Addr().String()+" "+token+"\n"), 0o600); err != nil {
		l.Close()
		return nil, "", nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		l.Close()
		return nil, "", nil, err
	}
	return l, token, func() { l.Close(); os.Remove(path) }, nil
}

// dialInstance reads <dir>/<name>.addr and connects to the address in it.
func dialInstance(dir, name string) (net.Conn, string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name+".addr"))
	if err != nil {
		return nil, "", err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || !strings.HasPrefix(f[0], "127.0.0.1:") {
		return nil, "", errors.New("malformed instance file")
	}
	c, err := net.DialTimeout("tcp", f[0], time.Second)
	return c, f[1], err
}
