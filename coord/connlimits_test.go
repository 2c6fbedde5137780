package coord

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testDeadline is when a test that waits for the coordinator to act gives
// up: just before the test binary's own deadline, so that only a
// coordinator that never acts fails, however busy the machine.
func testDeadline(t *testing.T) time.Time {
	if d, ok := t.Deadline(); ok {
		return d.Add(-10 * time.Second)
	}
	return time.Now().Add(10 * time.Minute)
}

// junkAuth is an Authorization header naming peer with a fresh timestamp
// and a signature that verifies with no key.
func junkAuth(peer string) string {
	sig := make([]byte, 64)
	rand.Read(sig)
	return fmt.Sprintf("Idlepool peer=%s, ts=%d, sig=%s", peer, time.Now().UnixMilli(), base64.StdEncoding.EncodeToString(sig))
}

// rawRequest opens a connection to ts and sends a request head declaring
// a body of length bytes (chunked when negative), then body.
func (ts *testServer) rawRequest(t *testing.T, method, path, auth string, length int64, body []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n", method, path)
	if auth != "" {
		fmt.Fprintf(&head, "Authorization: %s\r\n", auth)
	}
	fmt.Fprintf(&head, "Content-Length: %d\r\n\r\n", length)
	if _, err := c.Write(append([]byte(head.String()), body...)); err != nil {
		t.Fatal(err)
	}
	return c
}

// awaitAnswer reads the coordinator's answer on c, or its closing c
// without one (status 0).
func awaitAnswer(t *testing.T, c net.Conn) (status int, code string) {
	t.Helper()
	c.SetReadDeadline(testDeadline(t))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err) {
			return 0, ""
		}
		t.Fatalf("the coordinator neither answered nor closed the connection: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Type") != "application/json" {
		return resp.StatusCode, ""
	}
	a := answer{status: resp.StatusCode, body: b}
	return a.status, a.errorBody(t).Code
}

// awaitClose waits until the coordinator closes c, after its answer if
// any (that is, reads to the end).
func awaitClose(t *testing.T, c net.Conn) (status int) {
	t.Helper()
	c.SetReadDeadline(testDeadline(t))
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err == nil {
		status = resp.StatusCode
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if _, err := io.Copy(io.Discard, br); err != nil && !isReset(err) {
		t.Fatalf("the coordinator did not close the connection: %v", err)
	}
	return status
}

// isReset reports whether err is a connection reset, which is how a
// server closing with unread bytes ends a connection.
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "reset")
}

// until polls cond, at most 30000 times and until the test's deadline.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := testDeadline(t)
	for i := 0; i < 30000 && time.Now().Before(end); i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("gave up waiting until %s", what)
}

