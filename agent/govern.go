package agent

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"idlepool/idle"
	"idlepool/pool"
)

// Signaller samples what the owner's policy looks at. *idle.Sampler
// implements it.
//
// Sample must return promptly (well within a second) whatever its probes
// do: an unknown reading, not a wait, is the answer to a hung probe. It is
// called from one goroutine at a time.
type Signaller interface {
	Sample(ctx context.Context) idle.Signals
}

// Suspender is an executor whose running tasks can be stopped from using
// the CPU and GPU and later go on where they were. *worker.Pool
// implements it (SIGSTOP/SIGCONT; NtSuspendProcess on Windows). Both
// methods are idempotent, safe for concurrent use and return within a
// second; an error means some task could not be stopped or resumed.
type Suspender interface {
	Suspend() error
	Resume() error
}

// DefaultSamplePeriod is how often the governor samples the signals and
// asks the policy when Config.SamplePeriod is 0. With the probes' own
// timeout it bounds how long tasks go on after the owner comes back.
const DefaultSamplePeriod = 250 * time.Millisecond

// DefaultRestSamplePeriod is how often the governor samples while the
// policy says not to compute, when Config.RestSamplePeriod is 0: nothing
// needs to step aside then, and starting two seconds later goes
// unnoticed, so the machine at rest pays for an eighth of the samples.
const DefaultRestSamplePeriod = 2 * time.Second

// errHandedBack is the cause with which a task suspended longer than its
// lease allows is cancelled, so that its lease is handed back.
var errHandedBack = errors.New("agent: task suspended longer than its lease allows")

// AgentStatus is what the agent is doing and why, for `idlepool status`
// and the tray app (served by the local API, see ReadStatus). Units are in
// the names; times are wall-clock.
type AgentStatus struct {
	// Pool is the coordinator's URL.
	Pool string `json:"pool"`
	// Decision is the policy's latest decision, with its reason in words.
	// Its State is "" until the first decision.
	Decision idle.Decision `json:"decision"`
	// DecidedAt is when Decision was made; zero before the first.
	DecidedAt time.Time `json:"decidedAt"`
	// Signals are the readings Decision was made from; zero when the agent
	// has no Signaller (Config.Signals).
	Signals idle.Signals `json:"signals"`
	// Suspended reports whether running tasks are stopped (the decision
	// is not to run).
	Suspended bool `json:"suspended"`
	// SuspendedSince is when they were stopped; zero unless Suspended.
	SuspendedSince time.Time `json:"suspendedSince,omitzero"`
	// Slots is Config.Slots; ActiveSlots how many of them may take new
	// tasks now (at most Decision.Cores; 0 while waiting).
	Slots       int `json:"slots"`
	ActiveSlots int `json:"activeSlots"`
	// Running are the tasks this agent holds leases for now, running or
	// suspended.
	Running []RunningTask `json:"running"`
	// PoolName is the pool's name as it reported it; "" until joined.
	PoolName string `json:"poolName,omitempty"`
	// Always reports a Donor that computes at any time, with no idle
	// policy (DonorConfig.Always): its decision follows only the slots
	// and the GPUs (idle.DecideAlways).
	Always bool `json:"always,omitempty"`
	// Pools are the pools a Donor computes for, with what each is doing;
	// empty for a lone Agent (Pool names its one pool).
	Pools []PoolState `json:"pools,omitempty"`
	// Store is whether the local store takes writes (no new task while
	// it does not) and what was done with a damaged one at start.
	Store StoreStatus `json:"store,omitzero"`
	// Cache is the disk the job cache takes, and its cap (see Cache).
	Cache *CacheUsage `json:"cache,omitempty"`
	// ClockOffsetMS is the pool's clock minus this device's in
	// milliseconds, as measured from its answers; ClockRefused reports
	// whether the pool refused the last request for its timestamp all
	// the same; UnreachableSince is since when the pool has not answered
	// (zero while it answers). A lone Agent's; a Donor has them per pool.
	ClockOffsetMS    int64     `json:"clockOffsetMs,omitempty"`
	ClockRefused     bool      `json:"clockRefused,omitempty"`
	UnreachableSince time.Time `json:"unreachableSince,omitzero"`
	// Peers is a lone Agent's peer-to-peer data plane (a Donor has it
	// per pool); nil when it runs none.
	Peers *PeerStatus `json:"peers,omitempty"`
	// Energy is what the donation draws now and how its energy is
	// known; nil when the donor meters none (DonorConfig.Energy).
	Energy *EnergyStatus `json:"energy,omitempty"`
	// Abandoned are the latest tasks stopped without a result because
	// their lease ran out while the pool could not be reached.
	Abandoned []AbandonedTask `json:"abandoned,omitempty"`
	// HandedBack are the tasks handed back at once when they were
	// suspended for a pause expected to last (PredictPause), until the
	// device computes again.
	HandedBack []HandedBackTask `json:"handedBack,omitempty"`
}

