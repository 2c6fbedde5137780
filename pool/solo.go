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
	// accepts it only when both results are byte-identical.
	Verify bool
	// RunDir holds the run's journal, input snapshot and output files; the
	// same directory resumes the run.
	RunDir string
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
type Progress struct {
	Done, Failed, Total int64 // Done includes Failed
	Resumed             int64 // tasks replayed from the journal
	Elapsed             time.Duration
	Rate                float64       // tasks per second this session
	Left                time.Duration // estimate of time left; 0 when unknown
}

// TaskFailure is a task that produced no accepted result.
type TaskFailure struct {
	Index  int64  `json:"task"`
	Reason string `json:"reason"`
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
// (with the outcome) when no task succeeded.
func RunSolo(ctx context.Context, j *job.Job, exec Executor, cfg SoloConfig) (*Outcome, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Slots < 1 {
		cfg.Slots = 1
	}
	program, inputDir, err := PrepareInputs(j, cfg.RunDir)
	if err != nil {
		return nil, err
	}
	fold, err := OpenFolder(j, FoldConfig{Dir: cfg.RunDir, Result: cfg.Result, Rows: cfg.Rows, Progress: cfg.Progress, Logger: log})
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
	rec   JournalRecord
}

// dispatch runs every task not yet done on cfg.Slots goroutines, in index
// order (whoever is free takes the next), and folds results on this
// goroutine.
func (r *soloRun) dispatch(ctx context.Context, exec Executor) error {
	total := r.job.NumTasks()
	if r.fold.Complete() {
		return nil
	}
	// The dispatcher reads its own copy of the done set: the Folder's
	// changes as results come in, on this goroutine.
	done := slices.Clone(r.fold.done)
	g, gctx := errgroup.WithContext(ctx)
	next := make(chan int64)
	results := make(chan finished, r.cfg.Slots)
	g.Go(func() error {
		defer close(next)
		for i := int64(0); i < total; i++ {
			if done.get(i) {
				continue
			}
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
				rec, err := r.runTask(gctx, exec, i)
				if err != nil {
					return err
				}
				select {
				case results <- finished{i, rec}:
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
		foldErr = r.fold.Fold(f.rec)
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
// when verifying, retrying when a worker process died under it.
func (r *soloRun) runTask(ctx context.Context, exec Executor, i int64) (JournalRecord, error) {
	t := r.job.Task(i)
	if t.Chunk != nil {
		path, err := WriteChunk(r.job, r.inputDir, *t.Chunk)
		if err != nil {
			return JournalRecord{}, err
		}
		defer os.Remove(path)
	}
	req := TaskRequest(r.job, t, r.program, r.inputDir)
	first, err := RunTask(ctx, exec, req, r.log)
	if err != nil || first.Status != StatusOK || !r.cfg.Verify {
		return first.record(i), err
	}
	req.AvoidPID = first.PID
	second, err := RunTask(ctx, exec, req, r.log)
	if err != nil {
		return JournalRecord{}, err
	}
	if second.Status != StatusOK || !bytes.Equal(first.Body, second.Body) {
		a, b := sha256.Sum256(first.Body), sha256.Sum256(second.Body)
		reason := fmt.Sprintf("replicas disagree: process %d returned %x…, process %d returned %x…", first.PID, a[:6], second.PID, b[:6])
		if second.Status != StatusOK {
			reason = fmt.Sprintf("replicas disagree: process %d succeeded, process %d failed: %s", first.PID, second.PID, second.Body)
		}
		return JournalRecord{Index: i, Status: StatusFailed, Body: []byte(reason)}, nil
	}
	return first.record(i), nil
}

func (o TaskOutcome) record(i int64) JournalRecord {
	return JournalRecord{Index: i, Status: o.Status, Body: o.Body}
}

func lastLine(b []byte) string {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	if len(b) > 300 {
		b = append(b[:300:300], "…"...)
	}
	return string(b)
}

// snapshotInputs copies the program and every non-chunked input into the
// run directory, checking digests, so that editing a file during a run
// cannot change what tasks see. It returns the program's copy.
func snapshotInputs(j *job.Job, runDir, inputDir string) (string, error) {
	program := filepath.Join(runDir, "program.wasm")
	if err := snapshot(j.Program, program); err != nil {
		return "", err
	}
	for name, ref := range j.Inputs {
		if j.Manifest.Split.Rule == "chunks" && name == j.Manifest.Split.Input {
			continue
		}
		if err := snapshot(ref, filepath.Join(inputDir, name)); err != nil {
			return "", err
		}
	}
	return program, nil
}

func snapshot(ref job.InputRef, dst string) error {
	if sum, err := fileSHA256(dst); err == nil && sum == ref.SHA256 {
		return nil // already there from an earlier run
	}
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
