package pool

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"idlepool/job"
	"idlepool/worker"
)

// The functions in this file prepare and run one task of a job on an
// Executor. A solo run and a pool's donor agent share them, so that a task
// gives the same bytes, and fails with the same reason, wherever it runs:
// verification by redundancy compares exactly those bytes.

// PrepareInputs snapshots j's program and named inputs under dir, checking
// every digest: the program at dir/program.wasm and the inputs in
// dir/input (which tasks see, read-only, at job.InputMount), with an empty
// chunks directory for WriteChunk. A file already there with the right
// digest is kept, so preparing again is cheap. It returns the program's
// path and the input directory. A file that no longer matches its digest
// is an error wrapping ErrInputChanged.
func PrepareInputs(j *job.Job, dir string) (program, inputDir string, err error) {
	return PrepareStoredInputs(j, dir, "")
}

// PrepareStoredInputs is PrepareInputs with an input store
// (SoloConfig.InputStore; "" for none): a file the store has already is
// linked, not copied, and a file copied is linked into the store.
func PrepareStoredInputs(j *job.Job, dir, store string) (program, inputDir string, err error) {
	inputDir = filepath.Join(dir, "input")
	if err := os.MkdirAll(filepath.Join(inputDir, "chunks"), 0o700); err != nil {
		return "", "", fmt.Errorf("prepare inputs: %w", err)
	}
	program, err = snapshotInputs(j, dir, inputDir, store)
	if err != nil {
		return "", "", err
	}
	return program, inputDir, nil
}

// WriteChunk cuts chunk c out of j's split input (read from its InputRef
// path) into inputDir/chunks, named by its digest, and returns the file's
// path; the caller removes it when the task is done. A chunk whose bytes
// no longer match its digest is an error wrapping ErrInputChanged.
func WriteChunk(j *job.Job, inputDir string, c job.Chunk) (string, error) {
	src := j.Inputs[j.Manifest.Split.Input]
	f, err := os.Open(src.Path)
	if err != nil {
		return "", fmt.Errorf("read input: %w", err)
	}
	defer f.Close()
	buf := make([]byte, c.Length)
	if _, err := f.ReadAt(buf, c.Offset); err != nil {
		return "", fmt.Errorf("%w: %s: chunk at byte %d: %v", ErrInputChanged, src.Path, c.Offset, err)
	}
	if sha256.Sum256(buf) != c.SHA256 {
		return "", fmt.Errorf("%w: %s (chunk at byte %d); run the job again to plan it anew", ErrInputChanged, src.Path, c.Offset)
	}
	path := filepath.Join(inputDir, "chunks", c.SHA256.String())
	if err := os.WriteFile(path, buf, 0o400); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("write chunk: %w", err)
	}
	return path, nil
}

// TaskRequest returns the worker request that runs task t of j with the
// program and input directory from PrepareInputs: the task's JSON on
// stdin, its seed, and the job's memory, time and stdout limits.
func TaskRequest(j *job.Job, t job.Task, program, inputDir string) worker.Request {
	p := j.Manifest.Policy
	return worker.Request{
		ModulePath:     program,
		ModuleSHA256:   j.Program.SHA256.String(),
		InputDir:       inputDir,
		Stdin:          j.TaskJSON(t),
		Seed:           t.Seed,
		MemoryLimitMiB: p.MemoryMiB,
		Timeout:        p.TimeLimit.Duration,
		MaxStdoutBytes: p.StdoutMiB << 20,
	}
}

// TaskOutcome is what one execution of a task gave: StatusOK with the
// program's result (one JSON value) in Body, or StatusFailed with the
// reason in Body. Kind is the worker's failure kind ("" on success, for a
// malformed result or a setup error); Class is the failure's class ("" on
// success): a ClassMachine failure is not the task's outcome and must be
// run again, on this machine later or on another one. PID is the worker
// process that ran it. Work is what the worker counted of the work the
// task took (worker.Result.Work, by worker.MeterRule): part of the
// outcome replicas agree on (Submission.Work); meaningless for a
// machine-dependent failure.
type TaskOutcome struct {
	Status byte
	Body   []byte
	Kind   worker.FailureKind
	Class  worker.FailureClass
	PID    int
	Work   uint64
}

// Submission returns what an agent sends for o (not a machine-dependent
// failure): its result or its failure, with its digest and its work.
func (o TaskOutcome) Submission() Submission {
	s := Submission{Work: &Work{Rule: worker.MeterRule, Count: o.Work}}
	if o.Status == StatusOK {
		s.Result, s.Digest = o.Body, ReplicaDigest(o.Body, false, "")
	} else {
		s.Failed, s.Reason = true, string(o.Body)
		s.Digest = ReplicaDigest(nil, true, s.Reason)
	}
	return s
}

// MachineDependent reports whether o is a failure that depends on the
// machine that ran the task (a timeout, a dead worker, a setup error), so
// that the task must be run again rather than reported as failed.
func (o TaskOutcome) MachineDependent() bool { return o.Class == worker.ClassMachine }

// Cause names a machine-dependent failure for people, in a few words:
// "timed out", "lost its worker process", "could not be set up". It is ""
// for other outcomes.
func (o TaskOutcome) Cause() string {
	if !o.MachineDependent() {
		return ""
	}
	return causeOf(o.Kind)
}

func causeOf(k worker.FailureKind) string {
	switch k {
	case worker.FailureTimeout:
		return machineCauses[0].cause
	case worker.FailureWorkerDied:
		return machineCauses[1].cause
	case "":
		return machineCauses[2].cause
	}
	return "did not finish"
}

