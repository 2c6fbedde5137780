package pool

import (
	"slices"
	"time"
)

// A job ends when its last task ends. Near the end (the tail) the last
// tasks often sit on a slow device, or on one whose owner came back and
// paused it; the rest of the pool waits idle. The scheduler therefore
// learns what each device has shown (shown: its pace against each job's
// median, the share of its leases it kept alive, how often at each hour
// of day it stalled) and uses it three ways:
//
//   - Backups: once a job's undecided tasks are no more than the devices
//     that asked for work and got none (idle), an idle device (one that
//     holds no replica) expected to finish a running task 1.5 times
//     sooner than the task's replicas are estimated to is leased a backup
//     replica of it (backupFor), the task estimated to end last first, two
//     backups per task at most. A replica's end is estimated from its
//     device's pace; one already past it is guessed to take as long again
//     as it has taken (it is paused or stuck). A check (check.go) is
//     backed up only by an owner the pool draws for it. A backup is a
//     replica like any other: the first result that completes the task's
//     verification decides it and the replicas still running are
//     cancelled (Heartbeat and Submit answer ErrTaskDecided); a backup is
//     never of the owner (outside "owner" pools) or device of a replica
//     of the task, so it never counts as a second agreement of one owner,
//     and a device never holds two replicas of one task, so nobody is
//     credited twice. While a task has a backup, the leases of its
//     replicas are extended by BackupWindow at most, so that the one that
//     loses hears it at its next heartbeat, within a third of that.
//   - The tail to the likely finishers: in the tail, a device expected to
//     take more than twice the job's median is leased nothing of the job
//     while enough faster devices wait idle that may take what is left
//     (slowInTail).
//   - Lease timeouts from the device's record: a device whose leases
//     expired (it went silent: a crash, a lid closed, a lost network)
//     gets a shorter lease, down to a quarter of the job's lease timeout
//     (and not under MinLeaseTimeout), so that a task it drops comes back
//     sooner; every other device gets the job's (leaseTimeout).
//
// The record is what the scheduler itself saw of the device's leases,
// nothing the device says about its owner (DESIGN.md invariant 19): a
// pause is inferred from a lease handed back (agents hand back a task
// suspended too long) or a replica returned far slower than the device's
// own pace. It lives in memory, is updated in constant time per lease
// event, and is learned again after a restart.

// TailConfig holds the rules for a job's tail (see above). The zero value
// turns everything on with the defaults.
type TailConfig struct {
	// NoBackups turns backup replicas off.
	NoBackups bool
	// NoRanking turns the device record's uses off: every device is
	// expected to take the job's median, slow devices are leased the
	// tail like any other, and every lease gets the job's lease timeout.
	// Backups (unless NoBackups) then go to tasks overdue against the
	// median only, as MapReduce's backup tasks do.
	NoRanking bool
	// BackupWindow bounds how far a heartbeat extends a lease of a task
	// that has a backup (and a backup's first lease); default
	// DefaultBackupWindow. The agent heartbeats every third of the time
	// its lease has left, so the replica that loses stops within a third
	// of this after the task is decided.
	BackupWindow time.Duration
	// MinLeaseTimeout is the shortest lease timeout a device's record
	// may bring its leases down to; default DefaultMinLeaseTimeout. A
	// job whose own lease timeout is shorter keeps its own.
	MinLeaseTimeout time.Duration
	// IdleWithin is how recently a device must have asked for work and
	// got none to count as idle; default DefaultIdleWithin.
	IdleWithin time.Duration
}

// Defaults of TailConfig.
const (
	DefaultBackupWindow    = 30 * time.Second
	DefaultMinLeaseTimeout = 30 * time.Second
	DefaultIdleWithin      = 2 * time.Minute
)

// Constants of the device record and the tail rules.
const (
	paceSamples   = 63   // durations of finished replicas kept per job for its median
	paceMinimum   = 5    // finished replicas before a job's median is used
	shownAlpha    = 0.25 // weight of the newest sample in a device's moving averages
	shownMinimum  = 3    // leases before a device's kept share or hourly stalls are used (its pace counts from one)
	stallFactor   = 3    // a replica this many times slower than its device's pace was paused
	slowFactor    = 2    // a device expected to take this many medians is slow in the tail
	backupMargin  = 1.5  // a backup must be expected to end this many times sooner
	maxBackups    = 2    // live backups of one task at most
	pausePenalty  = 2.0  // expected medians lost per stall share (a pause costs about two medians)
	shownHourDrop = 0.98 // decay of the hourly counts per lease, so the pattern follows change
)

