package castore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testData returns n bytes that do not repeat chunk by chunk.
func testData(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func openStore(t *testing.T, capB int64, now func() time.Time) *Store {
	t.Helper()
	s, err := Open(Config{Dir: t.TempDir(), CapBytes: capB, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSplitAssembleRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, ChunkSize - 1, ChunkSize, ChunkSize + 1, 3*ChunkSize - 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			data := testData(n, uint64(n))
			src := filepath.Join(t.TempDir(), "in")
			if err := os.WriteFile(src, data, 0o600); err != nil {
				t.Fatal(err)
			}
			s := openStore(t, 0, nil)
			m, err := s.Import(src)
			if err != nil {
				t.Fatal(err)
			}
			want := (n + ChunkSize - 1) / ChunkSize
			if len(m.Chunks) != want || m.Size != int64(n) || m.SHA256 != sha256.Sum256(data) {
				t.Fatalf("manifest: %d chunks, size %d; want %d chunks of a %d-byte file with its SHA-256", len(m.Chunks), m.Size, want, n)
			}
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var back Manifest
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(m, back); diff != "" {
				t.Fatalf("JSON round trip (-want +got):\n%s", diff)
			}
			kept, err := s.Manifest(m.SHA256)
			if err != nil || !cmp.Equal(kept, m) {
				t.Fatalf("kept manifest: %v, equal %v", err, cmp.Equal(kept, m))
			}
			dst := filepath.Join(t.TempDir(), "out")
			if err := s.Assemble(m, dst); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(dst)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("assembled file differs (err %v)", err)
			}
		})
	}
}

func TestManifestValidateRefuses(t *testing.T) {
	good, err := Split(bytes.NewReader(testData(2*ChunkSize+10, 1)), ChunkSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(m *Manifest)
	}{
		{"chunk size too small", func(m *Manifest) { m.ChunkSize = 100 }},
		{"too few chunks", func(m *Manifest) { m.Chunks = m.Chunks[:2] }},
		{"short middle chunk", func(m *Manifest) { m.Chunks[1].Size-- }},
		{"last chunk size", func(m *Manifest) { m.Chunks[2].Size = 11 }},
		{"negative size", func(m *Manifest) { m.Size = -1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := good
			m.Chunks = append([]Chunk(nil), good.Chunks...)
			tc.edit(&m)
			if err := m.Validate(); !errors.Is(err, ErrBadManifest) {
				t.Errorf("Validate = %v, want ErrBadManifest", err)
			}
			b, _ := json.Marshal(m)
			var back Manifest
			if err := json.Unmarshal(b, &back); !errors.Is(err, ErrBadManifest) {
				t.Errorf("Unmarshal = %v, want ErrBadManifest", err)
			}
		})
	}
	if err := json.Unmarshal([]byte(`{"sha256":"zz","size":0,"chunkSize":262144,"chunks":[]}`), new(Manifest)); !errors.Is(err, ErrBadManifest) {
		t.Errorf("bad digest: %v, want ErrBadManifest", err)
	}
}

func TestStoreChecksDigests(t *testing.T) {
	s := openStore(t, 0, nil)
	b := testData(1000, 2)
	d := Digest(sha256.Sum256(b))
	if _, err := s.ReadChunk(d); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("absent chunk: %v, want fs.ErrNotExist", err)
	}
	if err := s.Put(d, append([]byte{1}, b...)); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("wrong bytes: %v, want ErrDigestMismatch", err)
	}
	if s.Has(d) {
		t.Fatal("wrong bytes were stored")
	}
	if err := s.Put(d, b); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadChunk(d)
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("ReadChunk = %v", err)
	}
	// The disk changes the file: caught on read, removed.
	p := s.path(d)
	if err := os.WriteFile(p, append(b[:10:10], 'x'), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadChunk(d); !errors.Is(err, ErrCorrupt) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("corrupt chunk: %v, want ErrCorrupt and fs.ErrNotExist", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) || s.Has(d) {
		t.Fatalf("the corrupt chunk is still there: %v", err)
	}
	if used, _, n := s.Usage(); used != 0 || n != 0 {
		t.Errorf("usage after removal: %d bytes, %d chunks", used, n)
	}
}

