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
	// Gather is the wait after a page that was not full (pageFull:
	// outcomes trickling in, not a backlog) before the next request,
	// so that the next page carries the outcomes of that while: at
	// 1,300 outcomes a second one page, one journal flush and one
	// acknowledgement carry about a hundred of them rather than a
	// handful, and each page not asked for saves the coordinator two
	// requests (the page and its acknowledgement). Default
	// DefaultGather; negative: none, the next request at once.
	Gather time.Duration
	// MaxBackoff caps the wait between retries while the coordinator is
	// away; default 10 s.
	MaxBackoff time.Duration
	// Activity, if set, receives what the pool is doing about the job
	// (Describe: its progress, the donors' live offers, results waiting
	// for a quorum, why it cannot progress) at the start and every
	// StatusPoll while no outcome arrives.
	Activity func(Activity)
	// Notice, if set, receives one-off messages for the person, such as
	// a job withdrawn from the pool because the merge journal already
	// holds its result.
	Notice func(string)
	// StatusPoll is the wait between reads of the job's status and the
	// pool's offers; default 5 s.
	StatusPoll time.Duration
	// Now is the clock of the time-left estimate; default time.Now.
	Now func() time.Time
	// FetchResult, if set, fetches the bytes of an ok outcome whose result
	// the devices kept (Verified.Ref) over the data plane, checked
	// against its digest (Seeder.FetchResult); an error wrapping
	// castore.ErrNoSource means no holder could give it. Without it such
	// an outcome ends Follow with an error.
	FetchResult func(ctx context.Context, v pool.Verified) ([]byte, error)
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// DefaultGather is FollowConfig.Gather's default: a tenth of a second
// added to when an outcome is merged, against two requests to the
// coordinator (the page and its acknowledgement) for every handful of
// outcomes of a busy job (docs/benchmarks.md, "The merger's requests").
const DefaultGather = 100 * time.Millisecond

// fullPageBytes is the result bytes at which a page counts as full
// whatever its length: half of what a coordinator puts in one results
// answer (64 MiB, cut before the result that would pass it), so that a
// backlog of large results is followed at once.
const fullPageBytes = 32 << 20

// pageFull reports whether page, asked for with at most max outcomes,
// came back full: max outcomes, or fullPageBytes of results or more. A
// page not full means the merger has everything decided so far.
func pageFull(page []pool.Verified, max int) bool {
	if len(page) >= max {
		return true
	}
	n := 0
	for _, v := range page {
		n += len(v.Result)
	}
	return n >= fullPageBytes
}

// errWaitKept means an outcome's kept result could not be fetched yet:
// Follow acknowledges what it folded and asks for the outcome again.
var errWaitKept = errors.New("agent: waiting for a kept result")

// ErrJobCancelled means the job was cancelled in the pool by its owner:
// it leases nothing more, and its result cannot be completed there.
var ErrJobCancelled = errors.New("agent: the job was cancelled in the pool by its owner")

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
// from the journal. After a page that was not full it waits
// FollowConfig.Gather before it asks again, so an outcome is folded up
// to that much later than it was decided. It returns the outcome once
// every task has one (with pool.ErrAllFailed when none succeeded, like
// pool.RunSolo). Cancelling ctx stops it with ctx's error; what was
// folded stays journaled. While the coordinator is away it retries with
// backoff. A job cancelled in the
// pool ends it with ErrJobCancelled. When the journal already holds
// every outcome (the job finished here, say through another pool) and
// the pool's job is not finished, Follow withdraws it from the pool
// (Client.Cancel), so that no donor computes what nobody merges.
//
// The progress it reports (FollowConfig.Progress) estimates the time left
// from how fast the pool returns results over the last few minutes,
// counting tasks whose results wait for a quorum, and gives none while
// that stalls.
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
	if cfg.Gather == 0 {
		cfg.Gather = DefaultGather
	}
	if cfg.StatusPoll <= 0 {
		cfg.StatusPoll = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("jobID", j.ID.String())
	fl := &follower{c: c, j: j, cfg: cfg, log: log}
	progress := cfg.Progress
	if progress != nil {
		progress = func(p pool.Progress) {
			p.Left, p.Rate = fl.est.left(p.Total)
			if fl.stuck {
				p.Left = 0
			}
			cfg.Progress(p)
		}
	}
	f, err := pool.OpenFolder(j, pool.FoldConfig{Dir: cfg.Dir, Result: cfg.Result, Rows: cfg.Rows, Progress: progress, Logger: log})
	if err != nil {
		return nil, err
	}
	fl.f = f
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

	est   estimator
	stuck bool           // the last activity said the job cannot progress
	idle  bool           // the last look's activity was Idle (nothing computing the waiting results)
	lost  map[int64]bool // kept results reported lost, by Seq (told once)
	// awaySince is when requests started to go unanswered (zero while
	// the pool answers); awayTold, whether Notice was told.
	awaySince time.Time
	awayTold  bool
}

