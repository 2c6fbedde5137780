package pool

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Stalled tasks. A task whose voters disagree needs one more agreeing
// owner than the quorum, and each owner votes once: in a small pool the
// owners may all have voted before any digest won (two colluders against
// two honest owners end 2-2). Such a task is stalled: no owner the pool
// has (registered, not excluded, allowed to compute it) may add a vote.
// Counting this in replicas (MaxReplicas) left it waiting for good, and
// its undecided replicas used up every device's bound on unverified work,
// so that even untouched tasks were never leased. Now:
//
//   - The replicas of a stalled task stop counting toward their devices'
//     bound (TrustConfig.MaxUnverified), so the job's other tasks go on.
//   - It keeps waiting for a device of a new owner, and JobStatus.Trouble
//     says why in words ("task 7 needs a third agreeing owner: 2 owners
//     agree with each other against 2 others, ...").
//   - A device caught on a known answer is proven to return wrong bytes:
//     its votes on undecided tasks are void (void), so a task it stalled
//     is decided by the others, and its owner's devices compute nothing
//     more of that job (jobState.caught): they would only pair with a
//     partner on the tasks they start.
//   - A device on the losing side of repeated stalls (its digest had no
//     strict majority) is a suspect: among the tasks it may take, those
//     with a known answer come first, and a right known answer clears it.
//   - Once the job has had nothing else to compute (no fresh task, no live
//     lease, every undecided task stalled) for a whole lease timeout of
//     the job (policy.lease_timeout: a new owner's device may still come
//     and settle them meanwhile), its stalled tasks end unverified with
//     the split in words: marked, never folded.

// suspectAfter is how many stalls a device must lose before it is a
// suspect.
const suspectAfter = 2

// votes reports whether returned replica r of ts votes: not when its
// device was caught deviating (a caught provisional replica, a void one),
// nor when its owner was caught on a known answer of the job.
func (js *jobState) votes(ts *taskState, r *replica) bool {
	return !r.void && !js.caught[r.rec.Owner] && (r != ts.prov || ts.provMode != provCaught)
}

// stallIfUndecidable marks ts stalled when its voters disagree, it has no
// live replica, and fewer voters than it needs (needed) may still join it
// among the pool's registered devices. lead, c, n and q are its tally and
// quorum. s.mu is held.
func (s *Scheduler) stallIfUndecidable(js *jobState, ts *taskState, lead *replica, c, n, q int) {
	if ts.stalled || n <= c || len(ts.live) > 0 || ts.refetch != nil {
		return
	}
	need := js.needed(q, c, n)
	if s.mayJoin(js, ts, need) >= need {
		return
	}
	ts.stalled = true
	js.stalled++
	for _, r := range ts.returned {
		s.unclaim(r)
	}
	// Who lost: every voter whose digest has no strict majority.
	for _, r := range ts.returned {
		if !js.votes(ts, r) || (js.agrees(r, lead) && 2*c > n) {
			continue
		}
		d := s.trust.device(r.rec.Peer)
		d.splits++
		s.trustChanged(TrustDevice, r.rec.Peer)
	}
	s.log.Warn("Task stalled: no owner the pool has may settle its split", "job", js.rec.ID.String(), "task", ts.index,
		"agreeing", c, "voters", n, "needs", need)
}

// mayJoin counts, up to max, the distinct voters of the pool's registered
// devices that may still take a replica of ts: allowed by the job, not
// excluded, not voting on it already, admitted by the trust rules. s.mu is
// held.
func (s *Scheduler) mayJoin(js *jobState, ts *taskState, max int) int {
	now := s.now()
	seen := map[string]bool{}
	for _, p := range s.peers {
		v := p.Owner
		if js.ownerOnly() {
			v = p.ID
		}
		if seen[v] || !js.allows(p) || !s.trust.excludedUntil(p, now).IsZero() || !js.eligible(ts, p) || !js.admits(ts, p) {
			continue
		}
		seen[v] = true
		if len(seen) >= max {
			break
		}
	}
	return len(seen)
}

// voidOwner voids the votes of every device of owner (void).
func (s *Scheduler) voidOwner(owner string) {
	for id, p := range s.peers {
		if p.Owner == owner {
			s.void(id)
		}
	}
}

// void takes the votes of device peer, just caught on a known answer or
// excluded, off every undecided task it returned a replica of, and
// decides those tasks again without them. s.mu is held.
func (s *Scheduler) void(peer string) {
	type task struct {
		js *jobState
		ts *taskState
	}
	var touched []task
	for _, js := range s.queue {
		for _, ts := range js.active {
			for _, r := range ts.returned {
				if r.rec.Peer == peer && !r.void && r != ts.prov {
					r.void = true
					touched = append(touched, task{js, ts})
				}
			}
		}
	}
	sort.Slice(touched, func(i, k int) bool { return touched[i].ts.index < touched[k].ts.index })
	for _, t := range touched {
		if t.js.active[t.ts.index] != t.ts || t.ts.refetch != nil {
			continue
		}
		if t.ts.stalled {
			t.ts.stalled = false // judged again below
			t.js.stalled--
		}
		s.decideIfReady(t.js, t.ts)
	}
}

