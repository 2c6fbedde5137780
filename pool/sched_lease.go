package pool

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"idlepool/job"
)

// Lease leases up to max tasks (capped at 256) to the registered peer and
// returns once the leases are committed: zero leases when nothing needs a
// replica this peer may compute (ask again later). Each lease must be
// heartbeated before its Deadline (now + the lease timeout: the job's, or
// shorter for a device whose leases expired before, or BackupWindow for a
// backup; tail.go) or it expires and its replica is leased to whoever
// asks next. Selection is described on Scheduler (and, for a job's tail,
// in tail.go). Leases past their deadline are expired first.
// Errors: ErrUnknownPeer, ErrBadRequest (max < 0), ErrStopped, or ctx's.
func (s *Scheduler) Lease(ctx context.Context, peer string, max int) ([]Lease, error) {
	if max < 0 {
		return nil, fmt.Errorf("lease for %s: %w: max %d", peer, ErrBadRequest, max)
	}
	max = min(max, maxLeasesPerCall)
	s.mu.Lock()
	if s.stopped != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("lease for %s: %w", peer, s.stopped)
	}
	if s.fault != nil { // no new work while results cannot be stored
		s.mu.Unlock()
		return nil, fmt.Errorf("lease for %s: %w", peer, s.fault)
	}
	p, ok := s.peers[peer]
	if !ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("lease for %s: %w", peer, ErrUnknownPeer)
	}
	now := s.now()
	pend, changes := s.pend, s.pend.size()
	s.expireDue(now)
	s.closeWindows(now)
	s.asked(p, now)
	s.asking(p)
	s.endStalledAll() // stall.go: whether or not p may compute them
	if until := s.trust.excludedUntil(p, now); !until.IsZero() {
		s.mu.Unlock()
		return nil, fmt.Errorf("lease for %s: %w", peer, &ExcludedError{Peer: peer, Until: until})
	}
	var (
		out []Lease
		w   *pending
	)
	order, views := s.candidates(p)
	if s.cfg.Select != nil && len(order) > 0 {
		// Matchmaking runs outside the lock: with thousands of jobs it
		// is the costliest step of a lease, and other calls need not
		// wait for it. What changed meanwhile is checked again below.
		s.mu.Unlock()
		ids := s.cfg.Select(p, views)
		s.mu.Lock()
		if s.stopped != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("lease for %s: %w", peer, s.stopped)
		}
		order = s.selected(p, ids)
	}
	// A device holds at most as many undecided replicas of other owners'
	// jobs as its record allows (room), so a newcomer that lies cannot take
	// a whole job at once. A check of a result another owner returned may
	// go MaxUnverified beyond that: without it, two devices whose rooms
	// were used up by their own results, each waiting for the other's
	// check, were never leased anything again (roomFor).
	room := s.trust.room(p.ID)
	for len(out) < max {
		js, ts, backup := s.pick(p, order, now, s.trust.roomFor(room))
		if ts == nil {
			break
		}
		if !js.ownerOnly() {
			room--
		}
		r := s.grant(js, ts, p, now, backup)
		out = append(out, Lease{ID: r.rec.Lease, Job: r.rec.Job, Task: r.rec.Task, Peer: p.ID, Deadline: r.rec.Deadline})
		w = r.batch
	}
	if len(out) == 0 && s.shownOf(p.ID).live == 0 {
		s.noteIdle(p, now) // it holds nothing and got nothing
	}
	if w == nil && (s.pend != pend || s.pend.size() != changes) {
		w = s.pend // it decided tasks (stall.go): return once that is stored
	}
	s.mu.Unlock()
	if err := wait(ctx, w); err != nil {
		return nil, fmt.Errorf("lease for %s: %w", peer, err)
	}
	return out, nil
}

// selected returns the jobs Select chose, in its order, that p may still
// be leased tasks of. s.mu is held.
func (s *Scheduler) selected(p Peer, ids []job.ID) []*jobState {
	out := make([]*jobState, 0, len(ids))
	seen := make(map[*jobState]bool, len(ids)) // not slices.Contains: quadratic in the number of jobs
	for _, id := range ids {
		js := s.jobs[id]
		if js != nil && !js.complete() && js.allows(p) && !seen[js] {
			seen[js] = true
			out = append(out, js)
		}
	}
	return out
}

// pick returns the task p should compute next, or nil; s.mu is held.
// The first job of order with work for p; within a job, the lowest-index
// task already started that needs another replica p may compute, else the
// next fresh task, else a backup replica in the job's tail (backup true;
// tail.go). A device that is slow in a job's tail (slowInTail) skips the
// job. A device held from a task it failed on (taskState.held) takes it
// again before the hold ends only once its retry is due and no other
// present device may take it (heldBack).
func (s *Scheduler) pick(p Peer, order []*jobState, now time.Time, bound roomMode) (*jobState, *taskState, bool) {
	for _, js := range order {
		mode := bound
		if js.ownerOnly() {
			mode = roomAny // an owner's own devices are not bounded
		}
		if js.complete() || mode == roomNone {
			continue
		}
		s.closeJobWindows(js)
		s.dueChecks(js)
		s.endStalled(js)
		if js.complete() || s.slowInTail(js, p, now) {
			continue
		}
		// A suspect (stall.go) takes the tasks with a known answer first.
		suspect := js.j.HasKnownAnswers() && s.trust.suspect(p.ID)
		for pass := 0; pass < 2; pass++ {
			for _, i := range js.want {
				if suspect && pass == 0 && !js.j.Knows(i) {
					continue
				}
				if ts := js.active[i]; js.eligible(ts, p) && (mode == roomAny || js.checksReturned(ts)) &&
					!s.heldBack(js, ts, p, now) && js.admits(ts, p) && s.checkOK(js, ts, p, now) {
					return js, ts, false
				}
			}
			if !suspect {
				break
			}
		}
		if mode != roomAny {
			continue // a fresh task or a backup replica needs room
		}
		if js.next < js.tasks {
			ts := js.task(js.next)
			js.next++
			js.touch()
			return js, ts, false
		}
		if ts := s.backupFor(js, p, now); ts != nil {
			return js, ts, true
		}
	}
	return nil, nil, false
}