// look reads the job's status and the pool's offers, feeds the time-left
// estimate and reports the activity. A pool without offers (404) is
// described without them; other failures are left for the next look.
func (fl *follower) look(ctx context.Context) (pool.JobStatus, error) {
	st, err := fl.c.Status(ctx, fl.j.ID)
	if err != nil {
		return st, err
	}
	now := fl.cfg.Now()
	fl.est.observe(now, st.Accepted+st.Failed+st.Waiting, st.Accepted+st.Failed)
	live, err := fl.c.Offers(ctx)
	if err != nil && !errors.Is(err, ErrNotFound) {
		fl.log.Debug("Cannot read the pool's offers", "err", err)
		return st, nil
	}
	a := Describe(st, ListingOf(fl.j, st), live, now)
	idle := a.Idle
	if idle && !fl.idle {
		a.Quorum = "" // a moment's lull, until the next look says it again
	}
	fl.idle = idle
	fl.stuck = a.Stuck != "" || a.Quorum != ""
	if fl.cfg.Activity != nil {
		fl.cfg.Activity(a)
	}
	return st, nil
}

func (fl *follower) retry(ctx context.Context, what string, op func(context.Context) error) error {
	b := backoff{Base: 100 * time.Millisecond, Max: fl.cfg.MaxBackoff}
	for {
		err := op(ctx)
		if err == nil {
			fl.answered()
		}
		if err == nil || !Retryable(err) {
			return err
		}
		fl.unanswered(err)
		d := b.after(err)
		fl.log.Debug("Coordinator unavailable, retrying", "op", what, "wait", d, "err", err)
		if err := sleep(ctx, d); err != nil {
			return err
		}
	}
}

// awayNotice is how long the pool must go unanswering before Follow
// tells the person (Notice): one refused request is no news, but a
// take-over in a cluster (about 10 s) or a restart left the progress
// line silent with nothing said.
const awayNotice = 3 * time.Second

// unanswered notes that a request was not answered (err is Retryable),
// and says so once the pool has not answered for awayNotice.
func (fl *follower) unanswered(err error) {
	now := fl.cfg.Now()
	if fl.awaySince.IsZero() {
		fl.awaySince = now
	}
	if fl.awayTold || now.Sub(fl.awaySince) < awayNotice || fl.cfg.Notice == nil {
		return
	}
	fl.awayTold = true
	fl.cfg.Notice(fmt.Sprintf("the pool at %s is not answering (%s); still trying", fl.c.URL(), UnansweredWords(err)))
}

