package coord

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"idlepool/castore"
	"idlepool/job"
)

// servedBytes reads idlepool_coord_bytes_served_total{kind} from /metrics.
func servedBytes(t *testing.T, ts *testServer, kind string) float64 {
	t.Helper()
	a := ts.do(t, nil, "GET", "/metrics", nil)
	sc := bufio.NewScanner(bytes.NewReader(a.body))
	prefix := fmt.Sprintf("idlepool_coord_bytes_served_total{kind=%q} ", kind)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", prefix)
	return 0
}

func TestCoordinatorServesChunksAndTracks(t *testing.T) {
	ts := startServer(t, nil)
	a, b, c := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{a, b, c} {
		ts.register(t, p, "", http.StatusCreated)
	}
	data := make([]byte, 3*castore.ChunkSize+100)
	rand.Read(data)
	d := job.Digest(sha256.Sum256(data))
	if got := ts.do(t, nil, "GET", "/v1/blobs/"+d.String()+"/chunks", nil); got.status != http.StatusNotFound {
		t.Fatalf("manifest of a file not uploaded: %d, want 404", got.status)
	}
	if got := ts.upload(t, a, data); got.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", got.status, got.body)
	}
	chunk := castore.Digest(sha256.Sum256(data[:castore.ChunkSize]))
	if got := ts.do(t, nil, "GET", "/v1/chunks/"+job.Digest(chunk).String(), nil); got.status != http.StatusNotFound || got.errorBody(t).Code != "unknown_chunk" {
		t.Fatalf("chunk before its manifest was asked: %d %s, want 404 unknown_chunk", got.status, got.body)
	}
	ans := ts.do(t, nil, "GET", "/v1/blobs/"+d.String()+"/chunks", nil)
	if ans.status != http.StatusOK {
		t.Fatalf("manifest: %d %s", ans.status, ans.body)
	}
	var m castore.Manifest
	ans.decode(t, &m)
	if m.SHA256 != d || m.Size != int64(len(data)) || len(m.Chunks) != 4 || m.Chunks[0].Digest != chunk {
		t.Fatalf("manifest: %x, %d bytes, %d chunks", m.SHA256[:4], m.Size, len(m.Chunks))
	}
	var whole []byte
	for _, ch := range m.Chunks {
		got := ts.do(t, nil, "GET", "/v1/chunks/"+job.Digest(ch.Digest).String(), nil)
		if got.status != http.StatusOK || sha256.Sum256(got.body) != ch.Digest {
			t.Fatalf("chunk: %d, %d bytes", got.status, len(got.body))
		}
		whole = append(whole, got.body...)
	}
	if !bytes.Equal(whole, data) {
		t.Fatal("the chunks do not make the file")
	}
	if n := servedBytes(t, ts, "input_chunk"); n != float64(len(data)) {
		t.Errorf("input_chunk bytes served = %v, want %d", n, len(data))
	}

	hex := func(i int) HexDigest { return HexDigest(m.Chunks[i].Digest) }
	announce := func(p *testPeer, ann ChunkAnnounce, want int) ChunkAnnounced {
		t.Helper()
		got := ts.do(t, p, "POST", "/v1/chunks/announce", ann)
		if got.status != want {
			t.Fatalf("announce by %s: %d %s, want %d", p.ID()[:8], got.status, got.body, want)
		}
		var out ChunkAnnounced
		if want == http.StatusOK {
			got.decode(t, &out)
		}
		return out
	}
	holders := func(p *testPeer, ds ...HexDigest) map[HexDigest][]string {
		t.Helper()
		got := ts.do(t, p, "POST", "/v1/chunks/holders", ChunkHoldersRequest{Chunks: ds})
		if got.status != http.StatusOK {
			t.Fatalf("holders: %d %s", got.status, got.body)
		}
		var out ChunkHolders
		got.decode(t, &out)
		return out.Holders
	}
	if got := announce(a, ChunkAnnounce{Add: []HexDigest{hex(0), hex(1)}}, http.StatusOK); got.Held != 2 {
		t.Errorf("a holds %d, want 2", got.Held)
	}
	announce(b, ChunkAnnounce{Add: []HexDigest{hex(1)}}, http.StatusOK)
	sorted := cmpopts.SortSlices(func(x, y string) bool { return x < y })
	want := map[HexDigest][]string{hex(0): {a.ID()}, hex(1): {a.ID(), b.ID()}}
	if diff := cmp.Diff(want, holders(c, hex(0), hex(1), hex(2)), sorted); diff != "" {
		t.Errorf("holders asked by c (-want +got):\n%s", diff)
	}
	// The asker is never named; a drop takes effect.
	if diff := cmp.Diff(map[HexDigest][]string{hex(1): {b.ID()}}, holders(a, hex(0), hex(1))); diff != "" {
		t.Errorf("holders asked by a (-want +got):\n%s", diff)
	}
	announce(a, ChunkAnnounce{Drop: []HexDigest{hex(0)}}, http.StatusOK)
	if diff := cmp.Diff(map[HexDigest][]string{hex(1): {a.ID(), b.ID()}}, holders(c, hex(0), hex(1)), sorted); diff != "" {
		t.Errorf("after a dropped chunk 0 (-want +got):\n%s", diff)
	}
	// Replace: the list is the whole holding.
	if got := announce(b, ChunkAnnounce{Add: []HexDigest{hex(3)}, Replace: true}, http.StatusOK); got.Held != 1 {
		t.Errorf("b holds %d after replacing, want 1", got.Held)
	}
	if diff := cmp.Diff(map[HexDigest][]string{hex(1): {a.ID()}, hex(3): {b.ID()}}, holders(c, hex(1), hex(3))); diff != "" {
		t.Errorf("after b replaced (-want +got):\n%s", diff)
	}

	// Bounds and authentication.
	if got := ts.do(t, nil, "POST", "/v1/chunks/announce", ChunkAnnounce{Add: []HexDigest{hex(0)}}); got.status != http.StatusUnauthorized {
		t.Errorf("unsigned announcement: %d, want 401", got.status)
	}
	many := func(n, from int) []HexDigest {
		out := make([]HexDigest, n)
		for i := range out {
			out[i] = HexDigest(sha256.Sum256([]byte(strconv.Itoa(from + i))))
		}
		return out
	}
	if got := ts.do(t, c, "POST", "/v1/chunks/holders", ChunkHoldersRequest{Chunks: many(MaxChunksPerRequest+1, 0)}); got.status != http.StatusBadRequest {
		t.Errorf("too many chunks asked: %d, want 400", got.status)
	}
	if got := ts.do(t, c, "POST", "/v1/chunks/announce", ChunkAnnounce{Add: many(MaxChunksPerRequest+1, 0)}); got.status != http.StatusBadRequest {
		t.Errorf("too many chunks in one announcement: %d, want 400", got.status)
	}
	for i := range MaxChunksPerPeer / MaxChunksPerRequest {
		announce(c, ChunkAnnounce{Add: many(MaxChunksPerRequest, i*MaxChunksPerRequest)}, http.StatusOK)
	}
	got := ts.do(t, c, "POST", "/v1/chunks/announce", ChunkAnnounce{Add: many(1, MaxChunksPerPeer)})
	if got.status != http.StatusRequestEntityTooLarge || got.errorBody(t).Code != "too_many_chunks" {
		t.Errorf("announcing past the per-device bound: %d %s, want 413 too_many_chunks", got.status, got.body)
	}
}

func TestTrackerForgetsSilentDevices(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	tr := newTracker(clock.Now)
	d := HexDigest(sha256.Sum256([]byte("x")))
	if _, err := tr.announce("p1", ChunkAnnounce{Add: []HexDigest{d}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.announce("p2", ChunkAnnounce{Add: []HexDigest{d}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(TrackerTTL - time.Minute)
	if _, err := tr.announce("p2", ChunkAnnounce{}); err != nil { // p2 is still there
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	if diff := cmp.Diff(map[HexDigest][]string{d: {"p2"}}, tr.holders("p3", []HexDigest{d})); diff != "" {
		t.Errorf("holders after p1 fell silent (-want +got):\n%s", diff)
	}
	if n := tr.entries(); n != 1 {
		t.Errorf("entries = %d, want 1 (p1's forgotten)", n)
	}
	// Many holders: at most MaxHoldersPerChunk are named.
	for i := range 40 {
		if _, err := tr.announce(fmt.Sprint("q", i), ChunkAnnounce{Add: []HexDigest{d}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tr.holders("p3", []HexDigest{d})[d]); n != MaxHoldersPerChunk {
		t.Errorf("%d holders named, want %d", n, MaxHoldersPerChunk)
	}
}
