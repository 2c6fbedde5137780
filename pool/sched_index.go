package pool

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"idlepool/job"
)

// JobClass is what a device's offer must satisfy before any job of the
// class may be leased to it: the manifest's [requirements] and the
// policy's memory and time limits. Jobs of one class are alike to
// matchmaking's hardware and hours checks, so a lease asks
// SchedulerConfig.Fits once per class instead of once per job.
type JobClass struct {
	Requirements    job.Requirements
	PolicyMemoryMiB int           // policy.memory_mib: the memory a task needs where Requirements.MemoryMiB is 0
	TimeLimit       time.Duration // policy.time_limit: how long a task may run
}

// ClassOf returns the class of j.
func ClassOf(j *job.Job) JobClass {
	m := j.Manifest
	return JobClass{Requirements: m.Requirements, PolicyMemoryMiB: m.Policy.MemoryMiB, TimeLimit: m.Policy.TimeLimit.Duration}
}

// groupKey names one group of listed jobs: those of one class and one
// owner that are, or are not, for the owner's devices alone.
type groupKey struct {
	class     JobClass
	owner     string
	ownerOnly bool
}

// checkIndex makes every lease compare what the index gave with a walk
// of every open job, and panic where they differ. Tests set it.
var checkIndex bool

// touch marks js as changed: the index looks at it again before the next
// lease uses it. Cheap, and harmless when nothing that matters changed.
func (js *jobState) touch() {
	if js.open != nil && !js.dirty {
		js.dirty = true
		js.open.dirty = append(js.open.dirty, js)
	}
}

// listable reports whether js may have work for some device: not
// complete nor cancelled, with a fresh task, a task that wants a replica,
// a held result, or possibly a backup in its tail (mayBackup, which also
// depends on the idle devices, is asked at each lease).
func (o *openJobs) listable(js *jobState) bool {
	if js.complete() || !js.rec.Cancelled.IsZero() {
		return false
	}
	return js.next < js.tasks || len(js.want) > 0 || js.held > 0 || (!o.noBackups && js.pace.known())
}

// mayStall reports whether endStalled may change something of js:
// nothing fresh, leased or held is left and some task is active, or a
// stall is being timed.
func mayStall(js *jobState) bool {
	stall := js.next >= js.tasks && js.leased == 0 && js.held == 0 && len(js.active) > 0
	return !js.complete() && (stall || !js.stalledSince.IsZero())
}

func byOrder(x *jobState, order int64) int { return cmp.Compare(x.rec.Order, order) }

// insertByOrder puts js into list, kept by Order.
func insertByOrder(list []*jobState, js *jobState) []*jobState {
	i, _ := slices.BinarySearchFunc(list, js.rec.Order, byOrder)
	return slices.Insert(list, i, js)
}

// deleteByOrder takes js out of list, kept by Order.
func deleteByOrder(list []*jobState, js *jobState) []*jobState {
	if i, ok := slices.BinarySearchFunc(list, js.rec.Order, byOrder); ok && list[i] == js {
		return slices.Delete(list, i, i+1)
	}
	return list
}

// refresh brings the index up to date with the jobs touched since it
// last ran: complete ones leave the open list, listable ones join their
// group and the others leave it, and those endStalled may change join
// the stall list. s.mu is held.
func (o *openJobs) refresh() {
	for len(o.dirty) > 0 {
		js := o.dirty[len(o.dirty)-1]
		o.dirty = o.dirty[:len(o.dirty)-1]
		js.dirty = false
		if js.inOpen && js.complete() {
			js.inOpen = false
			o.jobs = deleteByOrder(o.jobs, js)
		}
		if l := o.listable(js); l != js.listed {
			js.listed = l
			if o.groups == nil {
				o.groups = map[groupKey][]*jobState{}
			}
			k := js.group()
			if l {
				o.groups[k] = insertByOrder(o.groups[k], js)
			} else if o.groups[k] = deleteByOrder(o.groups[k], js); len(o.groups[k]) == 0 {
				delete(o.groups, k)
			}
		}
		if !js.inStalls && mayStall(js) {
			js.inStalls = true
			o.stalls = insertByOrder(o.stalls, js)
		}
	}
}

func (js *jobState) group() groupKey {
	return groupKey{class: js.class, owner: js.rec.Owner, ownerOnly: js.ownerOnly()}
}

