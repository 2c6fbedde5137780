package agent

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idlepool/castore"
)

// TestFileChunks: the seeder reads each chunk from its place in the
// submitter's file; a chunk it does not know is not found, and one whose
// file changed since is an error, never wrong bytes.
func TestFileChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "input")
	data := []byte(strings.Repeat("0123456789abcdef", 3*castore.ChunkSize/16+5))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := castore.ManifestOfFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fc := &fileChunks{m: map[castore.Digest]fileChunk{}}
	for i, c := range m.Chunks {
		fc.m[c.Digest] = fileChunk{path: path, off: int64(i) * int64(m.ChunkSize), size: c.Size}
	}
	last := m.Chunks[len(m.Chunks)-1]
	b, err := fc.ReadChunk(last.Digest)
	if err != nil || sha256.Sum256(b) != last.Digest || len(b) != last.Size {
		t.Fatalf("the last chunk: %d bytes, %v; want its %d bytes", len(b), err, last.Size)
	}
	if _, err := fc.ReadChunk([32]byte{1}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an unknown chunk: %v, want fs.ErrNotExist", err)
	}
	data[len(data)-1] ^= 1
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := fc.ReadChunk(last.Digest); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("a chunk of a changed file: %d bytes, %v; want an error saying the file changed", len(b), err)
	}
}