// answered notes that a request was answered, saying so where the
// pool's silence was told.
func (fl *follower) answered() {
	if fl.awayTold && fl.cfg.Notice != nil {
		fl.cfg.Notice(fmt.Sprintf("the pool answers again, after %s", fl.cfg.Now().Sub(fl.awaySince).Round(time.Second)))
	}
	fl.awaySince, fl.awayTold = time.Time{}, false
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
	if fl.f.Complete() {
		if !st.Complete && !st.Cancelled {
			if _, err := fl.c.Cancel(ctx, fl.j.ID); err != nil {
				fl.log.Warn("Cannot withdraw a job whose result the merge journal holds", "err", err)
			} else if fl.cfg.Notice != nil {
				fl.cfg.Notice(fmt.Sprintf("the merge journal already holds every result of job %s: withdrew it from pool %s, where nobody would merge it", fl.j.ID.String()[:12], fl.c.URL()))
			}
		}
		return nil
	}
	after := st.Acked
	lastLook := time.Time{}
	cancelled := false
	for !fl.f.Complete() {
		if now := time.Now(); now.Sub(lastLook) >= fl.cfg.StatusPoll {
			lastLook = now
			st, err := fl.look(ctx)
			switch {
			case err != nil && ctx.Err() != nil:
				return ctx.Err()
			case err != nil:
				fl.log.Debug("Cannot read the job's status", "err", err)
			case st.Cancelled:
				cancelled = true // merge what was accepted, then stop
			}
		}
		var page []pool.Verified
		wait, asked := fl.wait(lastLook), time.Now()
		if err := fl.retry(ctx, "results", func(ctx context.Context) error {
			var err error
			page, err = fl.c.ResultsWait(ctx, fl.j.ID, after, fl.cfg.Page, wait)
			return err
		}); err != nil {
			return fmt.Errorf("results of job %s: %w", fl.j.ID, err)
		}
		if len(page) == 0 {
			if cancelled {
				done, _ := fl.f.Count()
				return fmt.Errorf("%w: job %s, with %d of %d outcomes merged here", ErrJobCancelled, fl.j.ID, done, fl.j.NumTasks())
			}
			if fl.c.batched(ctx) && time.Since(asked) >= wait {
				continue // the coordinator waited for outcomes
			}
			if err := sleep(ctx, fl.cfg.Poll); err != nil {
				return err
			}
			continue
		}
		waitKept := false
		for _, v := range page {
			if v.Status == pool.OutcomeOK && v.Ref != nil && v.Result == nil {
				b, err := fl.fetchKept(ctx, v)
				if errors.Is(err, errWaitKept) {
					waitKept = true // the outcomes after it wait their turn
					break
				}
				if err != nil {
					return err
				}
				v.Result = b
			}
			if err := fl.f.Fold(record(v)); err != nil {
				return err
			}
			after = max(after, v.Seq)
		}
		if err := fl.f.Sync(); err != nil {
			return err
		}
		if waitKept {
			if done, _ := fl.f.Count(); done > st.Acked {
				if err := fl.retry(ctx, "ack", func(ctx context.Context) error { return fl.c.Ack(ctx, fl.j.ID, after) }); err != nil {
					return fmt.Errorf("acknowledge outcomes of job %s: %w", fl.j.ID, err)
				}
			}
			if err := sleep(ctx, max(fl.cfg.Poll, time.Second)); err != nil {
				return err
			}
			continue
		}
		if err := fl.retry(ctx, "ack", func(ctx context.Context) error { return fl.c.Ack(ctx, fl.j.ID, after) }); err != nil {
			return fmt.Errorf("acknowledge outcomes of job %s: %w", fl.j.ID, err)
		}
		if !pageFull(page, fl.cfg.Page) && fl.cfg.Gather > 0 && !fl.f.Complete() {
			if err := sleep(ctx, fl.cfg.Gather); err != nil {
				return err
			}
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

// wait is how long a results request may wait on the coordinator for a
// new outcome: until the next look at the job's status, at most a second
// and at least Poll.
func (fl *follower) wait(lastLook time.Time) time.Duration {
	return max(min(fl.cfg.StatusPoll-time.Since(lastLook), time.Second), fl.cfg.Poll)
}

// fetchKept fetches the kept result of outcome v from the devices that
// hold it. A fetch fails only once every holder the tracker names failed
// (each within the data plane's connect timeout, 30 s), so then it tells
// the pool, which has the task computed again (Client.ResultLost), and
// returns errWaitKept: the outcome is asked for again, with the holders
// the pool names by then.
func (fl *follower) fetchKept(ctx context.Context, v pool.Verified) ([]byte, error) {
	if fl.cfg.FetchResult == nil {
		return nil, fmt.Errorf("task %d of job %s: %w: its result is kept by the devices that computed it; follow the job from a home where no other idlepool process (a donor) runs its data plane",
			v.Task, fl.j.ID, errNoDataPlane)
	}
	b, err := fl.cfg.FetchResult(ctx, v)
	if err == nil || ctx.Err() != nil {
		return b, ctx.Err()
	}
	fl.log.Info("Cannot fetch a result kept by the devices; reporting it lost", "task", v.Task, "seq", v.Seq, "holders", len(v.Holders), "err", err)
	if err := fl.retry(ctx, "lost", func(ctx context.Context) error { return fl.c.ResultLost(ctx, fl.j.ID, v.Seq) }); err != nil {
		return nil, fmt.Errorf("report the result of task %d of job %s lost: %w", v.Task, fl.j.ID, err)
	}
	if !fl.lost[v.Seq] && fl.cfg.Notice != nil {
		fl.cfg.Notice(fmt.Sprintf("the devices that kept the result of task %d are gone: the pool has it computed again", v.Task))
	}
	if fl.lost == nil {
		fl.lost = map[int64]bool{}
	}
	fl.lost[v.Seq] = true
	return nil, errWaitKept
}