func TestStoreReopenAfterCrash(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b := testData(5000, 3)
	d := Digest(sha256.Sum256(b))
	if err := s.Put(d, b); err != nil {
		t.Fatal(err)
	}
	// A crash mid-write leaves a temporary file beside the chunks.
	leftover := filepath.Join(filepath.Dir(s.path(d)), tmpPrefix+"123")
	if err := os.WriteFile(leftover, b[:100], 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file left after reopening: %v", err)
	}
	if used, _, n := s2.Usage(); used != 5000 || n != 1 || !s2.Has(d) {
		t.Errorf("reopened: %d bytes in %d chunks, has %v; want 5000 in 1", used, n, s2.Has(d))
	}
}

func TestStoreEvictsLeastRecentlyUsedNotHeld(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}
	s := openStore(t, 3000, clock)
	var ds []Digest
	for i := range 3 {
		b := testData(1000, uint64(10+i))
		d := Digest(sha256.Sum256(b))
		ds = append(ds, d)
		if err := s.Put(d, b); err != nil {
			t.Fatal(err)
		}
	}
	// Chunk 0 is read (used), chunk 1 is held by a task: a fourth chunk
	// evicts chunk 2, the least recently used that is not held.
	if _, err := s.ReadChunk(ds[0]); err != nil {
		t.Fatal(err)
	}
	release := s.Hold(ds[1:2])
	if diff := cmp.Diff([]Digest{ds[1], ds[2], ds[0]}, s.lruOrder()); diff != "" {
		t.Fatalf("LRU order (-want +got):\n%s", diff)
	}
	b := testData(1000, 20)
	d3 := Digest(sha256.Sum256(b))
	if err := s.Put(d3, b); err != nil {
		t.Fatal(err)
	}
	if s.Has(ds[2]) || !s.Has(ds[1]) || !s.Has(ds[0]) || !s.Has(d3) {
		t.Fatalf("after the fourth chunk: has %v %v %v %v, want true true false true", s.Has(ds[0]), s.Has(ds[1]), s.Has(ds[2]), s.Has(d3))
	}
	// Everything held: the store goes over its cap rather than drop a
	// chunk a task needs, and comes back under it on release.
	release()
	b = testData(1000, 21)
	d4 := Digest(sha256.Sum256(b))
	hold := s.Hold([]Digest{ds[0], ds[1], d3, d4})
	if err := s.Put(d4, b); err != nil {
		t.Fatal(err)
	}
	if used, _, _ := s.Usage(); used != 4000 {
		t.Fatalf("used %d with every chunk held, want 4000", used)
	}
	hold()
	if used, _, _ := s.Usage(); used > 3000 {
		t.Fatalf("used %d after release, want at most the cap 3000", used)
	}
	s.SetCap(1000)
	if used, _, n := s.Usage(); used != 1000 || n != 1 {
		t.Fatalf("after SetCap(1000): %d bytes in %d chunks", used, n)
	}
}

// memSource is an in-process peer: it serves the chunks it holds,
// optionally wrong bytes (corrupt), and dies after serving dieAfter
// chunks (0: never).
type memSource struct {
	id       string
	chunks   map[Digest][]byte
	corrupt  bool
	dieAfter int

	mu     sync.Mutex
	served int
	asked  []Digest
	gate   chan struct{} // if set, each Fetch waits for it
}

func (m *memSource) ID() string { return m.id }

