package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// BenchmarkRunEmpty measures the pool's overhead per task: Pool.Run of a
// module whose _start does nothing, on a warm worker with the module
// compiled, through the protocol and back.
func BenchmarkRunEmpty(b *testing.B) {
	p, err := NewPool(childConfig(b, 1))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	empty := writeModule(b, "empty.wasm", emptyModule())
	req := Request{ModulePath: empty.path, ModuleSHA256: empty.sha, Stdin: []byte(`{}`), Timeout: time.Minute}
	ctx := context.Background()
	if _, err := p.Run(ctx, req); err != nil { // start the worker, compile
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := p.Run(ctx, req)
		if err != nil || res.Failure != nil {
			b.Fatal(err, res.Failure)
		}
	}
}

// BenchmarkRunGoModule is BenchmarkRunEmpty for a module built by the Go
// toolchain (the hostile test program in echo mode). The difference is
// what a Go-built program costs per task before doing any work: wazero
// instantiates it (copies its data segments into fresh linear memory) and
// the Go runtime inside it starts. See BenchmarkInstantiateGoModule for the
// two parts without the process boundary.
func BenchmarkRunGoModule(b *testing.B) {
	needHostile(b)
	p, err := NewPool(childConfig(b, 1))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	req := Request{ModulePath: hostile.path, ModuleSHA256: hostile.sha, Stdin: []byte(`{"mode":"echo"}`), Timeout: time.Minute}
	ctx := context.Background()
	if _, err := p.Run(ctx, req); err != nil { // start the worker, compile
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := p.Run(ctx, req)
		if err != nil || res.Failure != nil {
			b.Fatal(err, res.Failure)
		}
	}
}

// BenchmarkInstantiateGoModule splits the per-task start-up of a Go-built
// module in this process: "instantiate" is wazero's InstantiateModule and
// Close alone, "start" adds running _start (the Go runtime's
// initialisation and the program's echo).
func BenchmarkInstantiateGoModule(b *testing.B) {
	needHostile(b)
	bin, err := os.ReadFile(hostile.path)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithMemoryLimitPages(4096))
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	compiled, err := rt.CompileModule(ctx, bin)
	if err != nil {
		b.Fatal(err)
	}
	for _, start := range []bool{false, true} {
		name := "instantiate"
		if start {
			name = "start"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions().WithStdin(strings.NewReader(`{"mode":"echo"}`))
				m, err := rt.InstantiateModule(ctx, compiled, cfg)
				if err != nil {
					b.Fatal(err)
				}
				if start {
					var exit *sys.ExitError
					if _, err := m.ExportedFunction("_start").Call(ctx); err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 0) {
						b.Fatal(err)
					}
				}
				m.Close(ctx)
			}
		})
	}
}

// BenchmarkCloseOnContextDone measures what wazero's
// RuntimeConfig.WithCloseOnContextDone costs a running guest: it compiles
// a check into every loop back-edge and function entry. "busy" is a tight
// loop, "fib" a call-heavy recursion; each op is one whole run of the
// hostile module in this process. The pool does not use the option: it
// kills the worker process at the deadline instead (see doc.go).
func BenchmarkCloseOnContextDone(b *testing.B) {
	needHostile(b)
	bin, err := os.ReadFile(hostile.path)
	if err != nil {
		b.Fatal(err)
	}
	workloads := []struct{ name, stdin string }{
		{"busy", `{"mode":"busy","n":50000000}`},
		{"fib", `{"mode":"fib","n":32}`},
	}
	for _, w := range workloads {
		for _, closeOnDone := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/closeOnContextDone=%v", w.name, closeOnDone), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
				if err != nil {
					b.Fatal(err)
				}
				defer cache.Close(ctx)
				rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
					WithCompilationCache(cache).
					WithCloseOnContextDone(closeOnDone))
				defer rt.Close(ctx)
				wasi_snapshot_preview1.MustInstantiate(ctx, rt)
				compiled, err := rt.CompileModule(ctx, bin)
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					var out strings.Builder
					cfg := wazero.NewModuleConfig().WithName("").
						WithStdin(strings.NewReader(w.stdin)).
						WithStdout(&out).WithStderr(io.Discard)
					mod, err := rt.InstantiateModule(ctx, compiled, cfg)
					if err != nil {
						b.Fatal(err)
					}
					_ = mod.Close(ctx)
					if out.Len() == 0 {
						b.Fatal("no output")
					}
				}
			})
		}
	}
}