// RunningTask is one leased task in AgentStatus.
type RunningTask struct {
	// Pool is the URL of the pool that leased it.
	Pool string `json:"pool,omitempty"`
	Job  string `json:"job"`
	// JobName is the job's name from its manifest; "" when it has none.
	JobName  string    `json:"jobName,omitempty"`
	Task     int64     `json:"task"`
	Lease    string    `json:"lease"`
	Deadline time.Time `json:"deadline"` // of the lease as last granted
	// Started is when it began to run (this device's clock); TimeLimitMS
	// is the job's time limit per task in milliseconds (0: unknown).
	Started     time.Time `json:"started,omitzero"`
	TimeLimitMS int64     `json:"timeLimitMs,omitempty"`
	// Suspended reports whether it is stopped now: the decision is not
	// to run (AgentStatus.Decision says why).
	Suspended bool `json:"suspended,omitempty"`

	// Owner is the job's owner ID and OwnerName the display name of the
	// owner's verified profile; "" when unknown or not given.
	Owner     string `json:"owner,omitempty"`
	OwnerName string `json:"ownerName,omitempty"`
}

// governor holds the policy's current decision and what follows from it:
// whether the executor is suspended and how many slots may lease. Its
// methods are safe for concurrent use.
type governor struct {
	log *slog.Logger // fixed at New: the agent's own log changes at join

	mu        sync.Mutex
	decided   bool // a first decision was made
	decision  idle.Decision
	decidedAt time.Time
	signals   idle.Signals
	suspended bool
	since     time.Time     // when suspended, with a monotonic reading
	allowed   int           // slots that may lease: slot i may when i < allowed
	changed   chan struct{} // closed and replaced on every change of the above
	wake      chan struct{} // makes serveGovernor sample now (Agent.wakeGovernor)
}