// endStalledAll runs endStalled on every open job it may change, by
// Order, as a walk of every open job would. s.mu is held.
func (s *Scheduler) endStalledAll() {
	o := s.open
	if o == nil {
		return
	}
	last := int64(math.MinInt64)
	for {
		o.refresh()
		i, found := slices.BinarySearchFunc(o.stalls, last, byOrder)
		if found {
			i++
		}
		if i >= len(o.stalls) {
			return
		}
		js := o.stalls[i]
		last = js.rec.Order
		o.visited++
		if !js.complete() {
			s.endStalled(js)
		}
		if !mayStall(js) {
			js.inStalls = false
			o.stalls = slices.Delete(o.stalls, i, i+1)
		}
	}
}

// candidates returns the jobs p may be leased tasks of, in the order to
// try: the unfinished jobs p may compute by their policies that have work
// to give, of the classes p fits (SchedulerConfig.Fits), in fair-share
// order (fairOrder); with SchedulerConfig.Select also their views, which
// Lease hands to Select (outside s.mu) and selected turns back into jobs.
//
// It looks only at the listed jobs of the groups p may compute: those of
// a class p does not fit only until it finds each owner's first job with
// work, because fair share weighs the owners of every job p may compute,
// whatever its class. s.mu is held.
func (s *Scheduler) candidates(p Peer) ([]*jobState, []JobView) {
	o := s.open
	if o == nil {
		return nil, nil
	}
	o.refresh()
	now := s.now()
	ready := func(js *jobState) bool {
		o.visited++
		return !js.complete() && js.allows(p) && (js.next < js.tasks || len(js.want) > 0 || js.held > 0 || s.mayBackup(js, now))
	}
	fits := map[JobClass]bool{}
	first := map[string]int64{} // each owner's first job with work for p, by Order
	var jobs []*jobState
	for k, list := range o.groups {
		if k.ownerOnly != (k.owner == p.Owner) {
			continue // allows refuses every job of the group
		}
		f, ok := fits[k.class]
		if !ok {
			f = s.cfg.Fits == nil || s.cfg.Fits(p, k.class)
			fits[k.class] = f
		}
		for _, js := range list {
			if !ready(js) {
				continue
			}
			if at, ok := first[k.owner]; !ok || js.rec.Order < at {
				first[k.owner] = js.rec.Order
			}
			if !f {
				break // only its owner's first job counts, and it is by Order
			}
			jobs = append(jobs, js)
		}
	}
	owners := make([]string, 0, len(first))
	for owner := range first {
		owners = append(owners, owner)
	}
	slices.SortFunc(owners, func(a, b string) int { return cmp.Compare(first[a], first[b]) })
	slices.SortFunc(jobs, func(a, b *jobState) int { return cmp.Compare(a.rec.Order, b.rec.Order) })
	s.sortFair(jobs, s.fairPrio(owners, now))
	if checkIndex {
		s.checkCandidates(p, jobs, now)
	}
	if s.cfg.Select == nil || len(jobs) == 0 {
		return jobs, nil
	}
	views := make([]JobView, len(jobs))
	for i, js := range jobs {
		views[i] = JobView{Job: js.j, Status: js.counts()}
	}
	return jobs, views
}

// checkCandidates panics unless jobs is what a walk of every open job
// gives: those p may compute with work to give, in fair-share order, less
// those of classes p does not fit. s.mu is held.
func (s *Scheduler) checkCandidates(p Peer, jobs []*jobState, now time.Time) {
	var all []*jobState
	for _, js := range s.open.list() {
		if !js.complete() && js.allows(p) && (js.next < js.tasks || len(js.want) > 0 || js.held > 0 || s.mayBackup(js, now)) {
			all = append(all, js)
		}
	}
	s.fairOrder(all, now)
	all = slices.DeleteFunc(all, func(js *jobState) bool { return s.cfg.Fits != nil && !s.cfg.Fits(p, js.class) })
	if !slices.Equal(all, jobs) {
		name := func(l []*jobState) []string {
			var out []string
			for _, js := range l {
				out = append(out, fmt.Sprintf("%d/%s", js.rec.Order, js.j.Manifest.Name))
			}
			return out
		}
		panic(fmt.Sprintf("pool: job index for peer %s gave %v, a walk of every job %v", p.ID, name(jobs), name(all)))
	}
	for _, js := range s.open.jobs {
		if mayStall(js) && !js.inStalls && !js.dirty {
			panic(fmt.Sprintf("pool: job index: job %s may stall but is not in the stall list", js.j.Manifest.Name))
		}
	}
}