func (m *memSource) Fetch(ctx context.Context, d [32]byte) ([]byte, error) {
	if m.gate != nil {
		select {
		case <-m.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asked = append(m.asked, d)
	if m.dieAfter > 0 && m.served >= m.dieAfter {
		return nil, errors.New("connection closed")
	}
	b, ok := m.chunks[d]
	if !ok {
		return nil, fmt.Errorf("chunk %x: %w", d[:4], fs.ErrNotExist)
	}
	m.served++
	if m.corrupt {
		b = append([]byte{b[0] ^ 1}, b[1:]...)
	}
	return b, nil
}

// swarm is a file, its manifest and its chunks.
type swarm struct {
	data   []byte
	m      Manifest
	chunks map[Digest][]byte
}

func newSwarm(t *testing.T, n int) swarm {
	t.Helper()
	sw := swarm{data: testData(n, uint64(n)), chunks: map[Digest][]byte{}}
	var err error
	sw.m, err = Split(bytes.NewReader(sw.data), ChunkSize, func(d Digest, b []byte) error {
		sw.chunks[d] = bytes.Clone(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

// holding returns a source holding the chunks of sw whose index i has
// keep(i).
func (sw swarm) holding(id string, keep func(i int) bool) *memSource {
	s := &memSource{id: id, chunks: map[Digest][]byte{}}
	for i, c := range sw.m.Chunks {
		if keep(i) {
			s.chunks[c.Digest] = sw.chunks[c.Digest]
		}
	}
	return s
}

// locator answers from the sources' holdings.
func locator(srcs ...*memSource) Locator {
	return func(_ context.Context, ds []Digest) (map[Digest][]string, error) {
		out := map[Digest][]string{}
		for _, d := range ds {
			for _, s := range srcs {
				if _, ok := s.chunks[d]; ok {
					out[d] = append(out[d], s.id)
				}
			}
		}
		return out, nil
	}
}

func peersOf(srcs ...*memSource) func(string) Source {
	return func(id string) Source {
		for _, s := range srcs {
			if s.id == id {
				return s
			}
		}
		return nil
	}
}

// checkFetched assembles sw from st and compares it byte for byte.
func checkFetched(t *testing.T, st *Store, sw swarm) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "file")
	if err := st.Assemble(sw.m, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, sw.data) {
		t.Fatalf("the fetched file differs (err %v)", err)
	}
}

func TestFetchRarestFirst(t *testing.T) {
	sw := newSwarm(t, 6*ChunkSize)
	// Chunk i is held by the peers p0..p(i%3): chunks 2 and 5 by three,
	// 1 and 4 by two, 0 and 3 by one.
	var peers []*memSource
	for p := range 3 {
		peers = append(peers, sw.holding(fmt.Sprintf("p%d", p), func(i int) bool { return i%3 >= p }))
	}
	st := openStore(t, 0, nil)
	f := &Fetcher{Store: st, Locate: locator(peers...), Peers: peersOf(peers...), Device: "dev-a", Parallel: 1}
	stats, err := f.Fetch(context.Background(), sw.m)
	if err != nil {
		t.Fatal(err)
	}
	count := func(d Digest) int {
		for i, c := range sw.m.Chunks {
			if c.Digest == d {
				return i%3 + 1
			}
		}
		return -1
	}
	var holders []int
	for _, d := range stats.Order {
		holders = append(holders, count(d))
	}
	if diff := cmp.Diff([]int{1, 1, 2, 2, 3, 3}, holders); diff != "" {
		t.Errorf("holders of the chunks in the order asked (-want +got):\n%s", diff)
	}
	checkFetched(t, st, sw)

	// Ties are broken per device: the same device asks in the same order
	// again; across 8 devices the order of the two rarest is not fixed.
	orders := map[string]bool{}
	for i := range 8 {
		for _, dev := range []string{fmt.Sprintf("dev-%d", i), fmt.Sprintf("dev-%d", i)} {
			f := &Fetcher{Store: openStore(t, 0, nil), Locate: locator(peers...), Peers: peersOf(peers...), Device: dev, Parallel: 1}
			s, err := f.Fetch(context.Background(), sw.m)
			if err != nil {
				t.Fatal(err)
			}
			orders[fmt.Sprintf("%s %x", dev, s.Order[0][:4])] = true
		}
	}
	if len(orders) != 8 {
		t.Errorf("one device asked in different orders: %v", orders)
	}
	first := map[string]bool{}
	for k := range orders {
		first[k[len(k)-8:]] = true
	}
	if len(first) < 2 {
		t.Errorf("8 devices all asked for the same rarest chunk first: ties are not broken per device")
	}
}

func TestFetchAvoidsCorruptSource(t *testing.T) {
	sw := newSwarm(t, 8*ChunkSize)
	all := func(int) bool { return true }
	liar := sw.holding("liar", all)
	liar.corrupt = true
	honest := sw.holding("honest", all)
	st := openStore(t, 0, nil)
	var reported []string
	var mu sync.Mutex
	f := &Fetcher{Store: st, Locate: locator(liar, honest), Peers: peersOf(liar, honest), Device: "d",
		OnBadSource: func(id string, _ Digest) { mu.Lock(); reported = append(reported, id); mu.Unlock() }}
	stats, err := f.Fetch(context.Background(), sw.m)
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, st, sw)
	if stats.Chunks["liar"] != 0 || stats.Chunks["honest"] != 8 {
		t.Errorf("chunks stored by source: %v, want all 8 from honest", stats.Chunks)
	}
	if len(stats.Bad) != 1 || stats.Bad[0] != "liar" || len(reported) != 1 {
		t.Errorf("bad sources %v, reported %v; want liar once", stats.Bad, reported)
	}
	// Avoided after the first wrong chunk: it was asked at most as many
	// times as requests could be in flight to it then.
	if n := len(liar.asked); n > DefaultPerSource {
		t.Errorf("the liar was asked %d times, want at most %d", n, DefaultPerSource)
	}
}

func TestFetchReplacesKilledHolder(t *testing.T) {
	sw := newSwarm(t, 12*ChunkSize)
	all := func(int) bool { return true }
	dying := sw.holding("dying", all)
	dying.dieAfter = 3
	other := sw.holding("other", all)
	st := openStore(t, 0, nil)
	f := &Fetcher{Store: st, Locate: locator(dying, other), Peers: peersOf(dying, other), Device: "d", PerSource: 1}
	stats, err := f.Fetch(context.Background(), sw.m)
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, st, sw)
	if stats.Chunks["dying"] > 3 || stats.Chunks["dying"]+stats.Chunks["other"] != 12 || stats.Failures["dying"] != 1 {
		t.Errorf("chunks %v, failures %v; want at most 3 from dying, one failure there, the rest from other", stats.Chunks, stats.Failures)
	}

	// With no other holder, the fallback gives what the dead one did not.
	dying2 := sw.holding("dying", all)
	dying2.dieAfter = 5
	coord := sw.holding("coordinator", all)
	st2 := openStore(t, 0, nil)
	f = &Fetcher{Store: st2, Locate: locator(dying2), Peers: peersOf(dying2), Fallback: coord, Device: "d"}
	stats, err = f.Fetch(context.Background(), sw.m)
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, st2, sw)
	if stats.Chunks["dying"] != 5 || stats.Chunks["coordinator"] != 7 {
		t.Errorf("chunks %v, want 5 from dying and 7 from the coordinator", stats.Chunks)
	}

	// Nobody left: a clear error.
	dead := sw.holding("dead", all)
	dead.dieAfter, dead.served = 1, 1
	f = &Fetcher{Store: openStore(t, 0, nil), Locate: locator(dead), Peers: peersOf(dead), Device: "d"}
	if _, err := f.Fetch(context.Background(), sw.m); !errors.Is(err, ErrNoSource) {
		t.Errorf("every holder dead, no fallback: %v, want ErrNoSource", err)
	}
}

func TestFetchUsesFallbackOnlyForWhatPeersLack(t *testing.T) {
	sw := newSwarm(t, 40*ChunkSize)
	// Three peers hold 39 of the 40 chunks between them; chunk 39 only
	// the coordinator has.
	var peers []*memSource
	for p := range 3 {
		peers = append(peers, sw.holding(fmt.Sprintf("peer%d", p), func(i int) bool { return i < 39 && i%3 != p }))
	}
	coord := sw.holding("coordinator", func(int) bool { return true })
	st := openStore(t, 0, nil)
	f := &Fetcher{Store: st, Locate: locator(peers...), Peers: peersOf(peers...), Fallback: coord, Device: "d"}
	stats, err := f.Fetch(context.Background(), sw.m)
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, st, sw)
	t.Logf("chunks by source: %v", stats.Chunks)
	if stats.Chunks["coordinator"] != 1 {
		t.Errorf("the coordinator gave %d chunks, want 1 (the one no peer holds)", stats.Chunks["coordinator"])
	}
	for _, p := range peers {
		if stats.Chunks[p.id] < 8 {
			t.Errorf("peer %s gave %d chunks: the load is not spread", p.id, stats.Chunks[p.id])
		}
	}
	// Already stored: nothing is asked.
	again, err := f.Fetch(context.Background(), sw.m)
	if err != nil || len(again.Order) != 0 {
		t.Errorf("second fetch asked for %d chunks (err %v)", len(again.Order), err)
	}
}

