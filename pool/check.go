package pool

import (
	"container/heap"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"time"
)

// Checks that cannot be seen coming. A check is a replica that the pool
// leases to see whether another device returned the right bytes: the
// second replica of a task chosen for a spot check (adaptive
// replication), of a result held back whose check window closed, and, in
// a pool with established owners (TrustConfig.TrustedOwners), of every
// task first computed by a device of an owner the operator did not name.
//
// Leased at once to whoever asked next, as a task's other replicas are, a
// check told a cheater with a second device of another owner exactly
// which results were checked: that device was handed them, and the first
// lied only on the others (a probe merged 55 to 120 wrong results of 300
// this way). So a check is handed out only
//
//   - after the result it checks came back: the device has committed to
//     its bytes before anyone, friend or not, can be handed the same task;
//   - after a secret random number of further requests for work (0 to
//     maxCheckDelay, from HMAC over the pool's secret), so that when it is
//     handed out says nothing either;
//   - to a device of one owner the pool draws at random (HMAC again) among
//     the owners whose devices asked for work lately and may compute it,
//     leaving out owners that agreed with the checked owners far more often
//     than the others did (a pair that keeps agreeing), so that a
//     colluder gets a check only in its turn, however often it asks; the
//     draw is made again when that owner does not take it in time;
//   - never to the device that asked for work right after the checked
//     replica was leased (it may be the cheater's second device, told to
//     ask at once).
//
// A device therefore cannot tell a checked result from an unchecked one
// by what it or its friends are handed, nor by when, until its bytes are
// in. Under collusion of k devices of k owners among n owners that may
// check, a check lands on a colluder with probability (k−1)/(n−1) at
// most, and a device that lies on every task is caught on each lie with
// probability at least 1 − (k−1)/(n−1) (docs/operator.md, "What
// verification lets through"). The choice and the pairs' history are kept
// in memory only: after a restart an undecided task's next replica goes to
// whoever asks.

// maxCheckDelay bounds the random delay of a check, in requests for work.
const maxCheckDelay = 16

// checkItem is a check waiting for its delay: due once the pool has
// answered at requests for work.
type checkItem struct {
	at    int64
	js    *jobState
	ts    *taskState
	round int
}

type checkHeap []checkItem

