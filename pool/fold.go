package pool

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"idlepool/job"
)

// FoldConfig configures a Folder.
type FoldConfig struct {
	// Dir holds the journal and the output files of ordered sinks; opening
	// a Folder on the same Dir again resumes. Required.
	Dir string
	// Result, if set, is called with each accepted result as it is folded
	// in (arrival order, replays included).
	Result func(t job.Task, result []byte)
	// Rows, if set, receives a copy of what ordered sinks (collect,
	// concat) write, in task order.
	Rows io.Writer
	// Progress, if set, is called after every outcome folded by Fold.
	Progress func(Progress)
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Now is the clock Progress's Elapsed, Rate and Left are measured
	// with; nil means time.Now.
	Now func() time.Time
	// RetryMachineFailures makes opening skip journaled failures whose
	// reason names a machine-dependent cause (MachineReason), so that
	// their tasks count as not done and run again. Journals written before
	// failures were classified hold such records; a solo run sets it. A
	// pool's merger must not: what the pool decided is final there.
	RetryMachineFailures bool
}

// Folder folds the outcomes of one job's tasks, in any order, into the
// job's accumulators, and journals each in FoldConfig.Dir first, so that a
// Folder opened again on the same directory (after Ctrl-C or kill -9)
// replays them and continues. A solo run and a pool's merger both fold
// through a Folder, so the same set of outcomes gives the same Outcome
// bytes. An ok outcome the merge rules refuse becomes a failure; a task
// folded twice counts once. A Folder is not safe for concurrent use.
type Folder struct {
	job     *job.Job
	cfg     FoldConfig
	log     *slog.Logger
	merger  *job.Merger
	journal *Journal
	sinks   []*os.File
	outputs map[string]string

	done      bitmap
	doneCount int64
	failed    []TaskFailure
	resumed   int64
	start     time.Time
	// firstAt is when this session's first task ended; anchorAt and
	// anchorFresh are when the rate is counted from and how many of this
	// session's tasks had ended then (rateSettle).
	firstAt     time.Time
	anchorAt    time.Time
	anchorFresh int64
}

// The rate of a run is counted from its first finished task, not from
// its start: the start-up (the program compiling, the workers starting)
// takes seconds to minutes before any task ends, and a rate that counted
// it promised "40m43s left" for a run that ended three minutes later.
// Tasks that end within rateSettle of the first (each worker's first)
// move the anchor with them, so a rate is not inflated by tasks that
// started together; a rate is given once minRateSpan has passed since
// the anchor.
const (
	rateSettle  = 250 * time.Millisecond
	minRateSpan = time.Second
)

// OpenFolder opens (creating if needed) the folder of j in cfg.Dir and
// replays its journal. Close or Finish must be called.
func OpenFolder(j *job.Job, cfg FoldConfig) (*Folder, error) {
	f := &Folder{job: j, cfg: cfg, log: cfg.Logger, done: newBitmap(j.NumTasks()), outputs: map[string]string{}}
	if f.cfg.Now == nil {
		f.cfg.Now = time.Now
	}
	f.start = f.cfg.Now()
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", cfg.Dir, err)
	}
	var err error
	f.merger, err = job.NewMerger(j.Manifest.Merge, f.openSink)
	if err != nil {
		return nil, fmt.Errorf("merge rules: %w", err)
	}
	f.journal, err = OpenJournal(filepath.Join(cfg.Dir, "journal"), j.ID, f.replay)
	if err != nil {
		f.closeSinks()
		return nil, err
	}
	f.resumed = f.doneCount
	return f, nil
}

// Done reports whether task index has been folded.
func (f *Folder) Done(index int64) bool { return f.done.get(index) }

// Count returns how many tasks have been folded and how many of them
// failed.
func (f *Folder) Count() (done, failed int64) { return f.doneCount, int64(len(f.failed)) }

// Resumed returns how many tasks were replayed from the journal when the
// Folder was opened.
func (f *Folder) Resumed() int64 { return f.resumed }

// Complete reports whether every task has been folded.
func (f *Folder) Complete() bool { return f.doneCount == f.job.NumTasks() }

// Fold journals and folds one outcome: StatusOK with the program's result
// in Body, or StatusFailed with the reason. A task already folded is
// ignored. The journal is flushed to stable storage every SyncEvery
// records; call Sync before telling anyone the outcome is safe.
func (f *Folder) Fold(rec JournalRecord) error {
	if rec.Index < 0 || rec.Index >= f.job.NumTasks() {
		return fmt.Errorf("fold: task %d out of range [0,%d)", rec.Index, f.job.NumTasks())
	}
	if f.done.get(rec.Index) {
		return nil
	}
	rec = f.apply(rec, true)
	if err := f.journal.Append(rec); err != nil {
		return err
	}
	f.report()
	return nil
}

// FoldRetryable folds a failure that depends on the machine (a timeout, a
// dead worker) into this Folder's outcome without journaling it: the
// outcome lists it with TaskFailure.Retry set to cause, and a Folder
// opened again on the same directory counts the task as not done, so that
// it is computed again. A task already folded is ignored.
func (f *Folder) FoldRetryable(rec JournalRecord, cause string) error {
	if rec.Index < 0 || rec.Index >= f.job.NumTasks() {
		return fmt.Errorf("fold: task %d out of range [0,%d)", rec.Index, f.job.NumTasks())
	}
	if f.done.get(rec.Index) {
		return nil
	}
	rec.Status = StatusFailed
	f.apply(rec, true)
	f.failed[len(f.failed)-1].Retry = cause
	f.report()
	return nil
}