// checksReturned reports whether a replica of ts leased now would check
// a result already returned: some returned replica votes. Such a replica
// is decided when it comes back, unless it disagrees.
func (js *jobState) checksReturned(ts *taskState) bool {
	for _, r := range ts.returned {
		if js.votes(ts, r) {
			return true
		}
	}
	return false
}

// heldBack reports whether p is kept from ts for now: it failed ts for
// a reason of its own and that replica's hold has not ended
// (taskState.held: so that other devices take the task first), and
// either its retry is not due yet or another present device may take
// the task (othersMayTake). A retry is due once the job's time limit,
// doubled for each failure of ts on p, has passed since p's latest lease
// of ts: the first retry comes about one time limit after a timeout, the
// next three, then seven, so that a device slowed for a while gets a
// second chance soon and a task that keeps failing does not use up its
// failures at once while a better device may still come. s.mu is held.
func (s *Scheduler) heldBack(js *jobState, ts *taskState, p Peer, now time.Time) bool {
	held, n := false, 0
	var lastLease time.Time
	for _, r := range ts.machine {
		if r.rec.Peer != p.ID {
			continue
		}
		held = held || now.Before(r.rec.Deadline)
		n++
		if r.rec.Created.After(lastLease) {
			lastLease = r.rec.Created
		}
	}
	if !held {
		return false
	}
	if now.Before(lastLease.Add(js.pol.TimeLimit.Duration << min(n, 16))) {
		return true
	}
	return s.othersMayTake(js, ts, p, now)
}

// othersMayTake reports whether a present device of the pool other than
// p (SchedulerConfig.Present) may take a replica of ts: one the job
// allows, not excluded, eligible, admitted, and not held from ts itself.
// With none, holding p back would only stall the task for the rest of a
// lease timeout (minutes, where its time limit may be seconds), so p
// takes it again (heldBack); a task that keeps failing ends at the
// pool's limits (SchedulerConfig.MaxTimeouts, the job's max_replicas) as
// before. s.mu is held.
func (s *Scheduler) othersMayTake(js *jobState, ts *taskState, p Peer, now time.Time) bool {
	for id, q := range s.peers {
		if id == p.ID || s.cfg.Present != nil && !s.cfg.Present(id, now) {
			continue
		}
		if js.allows(q) && s.trust.excludedUntil(q, now).IsZero() && js.eligible(ts, q) && !ts.held(q, now) && js.admits(ts, q) {
			return true
		}
	}
	return false
}

// ownerOnly reports whether only the owner's devices compute the job.
func (js *jobState) ownerOnly() bool { return js.pol.Participants == "owner" }

// allows reports whether p may compute tasks of the job at all: never
// once the job is cancelled, nor once p's owner was caught on one of its
// known answers (stall.go).
func (js *jobState) allows(p Peer) bool {
	return js.rec.Cancelled.IsZero() && (p.Owner == js.rec.Owner) == js.ownerOnly() && !js.caught[p.Owner]
}

// eligible reports whether p may take a replica of ts: it holds or
// returned none, and (outside "owner" pools) neither did another device
// of its owner.
func (js *jobState) eligible(ts *taskState, p Peer) bool {
	for _, rs := range [2][]*replica{ts.live, ts.returned} {
		for _, r := range rs {
			if r.rec.Peer == p.ID || (!js.ownerOnly() && r.rec.Owner == p.Owner) {
				return false
			}
		}
	}
	return true
}

// held reports whether p reported a machine-dependent failure of ts whose
// hold (the replica's Deadline) has not passed: other devices take the
// task first.
func (ts *taskState) held(p Peer, now time.Time) bool {
	for _, r := range ts.machine {
		if r.rec.Peer == p.ID && now.Before(r.rec.Deadline) {
			return true
		}
	}
	return false
}

// voter is who a replica's vote belongs to: its owner, or its device in
// "owner" pools.
func (js *jobState) voter(r *replica) string {
	if js.ownerOnly() {
		return r.rec.Peer
	}
	return r.rec.Owner
}

// tally counts the distinct voters that returned (n) and the leading
// replica with the voters that agree with it (c; see agrees and leads).
// A voter counts once, with its first replica.
func (js *jobState) tally(ts *taskState) (lead *replica, c, n int) {
	var voters []string
	var firsts []*replica
	for _, r := range ts.returned {
		if !js.votes(ts, r) {
			continue // its device was caught deviating: it does not vote
		}
		v := js.voter(r)
		dup := false
		for _, x := range voters {
			dup = dup || x == v
		}
		if dup {
			continue
		}
		voters = append(voters, v)
		firsts = append(firsts, r)
	}
	for _, r := range firsts {
		k := 0
		for _, x := range firsts {
			if js.agrees(x, r) {
				k++
			}
		}
		if js.leads(r, k, lead, c) {
			lead, c = r, k
		}
	}
	return lead, c, len(firsts)
}

// needed is how many more agreeing votes the leading digest needs to win
// under quorum q: c+x >= q and 2(c+x) > n+x.
func (js *jobState) needed(q, c, n int) int {
	return max(q-c, n-2*c+1)
}

