package main

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

var relayLine = regexp.MustCompile(`idlepool: TURN relay on udp (\S+); devices reach it at (127\.0\.0\.1:\d+)\n`)

// TestServeRelay runs 'idlepool serve --turn' and asks the relay it
// reports for a STUN binding (RFC 8489), as a device's ICE agent does.
func TestServeRelay(t *testing.T) {
	d := startDaemon(t, "serve", t.TempDir(), "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--turn", "127.0.0.1:0")
	deadline := patient(t)
	var m [][]byte
	if !d.awaitStdout(deadline, func(b []byte) bool { m = relayLine.FindSubmatch(b); return m != nil }) {
		outb, _ := os.ReadFile(d.stdout)
		errb, _ := os.ReadFile(d.stderr)
		t.Fatalf("serve printed no relay line (it exited or the wait ran out); stdout:\n%s\nstderr:\n%s", outb, errb)
	}
	addr := string(m[2])
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := make([]byte, 20)
	binary.BigEndian.PutUint16(req[0:], 0x0001) // Binding request
	binary.BigEndian.PutUint32(req[4:], 0x2112A442)
	rand.Read(req[8:20])
	buf := make([]byte, 1500)
	for try := 0; ; try++ { // UDP: ask again until an answer comes, within the bound
		conn.Write(req)
		conn.SetReadDeadline(time.Now().Add(time.Second))
		n, err := conn.Read(buf)
		if err == nil && n >= 20 && binary.BigEndian.Uint16(buf) == 0x0101 && bytes.Equal(buf[8:20], req[8:20]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay at %s answered no STUN binding request (last: %d bytes, %v)", addr, n, err)
		}
	}
	d.stop()
}

func TestServeRelayNeedsAnAddress(t *testing.T) {
	out := idlepool(t, t.TempDir(), "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--turn", "0.0.0.0:0")
	if out.code != 2 || !strings.Contains(out.stderr, "--turn-ip") {
		t.Fatalf("serve --turn 0.0.0.0:0 without --turn-ip: exit %d, stderr:\n%s\nwant exit 2 naming --turn-ip", out.code, out.stderr)
	}
}