// BenchmarkHostRun measures what one task costs the worker process itself,
// without the pool and the process boundary: host.run of a Go-built
// module (the hostile test program in echo mode), of the reactor test
// program in empty mode built as a command and as a reactor (reactor.go),
// and of the hand-made empty module, compiled once, in CPU time of the
// whole process (GC included; cpu-µs/task) beside the wall time (ns/op).
func BenchmarkHostRun(b *testing.B) {
	needHostile(b)
	needReactor(b)
	empty := writeModule(b, "empty.wasm", emptyModule())
	command, err := buildWasm(filepath.Join(b.TempDir(), "reactor-command.wasm"), "./testdata/reactor")
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range []struct {
		name  string
		mod   testModule
		stdin string
	}{{"go", hostile, `{"mode":"echo"}`}, {"go-command", command, `{"mode":"empty"}`}, {"go-reactor", reactor, `{"mode":"empty"}`}, {"empty", empty, `{}`}} {
		b.Run(m.name, func(b *testing.B) {
			ctx := context.Background()
			h, err := newHost("")
			if err != nil {
				b.Fatal(err)
			}
			defer h.close(ctx)
			body := &runBody{
				ModulePath: m.mod.path, ModuleSHA256: m.mod.sha, Stdin: []byte(m.stdin),
				Seed: strings.Repeat("00", 32), MemoryLimitPages: 4096, MaxStdoutBytes: 1 << 20, MaxStderrBytes: 1 << 16,
			}
			started := func() error { return nil }
			if res, _ := h.run(ctx, body, started); res.Failure != nil || res.Error != "" { // compile
				b.Fatal(res.Failure, res.Error)
			}
			cpu0 := processCPU()
			for b.Loop() {
				if res, _ := h.run(ctx, body, started); res.Failure != nil || res.Error != "" {
					b.Fatal(res.Failure, res.Error)
				}
			}
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/task")
		})
	}
}

// BenchmarkMeter measures what metering (meter.go) costs a task: each op
// runs one task of an example program (the first task of each job of
// exampleTasks, as large as the examples' manifests make it) through a
// worker's host in this process, as a worker process runs it, twice:
// with the module as it is and metered, in alternating order, so that
// both meet the same machine. On a machine shared with other work wall
// time scatters widely, so it also reports each variant's CPU time per
// run on this thread (Linux): the median (plain-cpu-ms, metered-cpu-ms),
// the ratio of the medians less one (overhead-%) and the same for the
// fastest runs (min-overhead-%), and the task's count (instructions).
// docs/benchmarks.md has the figures.
func BenchmarkMeter(b *testing.B) {
	seen := map[string]bool{}
	for _, tk := range exampleTasks(b, true) {
		prog, _, _ := strings.Cut(tk.name, "/")
		if seen[prog] {
			continue
		}
		seen[prog] = true
		b.Run(prog, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			hosts := [2]*host{newTestHost(b, false), newTestHost(b, true)}
			var want []byte
			var work uint64
			for _, h := range hosts { // compile, and check the outputs agree
				res := runInHost(b, h, tk.body)
				if res.Failure != nil || (want != nil && !bytes.Equal(res.Stdout, want)) {
					b.Fatalf("failure %v, stdout %.80q", res.Failure, res.Stdout)
				}
				want, work = res.Stdout, res.Work
			}
			var cpu [2][]time.Duration
			i := 0
			for b.Loop() {
				for k := range 2 {
					v := (i + k) % 2 // alternate which goes first
					t0 := threadCPU()
					runInHost(b, hosts[v], tk.body)
					cpu[v] = append(cpu[v], threadCPU()-t0)
				}
				i++
			}
			b.ReportMetric(float64(work), "instructions") // after b.Loop, which resets the metrics
			if cpu[0][0] == 0 {
				return // no CPU time here
			}
			med := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2])
			}
			m0, m1 := med(cpu[0]), med(cpu[1])
			b.ReportMetric(m0/1e6, "plain-cpu-ms")
			b.ReportMetric(m1/1e6, "metered-cpu-ms")
			b.ReportMetric(100*(m1/m0-1), "overhead-%")
			b.ReportMetric(100*(float64(cpu[1][0])/float64(cpu[0][0])-1), "min-overhead-%")
		})
	}
}