// wants is how many more replicas of ts should be leased now.
func (js *jobState) wants(ts *taskState) int {
	if ts.refetch != nil {
		return max(1-len(ts.live), 0) // one device computes a lost result again at a time
	}
	if ts.prov != nil && ts.provMode == provHeld {
		return 0 // accepted alone, waiting for its check window
	}
	if c := ts.chk; c != nil { // check.go: one at a time, after its delay
		if len(ts.returned) == 0 {
			return max(1-len(ts.live), 0) // the checked replica ended unreturned: lease it again
		}
		if len(ts.live) > 0 || !c.due {
			return 0
		}
	}
	lead, c, n := js.tally(ts)
	q := js.quorumOf(ts, c, n)
	red := js.pol.Redundancy
	if ts.single && ts.prov == nil {
		red = js.ver.MinQuorum
	}
	need := max(js.needed(q, c, n), red-n)
	if need <= 0 && !js.leadEstablished(ts, lead) {
		need = 1 // a quorum of newcomers: an established owner must agree too
	}
	live := len(ts.live)
	room := js.maxReplicas - len(ts.returned) - live
	return max(min(need-live, room), 0)
}

// grant leases a replica of ts to p, a backup one if backup (tail.go);
// s.mu is held.
func (s *Scheduler) grant(js *jobState, ts *taskState, p Peer, now time.Time, backup bool) *replica {
	timeout := s.leaseTimeout(js, p.ID)
	if backup {
		timeout = min(timeout, s.backupWindow())
	}
	r := &replica{js: js, ts: ts, backup: backup, rec: ReplicaRecord{
		Lease: s.newLeaseID(), Job: js.rec.ID, Task: ts.index, Peer: p.ID, Owner: p.Owner,
		State: ReplicaLeased, Created: now, Deadline: now.Add(timeout),
	}}
	s.noteLeased(p.ID, now)
	first := len(ts.live)+len(ts.returned) == 0 && ts.refetch == nil
	if first && ts.chk != nil && ts.chk.round == 0 {
		ts.chk = nil // its checked replica ended unreturned: chosen again below
	}
	if js.adaptive() && first {
		// Chosen here, from a secret, so that the device cannot tell
		// whether another device computes the same task; a checked one's
		// second replica is a check (check.go).
		trusted := s.trust.trusted(js, p)
		spot := trusted && s.trust.spotCheck(js.rec.ID, ts.index, p.ID, js.ver.SpotCheckShare())
		ts.single = trusted && !spot
		if spot {
			s.makeCheck(ts, p.ID, true)
		}
	}
	if first && !ts.single && s.trust.active && !js.ownerOnly() && !s.trust.owner(p.Owner).operator {
		// Where owners must earn standing, a task first computed by an
		// owner the operator did not name is checked by a device the
		// pool draws, not by whoever asks next (check.go).
		s.makeCheck(ts, p.ID, true)
	}
	if c := ts.chk; c != nil && len(ts.returned) > 0 {
		c.taken, c.checker = true, "" // this round's check
	}
	if ts.stalled { // a device of an owner new to the task: it may settle it
		ts.stalled = false
		js.stalled--
	}
	s.trust.orders++
	r.order, r.counted = s.trust.orders, !js.ownerOnly()
	if r.counted {
		s.trust.device(p.ID).outstanding++
	}
	s.used(js, ts.index, now)
	ts.live = append(ts.live, r)
	s.nowLive(r)
	s.leases[r.rec.Lease] = r
	s.deadlines.push(deadlineItem{r.rec.Deadline, r})
	s.putReplica(r)
	js.update(ts)
	if s.debug() {
		s.log.Debug("Task leased", "lease", r.rec.Lease, "job", js.rec.ID.String(), "task", ts.index, "peer", p.ID, "backup", backup)
	}
	return r
}

// lastLeaseStamp is the time prefix of the newest lease ID minted by
// this process (NewLeaseID), in unix nanoseconds or above.
var lastLeaseStamp atomic.Uint64

// NewLeaseID returns a fresh lease ID: 32 lowercase hex digits, the
// first 16 a stamp that grows with every ID this process mints (the
// wall clock in nanoseconds, or one more than the last stamp when the
// clock has not moved on or went back), the last 16 random. IDs minted
// later sort after earlier ones, so that a store indexing replicas by
// lease appends its new leases at the end of the index instead of
// scattering them over its pages: with random IDs each new lease of a
// group commit dirtied its own index page, about a fifth of the
// commit's cost (docs/benchmarks.md). A lease ID is no secret (the
// scheduler checks that the peer acting on a lease holds it), and its
// stamp tells no more than the ledger does: when a device took the
// task, which the Time of its entry bounds (a lease lives until its
// deadline). The random half keeps IDs of different processes (a
// cluster's nodes, a restart) apart. It is safe for concurrent use.
func NewLeaseID() string { return mintLeaseID(-1) }

// newLeaseID mints the ID of a lease this Scheduler grants: NewLeaseID's,
// with the scheduler's shard in its 17th and 18th hex digits when it is
// a shard of a divided pool (SchedulerConfig.Shards > 1; LeaseShard).
func (s *Scheduler) newLeaseID() string {
	if s.cfg.Shards > 1 {
		return mintLeaseID(s.cfg.Shard)
	}
	return NewLeaseID()
}

// mintLeaseID is NewLeaseID with shard, when at least 0, as the first
// byte of the random half.
func mintLeaseID(shard int) string {
	now := uint64(max(time.Now().UnixNano(), 0))
	var stamp uint64
	for {
		last := lastLeaseStamp.Load()
		stamp = max(now, last+1)
		if lastLeaseStamp.CompareAndSwap(last, stamp) {
			break
		}
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], stamp)
	rand.Read(b[8:]) // never fails (crypto/rand)
	if shard >= 0 {
		b[8] = byte(shard)
	}
	return hex.EncodeToString(b[:])
}

// MaxShards is the most shards a divided pool may have for its lease IDs
// to name them: a shard is one byte of the ID (LeaseShard).
const MaxShards = 256