func TestFetchBoundsRequestsInFlight(t *testing.T) {
	sw := newSwarm(t, 30*ChunkSize)
	all := func(int) bool { return true }
	var peers []*memSource
	gate := make(chan struct{})
	for p := range 4 {
		s := sw.holding(fmt.Sprintf("p%d", p), all)
		s.gate = gate
		peers = append(peers, s)
	}
	var mu sync.Mutex
	cur, peak := map[string]int{}, map[string]int{}
	total, peakTotal := 0, 0
	wrap := func(id string) Source {
		src := peersOf(peers...)(id)
		return sourceFunc{id: id, f: func(ctx context.Context, d [32]byte) ([]byte, error) {
			mu.Lock()
			cur[id]++
			total++
			peak[id] = max(peak[id], cur[id])
			peakTotal = max(peakTotal, total)
			mu.Unlock()
			defer func() { mu.Lock(); cur[id]--; total--; mu.Unlock() }()
			return src.Fetch(ctx, d)
		}}
	}
	f := &Fetcher{Store: openStore(t, 0, nil), Locate: locator(peers...), Peers: wrap, Device: "d", PerSource: 2, Parallel: 5}
	done := make(chan error, 1)
	go func() { _, err := f.Fetch(context.Background(), sw.m); done <- err }()
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for id, n := range peak {
		if n > 2 {
			t.Errorf("%s had %d requests in flight, want at most 2", id, n)
		}
	}
	if peakTotal > 5 {
		t.Errorf("%d requests in flight, want at most 5", peakTotal)
	}
}

