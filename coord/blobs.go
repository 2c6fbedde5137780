package coord

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"idlepool/job"
	"idlepool/pool"
)

// errDigestMismatch means uploaded bytes do not hash to the digest they
// were uploaded under.
var errDigestMismatch = errors.New("coord: content does not match its digest")

// blobStore keeps files by SHA-256 under one directory, as
// DIR/<first 2 hex digits>/<64 hex digits>. A file is written to a
// temporary name, fsynced, renamed into place and its directory fsynced, so
// a file under its final name is always complete and correct; a crash
// leaves at most a temporary file, which newBlobStore removes. Safe for
// concurrent use: two uploads of one digest both write the same bytes and
// the last rename wins.
type blobStore struct {
	dir    string
	mirror BlobMirror // nil: not mirrored (a pool of one node)
}

const tmpPrefix = ".upload-"

func newBlobStore(dir string) (*blobStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create blob directory: %w", err)
	}
	// Remove temporaries a crash left behind.
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasPrefix(d.Name(), tmpPrefix) {
			return os.Remove(path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("clean blob directory: %w", err)
	}
	return &blobStore{dir: dir}, nil
}

// path returns where the file with digest d is (or would be).
func (b *blobStore) path(d job.Digest) string {
	s := d.String()
	return filepath.Join(b.dir, s[:2], s)
}

// has reports whether the file with digest d is stored.
func (b *blobStore) has(d job.Digest) bool {
	st, err := os.Stat(b.path(d))
	return err == nil && st.Mode().IsRegular()
}

// put stores what r yields under d. It returns created=false without
// reading r when d is already stored. Content that does not hash to d is
// an error wrapping errDigestMismatch and stores nothing; so does any read
// error (such as *http.MaxBytesError).
func (b *blobStore) put(d job.Digest, r io.Reader) (created bool, err error) {
	return b.store(d, r, b.mirror)
}

// store is put, mirroring the file to mirror (nil: not mirrored).
func (b *blobStore) store(d job.Digest, r io.Reader, mirror BlobMirror) (created bool, err error) {
	if b.has(d) {
		return false, nil
	}
	final := b.path(d)
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("store blob %s: %w", d, err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return false, fmt.Errorf("store blob %s: %w", d, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), r); err != nil {
		return false, fmt.Errorf("store blob %s: %w", d, err)
	}
	if got := job.Digest(h.Sum(nil)); got != d {
		return false, fmt.Errorf("%w: the body's SHA-256 is %s, not %s", errDigestMismatch, got, d)
	}
	if err := f.Sync(); err != nil {
		return false, fmt.Errorf("store blob %s: %w", d, err)
	}
	if err := f.Close(); err != nil {
		return false, fmt.Errorf("store blob %s: %w", d, err)
	}
	if mirror != nil {
		// Mirrored before it counts as stored here: a file this node
		// has is one every node can get after a failover.
		ctx, cancel := context.WithTimeout(context.Background(), mirrorTimeout)
		err := mirror.Put(ctx, d, tmp)
		cancel()
		if err != nil {
			return false, fmt.Errorf("store blob %s on the other nodes: %w: %w", d, pool.ErrStoreUnavailable, err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return false, fmt.Errorf("store blob %s: %w", d, err)
	}
	if err := syncDir(dir); err != nil {
		return true, fmt.Errorf("store blob %s: %w", d, err)
	}
	return true, nil
}

// mirrorTimeout bounds mirroring one file to the cluster.
const mirrorTimeout = 2 * time.Minute

// fillFromMirror copies every mirrored file this node lacks, so that the
// jobs in the cluster's state find their files here. A file begun is
// copied to its end (within mirrorTimeout) even if ctx ends meanwhile:
// a node taking charge tries to start its coordinator in short steps
// (runTerm), and a large file cut off at each step's end would be copied
// again from its start at the next. ctx is checked between files.
func (b *blobStore) fillFromMirror(ctx context.Context) (n int, err error) {
	ds, err := b.mirror.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("list the cluster's files: %w", err)
	}
	for _, d := range ds {
		if b.has(d) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("fetch files from the cluster: %w", err)
		}
		if err := b.fetch(ctx, d); err != nil {
			return n, fmt.Errorf("fetch file %s from the cluster: %w", d, err)
		}
		n++
	}
	return n, nil
}

// fetch copies the mirrored file d here, within mirrorTimeout whether or
// not ctx ends meanwhile (fillFromMirror).
func (b *blobStore) fetch(ctx context.Context, d job.Digest) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mirrorTimeout)
	defer cancel()
	return b.copyFromMirror(fctx, d)
}

// copyFromMirror copies the mirrored file d here within ctx. Safe for
// concurrent use (two copies of one file: the last rename wins).
func (b *blobStore) copyFromMirror(ctx context.Context, d job.Digest) error {
	r, err := b.mirror.Open(ctx, d)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = b.store(d, r, nil) // it is in the mirror already
	return err
}

// hasOrFetches reports whether the file with digest d is stored here,
// copying it from the mirror first when it is not and there is one (in
// a divided pool another shard's coordinator may have taken the upload),
// within ctx and mirrorTimeout. A file the mirror does not give (absent,
// or the mirror failing) is reported absent; the failure is logged by the
// caller through err.
func (b *blobStore) hasOrFetches(ctx context.Context, d job.Digest) (bool, error) {
	if b.has(d) {
		return true, nil
	}
	if b.mirror == nil {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, mirrorTimeout)
	defer cancel()
	if err := b.copyFromMirror(ctx, d); err != nil {
		return false, err
	}
	return b.has(d), nil
}

// putBytes stores data under its own digest.
func (b *blobStore) putBytes(data []byte) (job.Digest, error) {
	d := job.Digest(sha256.Sum256(data))
	_, err := b.put(d, bytes.NewReader(data))
	return d, err
}

// open opens the file with digest d; a missing one satisfies
// errors.Is(err, fs.ErrNotExist).
func (b *blobStore) open(d job.Digest) (*os.File, error) { return os.Open(b.path(d)) }

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}