// LeaseShard returns the shard, 0 to k-1, of lease id in a pool divided
// into k shards: the byte that a Scheduler configured as a shard of k > 1
// writes into the first byte of the ID's random half (hex digits 17 and
// 18, SchedulerConfig.Shard). In a pool of one shard (k = 1) every lease
// is shard 0's. The error wraps ErrBadRequest and says what is wrong: an
// ID that is not 32 lowercase hex digits, a k outside 1 to MaxShards, or
// a shard byte of k or more (no shard of this pool minted the ID).
func LeaseShard(id string, k int) (int, error) {
	if k < 1 || k > MaxShards {
		return 0, fmt.Errorf("shard of lease %q: %w: %d shards, want 1 to %d", id, ErrBadRequest, k, MaxShards)
	}
	if len(id) != 32 {
		return 0, fmt.Errorf("shard of lease %q: %w: %d characters, want 32 lowercase hex digits", id, ErrBadRequest, len(id))
	}
	for i := range len(id) {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return 0, fmt.Errorf("shard of lease %q: %w: character %d is not a lowercase hex digit", id, ErrBadRequest, i+1)
		}
	}
	if k == 1 {
		return 0, nil
	}
	b, _ := hex.DecodeString(id[16:18]) // checked above
	if int(b[0]) >= k {
		return 0, fmt.Errorf("shard of lease %s: %w: its shard byte is %d, and the pool has %d shards (0 to %d)", id, ErrBadRequest, b[0], k, k-1)
	}
	return int(b[0]), nil
}

// lookup returns the lease id held by peer. s.mu is held on entry and
// on return; for a lease not in memory it is released while the store
// is read (one indexed row on SQLite, a round trip to the key-value
// bucket of a cluster), so that a late request, or a device naming
// leases that do not exist, does not hold every other request up.
func (s *Scheduler) lookup(ctx context.Context, peer, id string) (*replica, error) {
	if s.stopped != nil {
		return nil, s.stopped
	}
	r, ok := s.leases[id]
	if !ok && s.archive() != nil {
		s.mu.Unlock()
		rec, found, err := s.archived(ctx, id)
		s.mu.Lock()
		if s.stopped != nil {
			return nil, s.stopped
		}
		// A settled replica never comes back into memory; memory is
		// asked again all the same, as it is what the lock guards.
		if r, ok = s.leases[id]; !ok {
			if err != nil {
				return nil, err
			}
			if found {
				r, ok = &replica{rec: rec, js: s.jobs[rec.Job]}, true
			}
		}
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownLease, id)
	}
	if r.rec.Peer != peer {
		return nil, fmt.Errorf("%w: lease %s", ErrNotYourLease, id)
	}
	if r.ts == nil && (r.rec.State == ReplicaLeased || r.rec.State == ReplicaReturned) {
		// Leased to compute a lost result again before a restart: that
		// state stays in memory (sched_refs.go), and its task has an
		// outcome. Nothing else leaves a replica in play without a task.
		r.rec.State = ReplicaCancelled
	}
	return r, nil
}

// ended returns the error for acting on a lease that is not live.
func ended(r *replica) error {
	switch r.rec.State {
	case ReplicaCancelled:
		return fmt.Errorf("%w: task %d of job %s", ErrTaskDecided, r.rec.Task, r.rec.Job)
	case ReplicaWithdrawn:
		return fmt.Errorf("%w: job %s (lease %s)", ErrJobCancelled, r.rec.Job, r.rec.Lease)
	case ReplicaExpired, ReplicaReleased:
		return fmt.Errorf("%w: lease %s was %s", ErrLeaseExpired, r.rec.Lease, r.rec.State)
	}
	return fmt.Errorf("%w: lease %s was already returned", ErrConflict, r.rec.Lease)
}

// expiredNow expires live lease r if its deadline has come; s.mu is held.
func (s *Scheduler) expiredNow(r *replica) bool {
	if s.now().Before(r.rec.Deadline) {
		return false
	}
	s.endLease(r, ReplicaExpired)
	return true
}

// Heartbeat extends a live lease of peer to now + its lease timeout (the
// job's, shorter for a device whose leases expired before, and at most
// TailConfig.BackupWindow while its task has a backup; tail.go) and
// returns the new deadline once committed. Errors: ErrUnknownLease,
// ErrNotYourLease, ErrLeaseExpired (past its deadline, or handed back),
// ErrTaskDecided (the task was decided without this replica: stop
// computing it), ErrConflict (already returned), ErrStopped.
func (s *Scheduler) Heartbeat(ctx context.Context, peer, lease string) (time.Time, error) {
	s.mu.Lock()
	r, err := s.lookup(ctx, peer, lease)
	if err == nil && r.rec.State != ReplicaLeased {
		err = ended(r)
	}
	if err == nil && s.expiredNow(r) {
		err = fmt.Errorf("%w: lease %s passed its deadline", ErrLeaseExpired, lease)
	}
	if err != nil {
		s.mu.Unlock()
		return time.Time{}, fmt.Errorf("heartbeat: %w", err)
	}
	r.rec.Deadline = s.now().Add(s.heartbeatTimeout(r))
	s.deadlines.push(deadlineItem{r.rec.Deadline, r})
	s.putReplica(r)
	d, w := r.rec.Deadline, r.batch
	s.mu.Unlock()
	if err := wait(ctx, w); err != nil {
		return time.Time{}, fmt.Errorf("heartbeat: %w", err)
	}
	return d, nil
}

// Release hands a live lease of peer back (the agent is stopping); its
// replica is leased to whoever asks next. Releasing a lease that already
// ended or was returned is nil. Errors: ErrUnknownLease, ErrNotYourLease,
// ErrStopped.
func (s *Scheduler) Release(ctx context.Context, peer, lease string) error {
	s.mu.Lock()
	r, err := s.lookup(ctx, peer, lease)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("release: %w", err)
	}
	if r.rec.State == ReplicaLeased {
		s.endLease(r, ReplicaReleased)
		if s.debug() {
			s.log.Debug("Lease released", "lease", lease, "job", r.rec.Job.String(), "task", r.rec.Task, "peer", peer)
		}
	}
	w := r.batch
	s.mu.Unlock()
	if err := wait(ctx, w); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// Submit records peer's submission for its live lease and returns once it
