package pool_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// cpuOnly configures matchmaking as the coordinator's for devices without
// a GPU: Fits refuses the classes that need one, and Select keeps the
// jobs Fits would (the old way, job by job), counting the jobs it was
// shown in shown.
func cpuOnly(shown *atomic.Int64) func(*pool.SchedulerConfig) {
	return func(c *pool.SchedulerConfig) {
		c.Fits = func(_ pool.Peer, cl pool.JobClass) bool { return !cl.Requirements.GPU.Required() }
		c.Select = func(_ pool.Peer, views []pool.JobView) []job.ID {
			shown.Add(int64(len(views)))
			var ids []job.ID
			for _, v := range views {
				if !v.Job.Manifest.Requirements.GPU.Required() {
					ids = append(ids, v.Job.ID)
				}
			}
			return ids
		}
	}
}

// addJobs adds n jobs named prefix-0... of tasks tasks each under pol,
// submitted by merger, many at once so that they share commits.
func addJobs(tb testing.TB, h *pooltest.Harness, prefix string, n int, tasks int64, pol pooltest.Policy, merger string) {
	tb.Helper()
	jobs := make([]*job.Job, n)
	for i := range jobs {
		jobs[i] = pooltest.Job(tb, h.Blobs, h.Dir, fmt.Sprintf("%s-%d", prefix, i), tasks, pol)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 256)
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := h.S.AddJob(context.Background(), j, merger); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

const gpuNeeded = "gpu = true\n"

// With 1,000 open jobs of which all but one need a GPU or have every
// task leased, a lease of a device without a GPU looks at a handful of
// jobs (Footprint.Visited) and shows matchmaking only the one it may
// compute; a walk of every open job looked at all 1,000.
func TestLeaseLooksAtJobsItMayComputeOnly(t *testing.T) {
	defer func(on bool) { *pool.CheckIndex = on }(*pool.CheckIndex)
	*pool.CheckIndex = false // a walk of 1,000 jobs on every lease is what this test is not
	var shown atomic.Int64
	h := pooltest.NewHarness(t, pool.NewMemStore(), cpuOnly(&shown))
	alice, bob := h.Device("alice", "alice-1"), h.Device("bob", "bob-1")
	one := pooltest.Policy{Redundancy: 1, Quorum: 1}
	const full, gpu = 199, 800
	addJobs(t, h, "full", full, 1, one, alice)
	// A new device holds only a few undecided replicas of other owners'
	// jobs at once: many devices fill them.
	for leased, d := 0, 0; leased < full; d++ {
		dev := h.Device(fmt.Sprintf("donor%d", d), fmt.Sprintf("donor%d-1", d))
		ls := h.Lease(dev, 256)
		if len(ls) == 0 {
			t.Fatalf("devices leased %d tasks of %d jobs, then none", leased, full)
		}
		leased += len(ls)
	}
	addJobs(t, h, "gpu", gpu, 1, pooltest.Policy{Requirements: gpuNeeded}, alice)
	open := h.Job("open", 1, one, alice)

	before, shownBefore := h.S.Footprint().Visited, shown.Load()
	ls := h.Lease(bob, 1)
	if len(ls) != 1 || ls[0].Job != open.ID {
		t.Fatalf("bob leased %+v, want task 0 of the open job", ls)
	}
	if f := h.S.Footprint(); f.Open != full+gpu+1 {
		t.Fatalf("%d open jobs, want %d", f.Open, full+gpu+1)
	}
	n := h.S.Footprint().Visited - before
	t.Logf("the lease looked at %d jobs", n)
	if n > 10 {
		t.Errorf("the lease looked at %d jobs, want at most 10 (the one it may compute, and each owner's first)", n)
	}
	if n := shown.Load() - shownBefore; n != 1 {
		t.Errorf("matchmaking was shown %d jobs, want 1", n)
	}
}
