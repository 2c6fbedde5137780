package pool

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"idlepool/job"
	"idlepool/worker"
)

// Executor runs one task in a sandbox. *worker.Pool implements it. Run
// returns an error only when the task could not be run at all (ctx
// cancelled, no worker process could start); a task that ran and failed
// reports it in Result.Failure.
type Executor interface {
	Run(ctx context.Context, req worker.Request) (worker.Result, error)
}

var _ Executor = (*worker.Pool)(nil)

// SoloConfig configures a solo run.
type SoloConfig struct {
	// Slots is how many tasks run at once (the executor's worker count).
	Slots int
	// Verify runs every task twice on different worker processes and
	// accepts it only when both results are byte-identical (or agree
	// within the job's tolerance) and, compared by digest, counted the
	// same work.
	Verify bool
	// RunDir holds the run's journal, input snapshot and output files; the
	// same directory resumes the run.
	RunDir string
	// InputStore, if set, is a directory shared by the runs whose
	// directories are beside RunDir (in RunDir's parent): each file a run
	// snapshots (program and inputs) is kept there once, named by its
	// SHA-256 in hex, as a hard link to the run's copy, and a later run
	// of a job with the same file links it instead of copying it again
	// (a training's rounds share their data set). A file no run
	// directory links any more is removed when a run is prepared.
	// Without it, or where the file system has no hard links, every run
	// copies its inputs.
	InputStore string
	// Progress, if set, is called after every finished task, from one
	// goroutine at a time.
	Progress func(Progress)
	// Result, if set, is called with each task's accepted result as it is
	// folded in (arrival order, replays included), from one goroutine.
	Result func(t job.Task, result []byte)
	// Rows, if set, receives a copy of what ordered sinks (collect,
	// concat) write, in task order.
	Rows io.Writer
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// Progress is the state of a run after a task finished. Elapsed and Rate
// count only this session's tasks (not ones replayed from the journal).
// A Folder counts Rate from the session's first finished task, so that
// the start-up (the program compiling) does not slow it down: Rate is 0
// (unknown) until a second has passed since then, except at the last
// task of a shorter run, where it is the session's mean rate.
type Progress struct {
	Done, Failed, Total int64 // Done includes Failed
	Resumed             int64 // tasks replayed from the journal
	Elapsed             time.Duration
	Rate                float64       // tasks per second this session; 0 when unknown
	Left                time.Duration // estimate of time left at Rate; 0 when unknown
}

// TaskFailure is a task that produced no accepted result.
type TaskFailure struct {
	Index  int64  `json:"task"`
	Reason string `json:"reason"`
	// Retry is set when the failure depends on the machine that ran the
	// task rather than on the task: it says what happened, in a few words
	// ("timed out", "lost its worker process"; TaskOutcome.Cause). Such a
	// failure is not journaled as final: running the same job again in
	// the same run directory runs the task again.
	Retry string `json:"retry,omitempty"`
}

// Outcome is the end of a solo run: counts, the merged result and the
// failures, all deterministic (nothing time-dependent).
type Outcome struct {
	Job     job.ID
	Total   int64
	OK      int64
	Failed  int64
	Resumed int64 // tasks taken from the journal instead of recomputed
	Result  any   // the Merger's result
	Derived map[string]float64
	// DeriveErrors holds, for a derived value that could not be computed
	// (its expression names a scalar no result produced), why not.
	DeriveErrors map[string]string
	Failures     []TaskFailure // sorted by task index
	Outputs      map[string]string

	// EntryFailures lists the first results that one collect entry alone
	// could not take (job.EntryFailure); those tasks are not failures.
	EntryFailures []job.EntryFailure
}

// maxRetries is how often a task is retried when its worker process died
// for a reason other than the task itself (killed from outside, crashed).
const maxRetries = 2

// RunSolo computes every task of j on exec, folds results into the job's
// accumulators and returns the outcome. It journals every finished task in
// cfg.RunDir, so a run interrupted at any point (Ctrl-C, kill -9) and run
// again continues where it stopped and ends with the same outcome bytes.
// Cancelling ctx stops dispatching, waits for running tasks to be
// abandoned, and returns ctx's error; finished tasks stay journaled.
// Failed tasks are part of the outcome; the error ErrAllFailed is returned
// (with the outcome) when no task succeeded. A failure that depends on the
// machine (a timeout, a dead worker; TaskOutcome.MachineDependent) is not
// the task's outcome: the task runs once more at the end of the run, and
// if that fails the same way it is listed with TaskFailure.Retry set and
// is not journaled, so that running the job again runs just those tasks.
func RunSolo(ctx context.Context, j *job.Job, exec Executor, cfg SoloConfig) (*Outcome, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Slots < 1 {
		cfg.Slots = 1
	}
	program, inputDir, err := PrepareStoredInputs(j, cfg.RunDir, cfg.InputStore)
	if err != nil {
		return nil, err
	}
	if cfg.InputStore != "" {
		if err := TrimInputStore(cfg.InputStore, filepath.Dir(cfg.RunDir)); err != nil {
			log.Warn("Cannot trim the store of inputs", "dir", cfg.InputStore, "err", err)
		}
	}
	fold, err := OpenFolder(j, FoldConfig{Dir: cfg.RunDir, Result: cfg.Result, Rows: cfg.Rows, Progress: cfg.Progress, Logger: log,
		RetryMachineFailures: true})
	if err != nil {
		return nil, err
	}
	if n := fold.Resumed(); n > 0 {
		log.Info("Resuming run", "jobID", j.ID.String(), "tasks", n)
	}
	r := &soloRun{job: j, cfg: cfg, log: log, inputDir: inputDir, program: program, fold: fold}
	if err := r.dispatch(ctx, exec); err != nil {
		fold.Close()
		return nil, err
	}
	return fold.Finish()
}

type soloRun struct {
	job      *job.Job
	cfg      SoloConfig
	log      *slog.Logger
	inputDir string
	program  string
	fold     *Folder // owned by the goroutine that called dispatch
}

func sanitize(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}

type finished struct {
	index int64
	out   TaskOutcome
}

// dispatch runs every task not yet done on cfg.Slots goroutines, in index
// order (whoever is free takes the next), and folds results on this
// goroutine. A task whose failure depends on the machine (a timeout, a dead
// worker) is run once more after every other task has been dispatched and
// finished, when the machine is no longer busy with this run's other
// tasks; if it fails that way again it is folded with FoldRetryable: part
// of this run's outcome, not journaled, so that the next run of the same
// command runs it again.
func (r *soloRun) dispatch(ctx context.Context, exec Executor) error {
	if r.fold.Complete() {
		return nil
	}
	// The dispatcher reads its own copy of the done set: the Folder's
	// changes as results come in, on this goroutine.
	done := slices.Clone(r.fold.done)
	var todo []int64
	for i := range r.job.NumTasks() {
		if !done.get(i) {
			todo = append(todo, i)
		}
	}
	var again []finished
	err := r.runAll(ctx, exec, todo, func(f finished) error {
		if f.out.MachineDependent() {
			r.log.Warn("Task failed on this machine; it runs again once the other tasks are done", "jobID", r.job.ID.String(),
				"taskIndex", f.index, "reason", string(f.out.Body))
			again = append(again, f)
			return nil
		}
		return r.fold.Fold(f.out.record(f.index))
	})
	if err != nil || len(again) == 0 {
		return err
	}
	todo = todo[:0]
	for _, f := range again {
		todo = append(todo, f.index)
	}
	return r.runAll(ctx, exec, todo, func(f finished) error {
		if f.out.MachineDependent() {
			return r.fold.FoldRetryable(f.out.record(f.index), f.out.Cause())
		}
		return r.fold.Fold(f.out.record(f.index))
	})
}

// runAll runs tasks todo, in order, on cfg.Slots goroutines and calls fold
// with each outcome on this goroutine.
func (r *soloRun) runAll(ctx context.Context, exec Executor, todo []int64, fold func(finished) error) error {
	g, gctx := errgroup.WithContext(ctx)
	next := make(chan int64)
	results := make(chan finished, r.cfg.Slots)
	g.Go(func() error {
		defer close(next)
		for _, i := range todo {
			select {
			case next <- i:
			case <-gctx.Done():
				return nil
			}
		}
		return nil
	})
	var wg sync.WaitGroup
	for range r.cfg.Slots {
		wg.Add(1)
		g.Go(func() error {
			defer wg.Done()
			for i := range next {
				out, err := r.runTask(gctx, exec, i)
				if err != nil {
					return err
				}
				select {
				case results <- finished{i, out}:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			return nil
		})
	}
	go func() { wg.Wait(); close(results) }()
	var foldErr error
	for f := range results {
		if foldErr != nil {
			continue // drain
		}
		foldErr = fold(f)
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if foldErr != nil {
		return foldErr
	}
	return ctx.Err()
}

// runTask computes task i once, or twice on different worker processes
// when verifying, retrying when a worker process died under it. A
// machine-dependent failure of either replica is the outcome: it says
// nothing about the task, so it is neither a result nor a disagreement.
func (r *soloRun) runTask(ctx context.Context, exec Executor, i int64) (TaskOutcome, error) {
	t := r.job.Task(i)
	if t.Chunk != nil {
		path, err := WriteChunk(r.job, r.inputDir, *t.Chunk)
		if err != nil {
			return TaskOutcome{}, err
		}
		defer os.Remove(path)
	}
	req := TaskRequest(r.job, t, r.program, r.inputDir)
	first, err := RunTask(ctx, exec, req, r.log)
	if err != nil || first.Status != StatusOK || !r.cfg.Verify {
		return first, err
	}
	req.AvoidPID = first.PID
	second, err := RunTask(ctx, exec, req, r.log)
	if err != nil {
		return TaskOutcome{}, err
	}
	if second.MachineDependent() {
		return second, nil
	}
	a, b := sha256.Sum256(first.Body), sha256.Sum256(second.Body)
	if second.Status != StatusOK || !r.job.Manifest.Verify.Agree(first.Body, second.Body) {
		reason := fmt.Sprintf("replicas disagree: process %d returned %x…, process %d returned %x…", first.PID, a[:6], second.PID, b[:6])
		if second.Status != StatusOK {
			reason = fmt.Sprintf("replicas disagree: process %d succeeded, process %d failed: %s", first.PID, second.PID, second.Body)
		}
		return TaskOutcome{Status: StatusFailed, Body: []byte(reason), Class: worker.ClassDeterministic}, nil
	}
	if r.job.Manifest.Verify.Rule == "" && !r.job.Manifest.Requirements.GPU.Uses() && first.Work != second.Work {
		// Replicas in a pool would not agree either: what a task counted
		// is part of its outcome.
		reason := fmt.Sprintf("replicas disagree on the work they counted: process %d counted %d instructions, process %d counted %d",
			first.PID, first.Work, second.PID, second.Work)
		return TaskOutcome{Status: StatusFailed, Body: []byte(reason), Class: worker.ClassDeterministic}, nil
	}
	if bytes.Compare(b[:], a[:]) < 0 {
		// Agreeing within tolerance: fold the lower digest, as a pool
		// does, so that the answer does not depend on which process
		// finished first.
		return second, nil
	}
	return first, nil
}

func (o TaskOutcome) record(i int64) JournalRecord {
	return JournalRecord{Index: i, Status: o.Status, Body: o.Body}
}

// snapshotInputs copies the program and every non-chunked input into the
// run directory, checking digests, so that editing a file during a run
// cannot change what tasks see. It returns the program's copy.
func snapshotInputs(j *job.Job, runDir, inputDir, store string) (string, error) {
	program := filepath.Join(runDir, "program.wasm")
	if err := snapshot(j.Program, program, store); err != nil {
		return "", err
	}
	for name, ref := range j.Inputs {
		if j.Manifest.Split.Rule == "chunks" && name == j.Manifest.Split.Input {
			continue
		}
		if err := snapshot(ref, filepath.Join(inputDir, name), store); err != nil {
			return "", err
		}
	}
	return program, nil
}

// snapshot makes dst a read-only copy of ref's file, checked against its
// digest: a hard link to store's file of that digest where there is one,
// else a copy, which is then linked into store (store "": none).
func snapshot(ref job.InputRef, dst, store string) error {
	if sum, err := fileSHA256(dst); err == nil && sum == ref.SHA256 {
		return nil // already there from an earlier run
	}
	var blob string
	if store != "" {
		blob = filepath.Join(store, ref.SHA256.String())
		// A file of the store was checked when it was linked there and
		// is read-only; its size is checked again.
		if st, err := os.Stat(blob); err == nil && st.Mode().IsRegular() && st.Size() == ref.Size {
			_ = os.Remove(dst)
			if os.Link(blob, dst) == nil {
				return nil
			}
		}
	}
	if err := copyInput(ref, dst); err != nil {
		return err
	}
	if blob != "" {
		// The store names the run's copy; another process may have put
		// the same file there meanwhile, and a file system without hard
		// links leaves the store empty.
		if err := os.MkdirAll(store, 0o700); err == nil {
			_ = os.Link(dst, blob)
		}
	}
	return nil
}

// copyInput copies ref's file to dst, read-only, checking its digest.
func copyInput(ref job.InputRef, dst string) error {
	src, err := os.Open(ref.Path)
	if err != nil {
		return fmt.Errorf("read input: %w", err)
	}
	defer src.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("snapshot input: %w", err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), src)
	if err = errors.Join(err, out.Sync(), out.Close()); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("snapshot %s: %w", ref.Path, err)
	}
	var sum job.Digest
	h.Sum(sum[:0])
	if sum != ref.SHA256 {
		os.Remove(tmp)
		return fmt.Errorf("%w: %s", ErrInputChanged, ref.Path)
	}
	if err := os.Chmod(tmp, 0o400); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// TrimInputStore removes the files of an input store (SoloConfig.InputStore)
// that no run directory under runs links any more: those whose inode is
// none of runs/*/program.wasm and runs/*/input/*. A run being prepared at
// the same time loses nothing: its own link keeps its file, and a link
// from a store file removed meanwhile falls back to a copy.
func TrimInputStore(store, runs string) error {
	blobs, err := os.ReadDir(store)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("trim inputs: %w", err)
	}
	dirs, err := os.ReadDir(runs)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("trim inputs: %w", err)
	}
	var used []os.FileInfo
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := filepath.Join(runs, d.Name())
		if st, err := os.Stat(filepath.Join(dir, "program.wasm")); err == nil {
			used = append(used, st)
		}
		in, _ := os.ReadDir(filepath.Join(dir, "input"))
		for _, e := range in {
			if e.Type().IsRegular() {
				if st, err := e.Info(); err == nil {
					used = append(used, st)
				}
			}
		}
	}
	var errs []error
	for _, b := range blobs {
		st, err := b.Info()
		if err != nil || !st.Mode().IsRegular() || slices.ContainsFunc(used, func(u os.FileInfo) bool { return os.SameFile(st, u) }) {
			continue
		}
		p := filepath.Join(store, b.Name())
		_ = os.Chmod(p, 0o600) // a read-only file cannot be removed on Windows
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("trim inputs: %w", err)
	}
	return nil
}

func fileSHA256(path string) (job.Digest, error) {
	var d job.Digest
	f, err := os.Open(path)
	if err != nil {
		return d, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return d, err
	}
	h.Sum(d[:0])
	return d, nil
}

// bitmap is a fixed-size set of task indices: one bit per task.
type bitmap []uint64

func newBitmap(n int64) bitmap    { return make(bitmap, (n+63)/64) }
func (b bitmap) get(i int64) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitmap) set(i int64)      { b[i/64] |= 1 << (i % 64) }