// (and the task's decision, if it completed a majority) is committed.
// sub.Digest must be ReplicaDigest of its content; a result over
// MaxResultBytes, a failure with result bytes or a reason over 4 KiB is
// refused. Sending the same submission again is nil (idempotent); a
// different one for the same lease is ErrConflict. Errors:
// ErrBadSubmission, ErrUnknownLease, ErrNotYourLease, ErrLeaseExpired
// (the deadline passed first), ErrTaskDecided (the task was decided while
// this replica was in flight; it earns nothing), ErrStopped.
func (s *Scheduler) Submit(ctx context.Context, peer, lease string, sub Submission) error {
	c, err := s.SubmitQueued(ctx, peer, lease, sub)
	if err != nil {
		return err
	}
	return c.Wait(ctx)
}

// Committed is a submission the scheduler has taken into its pending
// group commit (SubmitQueued); Wait returns once that commit is durable.
// The zero Committed waits for nothing.
type Committed struct {
	p     *pending
	lease string // the submission's lease, for Wait's errors
}

// Wait returns once the submission is committed: nil, the commit's error
// (the store's fault, ErrStopped), or ctx's error when ctx ends first
// (the submission may still commit after). Each error names the lease.
func (c Committed) Wait(ctx context.Context) error {
	if err := wait(ctx, c.p); err != nil {
		return fmt.Errorf("submit %s: %w", c.lease, err)
	}
	return nil
}

// SubmitQueued is Submit without its wait: it checks and records the
// submission as Submit does, with the same errors, and returns at once;
// the result is durable when the returned Committed's Wait returns nil.
// A request that carries several results submits each this way and
// waits after the last, so that they share a group commit without a
// goroutine each.
func (s *Scheduler) SubmitQueued(ctx context.Context, peer, lease string, sub Submission) (Committed, error) {
	switch {
	case len(sub.Result) > s.cfg.MaxResultBytes:
		return Committed{}, fmt.Errorf("submit %s: %w: result of %d bytes, the limit is %d", lease, ErrBadSubmission, len(sub.Result), s.cfg.MaxResultBytes)
	case sub.Failed && len(sub.Result) > 0:
		return Committed{}, fmt.Errorf("submit %s: %w: a failure carries no result", lease, ErrBadSubmission)
	case len(sub.Reason) > maxReasonBytes:
		return Committed{}, fmt.Errorf("submit %s: %w: reason of %d bytes, the limit is %d", lease, ErrBadSubmission, len(sub.Reason), maxReasonBytes)
	case sub.Machine && !sub.Failed:
		return Committed{}, fmt.Errorf("submit %s: %w: a machine-dependent failure is a failure: set failed and a reason", lease, ErrBadSubmission)
	case sub.Work != nil && (sub.Work.Rule < 1 || sub.Work.Count > MaxWorkCount):
		return Committed{}, fmt.Errorf("submit %s: %w: work counted by rule %d, %d instructions: want a rule from 1 and at most %d", lease, ErrBadSubmission, sub.Work.Rule, sub.Work.Count, uint64(MaxWorkCount))
	case sub.Ref != nil:
		if err := s.checkRef(sub); err != nil {
			return Committed{}, fmt.Errorf("submit %s: %w: %w", lease, ErrBadSubmission, err)
		}
	case ReplicaDigest(sub.Result, sub.Failed, sub.Reason) != sub.Digest:
		return Committed{}, fmt.Errorf("submit %s: %w: the digest does not match the result", lease, ErrBadSubmission)
	}
	if !sub.Failed {
		sub.Reason = ""
	}
	machine := sub.Failed && (sub.Machine || MachineReason(sub.Reason))
	if machine {
		sub.Work = nil // what a machine's failure counted says nothing about the task
	}
	s.mu.Lock()
	r, err := s.lookup(ctx, peer, lease)
	if err == nil && r.rec.State != ReplicaLeased {
		switch r.rec.State {
		case ReplicaReturned, ReplicaAgreed, ReplicaDeviated, ReplicaUnverified, ReplicaMachineFailed, ReplicaProvisional:
			if r.rec.Digest == sub.Digest && sameWork(r.rec.Work, sub.Work) {
				w := r.batch // the first submission may still be committing
				s.mu.Unlock()
				return Committed{w, lease}, nil
			}
			err = fmt.Errorf("%w: lease %s already returned another result", ErrConflict, lease)
		default:
			err = ended(r)
		}
	}
	if err == nil && sub.Ref != nil && r.js.ver.Rule != "" {
		err = fmt.Errorf("%w: job %s compares results within a tolerance, which needs their bytes: send the result, not a reference", ErrBadSubmission, r.rec.Job)
	}
	if err == nil && sub.Ref != nil && !s.now().Before(r.js.keptUntil) {
		err = fmt.Errorf("%w (job %s)", ErrSendInline, r.rec.Job)
	}
	if err == nil && s.expiredNow(r) {
		err = fmt.Errorf("%w: lease %s passed its deadline", ErrLeaseExpired, lease)
	}
	if err != nil {
		s.mu.Unlock()
		return Committed{}, fmt.Errorf("submit: %w", err)
	}
	ts, js := r.ts, r.js
	if machine {
		s.machineFailed(r, sub)
		w := r.batch
		s.mu.Unlock()
		return Committed{w, lease}, nil
	}
	s.returnedInTime(r, s.now())
	ts.live = removeReplica(ts.live, r)
	s.notLive(r)
	ts.returned = append(ts.returned, r)
	r.rec.State, r.rec.Digest, r.rec.Failed, r.rec.Reason = ReplicaReturned, sub.Digest, sub.Failed, sub.Reason
	r.rec.Result, r.rec.Ref, r.rec.Work = bytes.Clone(sub.Result), cloneManifest(sub.Ref), cloneWork(sub.Work)
	s.putReplica(r)
	if s.debug() {
		s.log.Debug("Replica returned", "lease", lease, "job", js.rec.ID.String(), "task", ts.index, "peer", peer, "digest", sub.Digest.String())
	}
	switch {
	case ts.refetch != nil:
		s.refetched(js, ts, r)
	case !s.checkKnown(js, ts, r):
		s.decideIfReady(js, ts)
	}
	s.endStalled(js)
	w := r.batch
	s.mu.Unlock()
	return Committed{w, lease}, nil
}

