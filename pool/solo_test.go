package pool_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/worker"
)

// starvedExec is a pool.Executor that computes {"x": i*i + 0.25} for task
// i, as a job program would, except that it fails task i with the failure
// in fail[i] while timesLeft[i] > 0 (each such run counts one down): what a
// machine starved of CPU (a timeout) or one whose worker processes are
// killed (worker died) does to tasks that would finish anywhere else.
type starvedExec struct {
	mu        sync.Mutex
	fail      map[int64]worker.FailureKind
	timesLeft map[int64]int
	ran       []int64
}

func (e *starvedExec) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	var t struct {
		Index int64 `json:"index"`
	}
	if err := json.Unmarshal(req.Stdin, &t); err != nil {
		return worker.Result{}, fmt.Errorf("%w: stdin: %v", worker.ErrInvalidRequest, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ran = append(e.ran, t.Index)
	if kind, ok := e.fail[t.Index]; ok && e.timesLeft[t.Index] > 0 {
		e.timesLeft[t.Index]--
		msg := "task ran longer than its limit of 1s"
		if kind == worker.FailureWorkerDied {
			msg = "worker process 7 ended (signal: killed): EOF"
		}
		return worker.Result{PID: 7, Failure: &worker.Failure{Kind: kind, Message: msg}}, nil
	}
	if t.Index == 4 {
		return worker.Result{PID: 7, Stderr: []byte("panic: boom\n"), Failure: &worker.Failure{Kind: worker.FailureTrap, Message: "exit status 2"}}, nil
	}
	return worker.Result{PID: 7, Stdout: fmt.Appendf(nil, `{"x": %d.25}`, t.Index*t.Index)}, nil
}

// runs returns the task indexes run since the last call, sorted.
func (e *starvedExec) runs() []int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := slices.Sorted(slices.Values(e.ran))
	e.ran = nil
	return out
}

// soloDoc runs j in dir on exec and returns what matters of the outcome
// (as outcomeOf does) and the outcome.
func soloDoc(t *testing.T, j *job.Job, dir string, exec pool.Executor) (string, *pool.Outcome) {
	t.Helper()
	out, err := pool.RunSolo(context.Background(), j, exec, pool.SoloConfig{Slots: 3, RunDir: dir})
	if err != nil {
		t.Fatalf("RunSolo: %v", err)
	}
	outputs := map[string]string{}
	for name, path := range out.Outputs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		outputs[name] = fmt.Sprintf("%x", sha256.Sum256(b))
	}
	b, err := json.Marshal(map[string]any{"result": out.Result, "derived": out.Derived, "failures": out.Failures,
		"ok": out.OK, "failed": out.Failed, "outputs": outputs})
	if err != nil {
		t.Fatal(err)
	}
	return string(b), out
}

func TestSoloRetriesMachineFailuresOnTheNextRun(t *testing.T) {
	const n = 12
	j := foldJob(t, n)
	want, _ := soloDoc(t, j, t.TempDir(), &starvedExec{}) // uninterrupted, on a machine with time to spare

	for _, kind := range []worker.FailureKind{worker.FailureTimeout, worker.FailureWorkerDied} {
		t.Run(string(kind), func(t *testing.T) {
			// Task 6 fails on this machine on its first try and on the retry
			// at the end of the run (worker deaths are retried twice more
			// at once by RunTask), then the machine is free again.
			tries := 2
			if kind == worker.FailureWorkerDied {
				tries = 6
			}
			exec := &starvedExec{fail: map[int64]worker.FailureKind{6: kind}, timesLeft: map[int64]int{6: tries}}
			dir := t.TempDir()
			_, first := soloDoc(t, j, dir, exec)
			exec.runs()
			var retry []pool.TaskFailure
			for _, f := range first.Failures {
				if f.Retry != "" {
					retry = append(retry, f)
				}
			}
			wantCause := map[worker.FailureKind]string{worker.FailureTimeout: "timed out", worker.FailureWorkerDied: "lost its worker process"}[kind]
			if len(retry) != 1 || retry[0].Index != 6 || retry[0].Retry != wantCause || first.Failed != 2 {
				t.Fatalf("failures of the starved run: %+v, want task 4 final and task 6 to retry (%q)", first.Failures, wantCause)
			}

			got, second := soloDoc(t, j, dir, exec)
			if diff := cmp.Diff([]int64{6}, exec.runs()); diff != "" {
				t.Errorf("tasks run again (-want +got):\n%s", diff)
			}
			if second.Resumed != n-1 {
				t.Errorf("%d tasks taken from the journal, want %d", second.Resumed, n-1)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("outcome after the retry differs from an uninterrupted run (-want +got):\n%s", diff)
			}
			// A third run computes nothing.
			if again, _ := soloDoc(t, j, dir, exec); again != want || len(exec.runs()) != 0 {
				t.Errorf("a third run recomputed tasks or changed the outcome")
			}
		})
	}
}