// shown is what the scheduler has seen of one device.
type shown struct {
	pace    float64     // moving average of elapsed/median of the job, per returned replica
	paced   int         // replicas that went into pace
	kept    float64     // moving average: 1 per replica returned in time, 0 per lease expired
	ended   int         // leases that went into kept
	leases  [24]float32 // decayed count of leases granted, by UTC hour
	stalls  [24]float32 // decayed count of stalls seen (hand-backs, very late returns), by UTC hour
	idleAt  time.Time   // when it last asked for work and got none; zero once it got some
	idleExp float64     // its expected medians when it became idle
	listed  bool        // in Scheduler.idle
	live    int         // its live replicas
}

// paceState is a job's recent replica durations, for its median.
type paceState struct {
	durs   [paceSamples]time.Duration
	n      int // samples written (the ring holds min(n, paceSamples))
	median time.Duration
}

// add records a finished replica's duration and recomputes the median.
func (p *paceState) add(d time.Duration) {
	p.durs[p.n%paceSamples] = d
	p.n++
	k := min(p.n, paceSamples)
	var buf [paceSamples]time.Duration
	s := buf[:k]
	copy(s, p.durs[:k])
	slices.Sort(s)
	p.median = s[k/2]
}

// known reports whether the median is based on enough replicas.
func (p *paceState) known() bool { return p.n >= paceMinimum }

// shownOf returns device id's record, creating it.
func (s *Scheduler) shownOf(id string) *shown {
	d := s.shown[id]
	if d == nil {
		d = &shown{kept: 1}
		s.shown[id] = d
	}
	return d
}

// ewma moves avg towards x.
func ewma(avg, x float64, n int) float64 {
	if n == 0 {
		return x
	}
	return avg + shownAlpha*(x-avg)
}

// medians is how many of its job's medians device d is expected to take
// for a replica, counting the share of leases it lets expire and how
// often it stalls at hour h; 1 for a newcomer or with NoRanking.
func (s *Scheduler) medians(d *shown, h int) float64 {
	if s.cfg.Tail.NoRanking || d == nil {
		return 1
	}
	pace := 1.0
	if d.paced > 0 {
		pace = d.pace
	}
	kept := 1.0
	if d.ended >= shownMinimum {
		kept = max(d.kept, 0.1)
	}
	return pace / kept * (1 + pausePenalty*d.stallShare(h))
}

// stallShare is the share of d's leases at hour h that stalled, or over
// all hours when it has few leases at h.
func (d *shown) stallShare(h int) float64 {
	if d.leases[h] >= shownMinimum {
		return float64(min(d.stalls[h]/d.leases[h], 1))
	}
	var l, st float32
	for i := range d.leases {
		l, st = l+d.leases[i], st+d.stalls[i]
	}
	if l < shownMinimum {
		return 0
	}
	return float64(min(st/l, 1))
}

// leaseTimeout is the lease timeout of device peer's leases of js: the
// job's, shortened in proportion to the share of leases the device let
// expire once it has let some expire, never under a quarter of the job's
// nor under MinLeaseTimeout (unless the job's is shorter still). s.mu is
// held.
func (s *Scheduler) leaseTimeout(js *jobState, peer string) time.Duration {
	base := js.pol.LeaseTimeout.Duration
	if s.cfg.Tail.NoRanking {
		return base
	}
	d := s.shown[peer]
	if d == nil || d.ended < shownMinimum || d.kept >= 1 {
		return base
	}
	floor := min(base, max(base/4, s.tailMinLease()))
	t := time.Duration(float64(base) * d.kept * d.kept).Round(time.Millisecond)
	return min(max(t, floor), base)
}

// heartbeatTimeout is how far a heartbeat of r extends its lease: its
// device's lease timeout, or BackupWindow at most while its task has a
// backup. s.mu is held.
func (s *Scheduler) heartbeatTimeout(r *replica) time.Duration {
	t := s.leaseTimeout(r.js, r.rec.Peer)
	if r.ts != nil && r.ts.backedUp() {
		t = min(t, s.backupWindow())
	}
	return t
}

func (s *Scheduler) backupWindow() time.Duration {
	if w := s.cfg.Tail.BackupWindow; w > 0 {
		return w
	}
	return DefaultBackupWindow
}

func (s *Scheduler) tailMinLease() time.Duration {
	if m := s.cfg.Tail.MinLeaseTimeout; m > 0 {
		return m
	}
	return DefaultMinLeaseTimeout
}

