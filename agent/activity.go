package agent

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/pool"
)

// Activity is what a pool is doing about one job, for the person who
// follows it: the job's progress in the pool, the donors' live offers in
// words, and why the job cannot progress now, if it cannot. Describe
// builds it; Follow reports it (FollowConfig.Activity).
type Activity struct {
	Status pool.JobStatus
	// Donors is one line on the live offers: "0 of 4 donors computing: 4
	// waiting (idle time unknown)", or "no donor offers compute in this
	// pool".
	Donors string
	// Matching is how many live offers match the job (offers.Match), and
	// Owners how many distinct owners those offers belong to.
	Matching, Owners int
	// Quorum, when results wait for a quorum that nothing in flight can
	// complete, says how many and why: "50 results waiting for a device of
	// a second owner: ...", or the pool's own words when it gives some
	// (pool.JobStatus.Trouble: "... waiting: task 7 needs a third
	// agreeing owner: ..."). Empty otherwise.
	Quorum string
	// Stuck says why no task of the job can be leased now ("no donor
	// matches this job: ..."); empty when one can, or nothing is left to
	// lease.
	Stuck string
	// Idle is set when Quorum says that nothing computes the waiting
	// results now (no task of the job leased at this instant): true of
	// one status, and in a divided pool a moment's lull while the donors
	// compute other shards' jobs, so a follow shows it only when it held
	// at its previous look too.
	Idle bool
	// Timeouts, while some tasks ran past their time limit on a device,
	// says how many, on how many devices and when such a task ends
	// (pool.JobStatus.Timeouts); empty otherwise.
	Timeouts string
}

