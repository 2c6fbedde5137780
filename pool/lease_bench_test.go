//go:build unix

package pool_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// BenchmarkLease measures one lease and its release by a device without
// a GPU among n open jobs, all but one of which need a GPU, with
// matchmaking as the coordinator's (cpuOnly).
//
//	go test -run '^$' -bench 'Lease$' -count 5 ./pool/
func BenchmarkLease(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			defer func(on bool) { *pool.CheckIndex = on }(*pool.CheckIndex)
			*pool.CheckIndex = false
			var shown atomic.Int64
			h := pooltest.NewHarness(b, pool.NewMemStore(), cpuOnly(&shown))
			alice, bob := h.Device("alice", "alice-1"), h.Device("bob", "bob-1")
			addJobs(b, h, "gpu", n-1, 1, pooltest.Policy{Requirements: gpuNeeded}, alice)
			h.Job("open", 1<<20, pooltest.Policy{}, alice)
			leaseAndRelease(b, h, bob)
		})
	}
}

// BenchmarkLeaseInFlight measures one lease and its release by a device
// while n tasks of the same job are leased to other devices: what a
// lease costs as a large pool computes one job (matchmaking as the
// coordinator's, cpuOnly).
//
//	go test -run '^$' -bench 'LeaseInFlight$' -count 5 ./pool/
func BenchmarkLeaseInFlight(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("inflight=%d", n), func(b *testing.B) {
			var shown atomic.Int64
			h := pooltest.NewHarness(b, pool.NewMemStore(), cpuOnly(&shown))
			alice, bob := h.Device("alice", "alice-1"), h.Device("bob", "bob-1")
			h.Job("open", 1<<20, pooltest.Policy{}, alice)
			ctx := context.Background()
			for i := 0; i < n; {
				d := h.Device(fmt.Sprintf("owner-%d", i), fmt.Sprintf("device-%d", i))
				ls, err := h.S.Lease(ctx, d, 64)
				if err != nil || len(ls) == 0 {
					b.Fatalf("lease: %v, %d leases", err, len(ls))
				}
				i += len(ls)
			}
			leaseAndRelease(b, h, bob)
		})
	}
}

// leaseAndRelease is the loop of the lease benchmarks: p leases one task
// (a device ID) and releases it, b.N times; it reports the process's CPU time per
// lease and release (cpu-ns/op).
func leaseAndRelease(b *testing.B, h *pooltest.Harness, p string) {
	ctx := context.Background()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for b.Loop() {
		ls, err := h.S.Lease(ctx, p, 1)
		if err != nil || len(ls) != 1 {
			b.Fatalf("lease: %v, %d leases", err, len(ls))
		}
		if err := h.S.Release(ctx, p, ls[0].ID); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time the process has used, user and system: a
// lease's wall time is mostly the group commit's window.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Skipf("no CPU time here: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
