package agent

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"idlepool/job"
)

// FetchJob rebuilds job id of the pool c speaks to: it fetches the job's
// canonical encoding and every file it names by digest into dir (files
// already there are not fetched again; every download is checked against
// its digest), then rebuilds the job with job.FromCanonical, which checks
// that it hashes to id. dir is a cache (see Cache): blobs/<digest> holds
// the files, jobs/<id>/canonical the encodings and jobs/<id>/files the
// list of the files the job names and its pool, written before any file
// is fetched.
func FetchJob(ctx context.Context, c *Client, id job.ID, dir string) (*job.Job, error) {
	return fetchJob(ctx, c, id, dir, c.FetchBlob)
}

// fetchJob is FetchJob with each missing file fetched by fetch (into
// path, atomically, checked against d).
func fetchJob(ctx context.Context, c *Client, id job.ID, dir string, fetch func(ctx context.Context, d job.Digest, path string) error) (*job.Job, error) {
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
	files := jobFiles{Pool: c.URL()}
	for _, d := range named {
		files.Files = append(files.Files, d.String())
	}
	if err == nil {
		return j, writeJobFiles(jobDir, files, j)
	}
	// Listed before any file arrives, so that the cache never takes a
	// file being fetched for a job as one that no job names.
	if err := writeJobFiles(jobDir, files, nil); err != nil {
		return nil, err
	}
	fetched := false
	for _, d := range named {
		if _, err := os.Stat(blobPath(d)); err == nil {
			continue
		}
		if err := fetch(ctx, d, blobPath(d)); err != nil {
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
	return j, writeJobFiles(jobDir, files, j)
}

// writeJobFiles writes the files list of a cached job (jobFilesName in
// jobDir), with the names of its inputs once j is rebuilt.
func writeJobFiles(jobDir string, files jobFiles, j *job.Job) error {
	if j != nil {
		files.Inputs = map[string]string{}
		for name, ref := range j.Inputs {
			files.Inputs[name] = ref.SHA256.String()
		}
	}
	b, err := json.Marshal(files)
	if err != nil {
		return fmt.Errorf("job cache: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(jobDir, jobFilesName), b); err != nil {
		return fmt.Errorf("job cache: %w", err)
	}
	return nil
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
