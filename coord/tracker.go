package coord

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"idlepool/castore"
	"idlepool/job"
)

// maxIndexedChunks bounds the chunks of the job files the coordinator
// can serve chunk by chunk (1 TiB at castore.ChunkSize).
const maxIndexedChunks = 1 << 22

// tracker remembers which devices hold which chunks, in memory: devices
// announce again after a coordinator restart (an agent's first
// announcement replaces). Safe for concurrent use.
type tracker struct {
	now func() time.Time

	mu      sync.Mutex
	byChunk map[castore.Digest]map[string]struct{}
	byPeer  map[string]*peerChunks
}

type peerChunks struct {
	chunks map[castore.Digest]struct{}
	seen   time.Time
}

func newTracker(now func() time.Time) *tracker {
	return &tracker{now: now, byChunk: map[castore.Digest]map[string]struct{}{}, byPeer: map[string]*peerChunks{}}
}

// errTooManyChunks means an announcement would make a device hold more
// than MaxChunksPerPeer.
var errTooManyChunks = errors.New("coord: too many chunks announced")

// announce applies a's changes for peer and returns how many chunks it
// holds. An announcement that would take the device over
// MaxChunksPerPeer changes nothing and wraps errTooManyChunks.
func (t *tracker) announce(peer string, a ChunkAnnounce) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pc := t.byPeer[peer]
	if pc == nil {
		pc = &peerChunks{chunks: map[castore.Digest]struct{}{}}
	}
	after := len(pc.chunks)
	if a.Replace {
		after = 0
	} else {
		for _, d := range a.Drop {
			if _, ok := pc.chunks[castore.Digest(d)]; ok {
				after--
			}
		}
	}
	for _, d := range a.Add {
		if _, ok := pc.chunks[castore.Digest(d)]; !ok || a.Replace {
			after++
		}
	}
	if after > MaxChunksPerPeer {
		return len(pc.chunks), fmt.Errorf("%w: device %s would hold %d chunks, at most %d are tracked", errTooManyChunks, peer, after, MaxChunksPerPeer)
	}
	t.byPeer[peer] = pc
	pc.seen = t.now()
	drop := func(d castore.Digest) {
		delete(pc.chunks, d)
		if hs := t.byChunk[d]; hs != nil {
			delete(hs, peer)
			if len(hs) == 0 {
				delete(t.byChunk, d)
			}
		}
	}
	if a.Replace {
		for d := range pc.chunks {
			drop(d)
		}
	}
	for _, d := range a.Drop {
		drop(castore.Digest(d))
	}
	for _, d := range a.Add {
		pc.chunks[castore.Digest(d)] = struct{}{}
		hs := t.byChunk[castore.Digest(d)]
		if hs == nil {
			hs = map[string]struct{}{}
			t.byChunk[castore.Digest(d)] = hs
		}
		hs[peer] = struct{}{}
	}
	if len(pc.chunks) == 0 {
		delete(t.byPeer, peer)
	}
	return len(pc.chunks), nil
}

// holders returns, for each of ds, up to MaxHoldersPerChunk devices
// other than asker that announced it within TrackerTTL. Devices silent
// for longer are forgotten on the way.
func (t *tracker) holders(asker string, ds []HexDigest) map[HexDigest][]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	out := map[HexDigest][]string{}
	for _, d := range ds {
		var ids []string
		for id := range t.byChunk[castore.Digest(d)] {
			if id == asker {
				continue
			}
			if pc := t.byPeer[id]; pc == nil || now.Sub(pc.seen) > TrackerTTL {
				t.forgetLocked(id)
				continue
			}
			ids = append(ids, id)
		}
		if len(ids) > MaxHoldersPerChunk {
			rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			ids = ids[:MaxHoldersPerChunk]
		}
		if len(ids) > 0 {
			out[d] = ids
		}
	}
	return out
}

// forgetLocked drops everything peer announced; t.mu is held.
func (t *tracker) forgetLocked(peer string) {
	pc := t.byPeer[peer]
	delete(t.byPeer, peer)
	if pc == nil {
		return
	}
	for d := range pc.chunks {
		if hs := t.byChunk[d]; hs != nil {
			delete(hs, peer)
			if len(hs) == 0 {
				delete(t.byChunk, d)
			}
		}
	}
}

// entries returns the chunk entries tracked, over all devices.
func (t *tracker) entries() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, pc := range t.byPeer {
		n += len(pc.chunks)
	}
	return n
}

// chunkIndex is what the coordinator knows of its job files' chunks, so
// that it can serve a chunk by digest as the fallback source: each file's
// manifest, computed when first asked, and where each chunk lies. Safe
// for concurrent use.
type chunkIndex struct {
	mu        sync.Mutex
	manifests map[job.Digest]castore.Manifest
	where     map[castore.Digest]chunkLoc
}

type chunkLoc struct {
	file   job.Digest
	offset int64
	size   int
}

func newChunkIndex() *chunkIndex {
	return &chunkIndex{manifests: map[job.Digest]castore.Manifest{}, where: map[castore.Digest]chunkLoc{}}
}

