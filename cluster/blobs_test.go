package cluster

import (
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"idlepool/job"
)

// A file put on one node is listed and read back on another.
func TestBlobsMirror(t *testing.T) {
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 3))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := untilOpen(t, "OpenBlobs on node 0", func(ctx context.Context) (*Blobs, error) { return OpenBlobs(ctx, nodes[0].JetStream(), 3) })
	b := untilOpen(t, "OpenBlobs on node 2", func(ctx context.Context) (*Blobs, error) { return OpenBlobs(ctx, nodes[2].JetStream(), 3) })
	data := []byte("the program's bytes")
	d := job.Digest(sha256.Sum256(data))
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second is a no-op
		if err := a.Put(ctx, d, path); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	ds, err := b.List(ctx)
	if err != nil || len(ds) != 1 || ds[0] != d {
		t.Fatalf("List = %v, %v; want [%s]", ds, err, d)
	}
	r, err := b.Open(ctx, d)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != string(data) {
		t.Fatalf("read %q, %v; want %q", got, err, data)
	}
}
