package offers

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"idlepool/idle"
	"idlepool/job"
)

// Match reports whether the offer o and the job listing l match at now,
// in both directions as HTCondor's ClassAds do (Raman, Livny and Solomon,
// HPDC 1998): the job's requirements must hold for the offer, and the
// offer's conditions for the job. When they do not, why holds one
// sentence for a person for every condition that fails (never empty then),
// in this order:
//
//   - the offer has expired ("offer expired 3 min ago");
//   - the offer is to another pool than the job's;
//   - participants "owner" and the offer's owner is not the job's owner;
//   - participants "open" or "invite" and the offer's owner is the job's
//     owner: the pool never leases a job to its owner's devices
//     (ReasonOwnJob);
//   - the donor refused the job, or its owner (unless the donor accepted
//     this job explicitly);
//   - the job needs a GPU and none offered has the memory and compute
//     capability asked ("needs a GPU with 8 GiB; this machine offers
//     none");
//   - the job needs a GPU program and the donor has not opted in for this
//     pool;
//   - a task needs more machine memory (Listing.MemoryMiB) than offered,
//     or than the donor's per-task ceiling;
//   - a task may run longer (Listing.TimeLimit) than the donor's ceiling;
//   - now is outside the offer's hours ("outside this machine's hours
//     (next: Mon 22:00)"), or a task may run longer (Listing.TimeLimit)
//     than is left of them ("a task may run 10 min; this machine's hours
//     end in 1 min"): a task leased then would be suspended at the end of
//     the hours and handed back, its work lost.
//
// The sentences speak to the donor ("you"); the coordinator may show them
// to either side. Participants "invite" is not checked here: the pool
// only lists and leases to its members. Match is pure and safe for
// concurrent use.
func Match(o Offer, l Listing, now time.Time) (ok bool, why []string) {
	a := o.Accept
	if !now.Before(o.Expires) {
		why = append(why, fmt.Sprintf("offer expired %s ago", idle.DurationText(now.Sub(o.Expires))))
	}
	if o.Pool != "" && l.Pool != "" && o.Pool != l.Pool {
		why = append(why, fmt.Sprintf("offered to pool %s, but the job is in pool %s", o.Pool, l.Pool))
	}
	if l.Participants == "owner" && o.Owner != l.Owner {
		why = append(why, fmt.Sprintf("only the devices of its owner %s may compute this job", ShortID(l.Owner)))
	}
	if l.Participants != "owner" && l.Owner != "" && o.Owner == l.Owner {
		why = append(why, ReasonOwnJob)
	}
	if !slices.Contains(a.AcceptJobs, l.Job) {
		if slices.Contains(a.RefuseJobs, l.Job) {
			why = append(why, "you refused this job")
		} else if slices.Contains(a.RefuseOwners, l.Owner) {
			why = append(why, fmt.Sprintf("you refused jobs of owner %s", ShortID(l.Owner)))
		}
	}
	why = needs(o, l, now, why)
	return len(why) == 0, why
}

// Fits reports whether the offer o satisfies what every job with
// requirements r, a task memory of memoryMiB (TaskMemoryMiB) and a task
// time limit of timeLimit needs at now: the GPU, memory, time and hours
// conditions of Match, which fail for every such job alike. A job Match
// accepts always fits; one that fits may still fail Match on its owner,
// its pool or the donor's refusals. Fits is pure and safe for concurrent
// use.
func Fits(o Offer, r job.Requirements, memoryMiB int64, timeLimit time.Duration, now time.Time) bool {
	return len(needs(o, Listing{Requirements: r, MemoryMiB: memoryMiB, TimeLimit: timeLimit}, now, nil)) == 0
}

// needs appends to why a sentence for each of Match's conditions on the
// job's requirements, memory, time and the offer's hours that fails.
func needs(o Offer, l Listing, now time.Time, why []string) []string {
	c, a, r := o.Capacity, o.Accept, l.Requirements
	if r.GPU.Required() { // "optional" runs anywhere: on a GPU where this machine allows one
		if m := gpuMismatch(r, c.GPUs); m != "" {
			why = append(why, m)
		}
		if !a.GPUPrograms {
			why = append(why, ReasonGPUPrograms)
		}
	}
	if need := l.MemoryMiB; need > 0 {
		if need > c.MemoryMiB {
			why = append(why, fmt.Sprintf("needs %s of memory per task; this machine offers %s", MiBText(need), MiBText(c.MemoryMiB)))
		} else if a.MaxMemoryMiB > 0 && need > a.MaxMemoryMiB {
			why = append(why, fmt.Sprintf("needs %s of memory per task; you allow at most %s", MiBText(need), MiBText(a.MaxMemoryMiB)))
		}
	}
	if a.MaxTaskTime > 0 && l.TimeLimit > a.MaxTaskTime {
		why = append(why, fmt.Sprintf("a task may run %s; you allow at most %s", idle.DurationText(l.TimeLimit), idle.DurationText(a.MaxTaskTime)))
	}
	if loc := zone(c.TimeZone); !c.Schedule.Allows(now, loc) {
		if next, ok := c.Schedule.Next(now, loc); ok {
			why = append(why, fmt.Sprintf("outside this machine's hours (next: %s)", dayText(next, now.In(loc))))
		} else {
			why = append(why, "outside this machine's hours")
		}
	} else if left, ends := c.Schedule.Left(now, loc); ends && l.TimeLimit > left {
		why = append(why, fmt.Sprintf("a task may run %s; this machine's hours end in %s (at %s)",
			idle.DurationText(l.TimeLimit), idle.DurationText(left), now.Add(left).In(loc).Format("15:04")))
	}
	return why
}

