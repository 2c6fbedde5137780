//go:build unix

package pool_test

import (
	"context"
	"testing"
	"time"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// BenchmarkTaskCycle measures the Scheduler and its MemStore deciding
// tasks as a busy pool does, in process (no HTTP, no JetStream): two
// devices lease 64 tasks each of one job (quorum 2) and submit equal
// results, 64 results to a group commit as a request carries them
// (SubmitQueued), and the merger acknowledges each batch of outcomes.
// The group commit waits 1 µs rather than 2 ms, so that the process
// is seldom idle: an idle process's processors run the collector's
// idle workers, whose CPU time would be counted against the tasks.
// One op is one decided task; cpu-ns/task is the process's CPU time per
// task, the figure to compare (its group commits, the MemStore's check
// and apply, the leases, the decisions).
//
//	go test -run '^$' -bench 'TaskCycle$' -benchtime 100000x -count 5 ./pool/
func BenchmarkTaskCycle(b *testing.B) {
	// per is how many tasks a device leases at once; forgetEvery how
	// many cycles pass between two snapshots of a clustered Store, which
	// then forgets what it archived (forget).
	const per, forgetEvery = 64, 64
	mem := pool.NewMemStore()
	h := pooltest.NewHarness(b, mem, func(c *pool.SchedulerConfig) { c.CommitDelay = time.Microsecond })
	alice, bob := h.Device("alice", "alice-1"), h.Device("bob", "bob-1")
	merger := h.Device("carol", "carol-1")
	j := h.Job("cycle", 1<<32, pooltest.Policy{Redundancy: 2, Quorum: 2}, merger)
	ctx := context.Background()
	sub := pooltest.Result([]byte("ok"))
	var acked int64
	submit := func(p string, ls []pool.Lease) {
		var last pool.Committed
		for _, l := range ls {
			c, err := h.S.SubmitQueued(ctx, p, l.ID, sub)
			if err != nil {
				b.Fatalf("submit task %d: %v", l.Task, err)
			}
			last = c
		}
		if len(ls) == 0 {
			return
		}
		if err := last.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// cycle leases up to per tasks to each device, submits their
	// results, acknowledges the outcomes and returns how many tasks and
	// how many leases of each it had.
	cycle := func() (decided, la, lb int) {
		ra, rb := h.Lease(alice, per), h.Lease(bob, per)
		submit(alice, ra)
		submit(bob, rb)
		vs, err := h.S.Results(ctx, merger, j.ID, acked, 4*per)
		if err != nil {
			b.Fatal(err)
		}
		if len(vs) > 0 {
			upto := vs[len(vs)-1].Seq
			if err := h.S.Ack(ctx, merger, j.ID, upto); err != nil {
				b.Fatal(err)
			}
			acked = upto
		}
		return len(vs), len(ra), len(rb)
	}
	// A new device is leased a few tasks at once until its results
	// verify (the Scheduler's room for it): cycle until both get per.
	for i := 0; ; i++ {
		if _, la, lb := cycle(); la == per && lb == per {
			break
		}
		if i == 10000 {
			b.Fatalf("the devices are not leased %d tasks at once after %d cycles", per, i)
		}
	}
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for done, i := 0, 1; done < b.N; i++ {
		n, _, _ := cycle()
		done += n
		if i%forgetEvery == 0 {
			forget(mem)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/task")
}

// forget drops from mem what a clustered Store drops once a snapshot
// archived it: the acknowledged outcomes, the done replicas and the
// ledger's entries up to its last whole range of 1,024.
func forget(mem *pool.MemStore) {
	mem.ForgetAcked()
	mem.ForgetDone(mem.Done())
	if _, seq := mem.LedgerBase(); seq >= 1024 {
		if _, err := mem.ForgetEntries(seq / 1024 * 1024); err != nil {
			panic(err)
		}
	}
}
