package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"idlepool/job"
	"idlepool/pool"
)

// FetchJob rebuilds job id of the pool c speaks to: it fetches the job's
// canonical encoding and every file it names by digest into dir (files
// already there are not fetched again; every download is checked against
// its digest), then rebuilds the job with job.FromCanonical, which checks
// that it hashes to id. dir is a cache: blobs/<digest> holds the files and
// jobs/<id>/canonical the encodings.
func FetchJob(ctx context.Context, c *Client, id job.ID, dir string) (*job.Job, error) {
	jobDir := filepath.Join(dir, "jobs", id.String())
	blobs := filepath.Join(dir, "blobs")
	for _, d := range []string{jobDir, blobs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("job cache: %w", err)
		}
	}
	canonPath := filepath.Join(jobDir, "canonical")
	canonical, err := os.ReadFile(canonPath)
	if err != nil || sha256.Sum256(canonical) != id {
		if canonical, err = c.Canonical(ctx, id); err != nil {
			return nil, fmt.Errorf("fetch job %s: %w", id, err)
		}
		if err := writeFileAtomic(canonPath, canonical); err != nil {
			return nil, fmt.Errorf("job cache: %w", err)
		}
	}
	blobPath := func(d job.Digest) string { return filepath.Join(blobs, d.String()) }
	// The first pass names the files; any that are missing are fetched
	// and the job is rebuilt again.
	var named []job.Digest
	j, err := job.FromCanonical(canonical, func(d job.Digest) string {
		named = append(named, d)
		return blobPath(d)
	})
	if err == nil {
		return j, nil
	}
	fetched := false
	for _, d := range named {
		if _, err := os.Stat(blobPath(d)); err == nil {
			continue
		}
		if err := c.FetchBlob(ctx, d, blobPath(d)); err != nil {
			return nil, fmt.Errorf("fetch file %s of job %s: %w", d, id, err)
		}
		fetched = true
	}
	if !fetched {
		return nil, fmt.Errorf("rebuild job %s: %w", id, err)
	}
	j, err = job.FromCanonical(canonical, blobPath)
	if err != nil {
		return nil, fmt.Errorf("rebuild job %s: %w", id, err)
	}
	return j, nil
}

func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err = errors.Join(err, tmp.Sync(), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// jobCache keeps the jobs an agent computes for: rebuilt once per process,
// their files fetched once per machine, their inputs prepared once for the
// sandbox. Safe for concurrent use; concurrent requests for one job share
// one fetch.
type jobCache struct {
	c   *Client
	dir string

	mu   sync.Mutex
	jobs map[job.ID]*cachedJob
}

// cachedJob is a job ready to run tasks of: ready is closed once j (with
// program and inputDir) or err is set.
type cachedJob struct {
	ready             chan struct{}
	j                 *job.Job
	program, inputDir string
	err               error
}

func newJobCache(c *Client, dir string) *jobCache {
	return &jobCache{c: c, dir: dir, jobs: map[job.ID]*cachedJob{}}
}

// get returns job id prepared to run. A failed preparation is forgotten,
// so the next call tries again.
func (jc *jobCache) get(ctx context.Context, id job.ID) (*cachedJob, error) {
	jc.mu.Lock()
	cj, ok := jc.jobs[id]
	if !ok {
		cj = &cachedJob{ready: make(chan struct{})}
		jc.jobs[id] = cj
	}
	jc.mu.Unlock()
	if !ok {
		cj.j, cj.err = FetchJob(ctx, jc.c, id, jc.dir)
		if cj.err == nil {
			cj.program, cj.inputDir, cj.err = pool.PrepareInputs(cj.j, filepath.Join(jc.dir, "jobs", id.String()))
		}
		if cj.err != nil {
			jc.mu.Lock()
			delete(jc.jobs, id)
			jc.mu.Unlock()
		}
		close(cj.ready)
	}
	select {
	case <-cj.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if cj.err != nil {
		return nil, cj.err
	}
	return cj, nil
}
