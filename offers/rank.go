package offers

import (
	"cmp"
	"slices"
	"strings"
)

// RankPeers returns the offers in the order the job of l prefers them, as
// a ClassAd's Rank expression orders machines: by Requirements.Prefer,
// more first ("memory": Capacity.MemoryMiB, "cores": Capacity.Cores,
// "gpu_memory": the largest GPU's offered memory), then by peer ID so that
// the order is total and the same everywhere. It sorts a copy and does not
// filter: call Match on each offer first and pass only those that match.
func RankPeers(l Listing, offers []Offer) []Offer {
	out := slices.Clone(offers)
	score := func(o Offer) int64 {
		switch l.Requirements.Prefer {
		case "memory":
			return o.Capacity.MemoryMiB
		case "cores":
			return int64(o.Capacity.Cores)
		case "gpu_memory":
			var best int64
			for _, g := range o.Capacity.GPUs {
				best = max(best, g.MemoryMiB)
			}
			return best
		}
		return 0
	}
	slices.SortStableFunc(out, func(a, b Offer) int {
		if c := cmp.Compare(score(b), score(a)); c != 0 {
			return c
		}
		return strings.Compare(a.Peer, b.Peer)
	})
	return out
}

// RankJobs returns the listings in the order the donor of o prefers them:
// jobs the donor accepted explicitly (Accept.AcceptJobs) first, then jobs
// of preferred owners (Accept.PreferOwners), then the others, and refused
// jobs and owners last; within each group more tasks left first (more
// work to take), then the higher cost per task, then by job ID so that the
// order is total. It sorts a copy and does not filter (see Match).
func RankJobs(o Offer, ls []Listing) []Listing {
	out := slices.Clone(ls)
	a := o.Accept
	group := func(l Listing) int {
		switch {
		case slices.Contains(a.AcceptJobs, l.Job):
			return 0
		case slices.Contains(a.RefuseJobs, l.Job), slices.Contains(a.RefuseOwners, l.Owner):
			return 3
		case slices.Contains(a.PreferOwners, l.Owner):
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(x, y Listing) int {
		if c := cmp.Compare(group(x), group(y)); c != 0 {
			return c
		}
		if c := cmp.Compare(y.TasksLeft, x.TasksLeft); c != 0 {
			return c
		}
		if c := cmp.Compare(y.CostPerTask, x.CostPerTask); c != 0 {
			return c
		}
		return slices.Compare(x.Job[:], y.Job[:])
	})
	return out
}

// PreferJobs orders the listings as the donor of o prefers them (the
// groups of RankJobs: accepted jobs, preferred owners, the others, refused
// last) and keeps the given order within each group: a pool's
// matchmaking passes its jobs in fair-share order and must not let the
// job with the most tasks left take every lease. It sorts a copy and does
// not filter.
func PreferJobs(o Offer, ls []Listing) []Listing {
	out := slices.Clone(ls)
	a := o.Accept
	if len(a.AcceptJobs)+len(a.RefuseJobs)+len(a.RefuseOwners)+len(a.PreferOwners) == 0 {
		return out // every job in one group: the order stays
	}
	slices.SortStableFunc(out, func(x, y Listing) int {
		return cmp.Compare(prefGroup(a, x), prefGroup(a, y))
	})
	return out
}

// prefGroup is l's group in the donor's preferences: 0 accepted, 1
// preferred owner, 2 others, 3 refused.
func prefGroup(a Accept, l Listing) int {
	switch {
	case slices.Contains(a.AcceptJobs, l.Job):
		return 0
	case slices.Contains(a.RefuseJobs, l.Job), slices.Contains(a.RefuseOwners, l.Owner):
		return 3
	case slices.Contains(a.PreferOwners, l.Owner):
		return 1
	}
	return 2
}
