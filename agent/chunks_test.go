package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/castore"
	"idlepool/job"
)

// storeSource is a peer that serves from its chunk store, as the network
// layer will (castore.Store.ReadChunk), until it is killed after dieAfter
// chunks (0: never); corrupt makes it flip a byte of every chunk.
type storeSource struct {
	id       string
	st       *castore.Store
	dieAfter int
	corrupt  bool

	mu     sync.Mutex
	served int
}

func (s *storeSource) ID() string { return s.id }

func (s *storeSource) Fetch(_ context.Context, d [32]byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dieAfter > 0 && s.served >= s.dieAfter {
		return nil, errors.New("peer connection closed")
	}
	b, err := s.st.ReadChunk(d)
	if err != nil {
		return nil, err
	}
	s.served++
	if s.corrupt {
		b[len(b)/2] ^= 0xff
	}
	return b, nil
}

// randomFile writes n random bytes to a file and returns its path and
// bytes.
func randomFile(t *testing.T, n int, seed uint64) (string, []byte) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	p := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, b
}

// servedBytes reads idlepool_coord_bytes_served_total{kind} from the
// coordinator's /metrics.
func servedBytes(t *testing.T, url, kind string) int64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	prefix := fmt.Sprintf("idlepool_coord_bytes_served_total{kind=%q} ", kind)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(f)
		}
	}
	t.Fatalf("/metrics has no %s", prefix)
	return 0
}

