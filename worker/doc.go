// Package worker runs tasks of a job in sandboxed subprocesses: each task
// is a WebAssembly module (a WASI preview 1 command or reactor) run by
// wazero inside a worker process at the lowest CPU priority, one task at a
// time. A Pool on the parent side starts, reuses and kills worker
// processes; Serve is the worker process's side.
//
// # What a job program sees
//
// A program is a WASI preview 1 command, e.g. built with
// GOOS=wasip1 GOARCH=wasm go build, or a reactor, whose runtime
// initialises once per worker and whose tasks start from a copy of the
// state that left (reactor.go). It
//
//   - reads its task as one JSON object on stdin (Request.Stdin);
//   - sees the task's input files read-only under /input (Request.InputDir)
//     and nothing else of any file system: no path, neither "..", nor an
//     absolute path, nor a symbolic link, resolves outside InputDir;
//     without an InputDir there is no file system at all;
//   - has no network (wazero grants no sockets; Go's wasip1 port has an
//     in-process fake network, which reaches nothing outside the guest);
//   - has args = [ProgramName] and no environment variables;
//   - reads random bytes from a ChaCha8 stream seeded with Request.Seed
//     (math/rand/v2), and clocks that advance 1 ms per reading from fixed
//     starting points; sleeping returns at once. These and every other
//     WASI call's answer are the determinism profile (profile.go,
//     docs/determinism.md), which the worker sets itself rather than
//     take from wazero's defaults, and which web/wasi.js implements for
//     browsers; testdata/vectors holds its test vectors;
//   - writes one JSON object on stdout (capped, Request.MaxStdoutBytes) and
//     a log on stderr (kept up to Request.MaxStderrBytes, head and tail).
//   - may compute on the task's GPUs (Request.GPUs) through the host module
//     idlepool_cuda (CUDAModuleName, cuda.go): PTX modules, device memory
//     capped at Request.GPUMemoryLimitMiB, launches; one CUDA context per
//     task, destroyed when the task ends. Without GPUs it sees 0 devices.
//     The driver (CUDADriver) is loaded at run time without cgo, only for
//     a task given GPUs.
//
// So running the same task twice gives byte-identical stdout, on any
// worker and any machine: replicas can be compared byte for byte.
//
// # Metering
//
// Every module is metered before it is compiled (meter.go): the worker
// rewrites its binary to count the WebAssembly instructions it executes,
// and reports the count with the task's outcome (Result.Work, by rule
// MeterRule), plus the threads of its GPU launches. The count is what the
// task took, the same on every honest device whatever its speed, so
// replicas agree on it like on their output; a pool credits it (package
// pool). It never depends on time. What it costs a task, measured on the
// example programs by BenchmarkMeter, is in docs/benchmarks.md.
//
// # Example
//
//	exe, _ := os.Executable()
//	pool, err := worker.NewPool(worker.Config{
//		Command:  []string{exe, "worker"}, // calls worker.Serve(ctx, os.Stdin, os.Stdout, os.Getenv(worker.CacheDirEnv))
//		Slots:    4,
//		CacheDir: filepath.Join(cacheRoot, "wazero"),
//		Logger:   log,
//	})
//	if err != nil { ... }
//	defer pool.Close()
//	res, err := pool.Run(ctx, worker.Request{
//		ModulePath:   "/jobs/abc/program.wasm",
//		ModuleSHA256: "9f86d0...",
//		Stdin:        taskJSON,
//		Seed:         seed,
//		Timeout:      time.Minute,
//	})
//	switch {
//	case err != nil:         // the task could not be run: retry later or elsewhere
//	case res.Failure != nil: // the task failed: res.Failure.Kind says how
//	default:                 // res.Stdout is the task's result
//	}
//
// # Failures
//
// Pool.Run returns a task's failure in Result.Failure (see FailureKind):
// trap (wazero's trap message; for Go programs also a panic or fatal
// runtime error, recognised by exit status 2 and the runtime's report on
// stderr), timeout, out-of-memory (the Go runtime's "out of memory" report
// after linear memory hit the cap, or a module whose minimum memory is over
// it), output-too-large (the stdout writer panics past the cap, which wazero
// turns into the call's error, so even a program that ignores write errors
// stops at once), exit-status, bad-module (hash mismatch, not WebAssembly,
// cannot be metered, does not compile, imports anything but WASI, no
// _start) and worker-died.
// Run's error is reserved for tasks whose outcome is unknown: bad requests,
// workers that cannot start, setup problems, cancellation, Close.
//
// # Protocol
//
// Pool and worker speak length-prefixed frames over the worker's stdin and
// stdout: a 4-byte big-endian length (1 to 128 MiB) and a JSON object with
// a version "v" (1) and a "type": hello (worker, once), run (pool), started
// and result (worker). Malformed frames are rejected with ErrBadFrame; the
// decoder is fuzzed (FuzzDecodeFrame). The worker's own stderr goes to the
// pool's log. The full description is at the top of protocol.go.
//
// # Time limits
//
// The pool enforces Request.Timeout by killing the worker process (a fresh
// one is started for the next task). This costs a running task nothing,
// whereas wazero's RuntimeConfig.WithCloseOnContextDone compiles into every
// loop header a call out of the guest to check for cancellation.
// BenchmarkCloseOnContextDone measured (wazero v1.12.0, Go 1.26, amd64,
// an Intel Xeon with 2 cores shared with other jobs at a load average of
// about 11, so single runs scattered widely; medians of 4 to 7 runs of 10
// operations each):
//
//	workload                      without     with CloseOnContextDone
//	busy loop, 5e7 iterations     0.15 s      4.3 s    (~28x; runs ranged 10x to 45x)
//	fib(32), recursive calls      0.08 s      0.49 s   (~6x; 6x to 8x)
//
// The loop check is not a load and a branch: in wazero's compiler
// (internal/engine/wazevo/frontend/lower.go) it is an indirect call of a
// trampoline that leaves the guest for Go at every loop header. A Go
// program compiled to WebAssembly has a loop at the top of every function
// (its goroutine resume points), so call-heavy code pays too.
//
// Killing the process also stops a guest that is stuck inside a host call,
// which a context cannot. The timer starts at the worker's "started" frame,
// so compiling a module the machine has not seen yet (seconds for a large
// Go program) never counts against a task; compiling is bounded separately
// (5 minutes).
//
// The pool's own overhead per task is small: BenchmarkRunEmpty (an empty
// module on a warm worker, through the protocol and back, instantiating
// the module and its WASI context) measured 56 to 124 µs per task, median
// about 100 µs, on the same machine.
//
// # Compilation
//
// Workers compile with wazero's optimizing compiler where it has one
// (amd64, arm64; the interpreter elsewhere) and share an on-disk
// compilation cache (Config.CacheDir), so that a module compiles once per
// machine and a fresh worker only loads it. Each worker also keeps up to 8
// compiled modules in memory, by SHA-256 and memory limit (wazero applies
// the memory limit when compiling).
//
// # Start-up per task
//
// Every task runs in a fresh instance of its module, so nothing of one
// task reaches the next. Two things keep that cheap: a module's data
// segments are packed into few before compiling (datapack.go; a Go-built
// module has tens of thousands, which wazero applies one by one at every
// instantiation), and the linear memory is one reservation per worker,
// reused by every task and zeroed when a task ends (memory.go), so that
// memory.grow copies nothing. TestTasksStartFromIdenticalState checks that
// a program's globals and memory start the same on every task of a
// worker, also after a task that trapped. The rest of a Go program's start
// is its runtime initialising itself in the instance (docs/benchmarks.md).
//
// # Process hygiene
//
// On Linux a worker is in its own process group, gets SIGKILL when its
// parent dies (Pdeathsig; the pool forks from one goroutine locked to its
// thread for the pool's lifetime, because Pdeathsig follows the forking
// thread, not the process), and sets nice 19 and SCHED_IDLE on all its
// threads as it starts. Its memory is bounded by the guest's linear memory
// cap plus the compiled code and the stdout buffer; between tasks it keeps
// at most 16 MiB of linear memory (memory.go); no RLIMIT_AS is set,
// because the Go runtime and wazero reserve far more address space than
// they use. Elsewhere the worker runs at normal priority and, if its parent
// dies without calling Close, exits when it next reads its stdin.
//
// # Concurrency and ownership
//
// A Pool is safe for concurrent use; Run blocks while all Config.Slots are
// busy. Each worker process belongs to one Run at a time, or to the idle
// list. Every goroutine the pool starts (one per worker to copy its stderr
// into the log, one per Run to talk to the worker, one to fork workers) is
// joined before the call that owns it returns, or by Close. Close kills and
// reaps every worker and waits for the Run calls in flight, which return
// ErrClosed. The Request's byte slices are only read; Result's are new.
//
// # Tests
//
// The tests re-execute the test binary as the worker (TestMain calls Serve
// when IDLEPOOL_WORKER_TEST_CHILD=1) and build testdata/hostile, one Go
// program whose task selects a behaviour (echo, panic, loop, memory bomb,
// stdout flood, file system escape, network, ...), with
// GOOS=wasip1 GOARCH=wasm go build into a temporary directory. Modules
// that Go cannot produce (a bare unreachable, no _start, foreign imports)
// are assembled by hand in wasm_test.go. The determinism profile's test
// program testdata/vectors/vectors.c is built with clang (the test skips
// without it, unless IDLEPOOL_REQUIRE_GUESTS=1). No .wasm file is
// committed.
package worker