// spooled is the size of the coordinator's temporary body files.
func spooled(t *testing.T, ts *testServer) (n int64, files int) {
	ents, err := os.ReadDir(filepath.Join(ts.cfg.DataDir, spoolDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil {
			n += info.Size()
			files++
		}
	}
	return n, files
}

// TestBodiesBeforeAuthentication checks what a body costs the coordinator
// before anyone is known (issue 9, item 18): a registration can only be
// small, so a large one is refused before it is read; a large body with a
// signature that does not verify, for a known peer, goes to a temporary
// file, not memory; memory for bodies is bounded in total (503 past it).
func TestBodiesBeforeAuthentication(t *testing.T) {
	t.Run("large registration refused unread", func(t *testing.T) {
		ts := startServer(t, nil)
		stranger := newPeer(t, nil)
		// The body is never sent: an answer proves it was not awaited.
		c := ts.rawRequest(t, "POST", "/v1/peers", junkAuth(stranger.ID()), 1<<20, nil)
		if status, code := awaitAnswer(t, c); status != http.StatusRequestEntityTooLarge || code != "too_large" {
			t.Errorf("got %d %q, want 413 too_large", status, code)
		}
	})

	t.Run("unverified bodies kept on disk", func(t *testing.T) {
		const inMemory, size, conns = 4 << 10, 256 << 10, 8
		ts := startServer(t, func(c *Config) { c.BodyInMemory = inMemory; c.MaxBodyMemory = 1 << 20; c.BodyTimeout = time.Hour })
		peer := newPeer(t, nil)
		ts.register(t, peer, "", http.StatusCreated)
		// Each sends all but the last byte of its body, then stalls.
		var open []net.Conn
		for range conns {
			open = append(open, ts.rawRequest(t, "POST", "/v1/leases/0123456789abcdef0123456789abcdef/result",
				junkAuth(peer.ID()), size+1, bytes.Repeat([]byte(" "), size)))
		}
		until(t, "the coordinator has read the bodies", func() bool {
			n, files := spooled(t, ts)
			return files == conns && n == conns*size
		})
		if got := ts.bodyMem.used.Load(); got != 0 {
			t.Errorf("%d body bytes in memory while %d unverified bodies of %d bytes stall, want 0", got, conns, size)
		}
		// Memory for peers that sign is still there.
		if a := ts.do(t, peer, "GET", "/v1/jobs", nil); a.status != http.StatusOK {
			t.Errorf("signed request while bodies stall: %d %s", a.status, a.body)
		}
		for _, c := range open {
			c.Write([]byte(" ")) // the last byte: the signature is checked, and fails
			if status, code := awaitAnswer(t, c); status != http.StatusUnauthorized || code != "unauthorized" {
				t.Errorf("junk signature: got %d %q, want 401 unauthorized", status, code)
			}
		}
		until(t, "the temporary files are removed", func() bool {
			_, files := spooled(t, ts)
			return files == 0 && ts.spool.used.Load() == 0 && ts.bodyMem.used.Load() == 0
		})
	})

	t.Run("body memory bounded", func(t *testing.T) {
		const size = 600 << 10
		ts := startServer(t, func(c *Config) { c.BodyInMemory = 1 << 20; c.MaxBodyMemory = 1 << 20; c.BodyTimeout = time.Hour })
		peer := newPeer(t, nil)
		ts.register(t, peer, "", http.StatusCreated)
		first := ts.rawRequest(t, "POST", "/v1/jobs", junkAuth(peer.ID()), size, []byte("{"))
		until(t, "the first body holds memory", func() bool { return ts.bodyMem.used.Load() == size })
		second := ts.rawRequest(t, "POST", "/v1/jobs", junkAuth(peer.ID()), size, []byte("{"))
		if status, code := awaitAnswer(t, second); status != http.StatusServiceUnavailable || code != "busy" {
			t.Errorf("second body past the memory bound: got %d %q, want 503 busy", status, code)
		}
		first.Close()
		until(t, "the first body's memory is free", func() bool { return ts.bodyMem.used.Load() == 0 })
		if a := ts.do(t, peer, "GET", "/v1/jobs", nil); a.status != http.StatusOK {
			t.Errorf("signed request after the memory is free: %d %s", a.status, a.body)
		}
	})
}

// TestSlowClientsAreCut checks that nothing a client does slowly holds a
// connection for ever (issue 9, item 19): a body trickled, a body sent in
// a burst then stalled, headers never finished, a kept-alive connection
// left idle.
func TestSlowClientsAreCut(t *testing.T) {
	ts := startServer(t, func(c *Config) {
		c.ReadHeaderTimeout = 50 * time.Millisecond
		c.BodyTimeout = 200 * time.Millisecond
		c.MinBodyRate = 1 << 10
		c.IdleTimeout = 50 * time.Millisecond
	})
	peer := newPeer(t, nil)
	ts.register(t, peer, "", http.StatusCreated)
	addr := strings.TrimPrefix(ts.URL(), "http://")
	cases := []struct {
		name string
		open func(t *testing.T) net.Conn
		want int // the answer's status, 0 for none, -1 for either
	}{
		{"trickled body", func(t *testing.T) net.Conn {
			c := ts.rawRequest(t, "POST", "/v1/leases", junkAuth(peer.ID()), 1000, []byte("{"))
			// One byte every 20 ms: far below the minimum rate, with
			// pauses shorter than the body timeout.
			done, stopped := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(stopped)
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for range 998 {
					select {
					case <-done:
						return
					case <-tick.C:
					}
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}()
			t.Cleanup(func() { close(done); <-stopped })
			return c
		}, http.StatusRequestTimeout},
		{"burst then stall", func(t *testing.T) net.Conn {
			// 64 KiB allows a minute at the minimum rate; the pause after
			// it is cut.
			return ts.rawRequest(t, "POST", "/v1/leases/0123456789abcdef0123456789abcdef/result", junkAuth(peer.ID()), 128<<10, make([]byte, 64<<10))
		}, http.StatusRequestTimeout},
		{"unread body of a plain route", func(t *testing.T) net.Conn {
			// Under the 256 KiB the server drains after a handler: the
			// drain is cut, and the answer goes out with the close or
			// not at all.
			return ts.rawRequest(t, "GET", "/healthz", "", 100<<10, []byte("x"))
		}, -1},
		{"headers never finished", func(t *testing.T) net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			c.Write([]byte("POST /v1/leases HTTP/1.1\r\nHost: test\r\n"))
			return c
		}, 0},
		{"idle keep-alive", func(t *testing.T) net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n"))
			return c
		}, http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.open(t)
			if status := awaitClose(t, c); status != tc.want && !(tc.want == -1 && (status == 0 || status == http.StatusOK)) {
				t.Errorf("closed with answer %d, want %d", status, tc.want)
			}
		})
	}
}