func newGovernor(log *slog.Logger) *governor {
	return &governor{log: log, changed: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// mayLease reports whether slot may take a new task, and a channel closed
// when that may have changed.
func (g *governor) mayLease(slot int) (bool, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.decided && !g.suspended && slot < g.allowed, g.changed
}

// waitLease returns nil once slot may take a new task, or ctx.Err().
func (g *governor) waitLease(ctx context.Context, slot int) error {
	for {
		ok, changed := g.mayLease(slot)
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pause returns whether tasks are suspended, since when, and a channel
// closed when that may have changed.
func (g *governor) pause() (bool, time.Time, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.suspended, g.since, g.changed
}

// latest returns the latest decision.
func (g *governor) latest() idle.Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.decision
}

// gpus returns the UUIDs of the GPUs tasks may use now.
func (g *governor) gpus() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.suspended {
		return nil
	}
	return slices.Clone(g.decision.GPUs)
}

// serveGovernor samples the signals and applies the policy's decision at
// once and then every SamplePeriod while computing or holding suspended
// tasks, every RestSamplePeriod while neither, until ctx ends; it returns
// nil then.
// Without a Signaller it decides once to run on every slot.
//
// It leaves the executor as it is when it returns: Serve's running tasks
// are being cancelled then, and killing a suspended worker needs no
// Resume.
func (a *Agent) serveGovernor(ctx context.Context) error {
	if a.cfg.Signals == nil {
		a.applyDecision(idle.Decision{
			State:  idle.StateComputing,
			Cores:  a.cfg.Slots,
			Reason: fmt.Sprintf("computing on %s (no idle policy)", plural(int64(a.cfg.Slots), "slot")),
		}, idle.Signals{})
		return nil
	}
	for {
		start := time.Now()
		sig := a.cfg.Signals.Sample(ctx)
		if ctx.Err() != nil {
			return nil
		}
		d := a.cfg.Decide(sig, time.Now())
		a.applyDecision(d, sig)
		period := a.cfg.SamplePeriod
		if !d.Run() && len(a.Running()) == 0 {
			// Nothing runs or waits suspended: nothing to step aside
			// from or to resume promptly.
			period = a.cfg.RestSamplePeriod
		}
		t := time.NewTimer(max(0, period-time.Since(start)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		case <-a.gov.wake:
			t.Stop()
		}
	}
}

// applyDecision suspends or resumes the executor as d says (on the first
// decision always, so that an executor left suspended is resumed), sets
// how many slots may lease, and wakes whoever waits on the governor.
func (a *Agent) applyDecision(d idle.Decision, sig idle.Signals) {
	g := a.gov
	run := d.Run()
	allowed := 0
	if d.MayLease() { // finishing: the running tasks go on, no new one
		allowed = min(d.Cores, a.cfg.Slots)
	}
	g.mu.Lock()
	first := !g.decided
	stateChanged := first || g.decision.State != d.State || g.decision.Cores != d.Cores || !slices.Equal(g.decision.GPUs, d.GPUs) ||
		g.decision.Finishing != d.Finishing
	reasonChanged := g.decision.Reason != d.Reason
	suspend, resume := !run && (first || !g.suspended), run && (first || g.suspended)
	g.decided, g.decision, g.decidedAt, g.signals = true, d, time.Now(), sig
	g.allowed = allowed
	if suspend {
		g.suspended, g.since = true, time.Now()
	} else if resume {
		g.suspended, g.since = false, time.Time{}
	}
	// Signal the change while still holding the lock, so that the task
	// watchers see the new pause state together with its channel.
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()

	if s, ok := a.cfg.Executor.(Suspender); ok {
		switch {
		case suspend:
			if err := s.Suspend(); err != nil {
				g.log.Error("Cannot suspend running tasks", "err", err)
			}
		case resume:
			if err := s.Resume(); err != nil {
				g.log.Error("Cannot resume tasks", "err", err)
			}
		}
	}
	if resume {
		// Computing again: the hand-backs of the pause are over.
		a.mu.Lock()
		a.handedBack = nil
		a.mu.Unlock()
	}
	if stateChanged || suspend || resume {
		a.noteChange()
	}
	switch {
	case stateChanged:
		g.log.Info("Policy decided", "state", string(d.State), "cores", d.Cores, "slots", allowed, "gpus", len(d.GPUs), "reason", d.Reason)
	case reasonChanged:
		g.log.Debug("Policy decided", "state", string(d.State), "reason", d.Reason)
	}
}

// watchPause cancels a running task with errHandedBack once the agent has
// been suspended for limit without a break: the task has held its lease
// as long as the lease allows without progress, and is handed back so
// that the pool leases it elsewhere. An executor that cannot suspend
// (no Suspender) has its tasks handed back as soon as the decision is to
// wait, since they would go on computing otherwise. It returns when ctx
// ends or it has cancelled the task.
//
// Before that, at every decision while suspended, it hands the task back
// at once with an *EarlyHandBackError when the pause is expected to last
// longer than holding the task is worth (PredictPause, handBackNow);
// started is when the task was taken (monotonic).
func (a *Agent) watchPause(ctx context.Context, limit time.Duration, started time.Time, cancel context.CancelCauseFunc) {
	if _, ok := a.cfg.Executor.(Suspender); !ok {
		limit = 0
	}
	for {
		paused, since, changed := a.gov.pause()
		var fire <-chan time.Time
		var timer *time.Timer
		if paused {
			pausedFor := time.Since(since)
			left := limit - pausedFor
			if left <= 0 {
				cancel(errHandedBack)
				return
			}
			if p, ok := PredictPause(a.gov.latest(), a.cfg.Now(), pausedFor, a.cfg.Pattern); ok &&
				handBackNow(p.Left, pausedFor, since.Sub(started), limit) {
				cancel(&EarlyHandBackError{Prediction: p})
				return
			}
			timer = time.NewTimer(left)
			fire = timer.C
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// pauseLimit is how long a task may stay suspended before its lease is
// handed back: the job's lease timeout less a safety margin of a quarter
// of it, at most 30 s, so that the release reaches the coordinator before
// the pool would count the device as gone.
func pauseLimit(leaseTimeout time.Duration) time.Duration {
	return leaseTimeout - min(leaseTimeout/4, 30*time.Second)
}

// Status returns what the agent is doing now and why. Safe for concurrent
// use, also before and after Serve.
func (a *Agent) Status() AgentStatus {
	g := a.gov
	g.mu.Lock()
	st := AgentStatus{
		Pool:           a.c.URL(),
		Decision:       g.decision,
		DecidedAt:      g.decidedAt,
		Signals:        g.signals,
		Suspended:      g.suspended,
		SuspendedSince: g.since,
		Slots:          a.cfg.Slots,
		ActiveSlots:    g.allowed,
	}
	st.Decision.GPUs, st.Decision.GPUsAllowed = slices.Clone(st.Decision.GPUs), slices.Clone(st.Decision.GPUsAllowed)
	g.mu.Unlock()
	a.mu.Lock()
	st.PoolName = a.joinedAs
	st.Abandoned = slices.Clone(a.abandoned)
	st.HandedBack = slices.Clone(a.handedBack)
	a.mu.Unlock()
	off, _ := a.c.ClockOffset()
	st.ClockOffsetMS, st.ClockRefused, st.UnreachableSince = off.Milliseconds(), a.c.ClockRefused(), a.c.UnreachableSince()
	usage := a.cache.Usage()
	st.Cache = &usage
	st.Peers = a.peerStatus()
	leases := a.Running()
	slices.SortFunc(leases, func(x, y pool.Lease) int {
		if c := bytes.Compare(x.Job[:], y.Job[:]); c != 0 {
			return c
		}
		return cmp.Compare(x.Task, y.Task)
	})
	st.Running = make([]RunningTask, 0, len(leases))
	a.mu.Lock()
	for _, l := range leases {
		ti := a.taskInfo[l.ID]
		st.Running = append(st.Running, RunningTask{Pool: st.Pool, Job: l.Job.String(), JobName: ti.jobName,
			Owner: ti.owner, OwnerName: ti.ownerName, Task: l.Task, Lease: l.ID,
			Deadline: l.Deadline, Started: ti.started, TimeLimitMS: ti.limit.Milliseconds(), Suspended: st.Suspended})
	}
	a.mu.Unlock()
	st.Store = a.health.status(a.heldCount())
	return st
}

// logHandedBack notes a lease handed back after a long pause.
func logHandedBack(log *slog.Logger, limit time.Duration) {
	log.Info("Task suspended longer than its lease allows, handing it back", "limit", limit)
}