func (s *Scheduler) idleWithin() time.Duration {
	if w := s.cfg.Tail.IdleWithin; w > 0 {
		return w
	}
	return DefaultIdleWithin
}

// backedUp reports whether a live replica of ts is a backup.
func (ts *taskState) backedUp() bool {
	for _, r := range ts.live {
		if r.backup {
			return true
		}
	}
	return false
}

// leased notes in peer's record that it was leased a replica at now.
// s.mu is held.
func (s *Scheduler) noteLeased(peer string, now time.Time) {
	d := s.shownOf(peer)
	h := now.UTC().Hour()
	for i := range d.leases {
		d.leases[i] *= shownHourDrop
		d.stalls[i] *= shownHourDrop
	}
	d.leases[h]++
	if !d.idleAt.IsZero() {
		d.idleAt, s.idleAt = time.Time{}, time.Time{} // idleCount counts again
	}
}

// noteIdle notes that p asked for work at now and got none. s.mu is held.
func (s *Scheduler) noteIdle(p Peer, now time.Time) {
	d := s.shownOf(p.ID)
	if !d.listed {
		d.listed = true
		s.idle = append(s.idle, p.ID)
	}
	d.idleAt, d.idleExp = now, s.medians(d, now.UTC().Hour())
	s.idleAt = time.Time{} // idleCount counts again
}

// idleCount returns how many devices asked for work within IdleWithin
// of now and got none, and how many of those are not slow (expected to
// take at most slowFactor medians). s.mu is held.
func (s *Scheduler) idleCount(now time.Time) (all, fast int) {
	if now.Equal(s.idleAt) {
		return s.idleAll, s.idleFast
	}
	keep := s.idle[:0]
	for _, id := range s.idle {
		d := s.shown[id]
		if d == nil {
			continue
		}
		if d.idleAt.IsZero() || now.Sub(d.idleAt) > s.idleWithin() {
			d.idleAt, d.listed = time.Time{}, false
			continue
		}
		keep = append(keep, id)
		all++
		if d.idleExp <= slowFactor {
			fast++
		}
	}
	s.idle = keep
	s.idleAt, s.idleAll, s.idleFast = now, all, fast
	return all, fast
}

// returnedInTime records replica r, returned at now, in its device's
// record and its job's pace. s.mu is held.
func (s *Scheduler) returnedInTime(r *replica, now time.Time) {
	d := s.shownOf(r.rec.Peer)
	d.kept = ewma(d.kept, 1, d.ended)
	d.ended++
	js := r.js
	elapsed := max(now.Sub(r.rec.Created), time.Millisecond)
	if js.pace.known() && js.pace.median > 0 {
		ratio := float64(elapsed) / float64(js.pace.median)
		if d.paced >= shownMinimum && ratio > stallFactor*d.pace {
			d.stalls[r.rec.Created.UTC().Hour()]++ // paused along the way: not its pace
		} else {
			d.pace = ewma(d.pace, ratio, d.paced)
			d.paced++
		}
	}
	js.pace.add(elapsed)
	js.touch()
}

// leaseEnded records in r's device's record that its lease ended
// without a result (state ReplicaExpired or ReplicaReleased). s.mu is
// held.
func (s *Scheduler) leaseEnded(r *replica, state string) {
	d := s.shownOf(r.rec.Peer)
	switch state {
	case ReplicaExpired:
		d.kept = ewma(d.kept, 0, d.ended)
		d.ended++
	case ReplicaReleased:
		d.stalls[s.now().UTC().Hour()]++ // agents hand back a task paused too long
	}
}

// inTail reports whether js's remaining work is no more than the idle
// devices: every task started, and the undecided ones no more than idle.
func inTail(js *jobState, idle int) bool {
	return js.next == js.tasks && int64(len(js.active)) <= int64(idle)
}

// mayBackup reports whether js may have a backup to lease to an idle
// device now: backups on, its median known, and in its tail counting one
// more idle device (the one asking). s.mu is held.
func (s *Scheduler) mayBackup(js *jobState, now time.Time) bool {
	if s.cfg.Tail.NoBackups || !js.pace.known() || js.next < js.tasks {
		return false
	}
	idle, _ := s.idleCount(now)
	return inTail(js, idle+1)
}

