package job_test

import (
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idlepool/job"
)

// knownDir writes a program and, when answers is not "", answers.json
// into a temporary directory.
func knownDir(t *testing.T, answers string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	if answers != "" {
		if err := os.WriteFile(filepath.Join(dir, "answers.json"), []byte(answers), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const knownBase = "name = \"k\"\nprogram = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 4\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n"

func plan(t *testing.T, dir, text string) (*job.Job, error) {
	t.Helper()
	m, err := job.ParseManifest("k.toml", dir, []byte(text))
	if err != nil {
		return nil, err
	}
	return job.Plan(m)
}

// TestKnownAnswers: [verify] known_answers maps task indexes to result
// digests. The answers are not part of the job: its ID (and so every
// task's seed) is the one it has without them, so the submitter learns
// an answer by running that task of this very job; its encoding names no
// answer and no file of them; a job rebuilt from its encoding has none
// until LoadKnownAnswers reads the file, which must match its digest.
func TestKnownAnswers(t *testing.T) {
	right := sha256.Sum256([]byte(`{"x":1}`))
	answers := `{"2": "` + job.Digest(right).String() + `"}`
	dir := knownDir(t, answers)
	j, err := plan(t, dir, knownBase+"[verify]\nknown_answers = \"answers.json\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := j.KnownAnswer(2); !ok || d != right {
		t.Errorf("KnownAnswer(2) = %s, %v; want %s", d, ok, job.Digest(right))
	}
	if _, ok := j.KnownAnswer(1); ok {
		t.Errorf("task 1 has a known answer; the file names only task 2")
	}
	digest := job.Digest(sha256.Sum256([]byte(answers)))
	if j.KnownAnswers.SHA256 != digest {
		t.Errorf("KnownAnswers digest %s is not the file's", j.KnownAnswers.SHA256)
	}
	plain, err := plan(t, dir, knownBase)
	if err != nil {
		t.Fatal(err)
	}
	if plain.ID != j.ID || plain.HasKnownAnswers() {
		t.Errorf("the job's ID changed with its known answers (%s, %s), or a job without them has some", plain.ID, j.ID)
	}
	for _, leak := range []string{job.Digest(right).String(), digest.String(), "known"} {
		if strings.Contains(string(j.Canonical), leak) {
			t.Errorf("the canonical encoding, which peers read, carries %q", leak)
		}
	}

	// Rebuilt as a peer or the coordinator does: never asked for the file.
	blobs := map[job.Digest]string{j.Program.SHA256: j.Program.Path}
	r, err := job.FromCanonical(j.Canonical, func(d job.Digest) string {
		p, ok := blobs[d]
		if !ok {
			t.Errorf("FromCanonical asked for file %s", d)
		}
		return p
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != j.ID || r.HasKnownAnswers() {
		t.Fatalf("rebuilt: ID %s (want %s), has answers %v", r.ID, j.ID, r.HasKnownAnswers())
	}
	other := filepath.Join(t.TempDir(), "other.json")
	os.WriteFile(other, []byte(`{"1": "`+job.Digest(right).String()+`"}`), 0o600)
	if err := r.LoadKnownAnswers(other, digest); !errors.Is(err, job.ErrManifest) {
		t.Errorf("LoadKnownAnswers of another file: %v, want ErrManifest", err)
	}
	past := filepath.Join(t.TempDir(), "past.json")
	pastBody := []byte(`{"4": "` + job.Digest(right).String() + `"}`)
	os.WriteFile(past, pastBody, 0o600)
	if err := r.LoadKnownAnswers(past, sha256.Sum256(pastBody)); !errors.Is(err, job.ErrManifest) {
		t.Errorf("LoadKnownAnswers naming task 4 of 4: %v, want ErrManifest", err)
	}
	if err := r.LoadKnownAnswers(filepath.Join(dir, "answers.json"), digest); err != nil {
		t.Fatal(err)
	}
	if d, ok := r.KnownAnswer(2); !ok || d != right {
		t.Errorf("after LoadKnownAnswers: %s, %v", d, ok)
	}
}

// TestKnownAnswersBad: a file that names no task, a task past the end, a
// key that is no index, or a value that is no digest is refused naming
// verify.known_answers.
func TestKnownAnswersBad(t *testing.T) {
	d := strings.Repeat("ab", 32)
	for _, tc := range []struct{ name, file string }{
		{"missing", ""},
		{"empty", `{}`},
		{"not an object", `["` + d + `"]`},
		{"past the last task", `{"4": "` + d + `"}`},
		{"negative", `{"-1": "` + d + `"}`},
		{"not decimal", `{"02": "` + d + `"}`},
		{"not a digest", `{"1": "abc"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plan(t, knownDir(t, tc.file), knownBase+"[verify]\nknown_answers = \"answers.json\"\n")
			var me *job.ManifestError
			if !errors.As(err, &me) || me.Field != "verify.known_answers" {
				t.Fatalf("error %v, want one naming verify.known_answers", err)
			}
		})
	}
}

// TestCheckKnownByRule: a known answer judges a result by the job's own
// rule: a digest by equal bytes; under rule = "tolerance" the task's
// result itself, within the declared tolerances. A result written out is
// refused for a job compared by digest, and a digest for one compared
// within tolerances (it could not judge other bytes), except when a pool
// loads such a file it stored before: then it passes equal bytes only and
// judges no other.
func TestCheckKnownByRule(t *testing.T) {
	const tol = "[verify]\nknown_answers = \"answers.json\"\nrule = \"tolerance\"\n[verify.tolerance]\nx = { abs = 1e-3 }\n"
	cpu := []byte(`{"x": 1.0000001, "n": 2}` + "\n")
	j, err := plan(t, knownDir(t, `{"1": {"x": 1.0000001, "n": 2}}`), knownBase+tol)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		task   int64
		result string
		want   job.KnownVerdict
	}{
		{"float32 within tolerance", 1, `{"x": 1, "n": 2}`, job.KnownRight},
		{"the same bytes", 1, string(cpu), job.KnownRight},
		{"outside tolerance", 1, `{"x": 1.01, "n": 2}`, job.KnownWrong},
		{"another exact field", 1, `{"x": 1, "n": 3}`, job.KnownWrong},
		{"a failure", 1, "", job.KnownWrong},
		{"no answer", 0, `{"x": 1, "n": 2}`, job.KnownNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b []byte
			if tc.result != "" {
				b = []byte(tc.result)
			}
			if got := j.CheckKnown(tc.task, sha256.Sum256(b), b); got != tc.want {
				t.Errorf("CheckKnown = %v, want %v", got, tc.want)
			}
		})
	}
	digest := job.Digest(sha256.Sum256(cpu)).String()
	if _, err := plan(t, knownDir(t, `{"1": {"x": 1}}`), knownBase+"[verify]\nknown_answers = \"answers.json\"\n"); err == nil || !strings.Contains(err.Error(), "give the SHA-256 of its output") {
		t.Errorf("a result answer for a digest job: %v", err)
	}
	dir := knownDir(t, `{"1": "`+digest+`"}`)
	if _, err := plan(t, dir, knownBase+tol); err == nil || !strings.Contains(err.Error(), "give the task's result itself") {
		t.Errorf("a digest answer under a tolerance rule: %v", err)
	}
	// A pool rebuilding a job it stored with such an answer keeps it.
	plain, err := plan(t, dir, knownBase+strings.Replace(tol, "known_answers = \"answers.json\"\n", "", 1))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "answers.json"))
	if err := plain.LoadKnownAnswers(filepath.Join(dir, "answers.json"), sha256.Sum256(b)); err != nil {
		t.Fatal(err)
	}
	if v := plain.CheckKnown(1, sha256.Sum256(cpu), cpu); v != job.KnownRight {
		t.Errorf("equal bytes against a stored digest answer: %v", v)
	}
	if v := plain.CheckKnown(1, sha256.Sum256([]byte(`{"x": 1, "n": 2}`)), []byte(`{"x": 1, "n": 2}`)); v != job.KnownNone {
		t.Errorf("other bytes against a stored digest answer under a tolerance: %v, want no verdict", v)
	}
}
