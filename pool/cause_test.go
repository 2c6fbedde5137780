package pool

import (
	"testing"

	"idlepool/worker"
)

func TestCauseOf(t *testing.T) {
	fail := func(k worker.FailureKind, msg string) string { return (&worker.Failure{Kind: k, Message: msg}).Error() }
	tests := []struct {
		reason string
		want   Cause
	}{
		{fail(worker.FailureExitStatus, "exit status 65") + "; program log: error: line 3 column a: not a number", CauseData},
		{fail(worker.FailureExitStatus, "exit status 65"), CauseData},
		{fail(worker.FailureExitStatus, "exit status 65") + "\nprogram log:\nerror: line 3 column a: not a number", CauseData},
		{fail(worker.FailureExitStatus, "exit status 1") + "; program log: error: boom", CauseProgram},
		{fail(worker.FailureExitStatus, "exit status 650"), CauseProgram},
		{fail(worker.FailureTrap, "wasm error: unreachable"), CauseProgram},
		{fail(worker.FailureBadModule, "compile: bad magic"), CauseModule},
		{fail(worker.FailureOutputTooLarge, "stdout exceeded 16777216 bytes"), CauseProgram},
		{"malformed result: stdout is not one JSON object: it was empty", CauseProgram},
		{malformedResult + `merge "energy": field energy: missing`, CauseResult},
		{fail(worker.FailureTimeout, "task ran longer than its limit of 1s") + " (raise policy.time_limit if the task needs longer)", CauseTimeLimit},
		{fail(worker.FailureOutOfMemory, "module memory") + " (raise policy.memory_mib if the task needs more)", CauseMemory},
		{fail(worker.FailureWorkerDied, "worker process 12 ended (signal: killed)"), CauseMachine},
	}
	for _, tc := range tests {
		if got := CauseOf(tc.reason); got != tc.want {
			t.Errorf("CauseOf(%q) = %d, want %d", tc.reason, got, tc.want)
		}
	}
}
