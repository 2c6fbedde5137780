package pool

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/job"
	"idlepool/worker"
)

// The manifest's ceilings are the ones every worker and every pool accept,
// so a job that passes the manifest check is never refused by a donor for
// its limits; a change to one side must change the other.
func TestLimitsAgree(t *testing.T) {
	checks := []struct {
		name      string
		got, want int
	}{
		{"job.DefaultStdoutMiB in bytes = worker.DefaultMaxStdoutBytes", job.DefaultStdoutMiB << 20, worker.DefaultMaxStdoutBytes},
		{"job.MaxStdoutMiB in bytes = worker.MaxStdoutLimitBytes", job.MaxStdoutMiB << 20, worker.MaxStdoutLimitBytes},
		{"job.MaxStdoutMiB in bytes = DefaultMaxResultBytes", job.MaxStdoutMiB << 20, DefaultMaxResultBytes},
		{"job.MaxStdoutMiB in bytes + 9 = the journal's maxRecord", job.MaxStdoutMiB<<20 + 9, maxRecord},
		{"job.MaxMemoryMiB = worker.MaxMemoryLimitMiB", job.MaxMemoryMiB, worker.MaxMemoryLimitMiB},
		{"job.DefaultMemoryMiB = worker.DefaultMemoryLimitMiB", job.DefaultMemoryMiB, worker.DefaultMemoryLimitMiB},
		{"job.MaxProgramBytes = worker.MaxModuleBytes", job.MaxProgramBytes, worker.MaxModuleBytes},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %d != %d", c.name, c.got, c.want)
		}
	}
}

func limitsJob(t *testing.T, policy string) *job.Job {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := "name = \"l\"\nprogram = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 1\n[[merge]]\nrule = \"sum\"\nfield = \"v\"\n[policy]\n" + policy + "\n"
	m, err := job.ParseManifest("job.toml", dir, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// A task runs under the limits its manifest sets, solo and on donors alike.
func TestTaskRequestLimits(t *testing.T) {
	j := limitsJob(t, "memory_mib = 512\ntime_limit = \"90s\"\nstdout_mib = 40")
	req := TaskRequest(j, j.Task(0), "p.wasm", "")
	got := [3]int{req.MemoryLimitMiB, int(req.Timeout / time.Second), req.MaxStdoutBytes}
	if want := [3]int{512, 90, 40 << 20}; got != want {
		t.Errorf("(memory MiB, timeout s, stdout bytes) = %v, want %v", got, want)
	}
	j = limitsJob(t, "")
	if got, want := TaskRequest(j, j.Task(0), "p.wasm", "").MaxStdoutBytes, worker.DefaultMaxStdoutBytes; got != want {
		t.Errorf("MaxStdoutBytes without stdout_mib = %d, want %d", got, want)
	}
}

// failingExec fails every task with one failure.
type failingExec struct{ f worker.Failure }

func (e failingExec) Run(context.Context, worker.Request) (worker.Result, error) {
	f := e.f
	return worker.Result{Failure: &f, PID: 1}, nil
}

// A failure caused by a limit names the manifest setting that raises it,
// or says that none can when the limit is already at its ceiling.
func TestRunTaskLimitHints(t *testing.T) {
	tests := []struct {
		name    string
		req     worker.Request
		kind    worker.FailureKind
		want    string
		notWant string
	}{
		{"stdout default", worker.Request{}, worker.FailureOutputTooLarge,
			"larger than the 16 MiB stdout limit; raise policy.stdout_mib, at most 64", ""},
		{"stdout raised", worker.Request{MaxStdoutBytes: 32 << 20}, worker.FailureOutputTooLarge,
			"larger than the 32 MiB stdout limit; raise policy.stdout_mib", ""},
		{"stdout at the ceiling", worker.Request{MaxStdoutBytes: 64 << 20}, worker.FailureOutputTooLarge,
			"larger than the 64 MiB stdout limit, the most a pool accepts", "raise"},
		{"memory", worker.Request{MemoryLimitMiB: 256}, worker.FailureOutOfMemory,
			"more than its 256 MiB of memory; raise policy.memory_mib, at most 4096", ""},
		{"memory at the ceiling", worker.Request{MemoryLimitMiB: 4096}, worker.FailureOutOfMemory,
			"more than 4096 MiB of memory, the most a WebAssembly module can address", "raise"},
		{"time", worker.Request{}, worker.FailureTimeout, "raise policy.time_limit", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := RunTask(context.Background(), failingExec{worker.Failure{Kind: tc.kind, Message: "m"}}, tc.req, nil)
			if err != nil {
				t.Fatal(err)
			}
			reason := string(out.Body)
			if out.Status != StatusFailed || !strings.Contains(reason, tc.want) || (tc.notWant != "" && strings.Contains(reason, tc.notWant)) {
				t.Errorf("reason %q, want one containing %q (and not %q)", reason, tc.want, tc.notWant)
			}
		})
	}
}
