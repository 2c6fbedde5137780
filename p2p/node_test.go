package p2p

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"idlepool/identity"
	"idlepool/idle"
)

// wait is the bound on every wait for a condition: generous, so a busy
// machine never fails a test that would pass.
const wait = 2 * time.Minute

// memChunks is a ChunkReader over a map; lie makes it serve other bytes.
type memChunks struct {
	mu   sync.Mutex
	m    map[[32]byte][]byte
	lie  bool
	read int
}

func newMemChunks(chunks ...[]byte) *memChunks {
	m := &memChunks{m: map[[32]byte][]byte{}}
	for _, c := range chunks {
		m.m[sha256.Sum256(c)] = c
	}
	return m
}

func (m *memChunks) ReadChunk(d [32]byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.read++
	b, ok := m.m[d]
	if !ok {
		return nil, fmt.Errorf("chunk %x: %w", d, fs.ErrNotExist)
	}
	if m.lie {
		b = bytes.Clone(b)
		b[0] ^= 1
	}
	return b, nil
}

var _ ChunkReader = (*memChunks)(nil)

// testNode makes a Node on h with cfg (Key and Signaller filled in) and
// runs it until the test ends.
func testNode(t *testing.T, h *hub, cfg Config) *Node { return benchNode(t, h, cfg) }

func benchNode(t testing.TB, h *hub, cfg Config) *Node {
	t.Helper()
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Key = key
	cfg.Signaller = h.endpoint(key)
	cfg.LoopbackOnly = true
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("Serve did not return within %v of cancel", wait)
		}
	})
	return n
}

// checkGoroutines fails t if the goroutine count does not come back to
// before within the wait bound (pion ends some goroutines a moment after
// Close returns).
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		now := runtime.NumGoroutine()
		if now <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left running, %d before:\n%s", now, before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not deciding a verdict
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func TestFetch(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Run("cases", func(t *testing.T) {
		small := []byte("hello, peer")
		big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: many frames
		h := newHub()
		store := newMemChunks(small, big)
		a := testNode(t, h, Config{Chunks: store})
		b := testNode(t, h, Config{})
		ctx := ctxT(t)
		for _, want := range [][]byte{small, big, {}} {
			if len(want) == 0 {
				store.mu.Lock()
				store.m[sha256.Sum256(nil)] = []byte{}
				store.mu.Unlock()
			}
			got, err := b.Fetch(ctx, a.ID(), sha256.Sum256(want))
			if err != nil {
				t.Fatalf("Fetch %d bytes: %v", len(want), err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Fetch returned %d bytes, want %d", len(got), len(want))
			}
		}
		_, err := b.Fetch(ctx, a.ID(), sha256.Sum256([]byte("absent")))
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Fetch of an absent chunk: %v, want fs.ErrNotExist", err)
		}
		// Parallel fetches over the channels of one connection.
		mid := big[:256<<10]
		store.mu.Lock()
		store.m[sha256.Sum256(mid)] = mid
		store.mu.Unlock()
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for range 16 {
			wg.Go(func() {
				got, err := b.Fetch(ctx, a.ID(), sha256.Sum256(mid))
				if err == nil && !bytes.Equal(got, mid) {
					err = errors.New("wrong bytes")
				}
				if err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("parallel Fetch: %v", err)
		}
		// The other way on the same connection.
		if _, err := a.Fetch(ctx, b.ID(), sha256.Sum256(small)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Fetch from a node with no chunks: %v, want fs.ErrNotExist", err)
		}
		conns := b.Conns()
		if len(conns) != 1 || conns[0].Peer != a.ID() || conns[0].Path != PathDirect || conns[0].LocalType != "host" {
			t.Errorf("Conns = %+v, want one direct host connection to %s", conns, a.ID())
		}
		st := b.Stats()
		if st.DirectConns != 1 || st.RelayedConns != 0 || st.DirectReceivedBytes < uint64(len(big)+16*len(mid)) || st.RelayedReceivedBytes != 0 {
			t.Errorf("Stats = %+v, want 1 direct connection and at least %d bytes received direct", st, len(big)+16*len(mid))
		}
	})
	checkGoroutines(t, before)
}

func TestWrongChunkNamesThePeer(t *testing.T) {
	h := newHub()
	chunk := []byte("the real bytes")
	liar := testNode(t, h, Config{Chunks: &memChunks{m: map[[32]byte][]byte{sha256.Sum256(chunk): chunk}, lie: true}})
	b := testNode(t, h, Config{})
	_, err := b.Fetch(ctxT(t), liar.ID(), sha256.Sum256(chunk))
	var pe *PeerError
	if !errors.Is(err, ErrWrongChunk) || !errors.As(err, &pe) || pe.Peer != liar.ID() {
		t.Fatalf("Fetch from a liar: %v, want a PeerError naming %s wrapping ErrWrongChunk", err, liar.ID())
	}
}

func TestChunkOverLimit(t *testing.T) {
	h := newHub()
	big := bytes.Repeat([]byte{7}, 200<<10)
	a := testNode(t, h, Config{Chunks: newMemChunks(big)}) // its limit is 4 MiB
	b := testNode(t, h, Config{MaxChunkBytes: 100 << 10})
	_, err := b.Fetch(ctxT(t), a.ID(), sha256.Sum256(big))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Fetch of 200 KiB with a limit of 100 KiB: %v, want ErrTooLarge", err)
	}
	small := testNode(t, h, Config{Chunks: newMemChunks(big), MaxChunkBytes: 100 << 10})
	_, err = a.Fetch(ctxT(t), small.ID(), sha256.Sum256(big))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Fetch of a chunk over the server's limit: %v, want ErrTooLarge", err)
	}
}

