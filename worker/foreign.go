package worker

import (
	"errors"

	"github.com/tetratelabs/wazero/sys"
)

// The functions in this file let a host other than this package's wazero
// runtime (the browser peer's, which runs modules in the browser's own
// WebAssembly engine) give the same answers as a worker process: the same
// work count and the same classification of a task's end. They are the
// worker's own code, so that the two cannot drift apart.

// MeterModule returns bin with the work counter of metering rule
// MeterRule injected, exported as the mutable i64 global MeterExport,
// exactly as a worker process meters a module before it compiles it; a
// host that reads that global when the task ends counts what a worker
// counts (Result.Work). The error names what could not be decoded: such
// a module fails its task with FailureBadModule on every device. bin is
// not modified.
func MeterModule(bin []byte) ([]byte, error) { return meterModule(bin) }

// TaskEnd is how a task run by another host ended, for ClassifyEnd.
type TaskEnd struct {
	// Exited is true when the module called proc_exit, with ExitCode.
	Exited   bool
	ExitCode uint32
	// Trap is the engine's message when the module trapped ("" if not).
	Trap string
	// Stdout is what the module wrote to stdout, Exceeded true when it
	// tried to write more than MaxStdoutBytes (the module was stopped).
	Stdout   []byte
	Exceeded bool
	// Stderr is everything the module wrote to stderr.
	Stderr []byte
	// MaxStdoutBytes and MaxStderrBytes are the task's limits (0: the
	// defaults, as in Request).
	MaxStdoutBytes int
	MaxStderrBytes int
	// Work is the value of the module's MeterExport global at the end.
	Work uint64
}

// ClassifyEnd returns the Result a worker process gives for a task that
// ended as e says: its Failure kind and message (a Go program's panic or
// out-of-memory report on stderr is read as a worker reads it), its
// stdout (kept only on success) and its stderr truncated to the limit as
// a worker truncates it. The machine's failures (timeout, a dead worker)
// are not ends of a module and are the caller's to report.
func ClassifyEnd(e TaskEnd) Result {
	maxOut := e.MaxStdoutBytes
	if maxOut <= 0 {
		maxOut = DefaultMaxStdoutBytes
	}
	maxErr := e.MaxStderrBytes
	if maxErr <= 0 {
		maxErr = DefaultMaxStderrBytes
	}
	stdout := &stdoutBuffer{buf: e.Stdout, max: maxOut, exceeded: e.Exceeded || len(e.Stdout) > maxOut}
	stderr := newStderrBuffer(maxErr)
	_, _ = stderr.Write(e.Stderr)
	stderr.finish()
	var callErr error
	switch {
	case e.Exited:
		callErr = sys.NewExitError(e.ExitCode)
	case e.Trap != "":
		callErr = errors.New(e.Trap)
	}
	res := Result{Stderr: stderr.bytes(), Failure: classify(callErr, stdout, stderr), Work: e.Work}
	if res.Failure == nil {
		res.Stdout = stdout.buf
	}
	return res
}
