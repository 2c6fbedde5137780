package job

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
)

// maxKnownAnswersBytes bounds a known-answers file.
const maxKnownAnswersBytes = 64 << 20

// planKnownAnswers reads, hashes and checks the [verify] known_answers
// file when the manifest names one. The answers are not part of the job's
// encoding: its ID and its tasks' seeds are the same with or without
// them, so the submitter learns an answer by running that task of this
// very job (idlepool run).
func (j *Job) planKnownAnswers() error {
	path := j.Manifest.Verify.KnownAnswers
	if path == "" {
		return nil
	}
	ref, err := hashFile(j.Manifest, "verify.known_answers", path)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(ref.Path)
	if err != nil {
		return j.Manifest.fail("verify.known_answers", "read %s: %v", ref.Path, err)
	}
	known, err := parseKnownAnswers(b, j.numTasks)
	if err != nil {
		return j.Manifest.fail("verify.known_answers", "%s: %v", ref.Path, err)
	}
	j.KnownAnswers, j.known = ref, known
	return nil
}

// parseKnownAnswers reads a known-answers file: one JSON object mapping
// a task index (a decimal string, 0..tasks-1) to the SHA-256 of that
// task's result (its standard output) as 64 hex digits, the digest
// `sha256sum` prints for the output of `idlepool run`'s task. An empty
// object is refused: it checks nothing.
func parseKnownAnswers(b []byte, tasks int64) (map[int64]Digest, error) {
	if len(b) > maxKnownAnswersBytes {
		return nil, fmt.Errorf("%d bytes, more than the %d a known-answers file may have", len(b), maxKnownAnswersBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var raw map[string]string
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("want a JSON object such as {\"17\": \"<SHA-256 of task 17's output, 64 hex digits>\"}: %v", err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("no answers: name at least one task whose result digest you know")
	}
	out := make(map[int64]Digest, len(raw))
	for k, v := range raw {
		i, err := strconv.ParseInt(k, 10, 64)
		if err != nil || i < 0 || i >= tasks || strconv.FormatInt(i, 10) != k {
			return nil, fmt.Errorf("key %q: want a task index from 0 to %d written in decimal", k, tasks-1)
		}
		d, err := ParseDigest(v)
		if err != nil {
			return nil, fmt.Errorf("task %d: want the SHA-256 of its result as 64 hex digits: %w", i, err)
		}
		out[i] = d
	}
	return out, nil
}

// LoadKnownAnswers reads known answers for the job from path, the file
// with digest d (where the coordinator keeps it by digest), checking the
// digest and the answers against the job's tasks. Only the coordinator
// calls it: peers never see the answers, and a job's encoding does not
// name them, so they cannot tell a task with a known answer from any
// other. Errors wrap ErrManifest.
func (j *Job) LoadKnownAnswers(path string, d Digest) error {
	bad := func(format string, args ...any) error {
		return &ManifestError{File: "known answers", Field: "verify.known_answers", Msg: fmt.Sprintf(format, args...)}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return bad("%v", err)
	}
	if len(b) > maxKnownAnswersBytes {
		return bad("%d bytes, more than the %d a known-answers file may have", len(b), maxKnownAnswersBytes)
	}
	if Digest(sha256.Sum256(b)) != d {
		return bad("%s does not match its digest %s", path, d)
	}
	known, err := parseKnownAnswers(b, j.numTasks)
	if err != nil {
		return bad("%v", err)
	}
	j.KnownAnswers, j.known = InputRef{Path: path, Size: int64(len(b)), SHA256: d}, known
	return nil
}

// HasKnownAnswers reports whether known answers are loaded for the job
// (Plan from a manifest with [verify] known_answers, or
// LoadKnownAnswers).
func (j *Job) HasKnownAnswers() bool { return j.known != nil }

// KnownAnswer returns the result digest the submitter knows for task i.
func (j *Job) KnownAnswer(i int64) (Digest, bool) {
	d, ok := j.known[i]
	return d, ok
}
