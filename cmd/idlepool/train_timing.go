package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"idlepool/pool"
	"idlepool/worker"
)

// taskClock measures how long tasks ran in this machine's workers: the
// time during which at least one task was running (busy), so that a
// training round's wall time splits into computing and everything around
// it. A task's time runs from handing it to a worker to its result, so it
// includes instantiating the module. Safe for concurrent use.
type taskClock struct {
	mu     sync.Mutex
	now    func() time.Time
	active int
	since  time.Time
	busy   time.Duration
}

// wrap returns an executor that runs tasks on e and times them.
func (c *taskClock) wrap(e pool.Executor) pool.Executor { return &timedExecutor{exec: e, clock: c} }

// Busy returns the busy time so far, counting a running task up to now.
func (c *taskClock) Busy() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.busy
	if c.active > 0 {
		b += c.now().Sub(c.since)
	}
	return b
}

func (c *taskClock) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active == 0 {
		c.since = c.now()
	}
	c.active++
}

func (c *taskClock) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active--
	if c.active == 0 {
		c.busy += c.now().Sub(c.since)
	}
}

type timedExecutor struct {
	exec  pool.Executor
	clock *taskClock
}

func (e *timedExecutor) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	e.clock.start()
	defer e.clock.stop()
	return e.exec.Run(ctx, req)
}

// jobTiming is where one job of a training round spent its time.
type jobTiming struct {
	// Seconds is the job's wall time as the driver saw it: alone,
	// planning (hashing the inputs), snapshotting the inputs, starting
	// workers, the tasks and the merge; on a pool, submitting, leasing,
	// fetching, computing on the donors, verifying and merging.
	Seconds float64 `json:"seconds"`
	// TaskSeconds is, alone, the time during which at least one of the
	// job's tasks ran in a worker; 0 on a pool, whose tasks run on the
	// donors.
	TaskSeconds float64 `json:"task_seconds"`
}

// roundTiming splits a round's wall time (trainRound.Seconds).
type roundTiming struct {
	Grad  jobTiming `json:"grad"`  // the shards' job
	Apply jobTiming `json:"apply"` // the update step's job
	// Eval is the evaluation job's; zero in a round after which the
	// held-out set was not evaluated.
	Eval jobTiming `json:"eval"`
	// DriverSeconds is the rest: writing the manifests, the merged
	// update and evaluation, the model and the lineage.
	DriverSeconds float64 `json:"driver_seconds"`
	// OverheadShare is, alone, the share of the round's wall time in
	// which no task ran: 1 − task seconds ÷ round seconds.
	OverheadShare float64 `json:"overhead_share,omitempty"`
}

// taskSeconds is the time tasks ran in the round's jobs, alone.
func (tm *roundTiming) taskSeconds() float64 {
	return tm.Grad.TaskSeconds + tm.Apply.TaskSeconds + tm.Eval.TaskSeconds
}

// timingSummary is the mean split of the lineage's rounds that have one.
type timingSummary struct {
	Rounds        int         `json:"rounds"`
	Seconds       float64     `json:"seconds"`
	Mean          roundTiming `json:"mean"`
	RoundsPerHour float64     `json:"rounds_per_hour"`
}

// secs rounds d to milliseconds, in seconds.
func secs(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

// summarize is the timing summary of the rounds with a timing, or nil
// when there are none.
func summarize(rounds []trainRound) *timingSummary {
	var s timingSummary
	for _, r := range rounds {
		if r.Timing == nil {
			continue
		}
		s.Rounds++
		s.Seconds += r.Seconds
		s.Mean.Grad.Seconds += r.Timing.Grad.Seconds
		s.Mean.Grad.TaskSeconds += r.Timing.Grad.TaskSeconds
		s.Mean.Apply.Seconds += r.Timing.Apply.Seconds
		s.Mean.Apply.TaskSeconds += r.Timing.Apply.TaskSeconds
		s.Mean.Eval.Seconds += r.Timing.Eval.Seconds
		s.Mean.Eval.TaskSeconds += r.Timing.Eval.TaskSeconds
		s.Mean.DriverSeconds += r.Timing.DriverSeconds
	}
	if s.Rounds == 0 || s.Seconds <= 0 {
		return nil
	}
	n := float64(s.Rounds)
	mean := func(v float64) float64 { return math.Round(v/n*1000) / 1000 }
	m := &s.Mean
	if tasks := m.taskSeconds(); tasks > 0 {
		m.OverheadShare = math.Round((1-tasks/s.Seconds)*1000) / 1000
	}
	m.Grad.Seconds, m.Grad.TaskSeconds = mean(m.Grad.Seconds), mean(m.Grad.TaskSeconds)
	m.Apply.Seconds, m.Apply.TaskSeconds = mean(m.Apply.Seconds), mean(m.Apply.TaskSeconds)
	m.Eval.Seconds, m.Eval.TaskSeconds = mean(m.Eval.Seconds), mean(m.Eval.TaskSeconds)
	m.DriverSeconds = mean(m.DriverSeconds)
	s.RoundsPerHour = math.Round(3600*n/s.Seconds*10) / 10
	s.Seconds = math.Round(s.Seconds*100) / 100
	return &s
}

// printTiming writes the summary's lines under the table.
func printTiming(w io.Writer, s *timingSummary) {
	if s == nil {
		return
	}
	m := s.Mean
	fmt.Fprintf(w, "time: %d rounds in %.1fs (%.0f rounds an hour); a round on average:\n", s.Rounds, s.Seconds, s.RoundsPerHour)
	if m.taskSeconds() == 0 { // on a pool: the tasks ran elsewhere
		fmt.Fprintf(w, "  shards' job %.2fs, update step %.2fs, evaluation %.2fs (each: submitted, leased, computed, verified and merged), driver %.2fs\n",
			m.Grad.Seconds, m.Apply.Seconds, m.Eval.Seconds, m.DriverSeconds)
		return
	}
	fmt.Fprintf(w, "  shards' job %.2fs (tasks running %.2fs), update step %.2fs (tasks running %.2fs), evaluation %.2fs (tasks running %.2fs), driver %.2fs; no task running %.0f%% of the time\n",
		m.Grad.Seconds, m.Grad.TaskSeconds, m.Apply.Seconds, m.Apply.TaskSeconds, m.Eval.Seconds, m.Eval.TaskSeconds, m.DriverSeconds, 100*m.OverheadShare)
}

// words says in brief where the round's time went, for its progress line:
// ", tasks running 3.1s" alone; "" on a pool.
func (tm *roundTiming) words() string {
	if tasks := tm.taskSeconds(); tasks > 0 {
		return fmt.Sprintf(", tasks running %.1fs", tasks)
	}
	return ""
}
