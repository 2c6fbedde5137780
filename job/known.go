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
	known, err := parseKnownAnswers(b, j.numTasks, j.Manifest.Verify, true)
	if err != nil {
		return j.Manifest.fail("verify.known_answers", "%s: %v", ref.Path, err)
	}
	j.KnownAnswers, j.known = ref, known
	return nil
}

// knownAnswer is one task's known answer: the digest of its result, or,
// for a job whose results are compared within tolerances, the result
// itself.
type knownAnswer struct {
	digest Digest
	result []byte // the expected result, one JSON object; nil for a digest
}

// parseKnownAnswers reads a known-answers file: one JSON object mapping
// a task index (a decimal string, 0..tasks-1) to the SHA-256 of that
// task's result (its standard output) as 64 hex digits, the digest
// `sha256sum` prints for the output of `idlepool run`'s task; or, when
// the job compares results within tolerances (v's rule "tolerance"), to
// the task's result itself, one JSON object, with which a returned result
// is compared by the job's rule (Verify.Agree). Under that rule a digest
// cannot say whether other bytes are within the tolerances: strict (a job
// being planned) refuses it; otherwise (a job a pool stored before) it is
// kept, and only equal bytes pass it (CheckKnown). An empty object is
// refused: it checks nothing.
func parseKnownAnswers(b []byte, tasks int64, v Verify, strict bool) (map[int64]knownAnswer, error) {
	if len(b) > maxKnownAnswersBytes {
		return nil, fmt.Errorf("%d bytes, more than the %d a known-answers file may have", len(b), maxKnownAnswersBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("want a JSON object such as {\"17\": \"<SHA-256 of task 17's output, 64 hex digits>\"}: %v", err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("no answers: name at least one task whose result digest you know")
	}
	out := make(map[int64]knownAnswer, len(raw))
	for k, val := range raw {
		i, err := strconv.ParseInt(k, 10, 64)
		if err != nil || i < 0 || i >= tasks || strconv.FormatInt(i, 10) != k {
			return nil, fmt.Errorf("key %q: want a task index from 0 to %d written in decimal", k, tasks-1)
		}
		a, err := parseKnownAnswer(i, val, v, strict)
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}

// parseKnownAnswer reads task i's answer (see parseKnownAnswers).
func parseKnownAnswer(i int64, val json.RawMessage, v Verify, strict bool) (knownAnswer, error) {
	tolerant := v.tolerant()
	if t := bytes.TrimSpace(val); len(t) > 0 && t[0] == '{' {
		if !tolerant {
			return knownAnswer{}, fmt.Errorf("task %d: a result written out is compared within tolerances, which this job does not declare ([verify] rule = \"tolerance\"): give the SHA-256 of its output as 64 hex digits", i)
		}
		if _, err := decodeResult(t); err != nil {
			return knownAnswer{}, fmt.Errorf("task %d: want its result, one JSON object: %v", i, err)
		}
		return knownAnswer{result: bytes.Clone(t)}, nil
	}
	var s string
	if err := json.Unmarshal(val, &s); err != nil {
		return knownAnswer{}, fmt.Errorf("task %d: want the SHA-256 of its result as 64 hex digits in a string: %v", i, err)
	}
	d, err := ParseDigest(s)
	if err != nil {
		return knownAnswer{}, fmt.Errorf("task %d: want the SHA-256 of its result as 64 hex digits: %w", i, err)
	}
	if tolerant && strict {
		return knownAnswer{}, fmt.Errorf("task %d: the job compares results within tolerances ([verify] rule = \"tolerance\"), and a digest cannot say whether other bytes are within them: give the task's result itself, such as {\"%d\": {\"price\": 10.4506}}", i, i)
	}
	return knownAnswer{digest: d}, nil
}

// LoadKnownAnswers reads known answers for the job from path, the file
// with digest d (where the coordinator keeps it by digest), checking the
// digest and the answers against the job's tasks. Only the coordinator
// calls it: peers never see the answers, and a job's encoding does not
// name them, so they cannot tell a task with a known answer from any
// other. A digest answer of a job with a tolerance rule, which planning
// refuses, is kept here (a pool may hold such a job from before): it
// passes equal bytes only and judges no other (CheckKnown). Errors wrap
// ErrManifest.
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
	known, err := parseKnownAnswers(b, j.numTasks, j.Manifest.Verify, false)
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

// KnownAnswer returns the result digest the submitter knows for task i;
// false when it knows none, or knows the result itself (a job with a
// tolerance rule: see CheckKnown).
func (j *Job) KnownAnswer(i int64) (Digest, bool) {
	a, ok := j.known[i]
	return a.digest, ok && a.result == nil
}

// Knows reports whether the submitter knows task i's answer.
func (j *Job) Knows(i int64) bool {
	_, ok := j.known[i]
	return ok
}

// KnownVerdict is what a known answer says of a returned result.
type KnownVerdict int

// Verdicts of CheckKnown.
const (
	KnownNone  KnownVerdict = iota // no answer for the task, or one that cannot judge these bytes
	KnownRight                     // the result agrees with the answer
	KnownWrong                     // the result does not
)

// CheckKnown compares a returned result of task i (its digest, the
// SHA-256 of result, and its bytes) with the task's known answer by the
// job's own rule: a digest answer passes equal digests only; a result
// answer (rule "tolerance") passes a result within the job's tolerances
// of it (Verify.Agree), so that an honest device whose floating point
// differs within them is not marked wrong. A digest answer of a job with
// a tolerance rule (kept from before, see LoadKnownAnswers) cannot judge
// other bytes: KnownNone. A failure (nil result, its own digest) is
// wrong against any answer.
func (j *Job) CheckKnown(i int64, digest Digest, result []byte) KnownVerdict {
	a, ok := j.known[i]
	switch {
	case !ok:
		return KnownNone
	case a.result != nil:
		if j.Manifest.Verify.Agree(a.result, result) {
			return KnownRight
		}
		return KnownWrong
	case a.digest == digest:
		return KnownRight
	case j.Manifest.Verify.tolerant():
		return KnownNone
	}
	return KnownWrong
}
