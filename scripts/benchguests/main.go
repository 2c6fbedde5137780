// Command benchguests measures what running a job program as WebAssembly
// costs against running the same program natively, in each language the
// examples are written in (Go, C, Rust). `make bench-guests` runs it.
//
// It builds each example kernel (pi, Ising) natively and as WebAssembly
// (C and Rust also with WebAssembly SIMD, and optimised again by
// binaryen's wasm-opt -O3 where it is installed) into a temporary
// directory, then
// runs them side by side, one after the other in each of several rounds:
// the native program as a subprocess (its CPU time from the kernel's
// rusage), the module as one task on a real idlepool worker process (the
// worker's CPU time across the task, from /proc). It prints the median
// CPU time per unit of work of each, their ratio and the worker's CPU
// time per task for a task of no work (start-up: instantiating the module,
// its runtime's start, reading the task and writing the result), and the
// start-up of the empty Go program built as a command and as a reactor:
//
//	language     kernel  native      wasm        ratio  start-up
//	Go           pi      1.9 ns/sa   11.3 ns/sa  5.95x  6.1 ms
//	C            pi      ...
//
// Below the table it says how each side was built and measured and the
// machine's load average at the start and the end of the rounds.
//
// Every run's result must be the same bytes as the Go program's for the
// same task, natively and in WebAssembly; it exits 1 if not. Linux only
// (/proc). Usage:
//
//	go run ./scripts/benchguests [-rounds 5] [-scale 1] [-idlepool bin/idlepool]
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"idlepool/worker"
)

// kernel is one example kernel and how to size its task.
type kernel struct {
	name string
	unit string // what ns are counted per
	// task returns the task JSON for a size scale and the units of work.
	task  func(scale float64) (string, float64)
	empty string // a task that does (almost) no work
}

var kernels = []kernel{
	{
		name: "pi", unit: "sample",
		task: func(scale float64) (string, float64) {
			n := int64(2e8 * scale)
			return fmt.Sprintf(`{"seed":1,"params":{"samples":%d}}`, n), float64(n)
		},
		empty: `{"seed":1,"params":{"samples":1}}`,
	},
	{
		name: "ising", unit: "flip",
		task: func(scale float64) (string, float64) {
			sweeps := int64(1e5 * scale)
			return fmt.Sprintf(`{"seed":1,"params":{"T":2.3,"L":32,"burnin":0,"sweeps":%d,"rep":0}}`, sweeps), float64(sweeps * 32 * 32)
		},
		empty: `{"seed":1,"params":{"T":2.3,"L":2,"burnin":0,"sweeps":1,"rep":0}}`,
	},
}

// variant is one language's build of a kernel.
type variant struct {
	lang   string // Go, C, Rust; "+simd" for the SIMD build
	kernel kernel
	native string // path of the native program
	wasm   string // path of the module
	task   string
	units  float64
	// measured, per round
	nativeCPU, wasmCPU []time.Duration
	startup            time.Duration
	pool               *worker.Pool // its own, one worker process
	pid                int          // that worker's
	nativeOut, wasmOut []byte
}