// slowInTail reports whether p should be leased nothing of js now: js's
// tasks still to lease are fewer than the idle devices that are not slow
// and may take one of them (fastIdleFor), and p is slow (expected to take
// over slowFactor of js's medians). s.mu is held.
func (s *Scheduler) slowInTail(js *jobState, p Peer, now time.Time) bool {
	if s.cfg.Tail.NoRanking || !js.pace.known() {
		return false
	}
	if s.medians(s.shown[p.ID], now.UTC().Hour()) <= slowFactor {
		return false
	}
	left := int64(len(js.want)) + js.tasks - js.next
	if _, fast := s.idleCount(now); left >= int64(fast) {
		return false // not enough fast idle devices, whatever they may take
	}
	return left < s.fastIdleFor(js, p, now, left+1)
}

// fastIdleFor counts, up to max, the idle devices other than p that are
// not slow and may take a replica of js now: a fresh task when js has
// one, else a task that wants a replica they may compute. An idle device
// that may take none (it voted on every task left, the job does not allow
// it, it is excluded) finishes nothing of js sooner than p: counted, it
// kept a split task from the only devices that may settle it. s.mu is
// held; idleCount was called at now.
func (s *Scheduler) fastIdleFor(js *jobState, p Peer, now time.Time, max int64) int64 {
	var n int64
	for _, id := range s.idle {
		d := s.shown[id]
		q, ok := s.peers[id]
		if id == p.ID || d == nil || !ok || d.idleAt.IsZero() || now.Sub(d.idleAt) > s.idleWithin() || d.idleExp > slowFactor {
			continue
		}
		if !js.allows(q) || !s.trust.excludedUntil(q, now).IsZero() {
			continue
		}
		may := js.next < js.tasks
		for _, i := range js.want {
			if may {
				break
			}
			ts := js.active[i]
			may = js.eligible(ts, q) && !ts.held(q, now) && js.admits(ts, q)
		}
		if may {
			if n++; n >= max {
				break
			}
		}
	}
	return n
}

// backupFor returns the task of js that p should compute a backup replica
// of, or nil: when p holds no live replica, in js's tail (inTail), among the tasks with live replicas
// and no backup that p may take, the one whose slowest replica is
// estimated to end last, if p is expected to end backupMargin times
// sooner. A replica's end is estimated from its device's expected time
// (medians); one already past it is guessed to take as long again as
// it has taken (it is paused or stuck). s.mu is held.
func (s *Scheduler) backupFor(js *jobState, p Peer, now time.Time) *taskState {
	if s.shownOf(p.ID).live > 0 || !s.mayBackup(js, now) {
		return nil // p is not idle, or js not in its tail
	}
	h := now.UTC().Hour()
	median := float64(js.pace.median)
	mine := s.medians(s.shown[p.ID], h) * median
	var best *taskState
	bestLeft := 0.0
	var left []float64
	for _, ts := range js.active {
		if len(ts.live) == 0 || ts.single || ts.refetch != nil || ts.prov != nil || ts.stalled {
			continue
		}
		if c := ts.chk; c != nil && (!c.due || len(ts.returned) == 0) {
			continue // a check not yet due, or its checked replica: not backed up
		}
		// When each live replica ends; the task needs all but its
		// backups' worth of them, the soonest first.
		left = left[:0]
		backups := 0
		for _, r := range ts.live {
			if r.backup {
				backups++
			}
			exp := s.medians(s.shown[r.rec.Peer], r.rec.Created.UTC().Hour()) * median
			spent := float64(now.Sub(r.rec.Created))
			l := exp - spent
			if spent > exp {
				l = spent
			}
			left = append(left, l)
		}
		if backups >= maxBackups {
			continue
		}
		slices.Sort(left)
		end := left[max(len(left)-1-backups, 0)]
		if mine*backupMargin >= end {
			continue
		}
		if best != nil && (end < bestLeft || end == bestLeft && ts.index > best.index) {
			continue
		}
		if !js.eligible(ts, p) || ts.held(p, now) || !js.admits(ts, p) || !s.checkOK(js, ts, p, now) {
			continue // a check's backup, too, goes to an owner the pool draws (check.go)
		}
		best, bestLeft = ts, end
	}
	return best
}

// nowLive counts live replica r, just leased, in its job and device.
// s.mu is held.
func (s *Scheduler) nowLive(r *replica) {
	r.js.leased++
	r.js.touch()
	s.shownOf(r.rec.Peer).live++
}

// notLive counts r, which was live, out of its job and device. s.mu is
// held.
func (s *Scheduler) notLive(r *replica) {
	r.js.leased--
	r.js.touch()
	s.shownOf(r.rec.Peer).live--
}
