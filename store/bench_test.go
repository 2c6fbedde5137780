//go:build unix

package store_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// BenchmarkSchedulerEmptyTasks measures the scheduler alone (no HTTP):
// one job of b.N empty tasks at redundancy 2 and quorum 2, eight
// goroutine peers of distinct owners that lease up to 4 tasks at a time
// and submit an empty result at once, and the merger fetching and
// acknowledging outcomes. It reports accepted tasks per second and the
// process CPU time (user + system, getrusage) per accepted task, which is
// all coordinator work: the peers do nothing else.
//
//	go test -run '^$' -bench SchedulerEmptyTasks -benchtime 20000x ./store/
func BenchmarkSchedulerEmptyTasks(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) pool.Store
	}{
		{"mem", func(b *testing.B) pool.Store { return pool.NewMemStore() }},
		{"sqlite", func(b *testing.B) pool.Store {
			db, err := store.Open(filepath.Join(b.TempDir(), "coordinator.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { db.Close() })
			return db
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) { benchEmptyTasks(b, st.open(b), 8) })
	}
}

// BenchmarkSchedulerManyDevices is BenchmarkSchedulerEmptyTasks on
// SQLite with the same eight goroutines leasing in turn for 2,048
// devices of as many owners, as a large pool's commits do: each commit
// then changes the trust records of devices whose rows lie apart.
//
//	go test -run '^$' -bench SchedulerManyDevices -benchtime 20000x ./store/
func BenchmarkSchedulerManyDevices(b *testing.B) {
	db, err := store.Open(filepath.Join(b.TempDir(), "coordinator.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	benchEmptyTasks(b, db, 2048)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchEmptyTasks runs the scheduler benchmark on st: eight goroutines,
// each leasing in turn for devices/8 of the devices (devices a multiple
// of 8, each of an owner of its own). With more than eight devices, a
// job of 4 tasks per device runs first, outside the measurement, so
// that every device has its trust record, as in a pool that has run a
// while.
func benchEmptyTasks(b *testing.B, st pool.Store, devices int) {
	const peers, slots = 8, 4
	h := pooltest.NewHarness(b, st, func(c *pool.SchedulerConfig) { c.Now = time.Now })
	merger := h.Device("alice", "alice-1")
	ids := make([][]string, peers)
	for i := range devices {
		ids[i%peers] = append(ids[i%peers], h.Device(fmt.Sprintf("owner%d", i), fmt.Sprintf("dev%d", i)))
	}
	empty := pooltest.Result(nil)
	ctx := context.Background()
	var (
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	run := func(name string, tasks int) {
		j := h.Job(name, int64(tasks), pooltest.Policy{}, merger)
		done := func() bool { st, _ := h.S.Status(j.ID); return st.Complete }
		var wg sync.WaitGroup
		for _, mine := range ids {
			wg.Go(func() {
				for k := 0; !done(); k++ {
					id := mine[k%len(mine)]
					ls, err := h.S.Lease(ctx, id, slots)
					if err != nil {
						fail(err)
						return
					}
					if len(ls) == 0 {
						time.Sleep(50 * time.Microsecond) // nothing to do until others return
						continue
					}
					var inner sync.WaitGroup
					for _, l := range ls {
						inner.Go(func() {
							if err := h.S.Submit(ctx, id, l.ID, empty); err != nil && !errors.Is(err, pool.ErrTaskDecided) {
								fail(err)
							}
						})
					}
					inner.Wait()
				}
			})
		}
		wg.Go(func() { // the merger
			var after int64
			for after < int64(tasks) {
				vs, err := h.S.Results(ctx, merger, j.ID, after, 1000)
				if err != nil {
					fail(err)
					return
				}
				if len(vs) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				after = vs[len(vs)-1].Seq
				if err := h.S.Ack(ctx, merger, j.ID, after); err != nil {
					fail(err)
					return
				}
			}
		})
		wg.Wait()
	}
	if devices > peers {
		run(fmt.Sprintf("warm-%d", b.N), 4*devices)
	}
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	run(fmt.Sprintf("bench-%d", b.N), b.N)
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	if len(errs) > 0 {
		b.Fatal(errs[0])
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/task")
	b.ReportMetric(0, "ns/op")
}
