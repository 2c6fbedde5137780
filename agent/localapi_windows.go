//go:build windows

package agent

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
)

// listenLocal listens on 127.0.0.1 at a random port and writes the base
// URL and a fresh random token to the file at path (in the user's own data
// directory); check accepts only requests bearing the token. cleanup
// closes the listener and removes the file.
func listenLocal(path string) (ln net.Listener, check func(*http.Request) bool, cleanup func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, err
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	content := "http://" + l.Addr().String() + "\n" + token + "\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		l.Close()
		return nil, nil, nil, err
	}
	want := []byte("Bearer " + token)
	check = func(r *http.Request) bool {
		return subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) == 1
	}
	return l, check, func() { l.Close(); os.Remove(path) }, nil
}

// dialLocal reads the base URL and token from the file at path.
func dialLocal(path string) (base string, header map[string]string, dial func(context.Context, string, string) (net.Conn, error), err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, nil, err
	}
	lines := strings.Fields(string(b))
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "http://127.0.0.1:") {
		return "", nil, nil, errors.New("malformed local API file")
	}
	var d net.Dialer
	return lines[0], map[string]string{"Authorization": "Bearer " + lines[1]}, d.DialContext, nil
}
