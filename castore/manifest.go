package castore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// ChunkSize is the size of every chunk but a file's last: 256 KiB. See
// RATIONALE.md ("Chunks of 256 KiB") for why: it is 4 data channel
// messages of 64 KiB, its digest costs 0.01% of its bytes, a 200 MB input
// is 763 chunks (a manifest of about 60 KB of JSON, as many tracker
// entries per holder), enough to spread over 16 peers at once.
const ChunkSize = 256 << 10

// Bounds of a manifest that a Store or Fetcher accepts.
const (
	// MinChunkSize and MaxChunkSize bound Manifest.ChunkSize.
	MinChunkSize = 4 << 10
	MaxChunkSize = 4 << 20
	// MaxChunks bounds the chunks of one file: 1 TiB at ChunkSize.
	MaxChunks = 1 << 22
)

// Digest is a SHA-256 digest, the name of a chunk or a file.
type Digest = [32]byte

// Chunk is one entry of a Manifest: a chunk's SHA-256 and its size in
// bytes.
type Chunk struct {
	Digest Digest
	Size   int
}

// Manifest is a file's chunk list: its chunks in order (each ChunkSize
// bytes but the last, which is 1 to ChunkSize bytes), the file's size in
// bytes and its SHA-256. An empty file has no chunks.
//
// Its JSON form (GET /v1/blobs/{digest}/chunks of the coordinator,
// docs/api.md) is
//
//	{"sha256":"<hex>","size":N,"chunkSize":262144,"chunks":[{"sha256":"<hex>","size":262144},...]}
type Manifest struct {
	SHA256    Digest
	Size      int64
	ChunkSize int
	Chunks    []Chunk
}

// ChunkWire is a chunk of ManifestWire: its SHA-256 in hex, its size.
type ChunkWire struct {
	SHA256 string `json:"sha256"`
	Size   int    `json:"size"`
}

// ManifestWire is a Manifest in the shape of its JSON form (see
// Manifest), digests as hex text: what encoding/json writes for a
// Manifest, and what a CBOR body of the coordinator's API carries for
// one (the "ref" of a result in POST /v1/work, coord/api), each with its
// field tags. Manifest turns it back into a checked Manifest.
type ManifestWire struct {
	SHA256    string      `json:"sha256"`
	Size      int64       `json:"size"`
	ChunkSize int         `json:"chunkSize"`
	Chunks    []ChunkWire `json:"chunks"`
}

// Wire returns m in the shape of its JSON form.
func (m Manifest) Wire() ManifestWire {
	w := ManifestWire{SHA256: hex.EncodeToString(m.SHA256[:]), Size: m.Size, ChunkSize: m.ChunkSize,
		Chunks: make([]ChunkWire, len(m.Chunks))}
	for i, c := range m.Chunks {
		w.Chunks[i] = ChunkWire{SHA256: hex.EncodeToString(c.Digest[:]), Size: c.Size}
	}
	return w
}

// MarshalJSON encodes m in its JSON form (see Manifest).
func (m Manifest) MarshalJSON() ([]byte, error) { return json.Marshal(m.Wire()) }

// UnmarshalJSON decodes m's JSON form and checks it (Validate); errors
// wrap ErrBadManifest.
func (m *Manifest) UnmarshalJSON(b []byte) error {
	var w ManifestWire
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("%w: %w", ErrBadManifest, err)
	}
	out, err := w.Manifest()
	if err == nil {
		*m = out
	}
	return err
}

// Manifest returns the manifest w describes, checked (Validate): the
// error wraps ErrBadManifest and says what is wrong (a digest that is not
// 64 hex digits, sizes that do not add up).
func (w ManifestWire) Manifest() (Manifest, error) {
	if len(w.Chunks) > MaxChunks {
		return Manifest{}, fmt.Errorf("%w: %d chunks, at most %d", ErrBadManifest, len(w.Chunks), MaxChunks)
	}
	out := Manifest{Size: w.Size, ChunkSize: w.ChunkSize}
	if len(w.Chunks) > 0 {
		out.Chunks = make([]Chunk, len(w.Chunks))
	}
	var err error
	if out.SHA256, err = ParseDigest(w.SHA256); err != nil {
		return Manifest{}, fmt.Errorf("%w: sha256: %w", ErrBadManifest, err)
	}
	for i, c := range w.Chunks {
		if out.Chunks[i].Digest, err = ParseDigest(c.SHA256); err != nil {
			return Manifest{}, fmt.Errorf("%w: chunk %d: %w", ErrBadManifest, i, err)
		}
		out.Chunks[i].Size = c.Size
	}
	if err := out.Validate(); err != nil {
		return Manifest{}, err
	}
	return out, nil
}

