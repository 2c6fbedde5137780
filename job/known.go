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
// file when the manifest names one, or keeps the digest a canonical
// encoding named (the file itself is loaded later, by the coordinator
// only: LoadKnownAnswers). Either way the digest enters the job's
// canonical encoding, so the answers are part of the job's ID.
func (j *Job) planKnownAnswers() error {
	v := &j.Manifest.Verify
	switch {
	case v.KnownAnswers != "":
		ref, err := hashFile(j.Manifest, "verify.known_answers", v.KnownAnswers)
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
		v.KnownAnswersSHA256 = ref.SHA256
	case v.KnownAnswersSHA256 != Digest{}:
		j.KnownAnswers = InputRef{SHA256: v.KnownAnswersSHA256}
	}
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

// LoadKnownAnswers reads the job's known-answers file from path (where
// the coordinator keeps it by digest), checking it against the digest in
// the job's encoding. A job rebuilt from its canonical encoding
// (FromCanonical) knows only that digest: peers never fetch the file, so
// they cannot tell a task with a known answer from any other; only the
// coordinator calls this. Nil for a job without known answers. Errors
// wrap ErrManifest.
func (j *Job) LoadKnownAnswers(path string) error {
	if !j.HasKnownAnswers() || j.known != nil {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return &ManifestError{File: "canonical job", Field: "verify.known_answers", Msg: err.Error()}
	}
	if Digest(sha256.Sum256(b)) != j.KnownAnswers.SHA256 {
		return &ManifestError{File: "canonical job", Field: "verify.known_answers",
			Msg: fmt.Sprintf("%s does not match the digest %s the job names", path, j.KnownAnswers.SHA256)}
	}
	known, err := parseKnownAnswers(b, j.numTasks)
	if err != nil {
		return &ManifestError{File: "canonical job", Field: "verify.known_answers", Msg: err.Error()}
	}
	j.KnownAnswers.Path, j.KnownAnswers.Size, j.known = path, int64(len(b)), known
	return nil
}

// HasKnownAnswers reports whether the job names a known-answers file
// ([verify] known_answers), loaded or not.
func (j *Job) HasKnownAnswers() bool { return j.KnownAnswers.SHA256 != Digest{} }

// KnownAnswer returns the result digest the submitter knows for task i,
// once the known answers are loaded (Plan from a manifest, or
// LoadKnownAnswers).
func (j *Job) KnownAnswer(i int64) (Digest, bool) {
	d, ok := j.known[i]
	return d, ok
}

// KnownAnswersLoaded reports whether the known answers are in memory.
func (j *Job) KnownAnswersLoaded() bool { return j.known != nil }

// KnownAnswersOf returns the digest of the known-answers file a canonical
// encoding names, if it names one, without needing any file (so that a
// pool can ask for every missing file at once).
func KnownAnswersOf(canonical []byte) (Digest, bool) {
	var doc map[string]any
	if canonicalDecMode.Unmarshal(canonical, &doc) != nil {
		return Digest{}, false
	}
	t, _ := doc["verify"].(map[string]any)
	s, _ := t["known_answers"].(string)
	d, err := ParseDigest(s)
	return d, err == nil
}
