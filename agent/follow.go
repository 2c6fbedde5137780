package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"idlepool/job"
	"idlepool/pool"
)

// FollowConfig configures Follow.
type FollowConfig struct {
	// Dir holds the merge's journal and output files (see pool.Folder);
	// following again with the same Dir resumes. Required.
	Dir string
	// Result, Rows and Progress are as in pool.FoldConfig: each verified
	// result as it is folded in, the rows of ordered sinks, and the
	// progress after each outcome.
	Result   func(t job.Task, result []byte)
	Rows     io.Writer
	Progress func(pool.Progress)
	// Page is how many outcomes one request fetches; default 256.
	Page int
	// Poll is the wait between requests while no new outcome is ready;
	// default 250 ms.
	Poll time.Duration
	// MaxBackoff caps the wait between retries while the coordinator is
	// away; default 10 s.
	MaxBackoff time.Duration
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// ErrMergeLost means the coordinator already handed over (and deleted)
// outcomes that this device's merge journal does not hold, so the job's
// result cannot be completed here.
var ErrMergeLost = errors.New("agent: outcomes handed over earlier are missing from the merge journal")

// Follow is the merger of job j in the pool c speaks to, run by the device
// that submitted it. It pulls the job's verified outcomes in acceptance
// order and folds them, exactly as a solo run does (pool.Folder): an ok
// outcome's result into the job's accumulators, a verified failure, and an
// unverified outcome, as failures that are never folded. It journals every
// outcome and flushes the journal before acknowledging, so the coordinator
// deletes only bytes that are safe here; an interrupted Follow resumes
// from the journal. It returns the outcome once every task has one (with
// pool.ErrAllFailed when none succeeded, like pool.RunSolo). Cancelling
// ctx stops it with ctx's error; what was folded stays journaled. While
// the coordinator is away it retries with backoff.
func Follow(ctx context.Context, c *Client, j *job.Job, cfg FollowConfig) (*pool.Outcome, error) {
	if cfg.Page <= 0 {
		cfg.Page = 256
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("jobID", j.ID.String())
	f, err := pool.OpenFolder(j, pool.FoldConfig{Dir: cfg.Dir, Result: cfg.Result, Rows: cfg.Rows, Progress: cfg.Progress, Logger: log})
	if err != nil {
		return nil, err
	}
	fl := &follower{c: c, j: j, f: f, cfg: cfg, log: log}
	if err := fl.run(ctx); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return f.Finish()
}

type follower struct {
	c   *Client
	j   *job.Job
	f   *pool.Folder
	cfg FollowConfig
	log *slog.Logger
}

func (fl *follower) retry(ctx context.Context, what string, op func(context.Context) error) error {
	b := backoff{Base: 100 * time.Millisecond, Max: fl.cfg.MaxBackoff}
	for {
		err := op(ctx)
		if err == nil || !Retryable(err) {
			return err
		}
		d := b.next()
		fl.log.Debug("Coordinator unavailable, retrying", "op", what, "wait", d, "err", err)
		if err := sleep(ctx, d); err != nil {
			return err
		}
	}
}

func (fl *follower) run(ctx context.Context) error {
	var st pool.JobStatus
	if err := fl.retry(ctx, "status", func(ctx context.Context) error {
		var err error
		st, err = fl.c.Status(ctx, fl.j.ID)
		return err
	}); err != nil {
		return fmt.Errorf("job %s: %w", fl.j.ID, err)
	}
	if st.Merger != fl.c.PeerID() {
		return fmt.Errorf("%w: job %s is merged by device %s, which submitted it; this device is %s", ErrForbidden, fl.j.ID, st.Merger, fl.c.PeerID())
	}
	if done, _ := fl.f.Count(); done < st.Acked {
		return fmt.Errorf("%w: the pool handed over %d outcomes of job %s, the journal holds %d", ErrMergeLost, st.Acked, fl.j.ID, done)
	}
	after := st.Acked
	for !fl.f.Complete() {
		var page []pool.Verified
		if err := fl.retry(ctx, "results", func(ctx context.Context) error {
			var err error
			page, err = fl.c.Results(ctx, fl.j.ID, after, fl.cfg.Page)
			return err
		}); err != nil {
			return fmt.Errorf("results of job %s: %w", fl.j.ID, err)
		}
		if len(page) == 0 {
			if err := sleep(ctx, fl.cfg.Poll); err != nil {
				return err
			}
			continue
		}
		for _, v := range page {
			if err := fl.f.Fold(record(v)); err != nil {
				return err
			}
			after = max(after, v.Seq)
		}
		if err := fl.f.Sync(); err != nil {
			return err
		}
		if err := fl.retry(ctx, "ack", func(ctx context.Context) error { return fl.c.Ack(ctx, fl.j.ID, after) }); err != nil {
			return fmt.Errorf("acknowledge outcomes of job %s: %w", fl.j.ID, err)
		}
	}
	return nil
}

// record turns a verified outcome into what the Folder journals: ok
// results fold in; verified failures and unverified outcomes are failures.
func record(v pool.Verified) pool.JournalRecord {
	switch v.Status {
	case pool.OutcomeOK:
		return pool.JournalRecord{Index: v.Task, Status: pool.StatusOK, Body: v.Result}
	case pool.OutcomeFailed:
		return pool.JournalRecord{Index: v.Task, Status: pool.StatusFailed, Body: []byte(v.Reason)}
	default:
		return pool.JournalRecord{Index: v.Task, Status: pool.StatusFailed, Body: []byte("unverified: " + orDefault(v.Reason, "replicas did not agree"))}
	}
}