// holdingPeer is a registered device whose chunk store holds the chunks
// of m whose index has keep(i), announced to the pool's tracker.
func holdingPeer(t *testing.T, url string, data []byte, keep func(i int) bool) *storeSource {
	t.Helper()
	dev := newDevice(t, nil)
	c := agentClient(t, url, dev)
	st, err := castore.Open(castore.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	var add []castore.Digest
	_, err = castore.Split(bytes.NewReader(data), castore.ChunkSize, func(d castore.Digest, b []byte) error {
		defer func() { i++ }()
		if !keep(i) {
			return nil
		}
		add = append(add, d)
		return st.Put(d, b)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AnnounceChunks(context.Background(), add, nil, true); err != nil {
		t.Fatal(err)
	}
	return &storeSource{id: dev.key.ID(), st: st}
}

// TestFetchFromPeersAndCoordinator fetches a 10 MiB file (40 chunks)
// with the pool's real tracker and the coordinator over HTTP as the
// fallback, from three in-process peers holding 38 of the chunks between
// them, each chunk by two of them.
func TestFetchFromPeersAndCoordinator(t *testing.T) {
	t.Parallel() // long: its own coordinator and peers, beside the other long tests
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	const chunks = 40
	path, data := randomFile(t, chunks*castore.ChunkSize, 1)
	d := job.Digest(sha256.Sum256(data))
	sub := newSubmitter(t, co.url, nil)
	if _, err := sub.c.PutBlob(context.Background(), d, path); err != nil {
		t.Fatal(err)
	}

	setup := func(t *testing.T) ([]*storeSource, *agent.Client, castore.Manifest) {
		var peers []*storeSource
		for p := range 3 {
			// Chunks 0..37 each held by two of the three peers; 38 and 39
			// by none.
			peers = append(peers, holdingPeer(t, co.url, data, func(i int) bool { return i < chunks-2 && i%3 != p }))
		}
		c := agentClient(t, co.url, newDevice(t, nil))
		m, err := c.ChunkManifest(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		return peers, c, m
	}
	fetch := func(t *testing.T, c *agent.Client, m castore.Manifest, peers []*storeSource) (castore.Stats, error) {
		st, err := castore.Open(castore.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]castore.Source{}
		for _, p := range peers {
			byID[p.id] = p
		}
		f := &castore.Fetcher{Store: st, Locate: c.ChunkHolders, Fallback: agent.CoordinatorSource{C: c}, Device: c.PeerID(),
			Peers: func(id string) castore.Source { return byID[id] }}
		stats, err := f.Fetch(context.Background(), m)
		if err == nil {
			out := filepath.Join(t.TempDir(), "out")
			if err := st.Assemble(m, out); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
				t.Fatal("the fetched file differs from the original")
			}
		}
		return stats, err
	}

	t.Run("four sources", func(t *testing.T) {
		peers, c, m := setup(t)
		before := servedBytes(t, co.url, "input_chunk")
		stats, err := fetch(t, c, m, peers)
		if err != nil {
			t.Fatal(err)
		}
		coordBytes := servedBytes(t, co.url, "input_chunk") - before
		t.Logf("chunks by source: coordinator %d, peers %d %d %d; the coordinator served %d of %d bytes (%.1f%%)",
			stats.Chunks["coordinator"], stats.Chunks[peers[0].id], stats.Chunks[peers[1].id], stats.Chunks[peers[2].id],
			coordBytes, len(data), 100*float64(coordBytes)/float64(len(data)))
		if stats.Chunks["coordinator"] != 2 || coordBytes != 2*castore.ChunkSize {
			t.Errorf("the coordinator gave %d chunks (%d bytes by /metrics), want the 2 no peer holds", stats.Chunks["coordinator"], coordBytes)
		}
		for _, p := range peers {
			if n := stats.Chunks[p.id]; n < 6 {
				t.Errorf("peer %s gave %d chunks: the load is not spread", p.id[:8], n)
			}
		}
	})
	t.Run("holder killed mid-fetch", func(t *testing.T) {
		peers, c, m := setup(t)
		peers[0].dieAfter = 3
		stats, err := fetch(t, c, m, peers)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Chunks[peers[0].id] > 3 || stats.Failures[peers[0].id] == 0 || stats.Chunks["coordinator"] != 2 {
			t.Errorf("chunks %v, failures %v: want at most 3 from the killed peer, the others covering it, 2 from the coordinator",
				stats.Chunks, stats.Failures)
		}
	})
	t.Run("corrupt peer", func(t *testing.T) {
		peers, c, m := setup(t)
		peers[1].corrupt = true
		stats, err := fetch(t, c, m, peers)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Chunks[peers[1].id] != 0 || len(stats.Bad) != 1 || stats.Bad[0] != peers[1].id || stats.Chunks["coordinator"] != 2 {
			t.Errorf("chunks %v, bad %v: want none from the corrupt peer, named once, 2 from the coordinator", stats.Chunks, stats.Bad)
		}
	})
}

// TestAgentFetchesInputsInChunks runs a job with a 1 MiB input on a real
// agent: the input comes in chunks from the coordinator (counted as
// input_chunk in /metrics, never whole; the program's chunk as program), the agent keeps the chunks and
// announces them, and a second agent, connected to the first (in
// process), gets the input of the next job from it and not from the
// coordinator.
func TestAgentFetchesInputsInChunks(t *testing.T) {
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	dataPath, data := randomFile(t, 4*castore.ChunkSize+123, 2)
	plan := func(name string) *job.Job {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
		text := fmt.Sprintf(`name = %q
program = "prog.wasm"
[inputs]
data = %q
[split]
rule = "range"
tasks = 2
[[merge]]
field = "square"
rule = "sum"
[policy]
lease_timeout = "10s"
redundancy = 1
quorum = 1
`, name, dataPath)
		m, err := job.ParseManifest("job.toml", dir, []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		j, err := job.Plan(m)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}

	first := newDevice(t, nil)
	cache := agent.NewCache(agent.CacheConfig{Dir: agent.JobCache(first.dirs), ShareDir: agent.ShareDir(first.dirs)})
	a1 := startCachingAgent(t, co.url, first, &fakeExec{}, cache, time.Hour)
	runJob(t, sub, plan("first"))
	if got := servedBytes(t, co.url, "input_chunk"); got != int64(len(data)) {
		t.Errorf("input bytes served in chunks = %d, want the input's %d", got, len(data))
	}
	if got := servedBytes(t, co.url, "input"); got != 0 {
		t.Errorf("whole input bytes served = %d, want 0", got)
	}
	if got := servedBytes(t, co.url, "program"); got != 8 {
		t.Errorf("program bytes served = %d, want the program's 8", got)
	}
	m, err := castore.ManifestOfFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	st1, err := cache.ShareStore()
	if err != nil {
		t.Fatal(err)
	}
	// The chunks are served from the cache's whole copy, not kept twice.
	if used, _, n := st1.Usage(); used != 0 || n != 0 {
		t.Errorf("the chunk store keeps %d bytes in %d chunk files besides the cache's copy, want none", used, n)
	}
	if missing := st1.Missing(m); len(missing) != 0 {
		t.Fatalf("the agent's chunk store lacks %d of the input's %d chunks", len(missing), len(m.Chunks))
	}
	// The tracker names the first agent as a holder once it announced.
	asker := agentClient(t, co.url, newDevice(t, nil))
	deadline := time.Now().Add(patience(t))
	for {
		h, err := asker.ChunkHolders(context.Background(), m.Digests())
		if err != nil {
			t.Fatal(err)
		}
		if len(h) == len(m.Chunks) && len(h[m.Chunks[0].Digest]) == 1 && h[m.Chunks[0].Digest][0] == first.key.ID() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tracker does not name the agent as the holder of the input's chunks: %v", h)
		}
		time.Sleep(20 * time.Millisecond)
	}
	a1.Stop(t)

	// A second agent reaches the first through the data plane (here in
	// process, serving from its chunk store): the coordinator serves no
	// input byte more.
	second := newDevice(t, nil)
	peer := &storeSource{id: first.key.ID(), st: st1}
	a2, err := agent.New(agent.Config{
		PoolURL: co.url, Home: second.dirs, DeviceKey: second.key, OwnerKey: second.owner, Slots: 1,
		Executor: &fakeExec{}, Store: second.local, HTTP: httpClient(t),
		Peers: func(id string) castore.Source {
			if id == peer.id {
				return peer
			}
			return nil
		},
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Logger: quietLogger(t).With("side", "agent2"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{Agent: a2, dev: second, stop: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a2.Serve(ctx) }()
	t.Cleanup(func() { ra.Stop(t) })
	before := servedBytes(t, co.url, "input_chunk")
	runJob(t, sub, plan("second"))
	if got := servedBytes(t, co.url, "input_chunk") - before; got != 0 {
		t.Errorf("the coordinator served %d input bytes for the second agent, want 0: its peer holds them", got)
	}
	if peer.served != len(m.Chunks)+1 {
		t.Errorf("the peer served %d chunks, want the input's %d and the program's 1", peer.served, len(m.Chunks))
	}
}