func TestForgedCertificateDropped(t *testing.T) {
	for _, tc := range []struct {
		name      string
		skipPion  bool
		wantCause error
	}{
		// Our own check alone (pion's off) drops it with ErrFingerprint.
		{"our check", true, ErrFingerprint},
		// With pion's check as well, the handshake fails before ours.
		{"with pion's check", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub()
			chunk := []byte("secret")
			honest := testNode(t, h, Config{Chunks: newMemChunks(chunk), skipPionFingerprintCheck: tc.skipPion, ConnectTimeout: 20 * time.Second})
			forger := testNode(t, h, Config{forgeCertificate: true, ConnectTimeout: 20 * time.Second})
			err := honest.Connect(ctxT(t), forger.ID())
			if err == nil {
				t.Fatal("Connect to a peer showing another certificate succeeded")
			}
			if tc.wantCause != nil && !errors.Is(err, tc.wantCause) {
				t.Fatalf("Connect: %v, want %v", err, tc.wantCause)
			}
			if got := honest.Conns(); len(got) != 0 {
				t.Errorf("honest node keeps connections %+v", got)
			}
			if _, err := forger.Fetch(ctxT(t), honest.ID(), sha256.Sum256(chunk)); err == nil {
				t.Error("the forger fetched a chunk from the honest node")
			}
		})
	}
}

func TestSignalReplayAndForgeryRefused(t *testing.T) {
	h := newHub()
	a := testNode(t, h, Config{})
	b := testNode(t, h, Config{})
	if err := b.Connect(ctxT(t), a.ID()); err != nil {
		t.Fatal(err)
	}
	// b's Connect returns once b's end is up; a's end may come up a moment
	// later (seen once in CI: a had 0 connections when it was counted).
	deadline := time.Now().Add(wait)
	for len(a.Conns()) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
	if got := a.Conns(); len(got) != 1 {
		t.Fatalf("a has %d connections after b connected, want 1", len(got))
	}
	h.mu.Lock()
	var offer Signal
	for _, s := range h.sent {
		if s.Kind == KindOffer {
			offer = s
		}
	}
	h.mu.Unlock()
	if offer.Kind != KindOffer {
		t.Fatal("no offer went through the hub")
	}
	if err := a.handle(offer); !errors.Is(err, ErrReplay) {
		t.Errorf("replayed offer: %v, want ErrReplay", err)
	}
	forged := offer
	forged.Seq += 1 << 40
	if err := a.handle(forged); !errors.Is(err, ErrBadSignal) {
		t.Errorf("offer with an altered sequence: %v, want ErrBadSignal", err)
	}
	mallory, _ := identity.Generate()
	forged = offer
	forged.Seq += 1 << 40
	forged.Sign(mallory)
	forged.From = offer.From // claims b, signed by mallory
	if err := a.handle(forged); !errors.Is(err, ErrBadSignal) {
		t.Errorf("offer signed by another key: %v, want ErrBadSignal", err)
	}
	forged.FromKey = mallory.Public() // a relay vouching for the wrong key
	if err := a.handle(forged); !errors.Is(err, ErrBadSignal) {
		t.Errorf("offer with a key that is not the sender's: %v, want ErrBadSignal", err)
	}
	if got := a.Conns(); len(got) != 1 {
		t.Errorf("after the refused signals a has %d connections, want the 1 it had", len(got))
	}
}

