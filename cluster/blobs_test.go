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
	a := untilOpen(t, "OpenBlobs on node 0", func(ctx context.Context) (*Blobs, error) { return OpenBlobs(ctx, nodes[0].JetStream(), 3) })
	b := untilOpen(t, "OpenBlobs on node 2", func(ctx context.Context) (*Blobs, error) { return OpenBlobs(ctx, nodes[2].JetStream(), 3) })
	// The bound on the requests below starts once the buckets are open
	// (a fresh cluster on a busy machine may take a while: untilOpen).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
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
	// Node 2 reads through its own replica of the bucket (JetStream's
	// direct get: the listing starts with one, and so does Open), which
	// applies the put a moment after node 0's was answered: on a busy
	// machine that moment can outlast the first read, which then finds
	// no file. A read that finds none is tried again, bounded, never
	// timed.
	var ds []job.Digest
	var err error
	patience(t, 2*time.Minute, "node 2 to list the file put on node 0", func() bool {
		ds, err = b.List(ctx)
		if err != nil || len(ds) == 0 {
			t.Logf("List via node 2 = %v, %v; want [%s]", ds, err, d)
			return false
		}
		return true
	})
	if len(ds) != 1 || ds[0] != d {
		t.Fatalf("List = %v; want [%s]", ds, d)
	}
	var r io.ReadCloser
	patience(t, 2*time.Minute, "node 2 to open the file put on node 0", func() bool {
		r, err = b.Open(ctx, d)
		if err != nil {
			t.Logf("Open via node 2: %v", err)
			return false
		}
		return true
	})
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != string(data) {
		t.Fatalf("read %q, %v; want %q", got, err, data)
	}
}