// TestConnectionLimit floods a coordinator with slow bodies past its
// connection limit (issue 9, item 19): it never holds more connections
// than the limit, /healthz and signed requests are still answered, and the
// connections that waited longest are the ones closed.
func TestConnectionLimit(t *testing.T) {
	const limit, flood = 4, 12
	ts := startServer(t, func(c *Config) { c.MaxConns = limit; c.BodyTimeout = time.Hour })
	peer := newPeer(t, nil)
	ts.register(t, peer, "", http.StatusCreated)
	ts.client.Transport.(*http.Transport).CloseIdleConnections()
	var slow []net.Conn
	for range flood {
		c := ts.rawRequest(t, "POST", "/v1/leases", junkAuth(peer.ID()), 1000, []byte("{"))
		slow = append(slow, c)
		// The next one arrives once this one waits for its body.
		until(t, "the slow body is being read", func() bool { return ts.ln.count() <= limit && ts.waitingForBody() >= min(len(slow), limit) })
	}
	if n := ts.ln.count(); n > limit {
		t.Errorf("%d connections open, limit %d", n, limit)
	}
	for i, c := range slow[:flood-limit] {
		if status := awaitClose(t, c); status != 0 {
			t.Errorf("slow connection %d closed with answer %d, want none", i, status)
		}
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer hc.CloseIdleConnections()
	for i := range 10 {
		resp, err := hc.Get(ts.URL() + "/healthz")
		if err != nil {
			t.Fatalf("healthz %d at the connection limit: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("healthz %d at the connection limit: %d", i, resp.StatusCode)
		}
	}
	if a := ts.do(t, peer, "GET", "/v1/jobs", nil); a.status != http.StatusOK {
		t.Errorf("signed request at the connection limit: %d %s", a.status, a.body)
	}
	if n := ts.ln.count(); n > limit {
		t.Errorf("%d connections open, limit %d", n, limit)
	}
	ts.client.Transport.(*http.Transport).CloseIdleConnections()
}

// waitingForBody counts the connections whose handler waits for body
// bytes.
func (s *Server) waitingForBody() int {
	s.ln.mu.Lock()
	defer s.ln.mu.Unlock()
	n := 0
	for c := range s.ln.conns {
		if c.state.Load() == connBusy && c.reading.Load() {
			n++
		}
	}
	return n
}

// TestConnLimiterAllBusy checks the limiter when every connection is
// handling a request: a newcomer is answered 503 and closed, and once a
// connection waits again, the next newcomer takes its place.
func TestConnLimiterAllBusy(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnLimiter(raw, 2, slog.New(slog.DiscardHandler))
	defer l.Close()
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var server []net.Conn
	for range 2 {
		dial()
		c := <-accepted
		l.connState(c, http.StateActive)
		server = append(server, c)
	}
	newcomer := dial()
	if status, code := awaitAnswer(t, newcomer); status != http.StatusServiceUnavailable || code != "busy" {
		t.Errorf("newcomer with every connection busy: got %d %q, want 503 busy", status, code)
	}
	l.connState(server[0], http.StateIdle)
	second := dial()
	c := <-accepted
	if _, err := server[0].Write([]byte("x")); err == nil {
		// A write to a closed net.Conn fails.
		t.Errorf("the idle connection was not closed for the newcomer")
	}
	if n := l.count(); n != 2 {
		t.Errorf("%d connections counted, want 2", n)
	}
	c.Close()
	second.Close()
	for _, c := range server {
		c.Close()
	}
	if n := l.count(); n != 0 {
		t.Errorf("%d connections counted after all closed, want 0", n)
	}
	l.Close()
	<-accepted
}

// TestSlowReaderIsCut checks that a client that stops reading a large
// answer does not hold its connection for ever: the coordinator gives up
// writing at the pace of the minimum rate and closes the connection
// (which the client never reads from).
func TestSlowReaderIsCut(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.BodyTimeout = 200 * time.Millisecond; c.MinBodyRate = 1 << 20 })
	blob := bytes.Repeat([]byte("idlepool"), 2<<20) // 16 MiB: more than the sockets buffer
	if _, err := ts.blobs.putBytes(blob); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(c, "GET /v1/blobs/%x HTTP/1.1\r\nHost: test\r\n\r\n", sha256.Sum256(blob))
	until(t, "the coordinator took the connection", func() bool { return ts.ln.count() == 1 })
	// The connection is forgotten once the server has closed it.
	until(t, "the coordinator gave up writing", func() bool { return ts.ln.count() == 0 })
}
