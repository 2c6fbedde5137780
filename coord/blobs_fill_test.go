package coord

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"testing"

	"idlepool/job"
)

// cancellingMirror is a BlobMirror of files in memory whose Open gives a
// reader that ends ctx (cancel) at its first Read: a node's try to start
// its coordinator that runs out of time while a file is copied.
type cancellingMirror struct {
	files  map[job.Digest][]byte
	order  []job.Digest
	cancel context.CancelFunc
}

func (m *cancellingMirror) Put(context.Context, job.Digest, string) error { return nil }

func (m *cancellingMirror) List(context.Context) ([]job.Digest, error) { return m.order, nil }

func (m *cancellingMirror) Open(ctx context.Context, d job.Digest) (io.ReadCloser, error) {
	return io.NopCloser(&cancelOnRead{r: bytes.NewReader(m.files[d]), cancel: m.cancel, ctx: ctx}), nil
}

type cancelOnRead struct {
	r      io.Reader
	cancel context.CancelFunc
	ctx    context.Context
}

func (c *cancelOnRead) Read(p []byte) (int, error) {
	c.cancel()
	if err := c.ctx.Err(); err != nil {
		return 0, err // a reader bound to the caller's context would fail here
	}
	return c.r.Read(p)
}

// TestFillFromMirrorFinishesAFile: a file begun is copied to its end even
// if the caller's context ends meanwhile, and the next file waits for the
// next try; so a node that takes charge in short tries copies a large
// file once, not from its start at every try.
func TestFillFromMirrorFinishesAFile(t *testing.T) {
	b, err := newBlobStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := &cancellingMirror{files: map[job.Digest][]byte{}}
	for _, s := range []string{"first file", "second file"} {
		d := job.Digest(sha256.Sum256([]byte(s)))
		m.files[d] = []byte(s)
		m.order = append(m.order, d)
	}
	b.mirror = m
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	n, err := b.fillFromMirror(ctx)
	if n != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("first try: %d files, %v; want 1 and context.Canceled", n, err)
	}
	if !b.has(m.order[0]) || b.has(m.order[1]) {
		t.Fatalf("after the first try: first file held %v, second %v; want true, false", b.has(m.order[0]), b.has(m.order[1]))
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	m.cancel = func() {}
	if n, err := b.fillFromMirror(ctx); n != 1 || err != nil {
		t.Fatalf("second try: %d files, %v; want the second file", n, err)
	}
	if !b.has(m.order[1]) {
		t.Fatal("the second file is not held")
	}
}