// Sync flushes the journal to stable storage.
func (f *Folder) Sync() error { return f.journal.Sync() }

// Close closes the journal and the output files without finishing the
// merge; what was folded stays journaled.
func (f *Folder) Close() error {
	return errors.Join(f.journal.Close(), f.closeSinks())
}

// Finish closes the journal, ends the merge of every task and returns the
// outcome: deterministic, nothing time-dependent. It returns ErrAllFailed
// with the outcome when no task succeeded. Every task must have been
// folded.
func (f *Folder) Finish() (*Outcome, error) {
	if err := f.journal.Close(); err != nil {
		f.closeSinks()
		return nil, err
	}
	if err := f.merger.Close(f.job.NumTasks()); err != nil {
		f.closeSinks()
		return nil, fmt.Errorf("finish merge: %w", err)
	}
	if err := f.closeSinks(); err != nil {
		return nil, fmt.Errorf("close outputs: %w", err)
	}
	sort.Slice(f.failed, func(a, b int) bool { return f.failed[a].Index < f.failed[b].Index })
	out := &Outcome{
		Job: f.job.ID, Total: f.job.NumTasks(), Failed: int64(len(f.failed)), Resumed: f.resumed,
		Result: f.merger.Result(), Failures: f.failed, Outputs: f.outputs,
		EntryFailures: f.merger.EntryFailures(),
	}
	out.OK = out.Total - out.Failed
	if len(f.job.Manifest.Derive) > 0 {
		scalars := f.merger.Scalars()
		out.Derived = map[string]float64{}
		for name, src := range f.job.Manifest.Derive {
			e, err := job.ParseExpr(src)
			if err != nil {
				return nil, err // checked when the manifest was loaded
			}
			v, err := e.Eval(scalars)
			if err != nil {
				// The merged result stands; only this derived value is
				// missing (a name no result produced).
				if out.DeriveErrors == nil {
					out.DeriveErrors = map[string]string{}
				}
				out.DeriveErrors[name] = err.Error()
				continue
			}
			out.Derived[name] = v
		}
	}
	if out.OK == 0 {
		return out, ErrAllFailed
	}
	return out, nil
}

// openSink creates the file an ordered sink (collect, concat) streams into.
// It is recreated on every open: replaying the journal rewrites it in order.
func (f *Folder) openSink(name string) (io.Writer, error) {
	path := filepath.Join(f.cfg.Dir, "output-"+sanitize(name)+".jsonl")
	file, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create output %s: %w", name, err)
	}
	f.sinks = append(f.sinks, file)
	f.outputs[name] = path
	if f.cfg.Rows != nil {
		return io.MultiWriter(file, f.cfg.Rows), nil
	}
	return file, nil
}

func (f *Folder) closeSinks() error {
	var errs []error
	for _, file := range f.sinks {
		errs = append(errs, file.Close())
	}
	f.sinks = nil
	return errors.Join(errs...)
}

// replay folds one journal record back in.
func (f *Folder) replay(rec JournalRecord) error {
	if rec.Index < 0 || rec.Index >= f.job.NumTasks() {
		return fmt.Errorf("%w: task %d out of range", ErrJournal, rec.Index)
	}
	if f.done.get(rec.Index) {
		return nil // written twice; the first one counts
	}
	if f.cfg.RetryMachineFailures && rec.Status == StatusFailed && MachineReason(string(rec.Body)) {
		return nil // not the task's outcome: run it again
	}
	f.apply(rec, false)
	return nil
}

// apply folds a finished task into the merge state. A result the merger
// refuses becomes a failure; the returned record is what to journal.
func (f *Folder) apply(rec JournalRecord, fresh bool) JournalRecord {
	if rec.Status == StatusOK {
		if err := f.merger.Add(rec.Index, rec.Body); err != nil {
			rec = JournalRecord{Index: rec.Index, Status: StatusFailed, Body: []byte(malformedResult + err.Error())}
		} else if f.cfg.Result != nil {
			f.cfg.Result(f.job.Task(rec.Index), rec.Body)
		}
	}
	if rec.Status != StatusOK {
		rec.Status = StatusFailed
		f.merger.Skip(rec.Index)
		f.failed = append(f.failed, TaskFailure{Index: rec.Index, Reason: string(rec.Body)})
		if fresh {
			f.log.Warn("Task failed", "jobID", f.job.ID.String(), "taskIndex", rec.Index, "reason", string(rec.Body))
		}
	}
	f.done.set(rec.Index)
	f.doneCount++
	return rec
}

func (f *Folder) report() {
	if f.cfg.Progress == nil {
		return
	}
	now := f.cfg.Now()
	p := Progress{Done: f.doneCount, Failed: int64(len(f.failed)), Total: f.job.NumTasks(), Resumed: f.resumed, Elapsed: now.Sub(f.start)}
	fresh := p.Done - p.Resumed
	switch {
	case fresh <= 0:
	case f.firstAt.IsZero():
		f.firstAt, f.anchorAt, f.anchorFresh = now, now, fresh
	case now.Sub(f.firstAt) < rateSettle:
		f.anchorAt, f.anchorFresh = now, fresh
	}
	if n, span := fresh-f.anchorFresh, now.Sub(f.anchorAt); n > 0 && span >= minRateSpan {
		p.Rate = float64(n) / span.Seconds()
		p.Left = time.Duration(float64(p.Total-p.Done) / p.Rate * float64(time.Second))
	} else if p.Done == p.Total && fresh > 0 && p.Elapsed > 0 {
		p.Rate = float64(fresh) / p.Elapsed.Seconds() // too short a run to measure a rate: its mean
	}
	f.cfg.Progress(p)
}
