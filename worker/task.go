package worker

import (
	"fmt"
	"time"
)

// Defaults and limits applied to a Request.
const (
	// DefaultMemoryLimitMiB is the linear memory cap used when
	// Request.MemoryLimitMiB is 0.
	DefaultMemoryLimitMiB = 256
	// MaxMemoryLimitMiB is the largest memory cap a 32-bit WebAssembly
	// module can have (65536 pages of 64 KiB).
	MaxMemoryLimitMiB = 4096
	// DefaultTimeout is the wall-clock limit used when Request.Timeout is 0.
	DefaultTimeout = 10 * time.Minute
	// DefaultMaxStdoutBytes is the stdout cap used when
	// Request.MaxStdoutBytes is 0.
	DefaultMaxStdoutBytes = 16 << 20
	// MaxStdoutLimitBytes is the largest Request.MaxStdoutBytes accepted.
	MaxStdoutLimitBytes = 64 << 20
	// DefaultMaxStderrBytes is the stderr cap used when
	// Request.MaxStderrBytes is 0.
	DefaultMaxStderrBytes = 64 << 10
	// MaxStderrLimitBytes is the largest Request.MaxStderrBytes accepted.
	MaxStderrLimitBytes = 1 << 20
	// MaxStdinBytes is the largest Request.Stdin accepted.
	MaxStdinBytes = 64 << 20
	// MaxModuleBytes is the largest module file a worker will load.
	MaxModuleBytes = 256 << 20
)

// InputMountPath is the guest path at which Request.InputDir is mounted.
const InputMountPath = "/input"

// ProgramName is the only argument (argv[0]) a task's program sees. It is a
// constant so that a task's output never depends on where the module file
// happens to lie.
const ProgramName = "program"

// Request is one task for Pool.Run: a WASI preview 1 module (a command or a
// reactor, reactor.go), its stdin and seed, and its limits. The zero value
// of each limit selects its default. A Request is not retained after Run
// returns.
type Request struct {
	// ModulePath is the host path of the .wasm file. A relative path is
	// resolved against the calling process's working directory.
	ModulePath string
	// ModuleSHA256 is the lowercase or uppercase hex SHA-256 of the module
	// file. The worker refuses a file that does not match (Failure kind
	// bad-module). Workers cache compiled modules by this hash, so a file
	// that is replaced under the same path is only read again once its hash
	// is new to the worker.
	ModuleSHA256 string
	// InputDir is a host directory mounted read-only at /input in the guest.
	// "" gives the guest no file system at all. Paths cannot leave the
	// directory, neither by ".." nor by symbolic links.
	InputDir string
	// Stdin is the task's JSON, at most MaxStdinBytes.
	Stdin []byte
	// Seed seeds the guest's random source (WASI random_get), a ChaCha8
	// stream from math/rand/v2.
	Seed [32]byte
	// MemoryLimitMiB caps the guest's linear memory, 1..MaxMemoryLimitMiB;
	// 0 means DefaultMemoryLimitMiB.
	MemoryLimitMiB int
	// Timeout is the task's wall-clock limit, counted from the moment the
	// module starts to run (compiling a module the worker has not seen does
	// not count); 0 means DefaultTimeout. When it passes, the worker process
	// is killed and Result.Failure has kind timeout.
	Timeout time.Duration
	// MaxStdoutBytes caps the guest's stdout, 1..MaxStdoutLimitBytes; 0
	// means DefaultMaxStdoutBytes. Writing more stops the module at once
	// with Failure kind output-too-large.
	MaxStdoutBytes int
	// MaxStderrBytes caps the stderr kept, 1..MaxStderrLimitBytes; 0 means
	// DefaultMaxStderrBytes. More is truncated silently: the first half and
	// the last part are kept, joined by a line "[... N bytes omitted ...]",
	// so the result never exceeds the cap.
	MaxStderrBytes int
	// AvoidPID, if nonzero, makes the task run on a worker process other
	// than this PID (a fresh one is started if every other one is busy), so
	// that a replica check does not reuse the process of the first replica.
	AvoidPID int
	// GPUs are the GPUs the task may use, by NVML UUID (GPU.UUID), as the
	// owner's policy allows. The task runs in a worker process whose
	// environment has CUDA_VISIBLE_DEVICES set to these UUIDs,
	// comma-joined (GPUEnv), so that CUDA sees no other GPU; its program
	// reaches them through the idlepool_cuda host module (CUDAModuleName),
	// and the worker loads the CUDA driver only for such a task. Empty: the
	// program sees 0 devices. A program that does not import idlepool_cuda
	// runs on the CPU whatever GPUs it is given. A UUID may not be empty
	// or hold a comma, '=' or white space.
	GPUs []string
	// GPUMemoryLimitMiB caps the device memory the task may allocate
	// through idlepool_cuda, in MiB, all its buffers together: the donor's
	// memory share of the GPU (idle.GPUSettings.MemoryShare of its total).
	// An allocation past it fails with CUDAErrOutOfMemory. 0 means no cap
	// but the device's own memory (a solo run on the owner's machine);
	// negative values are refused.
	GPUMemoryLimitMiB int64
}

