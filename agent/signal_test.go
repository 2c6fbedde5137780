package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/p2p"
)

// chunkMap is a p2p.ChunkReader over a map.
type chunkMap map[[32]byte][]byte

func (m chunkMap) ReadChunk(d [32]byte) ([]byte, error) {
	if b, ok := m[d]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("chunk %x: %w", d, fs.ErrNotExist)
}

// startNode runs a p2p.Node for a registered client until the test ends.
func startNode(t *testing.T, c *agent.Client, dev *device, cfg p2p.Config) *p2p.Node {
	t.Helper()
	cfg.Key, cfg.Signaller, cfg.LoopbackOnly = dev.key, c.Signaller(), true
	n, err := p2p.NewNode(cfg)
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
				t.Errorf("node: %v", err)
			}
		case <-time.After(2 * time.Minute):
			t.Error("node did not stop within 2 minutes")
		}
	})
	return n
}

// TestPeersSignalThroughCoordinator connects devices through a real
// coordinator's signalling API and its TURN relay: direct when ICE may
// use host candidates, relayed under ICE transport policy relay, and
// moving chunks either way.
func TestPeersSignalThroughCoordinator(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := coord.New(ctx, coord.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Pool: "test",
		Logger: quietLogger(t), Relay: coord.RelayConfig{Listen: "127.0.0.1:0"}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("coordinator: %v", err)
		}
	})
	chunk := bytes.Repeat([]byte("from peer to peer "), 100_000)
	digest := sha256.Sum256(chunk)
	for _, tc := range []struct {
		name      string
		relayOnly bool
		want      p2p.Path
	}{
		{"direct", false, p2p.PathDirect},
		{"relay only", true, p2p.PathRelayed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seeder, leecher := newDevice(t, nil), newDevice(t, nil)
			a := startNode(t, agentClient(t, srv.URL(), seeder), seeder, p2p.Config{Chunks: chunkMap{digest: chunk}, RelayOnly: tc.relayOnly})
			b := startNode(t, agentClient(t, srv.URL(), leecher), leecher, p2p.Config{RelayOnly: tc.relayOnly})
			fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer fcancel()
			got, err := b.Fetch(fctx, a.ID(), digest)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, chunk) {
				t.Fatal("fetched bytes differ")
			}
			for _, n := range []*p2p.Node{a, b} {
				conns := n.Conns()
				if len(conns) != 1 || conns[0].Path != tc.want {
					t.Errorf("%s: connections %+v, want one %q", n.ID(), conns, tc.want)
				}
			}
			st := b.Stats()
			received := st.DirectReceivedBytes
			if tc.want == p2p.PathRelayed {
				received = st.RelayedReceivedBytes
			}
			if received < uint64(len(chunk)) {
				t.Errorf("stats %+v: want at least %d bytes received %s", st, len(chunk), tc.want)
			}
		})
	}
}