// machineFailed records that live replica r failed for a reason of its
// machine: no vote and no ledger entry. Its task wants a replica again,
// which r's peer is not leased for the job's lease timeout while others
// may take it; the task ends unverified once it failed this way
// maxReplicas times. s.mu is held.
func (s *Scheduler) machineFailed(r *replica, sub Submission) {
	ts, js := r.ts, r.js
	ts.live = removeReplica(ts.live, r)
	s.notLive(r)
	s.unclaim(r)
	ts.unsingle()
	if len(ts.machine) == 0 {
		js.retrying++
	}
	ts.machine = append(ts.machine, r)
	r.rec.State, r.rec.Digest, r.rec.Failed, r.rec.Reason = ReplicaMachineFailed, sub.Digest, true, sub.Reason
	r.rec.Deadline, r.ts = s.now().Add(js.pol.LeaseTimeout.Duration), nil
	s.putReplica(r)
	s.log.Info("Task failed on a device for a reason of the device", "lease", r.rec.Lease,
		"job", js.rec.ID.String(), "task", ts.index, "peer", r.rec.Peer, "failures", len(ts.machine), "reason", sub.Reason)
	_, devices := ts.timeouts()
	if (len(ts.machine) >= js.maxReplicas || devices >= js.maxTimeouts) && ts.refetch == nil { // an accepted result is never abandoned
		if ts.prov != nil && ts.provMode == provHeld {
			return // decided alone already; the hold decides it
		}
		_, c, n := js.tally(ts)
		s.decide(js, ts, OutcomeUnverified, nil, c, n)
		return
	}
	js.update(ts)
}

// timeouts counts ts's machine-dependent failures that were timeouts, and
// the distinct devices they happened on.
func (ts *taskState) timeouts() (n, devices int) {
	var seen []string
	for _, r := range ts.machine {
		if reasonCause(r.rec.Reason) != causeTimedOut {
			continue
		}
		n++
		if !slices.Contains(seen, r.rec.Peer) {
			seen = append(seen, r.rec.Peer)
		}
	}
	return n, len(seen)
}

// decideIfReady decides ts when a digest has won, or when none can win
// within the replica limit; otherwise it updates what ts wants. s.mu is
// held.
func (s *Scheduler) decideIfReady(js *jobState, ts *taskState) {
	lead, c, n := js.tally(ts)
	q := js.quorumOf(ts, c, n)
	switch {
	case c >= q && 2*c > n && js.leadEstablished(ts, lead):
		if ts.single && ts.prov == nil && n == c && !ts.knownOK {
			s.provisional(js, ts, lead)
			return
		}
		status := OutcomeOK
		if lead.rec.Failed {
			status = OutcomeFailed
		}
		s.decide(js, ts, status, lead, c, n)
	case js.needed(q, c, n) > js.maxReplicas-len(ts.returned):
		s.decide(js, ts, OutcomeUnverified, nil, c, n)
	default:
		if n > c && ts.chk == nil && !js.ownerOnly() {
			// A split is settled by owners the pool draws, not by
			// whoever asks next, perhaps the liar's friend (check.go).
			s.makeCheck(ts, ts.returned[0].rec.Peer, false)
		}
		js.update(ts)
		s.scheduleCheck(js, ts)
		s.stallIfUndecidable(js, ts, lead, c, n, q)
	}
}