func TestSoloRetriesMachineFailureOnceInTheSameRun(t *testing.T) {
	j := foldJob(t, 5)
	want, _ := soloDoc(t, j, t.TempDir(), &starvedExec{})
	exec := &starvedExec{fail: map[int64]worker.FailureKind{2: worker.FailureTimeout}, timesLeft: map[int64]int{2: 1}}
	got, _ := soloDoc(t, j, t.TempDir(), exec)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcome (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{0, 1, 2, 2, 3, 4}, exec.runs()); diff != "" {
		t.Errorf("tasks run (-want +got):\n%s", diff)
	}
}

// A journal written before failures were classified holds timeouts as
// final failures; the next run computes those tasks again, and only those.
func TestSoloRetriesTimeoutsJournaledAsFinal(t *testing.T) {
	j := foldJob(t, 5)
	want, _ := soloDoc(t, j, t.TempDir(), &starvedExec{})
	dir := t.TempDir()
	jr, err := pool.OpenJournal(filepath.Join(dir, "journal"), j.ID, func(pool.JournalRecord) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	recs := []pool.JournalRecord{
		{Index: 0, Status: pool.StatusOK, Body: []byte(`{"x": 0.25}`)},
		{Index: 1, Status: pool.StatusFailed, Body: []byte("worker: task failed: timeout: task ran longer than its limit of 1s (raise policy.time_limit if the task needs longer)")},
		{Index: 2, Status: pool.StatusFailed, Body: []byte("worker: task failed: worker-died: worker process 9 ended (signal: killed): EOF")},
		{Index: 4, Status: pool.StatusFailed, Body: []byte("worker: task failed: trap: exit status 2\nprogram log:\npanic: boom")},
	}
	for _, rec := range recs {
		if err := jr.Append(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := jr.Close(); err != nil {
		t.Fatal(err)
	}
	exec := &starvedExec{}
	got, out := soloDoc(t, j, dir, exec)
	if diff := cmp.Diff([]int64{1, 2, 3}, exec.runs()); diff != "" {
		t.Errorf("tasks run (-want +got):\n%s", diff)
	}
	if out.Resumed != 2 {
		t.Errorf("%d tasks taken from the journal, want 2 (task 0, and task 4's trap)", out.Resumed)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcome (-want +got):\n%s", diff)
	}
}

// countingExec computes {"x": 1} for every task and counts its work as
// the PID of the worker that ran it says: the same on every worker when
// fair, one more on each process when not (a metering that depended on
// the machine).
type countingExec struct {
	fair bool
	pid  atomic.Int64
}

func (e *countingExec) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	pid := e.pid.Add(1)
	work := uint64(5000)
	if !e.fair {
		work += uint64(pid)
	}
	return worker.Result{PID: int(pid), Stdout: []byte(`{"x": 1}`), Work: work}, nil
}

// TestSoloVerifyComparesWork: a solo run that verifies each task on two
// worker processes fails a task whose two runs counted different work,
// as a pool's replicas would not agree; the same count passes.
func TestSoloVerifyComparesWork(t *testing.T) {
	j := foldJob(t, 3)
	for _, fair := range []bool{true, false} {
		out, err := pool.RunSolo(context.Background(), j, &countingExec{fair: fair}, pool.SoloConfig{Slots: 1, Verify: true, RunDir: t.TempDir()})
		if fair {
			if err != nil || out.OK != 3 {
				t.Errorf("fair counts: %v, %d ok, failures %+v; want 3 ok", err, out.OK, out.Failures)
			}
			continue
		}
		if out == nil || out.OK != 0 || len(out.Failures) != 3 || !strings.Contains(out.Failures[0].Reason, "replicas disagree on the work they counted") {
			t.Errorf("unfair counts: %+v, %v; want every task failed for its counts", out, err)
		}
	}
}