// sourceFunc is a Source made of a function.
type sourceFunc struct {
	id string
	f  func(ctx context.Context, d [32]byte) ([]byte, error)
}

func (s sourceFunc) ID() string { return s.id }
func (s sourceFunc) Fetch(ctx context.Context, d [32]byte) ([]byte, error) {
	return s.f(ctx, d)
}

func TestStoreServesChunksFromAddedFile(t *testing.T) {
	data := testData(3*ChunkSize+7, 30)
	src := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, 0, nil)
	m, err := s.Import(src)
	if err != nil {
		t.Fatal(err)
	}
	whole := filepath.Join(t.TempDir(), "whole")
	if err := s.Assemble(m, whole); err != nil {
		t.Fatal(err)
	}
	// Served from the whole file, the chunks are not kept twice.
	if err := s.AddFile(m, whole); err != nil {
		t.Fatal(err)
	}
	if used, _, n := s.Usage(); used != 0 || n != 0 {
		t.Errorf("after AddFile: %d bytes in %d chunk files, want none", used, n)
	}
	for i, c := range m.Chunks {
		b, err := s.ReadChunk(c.Digest)
		if err != nil || !bytes.Equal(b, data[i*ChunkSize:i*ChunkSize+c.Size]) {
			t.Fatalf("chunk %d from the file: %v", i, err)
		}
	}
	if len(s.Missing(m)) != 0 || len(s.List()) != 4 {
		t.Errorf("missing %d, listed %d; want 0 and 4", len(s.Missing(m)), len(s.List()))
	}
	if got := s.Manifests(); len(got) != 1 || got[0] != m.SHA256 {
		t.Errorf("Manifests = %x", got)
	}
	// The file changes: that chunk is no longer there. The file goes: none is.
	if err := os.Chmod(whole, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(whole, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{data[0] ^ 1}, 0)
	f.Close()
	if _, err := s.ReadChunk(m.Chunks[0].Digest); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a changed chunk: %v, want fs.ErrNotExist", err)
	}
	if s.Has(m.Chunks[0].Digest) {
		t.Error("a changed chunk is still listed")
	}
	os.Remove(whole)
	if s.Has(m.Chunks[1].Digest) || len(s.Missing(m)) != 4 {
		t.Errorf("the file is gone but its chunks are listed (missing %d)", len(s.Missing(m)))
	}
	if _, err := s.ReadChunk(m.Chunks[1].Digest); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("chunk of a removed file: %v, want fs.ErrNotExist", err)
	}
}