// machineCauses are the starts of the reasons RunTask writes for
// machine-dependent failures, now and in earlier versions, and their
// causes in a few words.
var machineCauses = []struct{ prefix, cause string }{
	{"worker: task failed: " + string(worker.FailureTimeout) + ": ", causeTimedOut},
	{"worker: task failed: " + string(worker.FailureWorkerDied) + ": ", "lost its worker process"},
	{"worker: task setup failed", "could not be set up"},
}

// causeTimedOut is the cause of a timeout, as reasonCause names it.
const causeTimedOut = "timed out"

// reasonCause names the cause of a machine-dependent failure from its
// reason, in a few words; "" when reason names none (MachineReason).
func reasonCause(reason string) string {
	for _, c := range machineCauses {
		if strings.HasPrefix(reason, c.prefix) {
			return c.cause
		}
	}
	return ""
}

// MachineReason reports whether reason, a failure reason written by
// RunTask, names a machine-dependent failure. It classifies reasons whose
// class was not recorded with them: journals written before failures were
// classified, and submissions of agents that do not send the class. A
// program cannot write such a reason: its log comes after the worker's.
func MachineReason(reason string) bool { return reasonCause(reason) != "" }

// RunTask runs req on exec, retrying (up to twice) when the worker process
// died under the task for a reason outside it. A task that ran and failed
// is a TaskOutcome with StatusFailed, whose reason is the worker's failure
// on its first line and, after it, the end of the program's log: its last
// lines and, for a Go panic, the panic and the failing goroutine's frames,
// in at most MaxReasonBytes; its Class is the failure kind's
// (worker.FailureKind.Class); stdout that is not JSON is a
// deterministic failure too ("malformed result"), and a worker that could
// not set the task up (worker.ErrSetup) a machine-dependent one. The error
// is non-nil only when the task could not be run (ctx cancelled, no worker
// process could start).
func RunTask(ctx context.Context, exec Executor, req worker.Request, log *slog.Logger) (TaskOutcome, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for try := 0; ; try++ {
		res, err := exec.Run(ctx, req)
		if errors.Is(err, worker.ErrSetup) && ctx.Err() == nil {
			return TaskOutcome{Status: StatusFailed, Body: []byte(clipBytes(strings.ToValidUTF8(err.Error(), "\uFFFD"), MaxReasonBytes)), Class: worker.ClassMachine, PID: res.PID}, nil
		}
		if err != nil {
			return TaskOutcome{}, err
		}
		if res.Failure == nil {
			if !json.Valid(res.Stdout) {
				return TaskOutcome{Status: StatusFailed, Body: []byte("malformed result: stdout is not one JSON object: " + excerpt(res.Stdout)),
					Class: worker.ClassDeterministic, PID: res.PID, Work: res.Work}, nil
			}
			return TaskOutcome{Status: StatusOK, Body: res.Stdout, PID: res.PID, Work: res.Work}, nil
		}
		if res.Failure.Kind == worker.FailureWorkerDied && try < maxRetries {
			log.Warn("Worker died, retrying task", "reason", res.Failure.Message)
			continue
		}
		if res.Failure.Trace != "" {
			// The engine's own words and the program's stack: for the
			// program's author, not part of the outcome.
			log.Info("Task trapped", "trap", res.Failure.Message, "trace", res.Failure.Trace)
		}
		reason := res.Failure.Error()
		switch res.Failure.Kind {
		case worker.FailureTimeout:
			reason += " (raise policy.time_limit if the task needs longer)"
		case worker.FailureOutOfMemory:
			reason += memoryHint(req.MemoryLimitMiB)
		case worker.FailureOutputTooLarge:
			reason += stdoutHint(req.MaxStdoutBytes)
		}
		goPanic := res.Failure.Kind == worker.FailureTrap || res.Failure.Kind == worker.FailureOutOfMemory
		reason = failureReason(reason, res.Stderr, goPanic)
		return TaskOutcome{Status: StatusFailed, Body: []byte(reason), Kind: res.Failure.Kind, Class: res.Failure.Kind.Class(), PID: res.PID, Work: res.Work}, nil
	}
}

// memoryHint names the setting behind an out-of-memory failure under a
// limit of limitMiB (0: the worker's default), or says that none can help.
func memoryHint(limitMiB int) string {
	limitMiB = cmp.Or(limitMiB, worker.DefaultMemoryLimitMiB)
	if limitMiB >= job.MaxMemoryMiB {
		return fmt.Sprintf(" (the task needs more than %d MiB of memory, the most a WebAssembly module can address: make it use less)", limitMiB)
	}
	return fmt.Sprintf(" (the task needs more than its %d MiB of memory; raise policy.memory_mib, at most %d)", limitMiB, job.MaxMemoryMiB)
}

// stdoutHint names the setting behind a result over the stdout limit of
// maxBytes (0: the worker's default), or says that none can help.
func stdoutHint(maxBytes int) string {
	maxBytes = cmp.Or(maxBytes, worker.DefaultMaxStdoutBytes)
	limit := fmt.Sprintf("%d MiB", maxBytes>>20)
	if maxBytes%(1<<20) != 0 {
		limit = fmt.Sprintf("%d-byte", maxBytes)
	}
	if maxBytes >= job.MaxStdoutMiB<<20 {
		return fmt.Sprintf(" (the result is larger than the %s stdout limit, the most a pool accepts: make each task's result smaller, e.g. by cutting the job into more tasks)", limit)
	}
	return fmt.Sprintf(" (the result is larger than the %s stdout limit; raise policy.stdout_mib, at most %d)", limit, job.MaxStdoutMiB)
}

// excerpt quotes the start of a program's output for a failure reason.
func excerpt(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "it was empty"
	}
	if len(b) > 80 {
		return fmt.Sprintf("%q…", b[:80])
	}
	return fmt.Sprintf("%q", b)
}
