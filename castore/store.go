package castore

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultCapBytes is a Store's cap when its Config sets none: 2 GiB.
const DefaultCapBytes int64 = 2 << 30

// tmpPrefix starts the names of files being written; Open removes those a
// crash left behind.
const tmpPrefix = ".tmp-"

// Config configures a Store.
type Config struct {
	// Dir holds the chunks (Dir/<2 hex digits>/<64 hex digits>) and the
	// manifests kept with PutManifest (Dir/manifests/<file's hex
	// SHA-256>.json). It is created if needed.
	Dir string
	// CapBytes caps the bytes of chunks kept; DefaultCapBytes when 0 or
	// less. Chunks held (Hold) may take the store over it until released.
	CapBytes int64
	// Now is the clock of last uses; time.Now when nil.
	Now func() time.Time
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// Store is a chunk store on disk (see the package doc). Create it with
// Open. It is safe for concurrent use, and by several Stores of one
// process on one directory only as far as a chunk's file is concerned
// (each keeps its own accounting).
type Store struct {
	dir string
	now func() time.Time
	log *slog.Logger

	mu      sync.Mutex
	capB    int64
	used    int64
	entries map[Digest]*entry
	holds   map[Digest]int
	files   map[Digest]fileChunk // chunks served from whole files (AddFile)
}

// fileChunk is where a chunk lies in a whole file kept elsewhere.
type fileChunk struct {
	path   string
	offset int64
	size   int
}

type entry struct {
	size    int64
	lastUse time.Time
}

// Open opens (creating) the store in cfg.Dir: it removes temporary files
// a crash left and takes stock of the chunks there, their last use being
// their files' modification times. A file whose name is not a digest is
// left alone and not counted.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("castore: no directory")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CapBytes <= 0 {
		cfg.CapBytes = DefaultCapBytes
	}
	s := &Store{dir: cfg.Dir, now: cfg.Now, log: cfg.Logger, capB: cfg.CapBytes,
		entries: map[Digest]*entry{}, holds: map[Digest]int{}, files: map[Digest]fileChunk{}}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "manifests"), 0o700); err != nil {
		return nil, fmt.Errorf("open chunk store: %w", err)
	}
	err := filepath.WalkDir(cfg.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), tmpPrefix) {
			_ = os.Remove(p)
			return nil
		}
		dg, err := ParseDigest(d.Name())
		if err != nil || p != s.path(dg) {
			return nil
		}
		if info, err := d.Info(); err == nil {
			s.entries[dg] = &entry{size: info.Size(), lastUse: info.ModTime()}
			s.used += info.Size()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("open chunk store: %w", err)
	}
	return s, nil
}

// path returns where chunk d is (or would be).
func (s *Store) path(d Digest) string {
	h := hex.EncodeToString(d[:])
	return filepath.Join(s.dir, h[:2], h)
}

// Has reports whether chunk d is stored, or lies in a file added with
// AddFile that is still there.
func (s *Store) Has(d Digest) bool {
	s.mu.Lock()
	_, ok := s.entries[d]
	fc, inFile := s.files[d]
	s.mu.Unlock()
	if ok || !inFile {
		return ok
	}
	_, err := os.Stat(fc.path)
	return err == nil
}

// List returns the digests of the chunks stored and of those in files
// added with AddFile, in no order.
func (s *Store) List() []Digest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Digest, 0, len(s.entries)+len(s.files))
	for d := range s.entries {
		out = append(out, d)
	}
	for d := range s.files {
		if _, ok := s.entries[d]; !ok {
			out = append(out, d)
		}
	}
	return out
}

// AddFile makes the store serve m's chunks from the whole file at path
// (such as the job cache's copy, put together with Assemble) instead of
// keeping them twice: the chunk files of m are removed, and ReadChunk
// reads the chunks from path, checking each against its digest. Chunks
// in files take nothing of the cap; when the file goes (its owner removes
// it) or changes, its chunks are no longer there.
func (s *Store) AddFile(m Manifest, path string) error {
	if err := m.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var off int64
	for _, c := range m.Chunks {
		s.files[c.Digest] = fileChunk{path: path, offset: off, size: c.Size}
		off += int64(c.Size)
		if _, ok := s.entries[c.Digest]; ok {
			s.removeLocked(c.Digest)
		}
	}
	return nil
}

// readFromFile reads chunk d from the file AddFile named for it; a file
// gone or changed drops the chunk and wraps fs.ErrNotExist.
func (s *Store) readFromFile(d Digest) ([]byte, error) {
	s.mu.Lock()
	fc, ok := s.files[d]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("read chunk %x: %w", d[:8], fs.ErrNotExist)
	}
	b := make([]byte, fc.size)
	f, err := os.Open(fc.path)
	if err == nil {
		_, err = f.ReadAt(b, fc.offset)
		f.Close()
	}
	if err == nil && Digest(sha256.Sum256(b)) == d {
		return b, nil
	}
	s.mu.Lock()
	if s.files[d] == fc {
		delete(s.files, d)
	}
	s.mu.Unlock()
	if err == nil {
		s.log.Warn("A file no longer holds a chunk it held", "chunk", hex.EncodeToString(d[:]), "path", fc.path)
	}
	return nil, fmt.Errorf("read chunk %x: %w", d[:8], fs.ErrNotExist)
}