// endStalled ends js's stalled tasks unverified once the job has had
// nothing else to compute for its lease timeout: no fresh task, no live
// lease, no held result, and every undecided task stalled. s.mu is held.
func (s *Scheduler) endStalled(js *jobState) {
	if js.next < js.tasks || js.leased > 0 || js.held > 0 || len(js.active) == 0 {
		js.stalledSince = time.Time{}
		return
	}
	if int(js.stalled) < len(js.active) && js.barsSeen != s.trust.bars {
		// A task may have stalled since its last vote (an owner that
		// could settle it was excluded, or barred from the job): judge
		// them again, once per such change.
		js.barsSeen = s.trust.bars
		for _, ts := range js.active {
			if !ts.stalled {
				lead, c, n := js.tally(ts)
				s.stallIfUndecidable(js, ts, lead, c, n, js.quorumOf(ts, c, n))
			}
		}
	}
	if int(js.stalled) < len(js.active) {
		js.stalledSince = time.Time{}
		return
	}
	now := s.now()
	if js.stalledSince.IsZero() {
		js.stalledSince = now
		js.touch() // the stall list keeps it while its stall is timed
	}
	if now.Sub(js.stalledSince) < js.pol.LeaseTimeout.Duration {
		return // a new owner's device may still settle them
	}
	js.stalledSince = time.Time{}
	var stalled []*taskState
	for _, ts := range js.active {
		stalled = append(stalled, ts)
	}
	sort.Slice(stalled, func(i, k int) bool { return stalled[i].index < stalled[k].index })
	for _, ts := range stalled {
		_, c, n := js.tally(ts)
		s.decide(js, ts, OutcomeUnverified, nil, c, n)
	}
}

// suspect reports whether device id lost repeated stalls and has not
// passed a known answer since.
func (t *trustState) suspect(id string) bool { return t.device(id).splits >= suspectAfter }

// stallText describes js's lowest stalled task for people: "task 7 needs
// a third agreeing owner: 2 owners agree with each other against 2
// others, and no other owner of the pool may compute it (3 tasks wait so;
// ...)". "" when none is stalled.
func (js *jobState) stallText() string {
	if js.stalled == 0 {
		return ""
	}
	var first *taskState
	for _, ts := range js.active {
		if ts.stalled && (first == nil || ts.index < first.index) {
			first = ts
		}
	}
	if first == nil {
		return ""
	}
	_, c, n := js.tally(first)
	need := js.needed(js.quorumOf(first, c, n), c, n)
	who, others := "owner", "other owner of the pool may compute it"
	if js.ownerOnly() {
		who, others = "device", "other device of its owner may compute it"
	}
	text := fmt.Sprintf("task %d needs a %s agreeing %s: %s, and no %s", first.index, ordinal(c+need), who, js.split(first, who), others)
	wait := "it waits for a new owner's device, and ends unverified once nothing else was left to compute for " + js.pol.LeaseTimeout.Duration.String()
	if js.stalled > 1 {
		wait = fmt.Sprintf("%d tasks wait so for a new owner's device, and end unverified once nothing else was left to compute for %s", js.stalled, js.pol.LeaseTimeout.Duration)
	}
	suspects := 0
	for id, d := range js.trust.devices {
		if d.splits >= suspectAfter && d.owner != "" && id != "" {
			suspects++
		}
	}
	switch {
	case suspects > 0 && js.j.HasKnownAnswers():
		wait += fmt.Sprintf("; %s on the losing side of repeated splits %s checked against the job's known answers first",
			plural(suspects, "device"), isAre(suspects))
	case suspects > 0:
		wait += "; the job names no known answers that could tell which side is right"
	}
	return text + " (" + wait + ")"
}

// split describes ts's votes: "2 owners agree with each other against 2
// others", or, with more sides, "4 owners disagree (2, 1 and 1 agree
// among themselves)".
func (js *jobState) split(ts *taskState, who string) string {
	var sides []int
	var reps []*replica
	seen := map[string]bool{}
	for _, r := range ts.returned {
		v := js.voter(r)
		if !js.votes(ts, r) || seen[v] {
			continue
		}
		seen[v] = true
		placed := false
		for i, x := range reps {
			if js.agrees(x, r) {
				sides[i]++
				placed = true
				break
			}
		}
		if !placed {
			reps, sides = append(reps, r), append(sides, 1)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(sides)))
	n := 0
	for _, k := range sides {
		n += k
	}
	switch {
	case len(sides) == 2 && sides[0] > 1:
		other := "others"
		if sides[1] == 1 {
			other = "other"
		}
		return fmt.Sprintf("%s agree with each other against %d %s", plural(sides[0], who), sides[1], other)
	case len(sides) == 2:
		return fmt.Sprintf("2 %ss disagree", who)
	}
	parts := make([]string, len(sides))
	for i, k := range sides {
		parts[i] = fmt.Sprint(k)
	}
	list := strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
	return fmt.Sprintf("%s disagree (%s agree among themselves)", plural(n, who), list)
}

// ordinal says 3 as "third".
func ordinal(n int) string {
	words := []string{"", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"}
	if n > 0 && n < len(words) {
		return words[n]
	}
	return fmt.Sprintf("%dth", n)
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}