// Lines returns the activity as lines for people, in the order progress,
// donors, quorum, timeouts, stuck (empty parts left out).
func (a Activity) Lines() []string {
	st := a.Status
	out := []string{fmt.Sprintf("pool: %d of %d tasks accepted, %d failed, %d leased now, %d with results waiting for a quorum",
		st.Accepted, st.Tasks, st.Failed, st.Leased, st.Waiting)}
	for _, s := range []string{a.Donors, a.Quorum, a.Timeouts, a.Stuck} {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ListingOf describes job j with its pool status as the pool lists it for
// donors (what offers.Match needs; the pool's name is left empty).
func ListingOf(j *job.Job, st pool.JobStatus) offers.Listing {
	m := j.Manifest
	return offers.Listing{
		Job: j.ID, Name: m.Name, Owner: st.Owner, Requirements: m.Requirements,
		MemoryMiB: offers.TaskMemoryMiB(m.Requirements, m.Policy), TimeLimit: m.Policy.TimeLimit.Duration,
		TasksLeft: st.Tasks - st.Accepted - st.Failed, TasksDone: st.Accepted + st.Failed,
		Quorum: st.Quorum, Participants: m.Policy.Participants,
	}
}

// Describe says what the pool does about the job l (with status st),
// given the pool's live offers at now. It is pure.
func Describe(st pool.JobStatus, l offers.Listing, live []offers.Offer, now time.Time) Activity {
	a := Activity{Status: st, Donors: donorsLine(live), Timeouts: st.Timeouts}
	type count struct {
		text string
		n    int
	}
	var (
		why      []count
		owners   []string
		idleWhy  []string // states of matching donors that do not compute
		ownOnly  = len(live) > 0
		matching []offers.Offer
	)
	for _, o := range live {
		ok, reasons := offers.Match(o, l, now)
		if ok {
			matching = append(matching, o)
			if !slices.Contains(owners, o.Owner) {
				owners = append(owners, o.Owner)
			}
			if why, off := notComputing(o); off {
				idleWhy = append(idleWhy, why)
			}
			ownOnly = false
			continue
		}
		if !slices.Equal(reasons, []string{offers.ReasonOwnJob}) {
			ownOnly = false
		}
		for _, r := range reasons {
			i := slices.IndexFunc(why, func(c count) bool { return c.text == r })
			if i < 0 {
				why = append(why, count{r, 0})
				i = len(why) - 1
			}
			why[i].n++
		}
	}
	a.Matching, a.Owners = len(matching), len(owners)
	left := st.Tasks - st.Accepted - st.Failed
	// No offer listed while tasks are leased: the pool lost its list (it
	// restarted, or a cluster's node in charge of it changed) and gathers
	// it again from the donors, who are computing all the same; what the
	// offers would say about this job is unknown.
	unlisted := len(live) == 0 && st.Leased > 0
	if unlisted {
		leased := fmt.Sprintf("%d tasks are", st.Leased)
		if st.Leased == 1 {
			leased = "1 task is"
		}
		a.Donors = "no donor's offer is listed now, though " + leased + " leased: the pool gathers the offers again after a restart or a take-over"
	}
	switch {
	case st.Cancelled:
		a.Stuck = "the job was cancelled by its owner: it leases nothing more"
	case left == 0, unlisted:
	case len(live) == 0:
		a.Stuck = "nothing is leased until a donor joins: start one with 'idlepool join POOL_URL' (or 'join --always' on a machine where nobody types)"
	case ownOnly:
		a.Stuck = "only your own devices offer compute here, and the pool never leases a job to its owner's devices: " +
			"add a device of another owner, or set participants = \"owner\" to compute on your own"
	case len(matching) == 0:
		sort.SliceStable(why, func(i, k int) bool { return why[i].n > why[k].n })
		parts := make([]string, 0, 3)
		for _, c := range why[:min(len(why), 3)] {
			parts = append(parts, fmt.Sprintf("%s (%s)", c.text, plural(int64(c.n), "donor")))
		}
		a.Stuck = "no donor matches this job: " + strings.Join(parts, "; ")
	case st.Leased == 0 && len(idleWhy) == len(matching):
		a.Stuck = fmt.Sprintf("%s this job but not computing now: %s", matchLine(len(matching)), groupText(idleWhy))
	}
	// Results waiting for a quorum are news only when nothing in flight
	// can complete them: no second owner matches, or nothing is leased.
	if st.Waiting > 0 && !st.Cancelled {
		results := plural(st.Waiting, "result")
		switch {
		case st.Trouble != "":
			// The pool knows best why they wait (a split no owner it
			// has may settle, a task failing on every device).
			a.Quorum = fmt.Sprintf("%s waiting: %s", results, st.Trouble)
		case unlisted:
		case st.Quorum >= 2 && len(owners) < st.Quorum && l.Participants != "owner":
			a.Quorum = fmt.Sprintf("%s waiting for a device of a %s owner: a task is accepted when devices of %d owners return the same bytes, and the donors that match belong to %s",
				results, ordinal(len(owners)+1), st.Quorum, plural(int64(len(owners)), "owner"))
		case st.Leased == 0:
			a.Quorum = fmt.Sprintf("%s waiting for the agreeing results of other devices (quorum %d), and none is computing one now", results, st.Quorum)
			a.Idle = true
		}
	}
	return a
}

// donorsLine summarises the live offers: "0 of 4 donors computing: 3
// waiting (for its owner), 1 not heard from for over a minute" (an offer
// the pool marks Silent counts as such, whatever its state).
func donorsLine(live []offers.Offer) string {
	if len(live) == 0 {
		return "no donor offers compute in this pool"
	}
	var computing int
	var rest []string
	for _, o := range live {
		if why, off := notComputing(o); off {
			rest = append(rest, why)
		} else {
			computing++
		}
	}
	line := fmt.Sprintf("%d of %s computing", computing, plural(int64(len(live)), "donor"))
	if len(rest) > 0 {
		line += ": " + groupText(rest)
	}
	return line
}

// notComputing says why the donor of offer o does not compute, and
// whether it does not: its state with its hold ("waiting (for its
// owner)"), or, for an offer the pool marks Silent, that the device was
// not heard from for over a minute, whatever its offer says.
func notComputing(o offers.Offer) (string, bool) {
	switch {
	case o.Silent:
		return "not heard from for over a minute", true
	case o.State != idle.StateComputing:
		return stateText(o), true
	}
	return "", false
}

// stateText is an offer's state with its coarse hold: "waiting (for its
// owner)" (offers.Offer.StateText).
func stateText(o offers.Offer) string { return o.StateText() }

// groupText counts equal texts: "3 waiting (idle time unknown), 1 paused".
func groupText(texts []string) string {
	var order []string
	n := map[string]int{}
	for _, t := range texts {
		if n[t] == 0 {
			order = append(order, t)
		}
		n[t]++
	}
	parts := make([]string, len(order))
	for i, t := range order {
		parts[i] = fmt.Sprintf("%d %s", n[t], t)
	}
	return strings.Join(parts, ", ")
}

func matchLine(n int) string {
	if n == 1 {
		return "1 donor matches"
	}
	return fmt.Sprintf("%d donors match", n)
}

func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func ordinal(n int) string {
	switch n {
	case 1:
		return "first"
	case 2:
		return "second"
	case 3:
		return "third"
	}
	return fmt.Sprintf("%dth", n)
}

// estimator estimates a job's time left from how fast the pool returns
// results (tasks accepted, failed, or with a result waiting for a
// quorum), over the last estimateWindow: none while that count did not
// move, so that a pool that stalled (no donor, a quorum that waits for a
// second owner) gives no estimate rather than a wrong one.
type estimator struct {
	samples []sample
}

type sample struct {
	at       time.Time
	done     int64 // tasks with results (outcomes, and results waiting for a quorum)
	outcomes int64 // tasks with an outcome
}

// estimateWindow is the span of progress an estimate is based on; an
// estimate needs at least minEstimateTasks results over minEstimateSpan
// in it (the first minute of a job is mostly its program compiling).
const (
	estimateWindow   = 5 * time.Minute
	minEstimateSpan  = 30 * time.Second
	minEstimateTasks = 5
)

// observe records that at now done tasks had results, outcomes of them
// an outcome.
func (e *estimator) observe(now time.Time, done, outcomes int64) {
	e.samples = append(e.samples, sample{now, done, outcomes})
	cut := 0
	for cut < len(e.samples)-2 && now.Sub(e.samples[cut+1].at) >= estimateWindow {
		cut++
	}
	e.samples = e.samples[cut:]
}

// left estimates the time until total tasks have an outcome, at the rate
// tasks got results (tasks per second); zero when unknown.
func (e *estimator) left(total int64) (left time.Duration, rate float64) {
	if len(e.samples) < 2 {
		return 0, 0
	}
	// A stretch without results at the start of the window (the program
	// compiling, no donor yet) says nothing about the rate once they come.
	i := 0
	for i < len(e.samples)-2 && e.samples[i+1].done == e.samples[i].done {
		i++
	}
	first, last := e.samples[i], e.samples[len(e.samples)-1]
	dt := last.at.Sub(first.at)
	if last.done-first.done < minEstimateTasks || dt < minEstimateSpan {
		return 0, 0
	}
	rate = float64(last.done-first.done) / dt.Seconds()
	return time.Duration(float64(total-last.outcomes) / rate * float64(time.Second)), rate
}
