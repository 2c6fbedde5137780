package pool

import (
	"fmt"
	"strings"

	"idlepool/worker"
)

// ExitDataError is the exit status with which a program says that its
// input data is at fault, not the program: EX_DATAERR of BSD's sysexits.h
// ("the input data was incorrect in some way").
const ExitDataError = 65

// Cause says what a failed task's reason points at, so that a person is
// told what to fix.
type Cause int

// The causes of a task failure, as CauseOf tells them apart.
const (
	// CauseProgram: the program trapped, exited non-zero, wrote no JSON
	// or wrote too much.
	CauseProgram Cause = iota
	// CauseData: the program exited with ExitDataError: its input data is
	// wrong (a text cell where a number belongs, a ragged row).
	CauseData
	// CauseResult: the program's result does not fit the [[merge]]
	// entries (a field they name is missing or of another type).
	CauseResult
	// CauseTimeLimit: the task ran past policy.time_limit.
	CauseTimeLimit
	// CauseMemory: the task ran out of policy.memory_mib.
	CauseMemory
	// CauseMachine: the worker process died under the task, which says
	// something about this machine, not about the job.
	CauseMachine
	// CauseModule: the program is not a module the worker runs (not
	// WebAssembly, neither a WASI command nor a reactor, built for
	// GOOS=js, importing what no worker offers): the way it was built
	// is at fault.
	CauseModule
)

// CauseOf reads a failed task's reason (TaskFailure.Reason, the body of a
// failed outcome as RunTask and Folder write it) and says what it points
// at.
func CauseOf(reason string) Cause {
	prefix := func(k worker.FailureKind, msg string) bool {
		p := (&worker.Failure{Kind: k, Message: msg}).Error()
		return strings.HasPrefix(reason, p)
	}
	dataExit := (&worker.Failure{Kind: worker.FailureExitStatus, Message: fmt.Sprintf("exit status %d", ExitDataError)}).Error()
	switch {
	case reason == dataExit || strings.HasPrefix(reason, dataExit+";") || strings.HasPrefix(reason, dataExit+" ") || strings.HasPrefix(reason, dataExit+"\n"):
		return CauseData
	case strings.HasPrefix(reason, malformedResult+"merge"):
		return CauseResult
	case prefix(worker.FailureTimeout, ""), GaveUp(reason):
		return CauseTimeLimit
	case prefix(worker.FailureOutOfMemory, ""):
		return CauseMemory
	case prefix(worker.FailureWorkerDied, ""):
		return CauseMachine
	case prefix(worker.FailureBadModule, ""):
		return CauseModule
	}
	return CauseProgram
}

// malformedResult starts the reason of a result the merge rules refused
// (see Folder.apply).
const malformedResult = "malformed result: "