// Usage returns the bytes of chunks stored, the cap and the number of
// chunks.
func (s *Store) Usage() (usedBytes, capBytes int64, chunks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, s.capB, len(s.entries)
}

// SetCap changes the cap (DefaultCapBytes when 0 or less) and evicts
// what the new cap asks.
func (s *Store) SetCap(n int64) {
	if n <= 0 {
		n = DefaultCapBytes
	}
	s.mu.Lock()
	s.capB = n
	s.evictLocked()
	s.mu.Unlock()
}

// Hold marks chunks ds as needed by a current task: they are never
// evicted until the release it returns is called (holds nest; release is
// idempotent). Chunks not yet stored may be held: they are kept once
// they arrive.
func (s *Store) Hold(ds []Digest) (release func()) {
	ds = slices.Clone(ds)
	s.mu.Lock()
	for _, d := range ds {
		s.holds[d]++
	}
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, d := range ds {
				if s.holds[d]--; s.holds[d] <= 0 {
					delete(s.holds, d)
				}
			}
			s.evictLocked()
		})
	}
}

// Put stores b as chunk d. Bytes that do not hash to d are refused with
// an error wrapping ErrDigestMismatch; a chunk already stored is not
// written again. The file is written to a temporary name, synced and
// renamed, so a crash leaves either the whole chunk or none. Putting may
// evict the least recently used chunks that are not held.
func (s *Store) Put(d Digest, b []byte) error {
	if Digest(sha256.Sum256(b)) != d {
		return fmt.Errorf("%w: put chunk %x", ErrDigestMismatch, d[:8])
	}
	if s.Has(d) {
		s.touch(d)
		return nil
	}
	final := s.path(d)
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("put chunk: %w", err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return fmt.Errorf("put chunk: %w", err)
	}
	_, err = f.Write(b)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("put chunk: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.Rename(f.Name(), final); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("put chunk: %w", err)
	}
	if _, ok := s.entries[d]; !ok {
		s.entries[d] = &entry{size: int64(len(b)), lastUse: s.now()}
		s.used += int64(len(b))
	}
	s.evictLocked()
	return nil
}

// ReadChunk returns chunk d's bytes, checked against d, from its chunk
// file or else from a file added with AddFile. A chunk not stored is an
// error wrapping fs.ErrNotExist; a stored chunk that no
// longer matches its digest is removed and reported with an error
// wrapping both ErrCorrupt and fs.ErrNotExist. This is the method the
// network layer serves peers from.
func (s *Store) ReadChunk(d Digest) ([]byte, error) {
	b, err := os.ReadFile(s.path(d))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			s.forget(d)
			return s.readFromFile(d)
		}
		return nil, fmt.Errorf("read chunk %x: %w", d[:8], err)
	}
	if Digest(sha256.Sum256(b)) != d {
		s.log.Warn("Removed a corrupt chunk", "chunk", hex.EncodeToString(d[:]))
		s.mu.Lock()
		s.removeLocked(d)
		s.mu.Unlock()
		return nil, fmt.Errorf("read chunk %x: %w (%w)", d[:8], ErrCorrupt, fs.ErrNotExist)
	}
	s.touch(d)
	return b, nil
}

// forget drops the accounting of chunk d, whose file is gone.
func (s *Store) forget(d Digest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[d]; ok {
		s.used -= e.size
		delete(s.entries, d)
	}
}

// touch records that chunk d was used now.
func (s *Store) touch(d Digest) {
	now := s.now()
	s.mu.Lock()
	if e, ok := s.entries[d]; ok {
		e.lastUse = now
	}
	s.mu.Unlock()
	_ = os.Chtimes(s.path(d), now, now)
}

// Remove deletes the stored chunks ds that no task holds (Hold) and
// returns how many it deleted; chunks not stored are skipped. A chunk
// that cannot be deleted is logged and left. Chunks served from whole
// files (AddFile) are not touched.
func (s *Store) Remove(ds []Digest) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range ds {
		if _, ok := s.entries[d]; ok && s.holds[d] == 0 && s.removeLocked(d) {
			n++
		}
	}
	return n
}

// removeLocked removes chunk d's file and accounting; s.mu is held.
func (s *Store) removeLocked(d Digest) bool {
	if err := os.Remove(s.path(d)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("Cannot remove a chunk", "chunk", hex.EncodeToString(d[:]), "err", err)
		return false
	}
	if e, ok := s.entries[d]; ok {
		s.used -= e.size
		delete(s.entries, d)
	}
	return true
}