// decide ends ts with an outcome and, outside "owner" pools, its ledger
// entries, all in the pending batch; s.mu is held. lead is a replica with
// the accepted digest (nil when unverified).
func (s *Scheduler) decide(js *jobState, ts *taskState, status string, lead *replica, c, n int) {
	js.seq++
	v := Verified{Seq: js.seq, Task: ts.index, Status: status}
	var digest job.Digest
	// Which replicas agree with the lead, decided before the loop below
	// drops their results.
	agreeing := make(map[*replica]bool, len(ts.returned))
	for _, r := range ts.returned {
		agreeing[r] = js.agrees(r, lead)
	}
	// A verified failure earns a receipt for the agreement but not the
	// cost of a completed task: a program that fails at once on every
	// task must not pay out as if the work were done. A completed task
	// earns what its agreed work took, up to the job's declared cost.
	var cost float64
	var unmetered string
	switch status {
	case OutcomeOK:
		v.Result, digest = lead.rec.Result, lead.rec.Digest
		if lead.rec.Ref != nil {
			v.Result, v.Ref, v.Holders = held(ts, lead, agreeing)
		}
		var ok bool
		if cost, v.Work, ok = js.workCost(ts, agreeing); !ok {
			unmetered = "the devices counted no work by this pool's rule (their idlepool is older or newer than the pool's): it earns no cost"
		}
		js.accepted++
	case OutcomeFailed:
		v.Reason, digest = lead.rec.Reason, lead.rec.Digest
		js.failed++
	default:
		v.Reason = describeVotes(js, ts, js.maxReplicas)
		js.failed++
	}
	if len(ts.machine) > 0 {
		js.retrying--
	}
	js.outcomes = append(js.outcomes, v)
	s.pend.b.Outcomes = append(s.pend.b.Outcomes, OutcomeRecord{Job: js.rec.ID, Digest: digest, Verified: v})
	p := s.changed()
	seq := js.seq
	p.after = append(p.after, func() { js.committed = max(js.committed, seq) })

	entries := !js.ownerOnly()
	at := s.now()
	now := at.UnixMilli()
	// Checked: at least two distinct voters returned, so agreeing counts
	// toward a device's record and deviating against it.
	// A task checked against its known answer counts as checked too.
	checked := (n >= 2 || ts.knownOK) && status != OutcomeUnverified
	withEstablished := false
	var agreed, deviated []*replica
	for _, r := range ts.returned {
		if agreeing[r] && s.trust.owner(r.rec.Owner).established && js.votes(ts, r) {
			withEstablished = true
		}
	}
	for _, r := range ts.returned {
		s.unclaim(r)
		e := Entry{Pool: s.cfg.Pool, Job: js.rec.ID, Task: ts.index, Peer: r.rec.Peer, Owner: r.rec.Owner,
			Lease: r.rec.Lease, Digest: r.rec.Digest, Time: now}
		prov := r == ts.prov
		switch {
		case prov && (status == OutcomeUnverified || agreeing[r]):
			// Computed alone and confirmed (or nobody can tell): the
			// receipt it earned stands; no second one.
			r.rec.State, e.Kind = ReplicaAgreed, ""
			if status == OutcomeUnverified {
				r.rec.State = ReplicaUnverified
			}
		case status == OutcomeUnverified:
			r.rec.State, e.Kind, e.Reason = ReplicaUnverified, KindUnverified, v.Reason
		case agreeing[r]:
			r.rec.State, e.Kind, e.Cost, e.Work, e.Reason = ReplicaAgreed, KindReceipt, cost, v.Work, r.rec.Reason
			if r.rec.Failed {
				// The ledger keeps the failure in a few words, not the
				// program log after them: it is kept forever.
				e.Reason = "verified failure (earns no cost): " + ReasonSummary(r.rec.Reason)
			} else if why := s.admission(r.rec.Owner); why != "" {
				e.Cost, e.Reason = 0, why
			} else if unmetered != "" {
				e.Reason = unmetered
			}
			if checked && js.votes(ts, r) {
				agreed = append(agreed, r)
			}
		default:
			r.rec.State, e.Kind = ReplicaDeviated, KindDeviation
			on := "on"
			if js.ver.Rule != "" {
				on = "within tolerance with"
			}
			e.Reason = fmt.Sprintf("returned %s; %d of %d distinct voters agreed %s %s", r.rec.Digest, c, n, on, digest)
			if prov {
				e.Reason = fmt.Sprintf("computed alone and returned %s; computed again, %d of %d distinct voters agreed %s %s",
					r.rec.Digest, c, n, on, digest)
			}
			s.log.Warn("Replica deviated", "lease", r.rec.Lease, "job", js.rec.ID.String(), "task", ts.index,
				"peer", r.rec.Peer, "owner", r.rec.Owner, "digest", r.rec.Digest.String(), "accepted", digest.String())
			deviated = append(deviated, r)
		}
		r.rec.Result, r.rec.Ref, r.ts = nil, nil, nil
		s.putReplica(r)
		if entries && e.Kind != "" {
			s.appendEntry(e)
			if e.Kind == KindReceipt {
				s.trust.owner(r.rec.Owner).contributed.add(e.Cost, at)
			}
		}
		if entries && prov && r.rec.State == ReplicaDeviated {
			s.revoke(js, ts, r, at)
		}
	}
	for _, r := range ts.live {
		r.rec.State, r.ts = ReplicaCancelled, nil
		s.notLive(r)
		s.unclaim(r)
		s.putReplica(r)
	}
	if ts.prov != nil && ts.provMode == provHeld {
		js.held--
	}
	js.touch()
	if ts.stalled {
		js.stalled--
	}
	if c := ts.chk; c != nil && c.round > 0 && !c.due {
		js.waitingChecks--
	}
	if status == OutcomeOK && checked && entries {
		s.agreedPairs(js, ts, agreeing)
	}
	ts.prov = nil
	delete(js.active, ts.index)
	if ts.wanting {
		i := sort.Search(len(js.want), func(k int) bool { return js.want[k] >= ts.index })
		js.want = append(js.want[:i], js.want[i+1:]...)
		ts.wanting = false
	}
	if status == OutcomeUnverified {
		s.log.Warn("Task unverified", "job", js.rec.ID.String(), "task", ts.index, "reason", v.Reason)
	} else {
		if s.debug() {
			s.log.Debug("Task decided", "job", js.rec.ID.String(), "task", ts.index, "status", status, "digest", digest.String())
		}
	}
	if js.complete() {
		s.log.Info("Job complete", "job", js.rec.ID.String(), "accepted", js.accepted, "failed", js.failed)
	}
	for _, r := range deviated {
		s.deviated(r, at)
	}
	for _, r := range agreed {
		s.agreedChecked(js, r, withEstablished)
	}
}

// describeVotes says why a task ended unverified.
func describeVotes(js *jobState, ts *taskState, limit int) string {
	if n, devices := ts.timeouts(); n > 0 && (devices >= js.maxTimeouts || n == len(ts.machine) && n >= limit) {
		return gaveUpReason(js, ts, n, devices)
	}
	if len(ts.machine) >= limit {
		last := ReasonSummary(ts.machine[len(ts.machine)-1].rec.Reason)
		if len(ts.returned) == 0 {
			return fmt.Sprintf("no device finished it: it failed %d times, each for a reason of the device that ran it (the last: %s)",
				len(ts.machine), last)
		}
		return fmt.Sprintf("it failed %d times for a reason of the device that ran it, and the %d replicas that finished reached no quorum of %d (the last failure: %s)",
			len(ts.machine), len(ts.returned), js.pol.Quorum, last)
	}
	// Votes are for a digest and, where counts are compared, a count.
	counts := map[string]int{}
	var order []string
	for _, r := range ts.returned {
		vote := r.rec.Digest.String()[:12]
		if w := r.rec.Work; w != nil && !js.countsApart() {
			vote += fmt.Sprintf(" counting %d", w.Count)
		}
		if counts[vote] == 0 {
			order = append(order, vote)
		}
		counts[vote]++
	}
	parts := make([]string, len(order))
	for i, v := range order {
		parts[i] = fmt.Sprintf("%s×%d", v, counts[v])
	}
	return fmt.Sprintf("no digest won a majority of distinct voters (quorum %d) within %d replicas: %s",
		js.pol.Quorum, limit, strings.Join(parts, ", "))
}

