package pool_test

import (
	"container/heap"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// The makespan simulation measures how long a job takes in a pool of
// gaming PCs against the ideal: the real Scheduler (MemStore, a
// simulated clock injected as SchedulerConfig.Now), simulated devices
// that behave as the agent does, and simulated time that jumps from
// event to event. Nothing of the scheduler's rules is copied here: every
// lease, heartbeat, hand-back and result goes through its API.
//
// The devices: speeds spread 10x (log-uniform), two devices per owner.
// Churners (a share of the devices) are paused by their owners for 1 to
// 3 hours at random, about four times as often in the evening (18:00 to
// 23:00) as at other hours; a paused device suspends its task and keeps
// heartbeating, and hands the lease back once it was suspended for the
// job's lease timeout less 30 s, as the agent does (agent.pauseLimit). A
// replica's device goes silent (no heartbeats, its lease expires) with a
// set chance, ten times that on flaky devices; a replica fails for a
// reason of the machine with a set chance; liars (whole owners) return
// wrong results. A device heartbeats every third of its lease's time
// left (the agent's heartbeatInterval, taken again after each heartbeat)
// and asks for work again at once after a task, every 30 s while it gets
// none.
//
// Ideal: the work the job needs (each task's work times its redundancy)
// divided by the capacity actually available while it ran (the speeds of
// the devices neither paused, silent nor excluded, over time), times the
// time it ran: the makespan if the available capacity were perfectly
// divisible and never wasted. Backups' extra work: the work done by
// replicas that were cancelled because their task was decided without
// them.
//
// `make bench-makespan` runs the full size (1,000 devices, 10,000 tasks)
// and prints the table of docs/operator.md; TestMakespanSmall runs a
// small one.

var (
	makespanFull    = flag.Bool("makespan.full", false, "run the makespan simulation at full size and print the table (make bench-makespan)")
	makespanDevices = flag.Int("makespan.devices", 1000, "devices of the makespan simulation")
	makespanTasks   = flag.Int64("makespan.tasks", 10000, "tasks of the makespan simulation")
	makespanRows    = flag.String("makespan.rows", "", "comma-separated row numbers (1..) of the table to run; empty: all")
	makespanTrace   = flag.Bool("makespan.trace", false, "print the job's state every 5 simulated minutes once fewer tasks than devices are left")
	makespanSeed    = flag.Uint64("makespan.seed", 1, "seed of the makespan simulation's random choices (devices, pauses, failures)")
)

// msConfig is one simulated pool and job.
type msConfig struct {
	Name     string
	Devices  int
	Tasks    int64
	Churn    float64 // share of devices whose owners pause them
	Silent   float64 // chance per replica that its device goes silent
	Flaky    float64 // share of devices that go silent ten times as often
	Fail     float64 // chance per replica of a failure of the machine
	Liars    float64 // share of owners that return wrong results
	Tail     pool.TailConfig
	Seed     uint64
	TaskWork float64 // hours a task takes on the slowest device; default 1.2
	// EarlyHandBack: a paused device hands its task back at once, as an
	// agent that predicts a long pause does (agent's early hand-back);
	// otherwise once suspended for the lease timeout less 30 s.
	EarlyHandBack bool
}

// msResult is what one run measured.
type msResult struct {
	Makespan, Ideal time.Duration
	Work            float64 // speed-hours the job needs
	Wasted          float64 // speed-hours of replicas cancelled: their task was decided without them
	Lost            float64 // speed-hours of replicas that expired, were handed back or failed
	Replicas        int
	Calls           int
}

func (r msResult) ratio() float64 { return float64(r.Makespan) / float64(r.Ideal) }

// msEvent is one thing that happens to a device at a time.
type msEvent struct {
	at   time.Time
	seq  int
	dev  *msDevice
	kind int
	gen  int // the device's run generation it was made for (msFinish, msBeat)
}

const (
	msAsk = iota
	msFinish
	msBeat
	msPause
	msResume
	msBack     // a silent device is back
	msHandBack // a paused device hands its lease back (agent.pauseLimit)
)

type msQueue []msEvent

func (q msQueue) Len() int { return len(q) }
func (q msQueue) Less(i, k int) bool {
	if !q[i].at.Equal(q[k].at) {
		return q[i].at.Before(q[k].at)
	}
	return q[i].seq < q[k].seq
}
func (q msQueue) Swap(i, k int) { q[i], q[k] = q[k], q[i] }
func (q *msQueue) Push(x any)   { *q = append(*q, x.(msEvent)) }
func (q *msQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// msDevice is one simulated device and the agent on it.
type msDevice struct {
	id             string
	speed          float64 // work per hour
	liar           bool
	churner, flaky bool
	paused, silent bool
	excluded       bool
	pausedAt       time.Time
	availSince     time.Time // available (not paused, silent or excluded) since; zero when not
	avail          float64   // speed-hours available so far
	lease          *pool.Lease
	gen            int       // run generation: bumped whenever the running replica's plan changes
	left           float64   // work left on the replica
	done           float64   // work done on the replica
	since          time.Time // when left was last updated while computing
	fate           int       // what happens at the end of the run: msFinish, or goes silent, or fails
	fateAt         float64   // work left when the fate strikes
	waiting        bool      // an msAsk is queued
}

const (
	fateDone = iota
	fateSilent
	fateFail
)

// runMakespan runs one simulated job to its end.
func runMakespan(tb testing.TB, c msConfig) msResult {
	h := newHarness(tb.(*testing.T), pool.NewMemStore(), func(sc *pool.SchedulerConfig) {
		sc.CommitDelay = time.Microsecond
		sc.Tail = c.Tail
		sc.Trust.Secret = []byte(fmt.Sprintf("makespan %d", c.Seed))
	})
	if c.TaskWork == 0 {
		c.TaskWork = 1.2
	}
	rng := rand.New(rand.NewPCG(c.Seed, 2))
	ctx := context.Background()
	// The job starts at 15:00 UTC, so that the evening falls within it.
	now := h.Clock.Now()
	start := time.Date(now.Year(), now.Month(), now.Day(), 15, 0, 0, 0, time.UTC).Add(24 * time.Hour)
	h.Clock.Advance(start.Sub(now))
	sub := h.Device("submitter", "submitter")
	const leaseTimeout = 5 * time.Minute
	pauseLimit := leaseTimeout - min(leaseTimeout/4, 30*time.Second) // agent.pauseLimit
	const redundancy = 2
	pol := pooltest.Policy{Redundancy: redundancy, Quorum: 2, LeaseTimeout: leaseTimeout}
	j := h.Job(fmt.Sprintf("makespan-%s-%d", c.Name, c.Seed), c.Tasks, pol, sub)

	work := make([]float64, c.Tasks)
	var r msResult
	for i := range work {
		work[i] = c.TaskWork * (0.8 + 0.4*rng.Float64())
		r.Work += redundancy * work[i]
	}
	owners := (c.Devices + 1) / 2
	liarOwners := int(math.Round(c.Liars * float64(owners)))
	devs := make([]*msDevice, c.Devices)
	var q msQueue
	seq := 0
	at := func(t time.Time, d *msDevice, kind, gen int) {
		seq++
		heap.Push(&q, msEvent{at: t, seq: seq, dev: d, kind: kind, gen: gen})
	}
	for i := range devs {
		o := i / 2
		d := &msDevice{
			id:    h.Device(fmt.Sprintf("o%d", o), fmt.Sprintf("d%d", i)),
			speed: math.Pow(10, rng.Float64()), liar: o < liarOwners,
			churner: rng.Float64() < c.Churn, flaky: rng.Float64() < c.Flaky,
			availSince: start,
		}
		devs[i] = d
		d.waiting = true
		at(start.Add(time.Duration(rng.Float64()*float64(30*time.Second))), d, msAsk, 0)
	}
	// Owners' pauses: a Poisson process thinned to the hour's rate.
	rate := func(t time.Time) float64 { // pauses per hour
		if hr := t.UTC().Hour(); hr >= 18 && hr < 23 {
			return 0.4
		}
		return 0.1
	}
	const maxRate = 0.4
	nextPause := func(d *msDevice, from time.Time) {
		t := from
		for {
			t = t.Add(time.Duration(rng.ExpFloat64() / maxRate * float64(time.Hour)))
			if rng.Float64() < rate(t)/maxRate {
				at(t, d, msPause, 0)
				return
			}
		}
	}
	for _, d := range devs {
		if d.churner {
			nextPause(d, start)
		}
	}
	var end time.Time
	unavailable := func(d *msDevice, t time.Time) {
		if !d.availSince.IsZero() {
			d.avail += d.speed * t.Sub(d.availSince).Hours()
			d.availSince = time.Time{}
		}
	}
	available := func(d *msDevice, t time.Time) {
		if d.availSince.IsZero() && !d.paused && !d.silent && !d.excluded {
			d.availSince = t
		}
	}
	ask := func(d *msDevice, t time.Time) {
		if !d.waiting {
			d.waiting = true
			at(t, d, msAsk, 0)
		}
	}
	// progress brings d's replica up to t while it computes.
	progress := func(d *msDevice, t time.Time) {
		if d.lease != nil && !d.paused && !d.silent {
			w := min(d.speed*t.Sub(d.since).Hours(), d.left)
			d.left -= w
			d.done += w
		}
		d.since = t
	}
	// plan queues the end of d's replica (its finish or its fate).
	plan := func(d *msDevice, t time.Time) {
		d.gen++
		if d.paused || d.silent || d.lease == nil {
			return
		}
		target := 0.0
		if d.fate != fateDone {
			target = d.fateAt
		}
		hours := max(d.left-target, 0) / d.speed
		at(t.Add(time.Duration(hours*float64(time.Hour))), d, msFinish, d.gen)
	}
	// drop ends d's replica without a result; its work so far is lost
	// (or wasted when the task was decided without it).
	drop := func(d *msDevice, wasted bool) {
		if wasted {
			r.Wasted += d.done
		} else {
			r.Lost += d.done
		}
		d.lease = nil
		d.gen++
	}
	beat := func(d *msDevice, t time.Time, deadline time.Time) {
		iv := min(leaseTimeout/3, deadline.Sub(t)/3)
		at(t.Add(max(iv, 100*time.Millisecond)), d, msBeat, d.gen)
	}
	complete := func() bool {
		st, err := h.S.Status(j.ID)
		if err != nil {
			tb.Fatal(err)
		}
		return st.Complete
	}
	nextTrace := start
	for q.Len() > 0 {
		ev := heap.Pop(&q).(msEvent)
		t := ev.at
		if *makespanTrace && !t.Before(nextTrace) {
			nextTrace = nextTrace.Add(5 * time.Minute)
			st, _ := h.S.Status(j.ID)
			var idle, paused, gone, busy int
			for _, d := range devs {
				switch {
				case d.paused:
					paused++
				case d.silent || d.excluded:
					gone++
				case d.lease != nil:
					busy++
				default:
					idle++
				}
			}
			if left := st.Tasks - st.Accepted - st.Failed; left < int64(c.Devices) {
				fmt.Printf("%v undecided %d leased %d waiting %d retrying %d | devices idle %d busy %d paused %d gone %d\n",
					t.Sub(start).Round(time.Minute), left, st.Leased, st.Waiting, st.Retrying, idle, busy, paused, gone)
				if left <= 2 {
					for _, d := range devs {
						if d.lease != nil {
							fmt.Printf("   task %d on %s speed %.1f paused %v silent %v left %.2f done %.2f leased %v ago deadline in %v\n", d.lease.Task, d.id[:8], d.speed, d.paused, d.silent, d.left, d.done, t.Sub(h.Clock.Now()), d.lease.Deadline.Sub(t))
						}
					}
				}
			}
		}
		if d := t.Sub(h.Clock.Now()); d > 0 {
			h.Clock.Advance(d)
		}
		d := ev.dev
		switch ev.kind {
		case msAsk:
			d.waiting = false
			if d.paused || d.silent || d.excluded || d.lease != nil {
				continue
			}
			r.Calls++
			ls, err := h.S.Lease(ctx, d.id, 1)
			if errors.Is(err, pool.ErrExcluded) {
				unavailable(d, t)
				d.excluded = true
				continue
			}
			if err != nil {
				tb.Fatalf("lease: %v", err)
			}
			if len(ls) == 0 {
				d.waiting = true
				at(t.Add(30*time.Second), d, msAsk, 0)
				continue
			}
			l := ls[0]
			r.Replicas++
			d.lease, d.left, d.done, d.since = &l, work[l.Task], 0, t
			d.fate = fateDone
			p := c.Silent
			if d.flaky {
				p *= 10
			}
			switch u := rng.Float64(); {
			case u < p:
				d.fate, d.fateAt = fateSilent, d.left*rng.Float64()
			case u < p+c.Fail:
				d.fate, d.fateAt = fateFail, d.left*rng.Float64()
			}
			plan(d, t)
			beat(d, t, l.Deadline)
		case msBeat:
			if ev.gen != d.gen || d.lease == nil || d.silent {
				continue
			}
			progress(d, t)
			r.Calls++
			dl, err := h.S.Heartbeat(ctx, d.id, d.lease.ID)
			switch {
			case errors.Is(err, pool.ErrTaskDecided):
				drop(d, true)
				ask(d, t)
				continue
			case errors.Is(err, pool.ErrLeaseExpired):
				drop(d, false)
				ask(d, t)
				continue
			case err != nil:
				tb.Fatalf("heartbeat: %v", err)
			}
			beat(d, t, dl)
		case msFinish:
			if ev.gen != d.gen || d.lease == nil {
				continue
			}
			progress(d, t)
			l := *d.lease
			switch d.fate {
			case fateSilent:
				d.silent = true
				unavailable(d, t)
				drop(d, false)
				at(t.Add(30*time.Minute+time.Duration(rng.Float64()*float64(90*time.Minute))), d, msBack, 0)
				continue
			case fateFail:
				r.Calls++
				s := pool.Submission{Digest: pool.ReplicaDigest(nil, true, "worker died"), Failed: true, Reason: "worker died", Machine: true}
				if err := h.S.Submit(ctx, d.id, l.ID, s); err != nil && !errors.Is(err, pool.ErrTaskDecided) && !errors.Is(err, pool.ErrLeaseExpired) {
					tb.Fatalf("submit failure: %v", err)
				}
				drop(d, false)
				ask(d, t)
				continue
			}
			s := good(l.Task)
			if d.liar {
				s = pooltest.Result(fmt.Appendf(nil, "lie %d by %s", l.Task, d.id))
			}
			r.Calls++
			err := h.S.Submit(ctx, d.id, l.ID, s)
			switch {
			case errors.Is(err, pool.ErrTaskDecided):
				drop(d, true)
			case errors.Is(err, pool.ErrLeaseExpired):
				drop(d, false)
			case err != nil:
				tb.Fatalf("submit: %v", err)
			default:
				d.lease = nil
				d.gen++
				if complete() {
					end = t
				}
			}
			ask(d, t)
		case msPause:
			progress(d, t)
			d.paused, d.pausedAt = true, t
			unavailable(d, t)
			plan(d, t) // suspended: no finish while paused; heartbeats go on
			if d.lease != nil {
				beat(d, t, d.lease.Deadline)
				limit := pauseLimit
				if c.EarlyHandBack {
					limit = time.Second
				}
				at(t.Add(limit), d, msHandBack, d.gen)
			}
			at(t.Add(time.Hour+time.Duration(rng.Float64()*float64(2*time.Hour))), d, msResume, 0)
		case msResume:
			progress(d, t)
			d.paused = false
			available(d, t)
			plan(d, t)
			if d.lease != nil {
				beat(d, t, t.Add(3*time.Second))
			} else {
				ask(d, t)
			}
			nextPause(d, t)
		case msHandBack:
			if ev.gen != d.gen || d.lease == nil {
				continue
			}
			r.Calls++
			if err := h.S.Release(ctx, d.id, d.lease.ID); err != nil {
				tb.Fatalf("release: %v", err)
			}
			drop(d, false)
		case msBack:
			d.silent = false
			available(d, t)
			ask(d, t)
		}
		if !end.IsZero() {
			break
		}
	}
	if end.IsZero() {
		st, _ := h.S.Status(j.ID)
		tb.Fatalf("the simulation ran out of events before the job completed: %+v", st)
	}
	var avail float64
	for _, d := range devs {
		unavailable(d, end)
		avail += d.avail
		if d.lease != nil {
			r.Wasted += d.done // still computing a task decided without it
		}
	}
	r.Makespan = end.Sub(start)
	r.Ideal = time.Duration(float64(r.Makespan) * r.Work / avail)
	return r
}

const msHeader = "| scenario | backups | ranking and lease timeouts | makespan | ideal | makespan / ideal | backups' extra work | work lost to pauses, silence, failures | replicas leased |\n" +
	"|---|---|---|---|---|---|---|---|---|"

// msRow runs c and formats its row of the table.
func msRow(tb testing.TB, c msConfig) (string, msResult) {
	begin := time.Now()
	r := runMakespan(tb, c)
	onOff := func(off bool) string {
		if off {
			return "off"
		}
		return "on"
	}
	tb.Logf("%s backups %s ranking %s: %+v (%v)", c.Name, onOff(c.Tail.NoBackups), onOff(c.Tail.NoRanking), r, time.Since(begin).Round(time.Millisecond))
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %.2f | %.1f%% | %.1f%% | %d |", c.Name, onOff(c.Tail.NoBackups), onOff(c.Tail.NoRanking),
		hm(r.Makespan), hm(r.Ideal), r.ratio(), 100*r.Wasted/r.Work, 100*r.Lost/r.Work, r.Replicas), r
}

// hm writes d as "8h02m".
func hm(d time.Duration) string {
	m := int(d.Round(time.Minute).Minutes())
	return fmt.Sprintf("%dh%02dm", m/60, m%60)
}

// msScenarios are the table's rows for n devices and tasks tasks: the
// churn scenario with each change off and on, and a steady pool.
func msScenarios(n int, tasks int64, seed uint64) []msConfig {
	churn := msConfig{Name: "churn", Devices: n, Tasks: tasks, Churn: 0.3, Silent: 0.01, Flaky: 0.1, Fail: 0.01, Liars: 0.02, Seed: seed}
	early := churn
	early.Name, early.EarlyHandBack = "churn, early hand-back", true
	steady := msConfig{Name: "steady", Devices: n, Tasks: tasks, Seed: seed}
	with := func(c msConfig, backups, ranking bool) msConfig {
		c.Tail = pool.TailConfig{NoBackups: !backups, NoRanking: !ranking}
		return c
	}
	return []msConfig{
		with(churn, false, false),
		with(churn, false, true),
		with(churn, true, false),
		with(churn, true, true),
		with(early, false, false),
		with(early, true, true),
		with(steady, false, false),
		with(steady, true, true),
	}
}

// TestMakespanFull is docs/operator.md's table: make bench-makespan.
func TestMakespanFull(t *testing.T) {
	if !*makespanFull {
		t.Skip("the full-size makespan simulation runs with -makespan.full (make bench-makespan)")
	}
	fmt.Printf("%d devices, %d tasks, seed %d\n\n", *makespanDevices, *makespanTasks, *makespanSeed)
	fmt.Println(msHeader)
	for i, c := range msScenarios(*makespanDevices, *makespanTasks, *makespanSeed) {
		if *makespanRows != "" && !slices.Contains(strings.Split(*makespanRows, ","), fmt.Sprint(i+1)) {
			continue
		}
		row, _ := msRow(t, c)
		fmt.Println(row)
	}
}

// TestMakespanSmall runs the churn scenario on 60 devices and 600 tasks
// with the changes off and on: the job completes both ways, the ideal is
// below the makespan, and backups cost little extra work.
func TestMakespanSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation skipped in -short mode")
	}
	rows := msScenarios(60, 600, 1)
	_, off := msRow(t, rows[0])
	_, on := msRow(t, rows[3])
	for _, r := range []msResult{off, on} {
		if r.Ideal <= 0 || r.Ideal > r.Makespan {
			t.Errorf("ideal %v, makespan %v: the ideal must be positive and no longer", r.Ideal, r.Makespan)
		}
	}
	if off.Wasted > 0.01*off.Work {
		t.Errorf("without backups %.1f%% of the work was cancelled, want about none", 100*off.Wasted/off.Work)
	}
	if on.Wasted > 0.1*on.Work {
		t.Errorf("backups cost %.1f%% extra work, want under 10%% even in a small pool", 100*on.Wasted/on.Work)
	}
	if on.Wasted == 0 {
		t.Errorf("with backups on, no replica was cancelled: no backup decided a task (%+v)", on)
	}
}
