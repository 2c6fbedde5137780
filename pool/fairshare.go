package pool

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// UsageHalfLife is how fast the usage and contribution behind fair share
// are forgotten: each halves over this time, as HTCondor's
// PRIORITY_HALFLIFE (one day by default) does for its user priorities.
const UsageHalfLife = 24 * time.Hour

// decayed is an amount of cost units that halves every UsageHalfLife.
type decayed struct {
	v  float64
	at time.Time
}

// at returns the amount at now.
func (d decayed) value(now time.Time) float64 {
	if d.v == 0 {
		return 0
	}
	return d.v * math.Exp2(-float64(now.Sub(d.at))/float64(UsageHalfLife))
}

func (d *decayed) add(x float64, now time.Time) {
	d.v, d.at = d.value(now)+x, now
}

// merge adds x, an amount of its own time, to d, at the later of their
// times.
func (d *decayed) merge(x decayed) {
	at := latest(d.at, x.at)
	d.v, d.at = d.value(at)+x.value(at), at
}

// fairOrder sorts jobs (the ones a peer may compute) by fair share, in the
// spirit of HTCondor's user priorities: the owner whose jobs used least
// of the pool, relative to its weight, goes first; within an owner, the
// older job, so that an owner's jobs finish in the order submitted and a
// started job's last tasks never wait behind the owner's newer jobs. An owner's weight is 1 plus
// what its own devices contributed (receipts' cost) over the mean usage of
// the owners waiting, so that a donor's jobs get a larger share; usage and
// contribution both decay with UsageHalfLife. In a pool divided into
// shards both are summed over the shards (SetShardUsage). s.mu is held.
func (s *Scheduler) fairOrder(jobs []*jobState, now time.Time) {
	if len(jobs) < 2 {
		return
	}
	var owners []string
	seen := map[string]bool{}
	for _, js := range jobs {
		if !seen[js.rec.Owner] {
			seen[js.rec.Owner] = true
			owners = append(owners, js.rec.Owner)
		}
	}
	s.sortFair(jobs, s.fairPrio(owners, now))
}

// fairPrio returns each owner's fair-share priority (lower goes first)
// among owners, the owners of the jobs a peer may compute in the order
// of their first such job (the order fixes the rounding of their mean
// usage). s.mu is held.
func (s *Scheduler) fairPrio(owners []string, now time.Time) map[string]float64 {
	prio := make(map[string]float64, len(owners))
	var sum float64
	for _, o := range owners {
		u, _ := s.ownerFigures(o, now)
		prio[o] = u
		sum += u
	}
	mean := math.Max(sum/float64(len(prio)), 1)
	for o, u := range prio {
		_, c := s.ownerFigures(o, now)
		prio[o] = u / (1 + c/mean)
	}
	return prio
}

// sortFair sorts jobs, given by Order, by their owners' prio, then by
// Order.
func (s *Scheduler) sortFair(jobs []*jobState, prio map[string]float64) {
	if len(jobs) < 2 {
		return
	}
	slices.SortStableFunc(jobs, func(a, b *jobState) int {
		if c := cmp.Compare(prio[a.rec.Owner], prio[b.rec.Owner]); c != 0 {
			return c
		}
		return cmp.Compare(a.rec.Order, b.rec.Order)
	})
}

// used charges a leased replica's planner cost to its job's owner. s.mu
// is held.
func (s *Scheduler) used(js *jobState, i int64, now time.Time) {
	s.trust.owner(js.rec.Owner).usage.add(js.j.CostOf(i), now)
}