// manifest returns the chunk manifest of blob d, computing and indexing
// it when first asked. A blob not stored wraps fs.ErrNotExist.
func (s *Server) chunkManifest(d job.Digest) (castore.Manifest, error) {
	ix := s.chunks
	ix.mu.Lock()
	m, ok := ix.manifests[d]
	ix.mu.Unlock()
	if ok {
		return m, nil
	}
	f, err := s.blobs.open(d)
	if err != nil {
		return m, err
	}
	defer f.Close()
	m, err = castore.Split(f, castore.ChunkSize, nil)
	if err != nil {
		return m, fmt.Errorf("chunk blob %s: %w", d, err)
	}
	if m.SHA256 != d {
		return m, fmt.Errorf("chunk blob %s: %w", d, errDigestMismatch)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if _, ok := ix.manifests[d]; !ok && len(ix.where)+len(m.Chunks) <= maxIndexedChunks {
		ix.manifests[d] = m
		var off int64
		for _, c := range m.Chunks {
			ix.where[c.Digest] = chunkLoc{file: d, offset: off, size: c.Size}
			off += int64(c.Size)
		}
	}
	return m, nil
}

// blobChunks is GET /v1/blobs/{digest}/chunks: the file's chunk manifest
// (castore.Manifest's JSON form), after which its chunks can be fetched
// from GET /v1/chunks/{digest} and from the devices that hold them.
func (s *Server) blobChunks(w http.ResponseWriter, r *http.Request) error {
	d, err := pathDigest(r, "digest")
	if err != nil {
		return err
	}
	if s.sched.SecretBlob(d) {
		// A job's known answers: neither the file nor its chunks are
		// served (getBlob), and they are answered as absent.
		return notFound("unknown_blob", "no file with digest %s: upload it first", d)
	}
	m, err := s.chunkManifest(d)
	if errors.Is(err, fs.ErrNotExist) {
		return notFound("unknown_blob", "no file with digest %s: upload it first", d)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	writeJSON(w, http.StatusOK, m)
	return nil
}

// getChunk is GET /v1/chunks/{digest}: one chunk of a job file whose
// manifest was asked for, the coordinator being the fallback source of
// chunks no device can give. Its bytes are counted in
// idlepool_coord_bytes_served_total as kind "program" when the file is
// a program of a job the pool computes, else "input_chunk".
func (s *Server) getChunk(w http.ResponseWriter, r *http.Request) error {
	d, err := pathDigest(r, "digest")
	if err != nil {
		return err
	}
	s.chunks.mu.Lock()
	loc, ok := s.chunks.where[castore.Digest(d)]
	s.chunks.mu.Unlock()
	if !ok {
		return notFound("unknown_chunk", "no chunk %s here: ask for its file's manifest first (GET /v1/blobs/{digest}/chunks)", d)
	}
	f, err := s.blobs.open(loc.file)
	if err != nil {
		return fmt.Errorf("open blob: %w", err)
	}
	defer f.Close()
	b := make([]byte, loc.size)
	if _, err := io.ReadFull(io.NewSectionReader(f, loc.offset, int64(loc.size)), b); err != nil {
		return fmt.Errorf("read chunk %s: %w", d, err)
	}
	if sha256.Sum256(b) != d {
		return fmt.Errorf("read chunk %s: %w", d, errDigestMismatch)
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		n, _ := w.Write(b)
		kind := servedInputChunk
		if s.blobKind(loc.file) == servedProgram {
			kind = servedProgram
		}
		s.metrics.served.WithLabelValues(kind).Add(float64(n))
	}
	return nil
}

// announceChunks is POST /v1/chunks/announce (ChunkAnnounce).
func (s *Server) announceChunks(w http.ResponseWriter, r *http.Request, c call) error {
	var a ChunkAnnounce
	if err := decodeStrict(c.body, &a); err != nil {
		return badRequest("%v", err)
	}
	if n := len(a.Add) + len(a.Drop); n > MaxChunksPerRequest {
		return badRequest("%d chunks in one announcement, at most %d: send them in several", n, MaxChunksPerRequest)
	}
	held, err := s.tracker.announce(c.peer.ID, a)
	if errors.Is(err, errTooManyChunks) {
		return &apiError{http.StatusRequestEntityTooLarge, "too_many_chunks", err.Error(), nil}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ChunkAnnounced{Held: held})
	return nil
}

// chunkHolders is POST /v1/chunks/holders (ChunkHoldersRequest).
func (s *Server) chunkHolders(w http.ResponseWriter, r *http.Request, c call) error {
	var q ChunkHoldersRequest
	if err := decodeStrict(c.body, &q); err != nil {
		return badRequest("%v", err)
	}
	if len(q.Chunks) > MaxChunksPerRequest {
		return badRequest("%d chunks asked in one request, at most %d: ask in several", len(q.Chunks), MaxChunksPerRequest)
	}
	writeJSON(w, http.StatusOK, ChunkHolders{Holders: s.tracker.holders(c.peer.ID, q.Chunks)})
	return nil
}

// Kinds of idlepool_coord_bytes_served_total.
const (
	servedProgram    = "program"
	servedInput      = "input"
	servedInputChunk = "input_chunk"
	servedResult     = "result"
	servedJob        = "job"
)

// blobKind says whether blob d is the program of a job the pool is
// computing (servedProgram) or another file (servedInput).
func (s *Server) blobKind(d job.Digest) string {
	for _, v := range s.sched.Seeking() {
		if v.Job != nil && v.Job.Program.SHA256 == d {
			return servedProgram
		}
	}
	return servedInput
}

// countingWriter counts the body bytes written through it.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