// ParseDigest parses 64 hex digits.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	if len(s) != 64 {
		return d, fmt.Errorf("digest %q is not 64 hex digits", s)
	}
	if _, err := hex.Decode(d[:], []byte(s)); err != nil {
		return d, fmt.Errorf("digest %q is not 64 hex digits", s)
	}
	return d, nil
}

// Validate checks that m's chunk sizes are consistent: ChunkSize within
// MinChunkSize..MaxChunkSize, every chunk ChunkSize bytes but the last
// (1..ChunkSize), as many chunks as Size needs, at most MaxChunks. Errors
// wrap ErrBadManifest and say what is wrong.
func (m Manifest) Validate() error {
	if m.ChunkSize < MinChunkSize || m.ChunkSize > MaxChunkSize {
		return fmt.Errorf("%w: chunk size %d bytes, want %d to %d", ErrBadManifest, m.ChunkSize, MinChunkSize, MaxChunkSize)
	}
	if m.Size < 0 {
		return fmt.Errorf("%w: negative size %d", ErrBadManifest, m.Size)
	}
	want := (m.Size + int64(m.ChunkSize) - 1) / int64(m.ChunkSize)
	if want > MaxChunks {
		return fmt.Errorf("%w: a file of %d bytes needs %d chunks, at most %d are allowed", ErrBadManifest, m.Size, want, MaxChunks)
	}
	if int64(len(m.Chunks)) != want {
		return fmt.Errorf("%w: a file of %d bytes in chunks of %d has %d chunks, not %d", ErrBadManifest, m.Size, m.ChunkSize, want, len(m.Chunks))
	}
	for i, c := range m.Chunks {
		wantSize := m.ChunkSize
		if i == len(m.Chunks)-1 {
			wantSize = int(m.Size - int64(i)*int64(m.ChunkSize))
		}
		if c.Size != wantSize {
			return fmt.Errorf("%w: chunk %d has %d bytes, want %d", ErrBadManifest, i, c.Size, wantSize)
		}
	}
	return nil
}

// Digests returns the distinct chunk digests of m, in order of first
// appearance.
func (m Manifest) Digests() []Digest {
	seen := make(map[Digest]bool, len(m.Chunks))
	out := make([]Digest, 0, len(m.Chunks))
	for _, c := range m.Chunks {
		if !seen[c.Digest] {
			seen[c.Digest] = true
			out = append(out, c.Digest)
		}
	}
	return out
}

// Split reads r to its end, cuts it into chunks of chunkSize bytes and
// returns its manifest; put, if not nil, is called with each chunk's
// digest and bytes (which it must not keep: the buffer is reused) in
// order, and its error stops Split.
func Split(r io.Reader, chunkSize int, put func(d Digest, b []byte) error) (Manifest, error) {
	m := Manifest{ChunkSize: chunkSize}
	if chunkSize < MinChunkSize || chunkSize > MaxChunkSize {
		return m, fmt.Errorf("%w: chunk size %d bytes, want %d to %d", ErrBadManifest, chunkSize, MinChunkSize, MaxChunkSize)
	}
	whole := sha256.New()
	buf := make([]byte, chunkSize)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if len(m.Chunks) >= MaxChunks {
				return m, fmt.Errorf("%w: more than %d chunks", ErrBadManifest, MaxChunks)
			}
			b := buf[:n]
			whole.Write(b)
			d := Digest(sha256.Sum256(b))
			m.Chunks = append(m.Chunks, Chunk{Digest: d, Size: n})
			m.Size += int64(n)
			if put != nil {
				if err := put(d, b); err != nil {
					return m, err
				}
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("split: %w", err)
		}
	}
	whole.Sum(m.SHA256[:0])
	return m, nil
}

// ManifestOfFile returns the manifest of the file at path in chunks of
// ChunkSize.
func ManifestOfFile(path string) (Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return Manifest{}, err
	}
	defer f.Close()
	return Split(f, ChunkSize, nil)
}