// evictLocked removes the least recently used chunks that are not held
// until the store is within its cap; s.mu is held.
func (s *Store) evictLocked() {
	if s.used <= s.capB {
		return
	}
	type cand struct {
		d   Digest
		use time.Time
	}
	var cands []cand
	for d, e := range s.entries {
		if s.holds[d] == 0 {
			cands = append(cands, cand{d, e.lastUse})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if c := a.use.Compare(b.use); c != 0 {
			return c
		}
		return bytes.Compare(a.d[:], b.d[:])
	})
	for _, c := range cands {
		if s.used <= s.capB {
			break
		}
		s.removeLocked(c.d)
	}
	if s.used > s.capB {
		s.log.Warn("The chunk store is over its cap: the chunks left are held by tasks", "usedBytes", s.used, "capBytes", s.capB)
	}
}

// Missing returns the distinct chunks of m that are not stored, in m's
// order.
func (s *Store) Missing(m Manifest) []Digest {
	var out []Digest
	for _, d := range m.Digests() {
		if !s.Has(d) {
			out = append(out, d)
		}
	}
	return out
}

// Assemble writes the file m describes to dst from the stored chunks:
// to a temporary file beside dst, checked against m's size and SHA-256,
// synced, made read-only (0400) and renamed to dst. A chunk missing is an
// error wrapping fs.ErrNotExist; a result that does not match m wraps
// ErrDigestMismatch. Hold m's chunks while fetching and assembling, or
// they may be evicted in between.
func (s *Store) Assemble(m Manifest, dst string) (err error) {
	if err := m.Validate(); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(dst), tmpPrefix+"*")
	if err != nil {
		return fmt.Errorf("assemble: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	w := io.MultiWriter(f, h)
	var n int64
	for i, c := range m.Chunks {
		b, err := s.ReadChunk(c.Digest)
		if err != nil {
			return fmt.Errorf("assemble chunk %d: %w", i, err)
		}
		if len(b) != c.Size {
			return fmt.Errorf("assemble chunk %d: %w: %d bytes, the manifest says %d", i, ErrDigestMismatch, len(b), c.Size)
		}
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("assemble: %w", err)
		}
		n += int64(len(b))
	}
	if n != m.Size || Digest(h.Sum(nil)) != m.SHA256 {
		return fmt.Errorf("assemble: %w: the chunks do not make the file %x", ErrDigestMismatch, m.SHA256[:8])
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("assemble: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("assemble: %w", err)
	}
	if err := os.Chmod(f.Name(), 0o400); err != nil {
		return fmt.Errorf("assemble: %w", err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return fmt.Errorf("assemble: %w", err)
	}
	return nil
}

// Import cuts the file at path into chunks of ChunkSize, stores them and
// returns its manifest (also kept with PutManifest): how a device seeds
// a file it has whole.
func (s *Store) Import(path string) (Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return Manifest{}, err
	}
	defer f.Close()
	m, err := Split(f, ChunkSize, s.Put)
	if err != nil {
		return m, fmt.Errorf("import %s: %w", path, err)
	}
	return m, s.PutManifest(m)
}

// manifestPath is where the manifest of the file with SHA-256 file is
// kept.
func (s *Store) manifestPath(file Digest) string {
	return filepath.Join(s.dir, "manifests", hex.EncodeToString(file[:])+".json")
}

// PutManifest keeps m (checked) under its file's SHA-256, so that the
// chunks of a file fetched earlier can be named after a restart.
// Manifests are small (about 80 bytes a chunk) and are not counted in
// the cap.
func (s *Store) PutManifest(m Manifest) error {
	if err := m.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	p := s.manifestPath(m.SHA256)
	f, err := os.CreateTemp(filepath.Dir(p), tmpPrefix+"*")
	if err != nil {
		return fmt.Errorf("put manifest: %w", err)
	}
	_, err = f.Write(b)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("put manifest: %w", err)
	}
	if err := os.Rename(f.Name(), p); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("put manifest: %w", err)
	}
	return nil
}

// Manifests returns the SHA-256 of the files whose manifests are kept,
// in no order.
func (s *Store) Manifests() []Digest {
	ents, _ := os.ReadDir(filepath.Join(s.dir, "manifests"))
	var out []Digest
	for _, e := range ents {
		if d, err := ParseDigest(strings.TrimSuffix(e.Name(), ".json")); err == nil && strings.HasSuffix(e.Name(), ".json") {
			out = append(out, d)
		}
	}
	return out
}

// Manifest returns the manifest kept for the file with SHA-256 file; one
// not kept is an error wrapping fs.ErrNotExist.
func (s *Store) Manifest(file Digest) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(s.manifestPath(file))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, err
	}
	if m.SHA256 != file {
		return Manifest{}, fmt.Errorf("%w: kept under %x but describes %x", ErrBadManifest, file[:8], m.SHA256[:8])
	}
	return m, nil
}

// lruOrder returns the stored chunks, least recently used first (for
// tests).
func (s *Store) lruOrder() []Digest {
	s.mu.Lock()
	defer s.mu.Unlock()
	ds := make([]Digest, 0, len(s.entries))
	for d := range s.entries {
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b Digest) int {
		return cmp.Or(s.entries[a].lastUse.Compare(s.entries[b].lastUse), bytes.Compare(a[:], b[:]))
	})
	return ds
}