// ReasonOwnJob is Match's reason for a job of the offer's own owner in an
// open or invite-only pool: a device never computes its owner's job there
// (DESIGN.md invariant 14), so the pool never leases it one.
const ReasonOwnJob = "your own job: the pool never leases a job to its owner's devices (participants \"owner\" would)"

// ReasonGPUPrograms is Match's reason for a job that needs a GPU program
// when the donor has not opted in to GPU programs in the offer's pool, so
// that a front end can offer the way to opt in.
const ReasonGPUPrograms = "needs a GPU program; you have not allowed GPU programs in this pool"

// gpuMismatch says why no GPU in gpus satisfies r, or "" when one does.
func gpuMismatch(r job.Requirements, gpus []idle.GPUOffer) string {
	want := "a GPU"
	switch {
	case r.GPUMemoryMiB > 0 && r.GPUComputeCapability != "":
		want = fmt.Sprintf("a GPU with %s and compute capability %s or higher", MiBText(r.GPUMemoryMiB), r.GPUComputeCapability)
	case r.GPUMemoryMiB > 0:
		want = fmt.Sprintf("a GPU with %s", MiBText(r.GPUMemoryMiB))
	case r.GPUComputeCapability != "":
		want = fmt.Sprintf("a GPU with compute capability %s or higher", r.GPUComputeCapability)
	}
	if len(gpus) == 0 {
		return "needs " + want + "; this machine offers none"
	}
	var bestMiB int64
	var bestCC []string
	memOK, ccOK := false, false
	for _, g := range gpus {
		m, cc := gpuFits(r, g)
		if m && cc {
			return ""
		}
		memOK, ccOK = memOK || m, ccOK || cc
		bestMiB = max(bestMiB, g.MemoryMiB)
		capability := g.ComputeCapability
		if capability == "" {
			capability = "unknown"
		}
		if !slices.Contains(bestCC, capability) {
			bestCC = append(bestCC, capability)
		}
	}
	switch {
	case !memOK:
		return fmt.Sprintf("needs %s; the largest GPU offered has %s", want, MiBText(bestMiB))
	case !ccOK:
		return fmt.Sprintf("needs %s; the GPUs offered have compute capability %s", want, strings.Join(bestCC, ", "))
	}
	return fmt.Sprintf("needs %s; no GPU offered has both", want)
}

// GPUFits reports whether GPU g, as offered (its memory share, its
// compute capability), meets the job's GPU requirements r: at least
// r.GPUMemoryMiB of memory offered and a compute capability of at least
// r.GPUComputeCapability, each where set. A device with several GPUs
// gives a task only one that fits.
func GPUFits(r job.Requirements, g idle.GPUOffer) bool {
	m, cc := gpuFits(r, g)
	return m && cc
}

// gpuFits is GPUFits for memory and compute capability apart.
func gpuFits(r job.Requirements, g idle.GPUOffer) (memory, capability bool) {
	return r.GPUMemoryMiB == 0 || g.MemoryMiB >= r.GPUMemoryMiB,
		r.GPUComputeCapability == "" || compareCapability(g.ComputeCapability, r.GPUComputeCapability) >= 0
}

// compareCapability compares CUDA compute capabilities "MAJOR.MINOR"
// numerically ("10.0" > "8.9"); an unknown or malformed one ("") is below
// every known one.
func compareCapability(a, b string) int {
	pa, oka := parseCapability(a)
	pb, okb := parseCapability(b)
	switch {
	case !oka || !okb:
		return cmp.Compare(btoi(oka), btoi(okb))
	case pa[0] != pb[0]:
		return cmp.Compare(pa[0], pb[0])
	}
	return cmp.Compare(pa[1], pb[1])
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func parseCapability(s string) ([2]int, bool) {
	maj, minor, ok := strings.Cut(s, ".")
	if !ok {
		return [2]int{}, false
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(minor)
	return [2]int{a, b}, err1 == nil && err2 == nil
}

var zones sync.Map // name -> *time.Location: LoadLocation reads a file

// zone loads the IANA zone name, caching it; "" or an unknown name is UTC
// (an offer names its zone; a wrong name must not pass as the reader's
// local zone).
func zone(name string) *time.Location {
	if name == "" {
		return time.UTC
	}
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		loc = time.UTC
	}
	zones.Store(name, loc)
	return loc
}

// dayText writes t as "Mon 22:00" within six days after now, else with
// its date as idle.ClockText does ("2 Jan 15:04", with the year when it
// is not now's).
func dayText(t, now time.Time) string {
	if t.After(now) && t.Sub(now) < 6*24*time.Hour {
		return t.Format("Mon 15:04")
	}
	return idle.ClockText(t, now)
}

// MiBText writes a MiB count for people: "8 GiB", "1.5 GiB", "512 MiB".
func MiBText(n int64) string {
	switch {
	case n >= 1024 && n%1024 == 0:
		return fmt.Sprintf("%d GiB", n/1024)
	case n >= 1024:
		return fmt.Sprintf("%.1f GiB", float64(n)/1024)
	}
	return fmt.Sprintf("%d MiB", n)
}

// ShortID shortens a peer or owner ID for people: its first 10
// characters and an ellipsis ("idk3m9x2qa…"); shorter IDs are returned
// whole.
func ShortID(id string) string {
	if len(id) <= 12 {
		return id
	}
	return id[:10] + "…"
}
