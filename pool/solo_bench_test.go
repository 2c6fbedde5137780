package pool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/job"
	"idlepool/worker"
)

// piExecutor stands in for the sandbox in benchmarks of the runner itself:
// it answers every task at once with the result the pi example gives for
// one sample, so the runner's own costs (dispatch, folding, journaling) are
// all that is measured.
type piExecutor struct{}

func (piExecutor) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	return worker.Result{Stdout: []byte(`{"inside":1,"samples":1}` + "\n"), PID: 1}, ctx.Err()
}

func piJob(b *testing.B, tasks int64) *job.Job {
	b.Helper()
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		b.Fatal(err)
	}
	m, err := job.ParseManifest("pi.toml", dir, fmt.Appendf(nil, `name = "pi"
program = "p.wasm"
[split]
rule = "range"
tasks = %d
[split.params]
samples = 1
[[merge]]
field = "inside"
rule = "sum"
[[merge]]
field = "samples"
rule = "sum"
`, tasks))
	if err != nil {
		b.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		b.Fatal(err)
	}
	return j
}

// BenchmarkSoloMemory runs pi jobs of 10^4, 10^5 and 10^6 tasks through
// RunSolo with an instant executor and reports the peak Go heap in use
// during the run (peak-heap-MiB, sampled every 5 ms) and the cost per task.
// Constant-size accumulators keep the heap flat as tasks grow; what does
// grow is the done-set (one bit per task) and the journal on disk.
func BenchmarkSoloMemory(b *testing.B) {
	for _, tasks := range []int64{1e4, 1e5, 1e6} {
		b.Run(fmt.Sprintf("tasks=%d", tasks), func(b *testing.B) {
			j := piJob(b, tasks)
			var peak atomic.Uint64
			for b.Loop() {
				runtime.GC()
				stop := make(chan struct{})
				var wg sync.WaitGroup
				wg.Go(func() {
					var ms runtime.MemStats
					tick := time.NewTicker(5 * time.Millisecond)
					defer tick.Stop()
					for {
						runtime.ReadMemStats(&ms)
						if ms.HeapInuse > peak.Load() {
							peak.Store(ms.HeapInuse)
						}
						select {
						case <-stop:
							return
						case <-tick.C:
						}
					}
				})
				out, err := RunSolo(context.Background(), j, piExecutor{}, SoloConfig{Slots: 2, RunDir: b.TempDir()})
				close(stop)
				wg.Wait()
				if err != nil || out.OK != tasks {
					b.Fatalf("run: %v (%d ok)", err, out.OK)
				}
			}
			b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(int64(b.N)*tasks), "µs/task")
		})
	}
}