func main() {
	rounds := flag.Int("rounds", 5, "rounds of every measurement; the table shows medians")
	scale := flag.Float64("scale", 1, "task size relative to the default (2·10^8 samples, 10^5 sweeps of 32×32)")
	idlepool := flag.String("idlepool", "bin/idlepool", "the idlepool binary whose worker runs the modules")
	startupTasks := flag.Int("startup-tasks", 200, "tasks of no work run to measure start-up")
	simd := flag.Bool("simd", true, "also build and measure C and Rust with WebAssembly SIMD")
	flag.Parse()
	if err := run(context.Background(), *rounds, *scale, *idlepool, *startupTasks, *simd); err != nil {
		fmt.Fprintln(os.Stderr, "benchguests:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, rounds int, scale float64, idlepool string, startupTasks int, simd bool) error {
	if rounds < 1 || scale <= 0 || startupTasks < 1 {
		return errors.New("-rounds and -startup-tasks must be at least 1 and -scale positive")
	}
	if _, err := os.Stat("examples/build-guest.sh"); err != nil {
		return fmt.Errorf("run from the repository root (make bench-guests): %w", err)
	}
	dir, err := os.MkdirTemp("", "benchguests-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	vs, err := build(dir, scale, simd)
	if err != nil {
		return err
	}
	loadStart := loadAverage()
	// The worker keeps its normal priority: at the idle priority a busy
	// machine would stretch only the WebAssembly side. Each variant has a
	// pool of its own, one worker process that keeps its module compiled
	// (a worker caches fewer modules than there are variants).
	os.Setenv(worker.PriorityEnv, "normal")
	for _, v := range vs {
		pool, err := worker.NewPool(worker.Config{Command: []string{idlepool, "worker"}, Slots: 1})
		if err != nil {
			return err
		}
		defer pool.Close()
		v.pool = pool
		if err := measureStartup(ctx, v, startupTasks); err != nil {
			return err
		}
	}
	empties, err := buildEmpty(dir)
	if err != nil {
		return err
	}
	for _, v := range empties {
		pool, err := worker.NewPool(worker.Config{Command: []string{idlepool, "worker"}, Slots: 1})
		if err != nil {
			return err
		}
		defer pool.Close()
		v.pool = pool
		if err := measureStartup(ctx, v, startupTasks); err != nil {
			return err
		}
	}
	for r := range rounds {
		fmt.Fprintf(os.Stderr, "round %d of %d\n", r+1, rounds)
		for _, v := range vs {
			if err := measureOnce(ctx, v); err != nil {
				return err
			}
		}
	}
	if err := report(vs, loadStart, loadAverage()); err != nil {
		return err
	}
	fmt.Println()
	fmt.Println("Start-up of the empty Go program (cmd/idlepool/testdata/empty), worker CPU per task:")
	for _, v := range empties {
		fmt.Printf("  %-8s %.2f ms\n", v.lang, float64(v.startup.Microseconds())/1000)
	}
	return nil
}

// buildEmpty builds the empty Go program as a command and as a reactor
// (docs/author.md), for their start-up alone.
func buildEmpty(dir string) ([]*variant, error) {
	var vs []*variant
	for _, form := range []struct{ name, flag string }{{"command", ""}, {"reactor", "-buildmode=c-shared"}} {
		out := filepath.Join(dir, "empty-"+form.name+".wasm")
		args := []string{"build", "-trimpath", "-o", out}
		if form.flag != "" {
			args = append(args, form.flag)
		}
		if err := command([]string{"GOOS=wasip1", "GOARCH=wasm"}, "go", append(args, "./cmd/idlepool/testdata/empty")...); err != nil {
			return nil, err
		}
		vs = append(vs, &variant{lang: form.name, wasm: out, kernel: kernel{empty: `{"seed":1,"params":{}}`}})
	}
	return vs, nil
}

// loadAverage is the machine's load average over the last minute, from
// /proc/loadavg ("?" where there is none): the table says how busy the
// machine was, since a busy one inflates both columns unevenly.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// build builds every variant into dir.
func build(dir string, scale float64, simd bool) ([]*variant, error) {
	var vs []*variant
	_, err := exec.LookPath("wasm-opt")
	wasmOpt := err == nil
	if !wasmOpt {
		fmt.Fprintln(os.Stderr, "benchguests: no wasm-opt (Debian: apt-get install binaryen), its rows left out")
	}
	for _, k := range kernels {
		task, units := k.task(scale)
		add := func(lang, native, wasm string) {
			vs = append(vs, &variant{lang: lang, kernel: k, native: native, wasm: wasm, task: task, units: units})
		}
		goNative := filepath.Join(dir, "go-"+k.name)
		goWasm := goNative + ".wasm"
		if err := command(nil, "go", "build", "-trimpath", "-o", goNative, "./examples/"+k.name); err != nil {
			return nil, err
		}
		if err := command([]string{"GOOS=wasip1", "GOARCH=wasm"}, "go", "build", "-trimpath", "-o", goWasm, "./examples/"+k.name); err != nil {
			return nil, err
		}
		add("Go", goNative, goWasm)
		for _, l := range []struct{ name, lang, ext string }{{"C", "c", "c"}, {"Rust", "rust", "rs"}} {
			if err := command(nil, "examples/build-guest.sh", "check", l.lang); err != nil {
				fmt.Fprintf(os.Stderr, "benchguests: no %s toolchain, %s left out\n", l.name, l.name)
				continue
			}
			src := filepath.Join("examples", l.lang, k.name+"."+l.ext)
			base := filepath.Join(dir, l.lang+"-"+k.name)
			targets := []string{"native", "wasm"}
			if simd {
				targets = append(targets, "wasm-simd")
			}
			for _, target := range targets {
				out := base + "." + target
				if err := command(nil, "examples/build-guest.sh", l.lang, target, src, out); err != nil {
					return nil, err
				}
			}
			add(l.name, base+".native", base+".wasm")
			if simd {
				add(l.name+" +simd128", base+".native", base+".wasm-simd")
			}
			if wasmOpt {
				if err := command(nil, "wasm-opt", "-O3", base+".wasm", "-o", base+".wasm-opt"); err != nil {
					return nil, err
				}
				add(l.name+" +wasm-opt", base+".native", base+".wasm-opt")
			}
		}
	}
	return vs, nil
}

func command(env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// request is the worker request for one task of v's module.
func request(v *variant, stdin string) (worker.Request, error) {
	b, err := os.ReadFile(v.wasm)
	if err != nil {
		return worker.Request{}, err
	}
	sum := sha256.Sum256(b)
	return worker.Request{ModulePath: v.wasm, ModuleSHA256: hex.EncodeToString(sum[:]), Stdin: []byte(stdin), Timeout: 10 * time.Minute}, nil
}

// runWasm runs one task on the pool's worker and returns its stdout and
// the worker process's CPU time across it.
func runWasm(ctx context.Context, pool *worker.Pool, req worker.Request, pid int) ([]byte, time.Duration, int, error) {
	before, err := processCPU(pid)
	if pid != 0 && err != nil {
		return nil, 0, 0, err
	}
	res, err := pool.Run(ctx, req)
	if err != nil {
		return nil, 0, 0, err
	}
	if res.Failure != nil {
		return nil, 0, 0, fmt.Errorf("%s: %v\n%s", req.ModulePath, res.Failure, res.Stderr)
	}
	if pid != 0 && res.PID != pid {
		return nil, 0, 0, fmt.Errorf("the task ran on worker %d, not %d: was the worker replaced?", res.PID, pid)
	}
	after, err := processCPU(res.PID)
	if err != nil {
		return nil, 0, 0, err
	}
	return res.Stdout, after - before, res.PID, nil
}

// measureStartup compiles v's module on the worker, then runs tasks of no
// work and keeps the worker's CPU time per task.
func measureStartup(ctx context.Context, v *variant, n int) error {
	req, err := request(v, v.kernel.empty)
	if err != nil {
		return err
	}
	_, _, pid, err := runWasm(ctx, v.pool, req, 0) // start the worker, compile
	if err != nil {
		return err
	}
	v.pid = pid
	before, err := processCPU(pid)
	if err != nil {
		return err
	}
	for range n {
		if _, _, _, err := runWasm(ctx, v.pool, req, pid); err != nil {
			return err
		}
	}
	after, err := processCPU(pid)
	if err != nil {
		return err
	}
	v.startup = (after - before) / time.Duration(n)
	return nil
}

// measureOnce runs v's task natively and as WebAssembly once each.
func measureOnce(ctx context.Context, v *variant) error {
	cmd := exec.Command(v.native)
	cmd.Stdin = strings.NewReader(v.task)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", v.native, err, stderr.Bytes())
	}
	v.nativeCPU = append(v.nativeCPU, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
	v.nativeOut = out
	req, err := request(v, v.task)
	if err != nil {
		return err
	}
	wout, cpu, _, err := runWasm(ctx, v.pool, req, v.pid)
	if err != nil {
		return err
	}
	v.wasmCPU = append(v.wasmCPU, cpu)
	v.wasmOut = wout
	return nil
}

// processCPU is the user plus system CPU time of process pid and all its
// threads, living and ended, from /proc/PID/stat (in clock ticks of 10 ms).
func processCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, errors.New("no worker process")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("worker CPU time (Linux only): %w", err)
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on every Linux ABI
	return time.Duration(utime+stime) * tick, nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// fairness says what each column holds, so that a reader can judge the
// ratio: both sides are built for the same baseline CPU and both figures
// hold one start, which a round's second or more dwarfs.
const fairness = `Native: Go's default build (GOAMD64=v1), clang -O2 and rustc -C opt-level=3 for the baseline x86-64,
  not -march=native: a job's module runs on every donor's CPU, and WebAssembly's SIMD is 128 bits wide
  (clang -O2 -march=native vectorises C pi with AVX-512 and runs it about 6x faster than this column).
Wasm: compiled once by wazero's optimizing compiler before the rounds (not counted), metered as every
  worker meters (worker/meter.go, about 0-15% of the kernels' time), one task's start-up included.
`

// report prints the table and checks every result against Go's.
func report(vs []*variant, loadStart, loadEnd string) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "language\tkernel\tnative\twasm\tratio\tstart-up")
	var bad []string
	goOut := map[string][]byte{}
	for _, v := range vs {
		if v.lang == "Go" {
			goOut[v.kernel.name] = v.nativeOut
		}
		for _, out := range [][]byte{v.nativeOut, v.wasmOut} {
			if !bytes.Equal(out, goOut[v.kernel.name]) {
				bad = append(bad, fmt.Sprintf("%s %s: %q, Go's %q", v.lang, v.kernel.name, out, goOut[v.kernel.name]))
			}
		}
		n, w := median(v.nativeCPU), median(v.wasmCPU)
		perUnit := func(d time.Duration) string {
			return fmt.Sprintf("%.2f ns/%s", float64(d.Nanoseconds())/v.units, v.kernel.unit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2fx\t%.2f ms\n", v.lang, v.kernel.name, perUnit(n), perUnit(w), float64(w)/float64(n), float64(v.startup.Microseconds())/1000)
	}
	tw.Flush()
	fmt.Printf("CPU time per unit of work, median of %d rounds; wasm on an idlepool worker (wazero), start-up = worker CPU per task of no work.\n", len(vs[0].nativeCPU))
	fmt.Print(fairness)
	fmt.Printf("Load average %s at the start of the rounds, %s at the end (%s, %d CPUs).\n", loadStart, loadEnd, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU())
	if len(bad) > 0 {
		return fmt.Errorf("results differ from the Go program's:\n%s", strings.Join(bad, "\n"))
	}
	fmt.Println("Every result, native and wasm, is the same bytes as the Go program's.")
	return nil
}