// Result is the outcome of one task.
type Result struct {
	// Stdout is what the guest wrote to stdout; nil when the task failed
	// with output-too-large or timeout, or the worker died.
	Stdout []byte
	// Stderr is the guest's stderr, truncated to Request.MaxStderrBytes;
	// nil when the task timed out or the worker died (those bytes die with
	// the process).
	Stderr []byte
	// PID is the process ID of the worker process that ran the task (0 if
	// none was reached).
	PID int
	// Failure is nil on success: the guest exited with status 0 and its
	// stdout fit. Otherwise it says why the task failed.
	Failure *Failure
	// GPU is what the task's use of its GPUs cost (driver load, context
	// creation, module loads); nil when the task was given no GPU or made
	// no idlepool_cuda call that reached the driver. For measurement only:
	// it depends on the machine and never on the task's answer.
	GPU *GPUStats
	// Work is the task's work counted by metering rule MeterRule
	// (meter.go): the WebAssembly instructions it executed, roughly, plus
	// the threads of its GPU launches. It is the same on every device for
	// the same task, and counts up to the end whatever it was (a trap, an
	// exit status, an exceeded stdout); 0 when the module never ran (a bad
	// module) and meaningless for the machine's failures (timeout,
	// worker-died), whose process is gone.
	Work uint64
}

// FailureKind classifies why a task failed. Its values are stable strings,
// also used on the wire between pool and worker.
type FailureKind string

// The kinds of task failure.
const (
	// FailureTrap: the guest trapped (unreachable, out-of-bounds access,
	// ...) or, for a Go program, panicked or hit a fatal runtime error
	// (exit status 2 with a Go panic report on stderr).
	FailureTrap FailureKind = "trap"
	// FailureTimeout: the task ran past Request.Timeout and its worker
	// process was killed.
	FailureTimeout FailureKind = "timeout"
	// FailureOutOfMemory: the guest needed more linear memory than
	// Request.MemoryLimitMiB. Detected when a Go program's runtime reports
	// "out of memory" on stderr, or when the module's minimum memory is
	// already over the limit. Other languages may report their failed
	// allocation as a trap or an exit status instead.
	FailureOutOfMemory FailureKind = "out-of-memory"
	// FailureOutputTooLarge: the guest wrote more than
	// Request.MaxStdoutBytes to stdout.
	FailureOutputTooLarge FailureKind = "output-too-large"
	// FailureExitStatus: the guest called proc_exit with a nonzero status.
	FailureExitStatus FailureKind = "exit-status"
	// FailureBadModule: the module file does not match ModuleSHA256, is not
	// WebAssembly, does not compile, imports anything but WASI preview 1 or
	// is not a command (no _start export).
	FailureBadModule FailureKind = "bad-module"
	// FailureWorkerDied: the worker process crashed or was killed by
	// someone other than the pool's timeout.
	FailureWorkerDied FailureKind = "worker-died"
)

// valid reports whether k is one of the defined kinds.
func (k FailureKind) valid() bool {
	switch k {
	case FailureTrap, FailureTimeout, FailureOutOfMemory, FailureOutputTooLarge,
		FailureExitStatus, FailureBadModule, FailureWorkerDied:
		return true
	}
	return false
}

// FailureClass says whether a failure is the task's answer or a fact about
// the machine that ran it (DESIGN.md invariant 16). Its values are stable
// strings.
type FailureClass string

// The classes of task failure.
const (
	// ClassDeterministic: the program and its inputs alone caused the
	// failure, so every machine fails the same way; it is the task's
	// outcome and may be verified like a result.
	ClassDeterministic FailureClass = "deterministic"
	// ClassMachine: the failure depends on the machine that ran the task
	// (its speed, its load, its other processes); another machine, or the
	// same one later, may well finish the task. It is never a task's
	// outcome: the task is run again.
	ClassMachine FailureClass = "machine"
)

// Class returns the class of failures of kind k, the one place where this
// is decided. Machine-dependent: FailureTimeout (time limits are wall-clock,
// so a slow or busy machine runs past them, and "module not ready to run"
// measures the machine's compile time) and FailureWorkerDied (the worker
// process was killed or crashed: by someone else, by the host running out
// of memory). Deterministic: FailureTrap, FailureExitStatus,
// FailureOutOfMemory (the guest exceeded the linear memory the job
// declares, the same on every machine), FailureOutputTooLarge and
// FailureBadModule. An unknown kind is machine-dependent: it cannot be
// shown to be the task's answer. A worker's own setup errors (ErrSetup) are
// errors, not failures; callers treat them as ClassMachine too.
func (k FailureKind) Class() FailureClass {
	switch k {
	case FailureTrap, FailureExitStatus, FailureOutOfMemory, FailureOutputTooLarge, FailureBadModule:
		return ClassDeterministic
	}
	return ClassMachine
}

// Failure says why a task failed. It implements error so that callers may
// return it as one; compare kinds with Kind, not the message.
type Failure struct {
	// Kind classifies the failure.
	Kind FailureKind `json:"kind"`
	// Message is a one-paragraph description for people, such as wazero's
	// trap message, the Go panic line or the exit status.
	Message string `json:"message"`
	// Trace is the engine's own account of a trap (wazero's message and
	// the program's stack), for people debugging the program: it is not
	// part of the task's outcome, which hosts must agree on, and is
	// empty for other failures.
	Trace string `json:"trace,omitempty"`
}

// Error implements error: "worker: task failed: KIND: MESSAGE".
func (f *Failure) Error() string {
	return fmt.Sprintf("worker: task failed: %s: %s", f.Kind, f.Message)
}
