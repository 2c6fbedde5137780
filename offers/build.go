package offers

import (
	"slices"
	"strings"
	"time"

	"idlepool/idle"
	"idlepool/job"
)

// Preferences are the donor's choices about pools and jobs, as the local
// store keeps them (store.Local.Preferences): the pools this machine knows,
// and for each (or for all pools, URL "") which jobs and owners the donor
// accepts or refuses, whether GPU programs are allowed, the per-task
// ceilings and the pool's weight. Accept turns them into what one pool's
// offer carries.
type Preferences struct {
	// Global applies to every pool (its URL is "").
	Global PoolPreferences `json:"global"`
	// Pools are the pools this machine knows, sorted by URL.
	Pools []PoolPreferences `json:"pools"`
}

// PoolPreferences are the donor's choices for one pool, or for all pools
// when URL is "".
type PoolPreferences struct {
	URL  string `json:"url"`            // the pool's URL as the donor gave it; "" for all pools
	Name string `json:"name,omitempty"` // the pool's name, when known
	// Weight is the donor's relative weight of this pool among its
	// pools (default 1; 0 offers it nothing); Accept normalises it.
	Weight       float64       `json:"weight"`
	GPUPrograms  bool          `json:"gpu_programs"`
	MaxMemoryMiB int64         `json:"max_memory_mib,omitempty"` // per task; 0: no ceiling beyond the offer
	MaxTaskTime  time.Duration `json:"max_task_time,omitempty"`  // per task, nanoseconds in JSON; 0: no ceiling
	AcceptOwners []string      `json:"accept_owners,omitempty"`
	RefuseOwners []string      `json:"refuse_owners,omitempty"`
	AcceptJobs   []job.ID      `json:"accept_jobs,omitempty"`
	RefuseJobs   []job.ID      `json:"refuse_jobs,omitempty"`
}

// Pool returns the preferences of the pool at url, and whether the
// machine knows it.
func (p Preferences) Pool(url string) (PoolPreferences, bool) {
	i := slices.IndexFunc(p.Pools, func(pp PoolPreferences) bool { return pp.URL == url })
	if i < 0 {
		return PoolPreferences{URL: url, Weight: 1}, false
	}
	return p.Pools[i], true
}

// Accept is what the offer to the pool at url accepts: the global choices
// and the pool's together, where a choice for the pool overrides the
// opposite global one about the same job or owner; GPU programs when
// allowed globally or for the pool; the smaller non-zero ceiling of each;
// and the pool's weight divided by the sum of the weights of the known
// pools (1 when the pool is the only one or unknown and alone, 0 when all
// weights are 0). An unknown pool has weight 1 and counts in the sum.
func (p Preferences) Accept(url string) Accept {
	g := p.Global
	pp, known := p.Pool(url)
	a := Accept{
		GPUPrograms:  g.GPUPrograms || pp.GPUPrograms,
		MaxMemoryMiB: minPositive(g.MaxMemoryMiB, pp.MaxMemoryMiB),
		MaxTaskTime:  minPositive(g.MaxTaskTime, pp.MaxTaskTime),
	}
	a.PreferOwners = merged(g.AcceptOwners, pp.AcceptOwners, pp.RefuseOwners, strings.Compare)
	a.RefuseOwners = merged(g.RefuseOwners, pp.RefuseOwners, pp.AcceptOwners, strings.Compare)
	a.AcceptJobs = merged(g.AcceptJobs, pp.AcceptJobs, pp.RefuseJobs, compareIDs)
	a.RefuseJobs = merged(g.RefuseJobs, pp.RefuseJobs, pp.AcceptJobs, compareIDs)
	total := 0.0
	for _, q := range p.Pools {
		total += max(q.Weight, 0)
	}
	if !known {
		total += pp.Weight
	}
	if total > 0 {
		a.Weight = max(pp.Weight, 0) / total
	}
	return a
}

// merged is global without what the pool overrides, plus the pool's own,
// sorted by compare and without duplicates.
func merged[T comparable](global, pool, overridden []T, compare func(a, b T) int) []T {
	var out []T
	for _, v := range global {
		if !slices.Contains(overridden, v) {
			out = append(out, v)
		}
	}
	out = append(out, pool...)
	slices.SortFunc(out, compare)
	return slices.Compact(out)
}

func compareIDs(a, b job.ID) int { return slices.Compare(a[:], b[:]) }

func minPositive[T int64 | time.Duration](a, b T) T {
	switch {
	case a <= 0:
		return max(b, 0)
	case b <= 0:
		return a
	}
	return min(a, b)
}

// Spec is what Build makes an offer from.
type Spec struct {
	Pool    string // the pool's name, as the offer carries it
	PoolURL string // the pool's URL: which of Preferences applies
	Peer    string // the device's peer ID (Sign sets it too)
	Owner   string // the owner ID
	// Capacity is idle.NewCapacity(idle.ReadMachine(...), settings, the
	// GPUs NVML found).
	Capacity    idle.Capacity
	State       idle.State // the policy's decision now
	Hold        idle.Hold  // its coarse hold (idle.Decision.Hold), never its reason in words
	Preferences Preferences
	Issued      time.Time     // now
	TTL         time.Duration // how long the offer is valid; 0: DefaultTTL
}

// Build returns the unsigned offer of s: its capacity and state as given,
// Accept from s.Preferences.Accept(s.PoolURL), valid from s.Issued for
// s.TTL. The agent signs it (Offer.Sign) and publishes it; 'idlepool
// jobs' builds the same offer to tell the donor which jobs match.
func Build(s Spec) Offer {
	ttl := s.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	c := s.Capacity
	if c.GPUs == nil {
		c.GPUs = []idle.GPUOffer{}
	}
	if c.Schedule == nil {
		c.Schedule = idle.Schedule{}
	}
	return Offer{
		Peer: s.Peer, Owner: s.Owner, Pool: s.Pool,
		Capacity: c, State: s.State, Hold: s.Hold,
		Accept: s.Preferences.Accept(s.PoolURL),
		Issued: s.Issued, Expires: s.Issued.Add(ttl),
	}
}
