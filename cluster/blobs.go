package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/job"
)

// BlobBucket is the JetStream object store that holds the pool's files
// (job programs and inputs, canonical manifests) by SHA-256.
const BlobBucket = "idlepool_blobs"

// Blobs mirrors the pool's files to every node through the JetStream
// object store idlepool_blobs (replicated like the pool's state), so the
// node that takes over scheduling finds every job's files. It implements
// coord.BlobMirror. Files are named by their SHA-256 in hex; the object
// store also checks its own digest of each file on read.
type Blobs struct {
	obs jetstream.ObjectStore
}

// OpenBlobs creates (or opens) the object store with replicas replicas.
func OpenBlobs(ctx context.Context, js jetstream.JetStream, replicas int) (*Blobs, error) {
	obs, err := openObjectStore(ctx, js, jetstream.ObjectStoreConfig{Bucket: BlobBucket,
		Description: "idlepool: the pool's files by SHA-256", Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: file store: %w", unavailable(err))
	}
	return &Blobs{obs: obs}, nil
}

// Put stores the file at path under d unless it is stored already; it
// returns once JetStream acknowledged every chunk (replicated).
func (b *Blobs) Put(ctx context.Context, d job.Digest, path string) error {
	if _, err := b.obs.GetInfo(ctx, d.String()); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("cluster: file %s: %w", d, unavailable(err))
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := b.obs.Put(ctx, jetstream.ObjectMeta{Name: d.String()}, f); err != nil {
		return fmt.Errorf("cluster: store file %s: %w", d, unavailable(err))
	}
	return nil
}

// List returns the digests of the stored files. It waits at most
// listTimeout for the listing (then wraps pool.ErrStoreUnavailable).
func (b *Blobs) List(ctx context.Context) ([]job.Digest, error) {
	infos, err := listObjects(ctx, b.obs)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: list files: %w", unavailable(err))
	}
	var out []job.Digest
	for _, in := range infos {
		if in.Deleted {
			continue
		}
		d, err := job.ParseDigest(in.Name)
		if err != nil {
			return nil, fmt.Errorf("cluster: file store holds %q, not a SHA-256: %w", in.Name, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// Open returns the stored file with digest d; the reader fails at its
// end if the bytes do not match the object store's digest.
func (b *Blobs) Open(ctx context.Context, d job.Digest) (io.ReadCloser, error) {
	r, err := b.obs.Get(ctx, d.String())
	if err != nil {
		return nil, fmt.Errorf("cluster: file %s: %w", d, unavailable(err))
	}
	return r, nil
}