func (h checkHeap) Len() int           { return len(h) }
func (h checkHeap) Less(i, k int) bool { return h[i].at < h[k].at }
func (h checkHeap) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *checkHeap) Push(x any)        { *h = append(*h, x.(checkItem)) }
func (h *checkHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// checkState is a task's state as a check (taskState.chk). Each round
// waits for its delay (due), then for one device to take its replica
// (taken); a task still undecided once that replica is back starts the
// next round.
type checkState struct {
	first    string // the device the checked replica was leased to
	barred   string // the device that asked for work right after it
	round    int    // rounds started
	due      bool   // this round's delay passed
	taken    bool   // this round's replica was leased
	draws    int    // checker draws so far
	checker  string // the owner whose device is to take it; "" for any
	redrawAt int64  // trustState.asks after which it is drawn again
}

// pairKey names an unordered pair of owners.
func pairKey(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// asking notes a request for work by device p: it bars p from the checks
// leased right before (unless p computed them), and makes the checks
// whose delay passed due. s.mu is held.
func (s *Scheduler) asking(p Peer) {
	t := s.trust
	t.asks++
	if len(s.watch) > 0 {
		keep := s.watch[:0]
		for _, ts := range s.watch {
			if ts.chk == nil || ts.chk.barred != "" {
				continue
			}
			if ts.chk.first == p.ID {
				keep = append(keep, ts)
				continue
			}
			ts.chk.barred = p.ID
		}
		s.watch = keep
	}
	for len(t.checks) > 0 && t.checks[0].at <= t.asks {
		it := heap.Pop(&t.checks).(checkItem)
		s.checkDue(it.js, it.ts, it.round)
	}
}

// checkDue makes round of ts's checks due, if ts still waits for it.
// s.mu is held.
func (s *Scheduler) checkDue(js *jobState, ts *taskState, round int) {
	c := ts.chk
	if c == nil || c.due || c.round != round || js.active[ts.index] != ts {
		return // decided, or its round moved on
	}
	c.due, c.checker = true, ""
	js.waitingChecks--
	js.update(ts)
}

// makeCheck marks ts, whose first replica was just leased to device
// first, as a task whose further replicas are checks; watch: bar the
// next device to ask. s.mu is held.
func (s *Scheduler) makeCheck(ts *taskState, first string, watch bool) {
	if ts.chk != nil {
		return
	}
	ts.chk = &checkState{first: first}
	if watch {
		s.watch = append(s.watch, ts)
	}
}

// scheduleCheck starts ts's next round, now that no replica of it is
// live and it is undecided: unless this round still waits for its delay
// or for its replica. Due at once when the delay drawn is 0 or the job
// has no fresh task left (no request for work would otherwise come).
// s.mu is held.
func (s *Scheduler) scheduleCheck(js *jobState, ts *taskState) {
	c := ts.chk
	if c == nil || len(ts.live) > 0 || (c.round > 0 && !(c.due && c.taken)) {
		return
	}
	c.round++
	c.due, c.taken, c.checker = false, false, ""
	js.waitingChecks++
	d := int64(s.secretDraw("idlepool/check-delay/v1", js, ts, c.round) % (maxCheckDelay + 1))
	if js.next >= js.tasks || d == 0 {
		s.checkDue(js, ts, c.round)
		return
	}
	heap.Push(&s.trust.checks, checkItem{at: s.trust.asks + d, js: js, ts: ts, round: c.round})
}

// dueChecks makes every check of js due once it has no fresh task left.
// s.mu is held.
func (s *Scheduler) dueChecks(js *jobState) {
	if js.waitingChecks == 0 || js.next < js.tasks {
		return
	}
	for _, ts := range js.active {
		if ts.chk != nil && !ts.chk.due {
			s.checkDue(js, ts, ts.chk.round)
		}
	}
}

// secretDraw is HMAC-SHA256(secret, domain, job, task, round) read as a
// number: a draw a peer cannot compute.
func (s *Scheduler) secretDraw(domain string, js *jobState, ts *taskState, round int) uint64 {
	m := hmac.New(sha256.New, s.trust.cfg.Secret)
	m.Write([]byte(domain))
	m.Write([]byte{0})
	m.Write(js.rec.ID[:])
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(ts.index))
	binary.BigEndian.PutUint64(b[8:], uint64(round))
	m.Write(b[:])
	return binary.BigEndian.Uint64(m.Sum(nil)[:8])
}

// checkOK reports whether p may take ts's next replica as its check: a
// device of the owner drawn for it (drawn now when none is, or when the
// drawn owner did not take it in time), and not the device barred from
// it. Any device p may take it when no owner
// could be drawn. s.mu is held.
func (s *Scheduler) checkOK(js *jobState, ts *taskState, p Peer, now time.Time) bool {
	c := ts.chk
	if c == nil || len(ts.returned) == 0 {
		return true // not a check, or its checked replica is leased again
	}
	if c.checker == "" || s.trust.asks > c.redrawAt {
		s.drawChecker(js, ts, now)
	}
	if p.ID == c.barred && c.checker != "" {
		return false
	}
	return c.checker == "" || p.Owner == c.checker
}

// drawChecker draws the owner whose device is to take ts's next check
// (see the top of this file). s.mu is held.
func (s *Scheduler) drawChecker(js *jobState, ts *taskState, now time.Time) {
	c := ts.chk
	c.draws++
	c.checker = ""
	var voters []string
	for _, r := range ts.returned {
		if js.votes(ts, r) && !slices.Contains(voters, r.rec.Owner) {
			voters = append(voters, r.rec.Owner)
		}
	}
	// The owners whose devices asked lately and may compute it, with how
	// often each agreed with the checked owners.
	hist := map[string]int{}
	connected := 0
	for id, d := range s.trust.devices {
		if d.asked.IsZero() || now.Sub(d.asked) > connectedWithin || d.owner == "" {
			continue
		}
		connected++
		if id == c.barred {
			continue
		}
		p := Peer{ID: id, Owner: d.owner}
		if _, ok := hist[p.Owner]; ok || !js.allows(p) || !s.trust.excludedUntil(p, now).IsZero() ||
			!js.eligible(ts, p) || !js.admits(ts, p) {
			continue
		}
		h := 0
		for _, v := range voters {
			h += s.trust.pairs[pairKey(p.Owner, v)]
		}
		hist[p.Owner] = h
	}
	// The drawn owner has four requests for work per connected device
	// (16 at least) to take it.
	c.redrawAt = s.trust.asks + int64(max(16, 4*connected))
	if len(hist) == 0 {
		return
	}
	sum := 0
	for _, h := range hist {
		sum += h
	}
	mean := float64(sum) / float64(len(hist))
	var cands []string
	for o, h := range hist {
		if float64(h) <= 2*mean+1 { // not a pair that keeps agreeing
			cands = append(cands, o)
		}
	}
	slices.Sort(cands)
	c.checker = cands[s.secretDraw("idlepool/checker/v1", js, ts, c.draws)%uint64(len(cands))]
}

// agreedPairs records that the owners of agreeing, voting replicas of ts
// agreed once more (checkers are drawn away from pairs that keep
// agreeing). s.mu is held.
func (s *Scheduler) agreedPairs(js *jobState, ts *taskState, agreeing map[*replica]bool) {
	var owners []string
	for _, r := range ts.returned {
		if agreeing[r] && js.votes(ts, r) && !slices.Contains(owners, r.rec.Owner) {
			owners = append(owners, r.rec.Owner)
		}
	}
	for i, a := range owners {
		for _, b := range owners[i+1:] {
			if s.trust.pairs == nil {
				s.trust.pairs = map[[2]string]int{}
			}
			s.trust.pairs[pairKey(a, b)]++
		}
	}
}