// TestFetchRelocates: holders that get chunks after a fetch began are
// found by asking the locator again (Fetcher.Relocate) and asked too.
// At first only a, which answers nothing until b has served a chunk (or
// 10 s passed, so that a fetch that never asks b fails instead of
// hanging), is named; from the second question on, b is named too.
func TestFetchRelocates(t *testing.T) {
	sw := newSwarm(t, 16*ChunkSize)
	a := sw.holding("a", func(int) bool { return true })
	b := sw.holding("b", func(int) bool { return true })
	a.gate = make(chan struct{})
	bServed := make(chan struct{})
	var once sync.Once
	go func() {
		select {
		case <-bServed:
		case <-time.After(10 * time.Second):
		}
		close(a.gate)
	}()
	var mu sync.Mutex
	asked := 0
	locate := func(ctx context.Context, ds []Digest) (map[Digest][]string, error) {
		mu.Lock()
		asked++
		n := asked
		mu.Unlock()
		if n == 1 {
			return locator(a)(ctx, ds)
		}
		return locator(a, b)(ctx, ds)
	}
	bSrc := sourceFunc{id: "b", f: func(ctx context.Context, d [32]byte) ([]byte, error) {
		chunk, err := b.Fetch(ctx, d)
		if err == nil {
			once.Do(func() { close(bServed) })
		}
		return chunk, err
	}}
	st := openStore(t, 0, nil)
	f := &Fetcher{Store: st, Locate: locate, Relocate: 10 * time.Millisecond,
		Peers: func(id string) Source {
			switch id {
			case "a":
				return a
			case "b":
				return bSrc
			}
			return nil
		}}
	stats, err := f.Fetch(context.Background(), sw.m)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Chunks["b"] == 0 {
		t.Errorf("chunks by source %v: want some from b, named only after the fetch began", stats.Chunks)
	}
	if got := stats.Chunks["a"] + stats.Chunks["b"]; got != len(sw.m.Chunks) {
		t.Errorf("%d chunks stored, want %d", got, len(sw.m.Chunks))
	}
}

// TestStoreRemoveSkipsHeld: Remove deletes the stored chunks asked for
// that no task holds, and nothing else.
func TestStoreRemoveSkipsHeld(t *testing.T) {
	s := openStore(t, 1<<20, nil)
	var ds []Digest
	for i := range 3 {
		b := testData(1000, uint64(30+i))
		d := Digest(sha256.Sum256(b))
		ds = append(ds, d)
		if err := s.Put(d, b); err != nil {
			t.Fatal(err)
		}
	}
	release := s.Hold(ds[1:2])
	if n := s.Remove([]Digest{ds[0], ds[1], {7}}); n != 1 {
		t.Errorf("Remove deleted %d chunks, want 1 (the one not held)", n)
	}
	if s.Has(ds[0]) || !s.Has(ds[1]) || !s.Has(ds[2]) {
		t.Errorf("after Remove: has %v %v %v, want false true true", s.Has(ds[0]), s.Has(ds[1]), s.Has(ds[2]))
	}
	if used, _, chunks := s.Usage(); used != 2000 || chunks != 2 {
		t.Errorf("usage after Remove: %d bytes in %d chunks, want 2000 in 2", used, chunks)
	}
	release()
	if n := s.Remove(ds[1:2]); n != 1 || s.Has(ds[1]) {
		t.Errorf("Remove of a released chunk: %d deleted, still stored %v", n, s.Has(ds[1]))
	}
}

// A holder that dies with several requests in flight is said to have
// failed once in the log, however many of them fail: the others are
// counted in Failures.
func TestFetchLogsAFailedSourceOnce(t *testing.T) {
	sw := newSwarm(t, 12*ChunkSize)
	all := func(int) bool { return true }
	dying := sw.holding("dying", all)
	dying.dieAfter = 1
	other := sw.holding("other", all)
	var logs bytes.Buffer
	f := &Fetcher{Store: openStore(t, 0, nil), Locate: locator(dying, other), Peers: peersOf(dying, other), Device: "d",
		PerSource: 4, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	stats, err := f.Fetch(context.Background(), sw.m)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "A source failed; asking others"); n != 1 || stats.Failures["dying"] < 1 {
		t.Errorf("%d log lines of the dying source's failure (failures %v), want 1:\n%s", n, stats.Failures, logs.String())
	}
}