// gaveUpReason says why the pool gave up on task ts, which timed out n
// times on devices distinct devices: "timed out on 5 devices, after 2m
// each: ...", a decision of the pool and not a verified result, followed
// by the end of the program's log as the last of those devices kept it
// (where it was when stopped), within MaxReasonBytes.
func gaveUpReason(js *jobState, ts *taskState, n, devices int) string {
	times := ""
	if n != devices {
		times = fmt.Sprintf(" %d times", n)
	}
	reason := fmt.Sprintf("timed out%s on %s, after %s each: the pool gave up on it, which is its decision and no verified result (raise policy.time_limit if the task needs longer)",
		times, plural(devices, "device"), limitWords(js.pol.TimeLimit.Duration))
	var last string
	for _, r := range ts.machine {
		if reasonCause(r.rec.Reason) == causeTimedOut {
			last = r.rec.Reason
		}
	}
	if i := strings.Index(last, "\n"+logHeader); i >= 0 {
		reason = clipBytes(reason+last[i:], MaxReasonBytes)
	}
	return reason
}

// GaveUp reports whether reason, a failed task's reason as a pool's
// merger folds it ("unverified: " and the outcome's reason), says that
// the pool gave up on the task after it timed out on too many devices.
func GaveUp(reason string) bool {
	return strings.HasPrefix(strings.TrimPrefix(reason, "unverified: "), "timed out ") && strings.Contains(ReasonSummary(reason), "the pool gave up on it")
}

// limitWords writes a time limit for people: "2m", "90s", "1h30m".
func limitWords(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// appendEntry numbers e and adds it to the pending batch; flush chains
// and signs it outside s.mu. s.mu is held.
func (s *Scheduler) appendEntry(e Entry) {
	s.ledgerSeq++
	e.Seq = s.ledgerSeq
	s.pend.b.Entries = append(s.pend.b.Entries, e)
	s.changed()
}

// Results returns job id's committed outcomes with Seq > after, in Seq
// order, at most max (capped at 10,000): for the job's merger only
// (ErrNotMerger). Result bytes are shared: do not modify them. Asking for
// outcomes already acknowledged (after < the ack mark) is ErrConflict:
// their bytes are gone. Errors also: ErrUnknownJob.
func (s *Scheduler) Results(ctx context.Context, peer string, id job.ID, after int64, max int) ([]Verified, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	js, ok := s.jobs[id]
	switch {
	case !ok:
		return nil, fmt.Errorf("results of job %s: %w", id, ErrUnknownJob)
	case js.rec.Merger != peer:
		return nil, fmt.Errorf("results of job %s: %w: %s", id, ErrNotMerger, peer)
	case after < 0:
		return nil, fmt.Errorf("results of job %s: %w: after %d", id, ErrBadRequest, after)
	case after < js.rec.Acked:
		return nil, fmt.Errorf("results of job %s: %w: outcomes up to %d were acknowledged; ask after %d", id, ErrConflict, js.rec.Acked, js.rec.Acked)
	case max <= 0:
		return nil, nil
	}
	from := after - js.rec.Acked
	to := min(js.committed-js.rec.Acked, from+int64(min(max, maxPageSize)))
	if from >= to {
		return nil, nil
	}
	return append([]Verified(nil), js.outcomes[from:to]...), nil
}

// Ack records that job id's merger has folded the outcomes with Seq <=
// upto; their result bytes are deleted. It returns once committed. An ack
// at or below the current mark is nil; above the last committed outcome it
// is ErrBadRequest. Errors also: ErrUnknownJob, ErrNotMerger, ErrStopped.
func (s *Scheduler) Ack(ctx context.Context, peer string, id job.ID, upto int64) error {
	s.mu.Lock()
	js, err := s.mergersJob(peer, id)
	if err == nil && upto > js.committed {
		err = fmt.Errorf("%w: outcome %d has not been delivered (the last is %d)", ErrBadRequest, upto, js.committed)
	}
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("ack job %s: %w", id, err)
	}
	if upto > js.rec.Acked {
		s.pend.b.Acks = append(s.pend.b.Acks, AckRecord{Job: id, Prev: js.rec.Acked, Upto: upto})
		js.outcomes = append([]Verified(nil), js.outcomes[upto-js.rec.Acked:]...)
		js.rec.Acked = upto
		s.dropRefetches(js)
		js.ackBatch = s.changed()
	}
	w := js.ackBatch
	s.mu.Unlock()
	if err := wait(ctx, w); err != nil {
		return fmt.Errorf("ack job %s: %w", id, err)
	}
	return nil
}

// mergersJob returns job id for peer, its merger; s.mu is held. Errors:
// the scheduler's stop (ErrStopped), ErrUnknownJob, ErrNotMerger.
func (s *Scheduler) mergersJob(peer string, id job.ID) (*jobState, error) {
	js, ok := s.jobs[id]
	switch {
	case s.stopped != nil:
		return nil, s.stopped
	case !ok:
		return nil, ErrUnknownJob
	case js.rec.Merger != peer:
		return nil, fmt.Errorf("%w: %s", ErrNotMerger, peer)
	}
	return js, nil
}
