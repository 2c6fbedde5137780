//go:build linux

package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// BenchmarkSchedulerMemory measures whether the coordinator's memory stays
// flat as accepted tasks grow: the scheduler on SQLite (as `idlepool
// serve` runs it) with eight goroutine peers and the merger, one job of
// b.N empty tasks at quorum 2. It reports the process's resident set
// (VmRSS) and the Go heap in use after a collection, when a tenth of the
// tasks are accepted and at the end, and their ratio:
//
//	go test -run '^$' -bench SchedulerMemory -benchtime 1000000x -timeout 60m ./store/
func BenchmarkSchedulerMemory(b *testing.B) {
	if b.N < 200000 {
		return // the framework's first run of 1 task; the figures need -benchtime 200000x or more
	}
	db, err := store.Open(filepath.Join(b.TempDir(), "coordinator.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	const peers, slots = 8, 16
	first := int64(b.N / 10)
	h := pooltest.NewHarness(b, db, func(c *pool.SchedulerConfig) { c.Now = time.Now })
	merger := h.Device("alice", "alice-1")
	ids := make([]string, peers)
	for i := range ids {
		ids[i] = h.Device(fmt.Sprintf("owner%d", i), fmt.Sprintf("dev%d", i))
	}
	j := h.Job(fmt.Sprintf("memory-%d", b.N), int64(b.N), pooltest.Policy{}, merger)
	empty := pooltest.Result(nil)
	ctx := context.Background()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
		acked  atomic.Int64
		failed atomic.Bool
	)
	fail := func(err error) {
		failed.Store(true)
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	b.ResetTimer()
	for _, id := range ids {
		wg.Go(func() {
			for acked.Load() < int64(b.N) && !failed.Load() {
				ls, err := h.S.Lease(ctx, id, slots)
				if err != nil {
					fail(err)
					return
				}
				if len(ls) == 0 {
					time.Sleep(time.Millisecond)
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
	var at [2]struct{ rss, heap float64 }
	sample := func(i int) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		at[i].rss, at[i].heap = rssMiB(), float64(ms.HeapInuse)/(1<<20)
		b.Logf("accepted %d: RSS %.1f MiB, Go heap in use %.1f MiB, %+v", acked.Load(), at[i].rss, at[i].heap, h.S.Footprint())
	}
	wg.Go(func() { // the merger
		var after int64
		sampled := false
		for after < int64(b.N) && !failed.Load() {
			if !sampled && after >= first {
				sample(0)
				sampled = true
			}
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
			acked.Store(after)
		}
	})
	wg.Wait()
	b.StopTimer()
	if len(errs) > 0 {
		b.Fatal(errs[0])
	}
	sample(1)
	b.ReportMetric(at[0].rss, "rss-MiB@tenth")
	b.ReportMetric(at[1].rss, "rss-MiB@end")
	b.ReportMetric(at[1].rss/at[0].rss, "rss-ratio")
	b.ReportMetric(at[0].heap, "heap-MiB@tenth")
	b.ReportMetric(at[1].heap, "heap-MiB@end")
	b.ReportMetric(0, "ns/op")
}

// rssMiB reads this process's resident set from /proc/self/status.
func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kib / 1024
		}
	}
	return 0
}