func TestMaxPeers(t *testing.T) {
	h := newHub()
	a := testNode(t, h, Config{MaxPeers: 1})
	b := testNode(t, h, Config{})
	c := testNode(t, h, Config{})
	if err := b.Connect(ctxT(t), a.ID()); err != nil {
		t.Fatal(err)
	}
	err := c.Connect(ctxT(t), a.ID())
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("third peer's Connect: %v, want ErrRefused", err)
	}
	if err := a.Connect(ctxT(t), c.ID()); !errors.Is(err, ErrTooManyPeers) {
		t.Fatalf("Connect over MaxPeers: %v, want ErrTooManyPeers", err)
	}
	b.Disconnect(a.ID())
	deadline := time.Now().Add(wait)
	for len(a.Conns()) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
	if err := c.Connect(ctxT(t), a.ID()); err != nil {
		t.Fatalf("Connect after a slot freed: %v", err)
	}
}

func TestRelayOnly(t *testing.T) {
	relay, err := NewRelay(RelayConfig{Listen: "127.0.0.1:0", Secret: []byte("0123456789abcdef0123")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-relayDone; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	h := newHub()
	h.servers = func(id string) []ICEServer { return relay.ICEServers(id, time.Minute) }
	chunk := bytes.Repeat([]byte("relayed "), 64<<10)
	a := testNode(t, h, Config{Chunks: newMemChunks(chunk), RelayOnly: true})
	b := testNode(t, h, Config{RelayOnly: true})
	got, err := b.Fetch(ctxT(t), a.ID(), sha256.Sum256(chunk))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, chunk) {
		t.Fatal("relayed chunk differs")
	}
	for _, n := range []*Node{a, b} {
		conns := n.Conns()
		if len(conns) != 1 || conns[0].Path != PathRelayed {
			t.Errorf("%s: Conns = %+v, want one relayed connection", n.ID(), conns)
		}
	}
	st := b.Stats()
	if st.RelayedConns != 1 || st.RelayedReceivedBytes < uint64(len(chunk)) || st.DirectReceivedBytes != 0 {
		t.Errorf("Stats = %+v, want all %d bytes received relayed", st, len(chunk))
	}
	if relay.Allocations() == 0 {
		t.Error("the relay has no allocation")
	}
}

func TestCollectors(t *testing.T) {
	h := newHub()
	chunk := bytes.Repeat([]byte{1}, 5000)
	a := testNode(t, h, Config{Chunks: newMemChunks(chunk)})
	b := testNode(t, h, Config{})
	if _, err := b.Fetch(ctxT(t), a.ID(), sha256.Sum256(chunk)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(b.Collectors()...)
	var out strings.Builder
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			fmt.Fprintf(&out, "%s{path=%s} %v\n", mf.GetName(), m.GetLabel()[0].GetValue(), v > 0)
		}
	}
	want := `idlepool_p2p_connections{path=direct} true
idlepool_p2p_connections{path=relayed} false
idlepool_p2p_received_bytes_total{path=direct} true
idlepool_p2p_received_bytes_total{path=relayed} false
idlepool_p2p_sent_bytes_total{path=direct} true
idlepool_p2p_sent_bytes_total{path=relayed} false
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

func TestConnectTimeout(t *testing.T) {
	h := newHub()
	a := testNode(t, h, Config{ConnectTimeout: time.Second})
	silent, _ := identity.Generate()
	h.endpoint(silent) // registered, but no node reads its mailbox
	err := a.Connect(ctxT(t), silent.ID())
	var pe *PeerError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &pe) || pe.Peer != silent.ID() {
		t.Fatalf("Connect to a silent device: %v, want a PeerError wrapping context.DeadlineExceeded", err)
	}
	if got := a.Conns(); len(got) != 0 {
		t.Errorf("connections left: %+v", got)
	}
	a.mu.Lock()
	left := len(a.conns)
	a.mu.Unlock()
	if left != 0 {
		t.Errorf("%d connection attempts kept after the timeout", left)
	}
}

// TestConnectToOfflinePeer: when the signalling server says the device
// stopped listening, the connection fails at once with ErrPeerOffline
// (the timeout is an hour: waiting it out would fail the test's
// deadline instead).
func TestConnectToOfflinePeer(t *testing.T) {
	h := newHub()
	a := testNode(t, h, Config{ConnectTimeout: time.Hour})
	gone, _ := identity.Generate()
	h.endpoint(gone)
	h.mu.Lock()
	h.offline = map[string]bool{gone.ID(): true}
	h.mu.Unlock()
	err := a.Connect(ctxT(t), gone.ID())
	var pe *PeerError
	if !errors.Is(err, ErrPeerOffline) || !errors.As(err, &pe) || pe.Peer != gone.ID() {
		t.Fatalf("Connect to an offline device: %v, want a PeerError wrapping ErrPeerOffline", err)
	}
	a.mu.Lock()
	left := len(a.conns)
	a.mu.Unlock()
	if left != 0 {
		t.Errorf("%d connection attempts kept after the refusal", left)
	}
}

func TestRemoteTURNIPs(t *testing.T) {
	got := remoteTURNIPs([]ICEServer{
		{URLs: []string{"stun:198.51.100.7:3478"}},
		{URLs: []string{"turn:198.51.100.7:3478?transport=udp", "turns:[2001:db8::9]:5349", "turn:127.0.0.1:3478"}},
	})
	want := map[string]bool{"198.51.100.7": true, "2001:db8::9": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TURN IPs (-want +got):\n%s", diff)
	}
}

// virtualClock is an uploadClock whose time moves only when a wait asks
// it to: a wait until t returns at once with the clock at t (or later,
// when another wait took it further). The rate of a transfer is then its
// bytes over the virtual time its waits took, whatever the machine's
// speed.
type virtualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *virtualClock) WaitUntil(ctx context.Context, t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	return ctx.Err()
}

// TestUploadLimit: two Nodes sharing one UploadLimit at the donor's
// default cap (idle's 1 MiB/s) send, over real data channels on
// loopback, at that rate all together: the bytes the limit let through
// over the time its waits took (on a virtual clock, so that a busy
// machine changes nothing) are at most the cap times that time plus one
// burst, and at least the cap times that time (the limit holds back no
// more than the cap asks). Every byte the Nodes sent went through the
// limit. After the cap is lifted it reports none and chunks still go.
func TestUploadLimit(t *testing.T) {
	rate := idle.Defaults().ShareUploadBytesPerSecond()
	if rate != 1<<20 {
		t.Fatalf("the default cap is %d B/s, want 1 MiB/s", rate)
	}
	start := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	clock := &virtualClock{now: start}
	up := newUploadLimit(rate, clock)
	if up.BytesPerSecond() != rate {
		t.Fatalf("BytesPerSecond = %d, want %d", up.BytesPerSecond(), rate)
	}
	h := newHub()
	var one, two [][]byte
	for i := range 6 {
		one = append(one, bytes.Repeat(fmt.Appendf(nil, "capped one %d ", i), 25<<10))
		two = append(two, bytes.Repeat(fmt.Appendf(nil, "capped two %d ", i), 25<<10))
	}
	a := testNode(t, h, Config{Chunks: newMemChunks(one...), Upload: up})
	b := testNode(t, h, Config{Chunks: newMemChunks(two...), Upload: up})
	c := testNode(t, h, Config{})
	for _, n := range []*Node{a, b} {
		if err := c.Connect(ctxT(t), n.ID()); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 2)
	chunks := 0
	for _, f := range []struct {
		n      *Node
		chunks [][]byte
	}{{a, one}, {b, two}} {
		go func() {
			for _, chunk := range f.chunks {
				got, err := c.Fetch(ctxT(t), f.n.ID(), sha256.Sum256(chunk))
				if err == nil && !bytes.Equal(got, chunk) {
					err = errors.New("fetched bytes differ")
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
		for _, chunk := range f.chunks {
			chunks += len(chunk)
		}
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	sent, took := up.sent.Load(), clock.Now().Sub(start)
	nodes := a.Stats().DirectSentBytes + a.Stats().RelayedSentBytes + b.Stats().DirectSentBytes + b.Stats().RelayedSentBytes
	if sent < int64(chunks) || uint64(sent) != nodes {
		t.Errorf("the limit let %d bytes through, the Nodes sent %d; want every byte sent (the %d chunk bytes and the frames' headers) through it", sent, nodes, chunks)
	}
	most := float64(rate)*took.Seconds() + uploadBurst
	least := float64(rate) * took.Seconds()
	if float64(sent) > most+0.5 || float64(sent) < least-0.5 {
		t.Errorf("%d bytes in %v of the limit's time: want %.0f to %.0f at %d B/s", sent, took, least, most, rate)
	}
	t.Logf("two Nodes sharing the default cap of %d B/s sent %d bytes in %v of its time: %.0f B/s, %.0f B/s past the first burst",
		rate, sent, took, float64(sent)/took.Seconds(), float64(sent-uploadBurst)/took.Seconds())

	up.Set(0)
	if up.BytesPerSecond() != 0 {
		t.Errorf("BytesPerSecond after Set(0) = %d, want 0 (no cap)", up.BytesPerSecond())
	}
	before := clock.Now()
	if _, err := c.Fetch(ctxT(t), a.ID(), sha256.Sum256(one[0])); err != nil {
		t.Fatalf("fetch without a cap: %v", err)
	}
	if waited := clock.Now().Sub(before); waited != 0 {
		t.Errorf("without a cap a fetch waited %v", waited)
	}
}
