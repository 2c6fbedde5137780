package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// CacheDirEnv is the environment variable through which a Pool passes
// Config.CacheDir to its worker processes. The command that starts a worker
// passes its value to Serve.
const CacheDirEnv = "IDLEPOOL_WORKER_CACHE_DIR"

// PriorityEnv is the environment variable that says at which priority a
// worker process runs: unset (or anything else) PriorityIdle, "low"
// PriorityLow (a Pool sets it for Config.Priority), and "normal", in a
// worker process's environment (Config.Env), keeps Serve from lowering
// the process's priority at all: for tests and benchmarks on busy
// machines only.
const PriorityEnv = "IDLEPOOL_WORKER_PRIORITY"

// Limits of the worker's in-process caches.
const (
	maxCachedModules  = 8 // compiled modules, across all runtimes
	maxCachedRuntimes = 4 // one per distinct memory limit
	maxMessageBytes   = 4096
)

// Serve is the worker process's side of the pool: it reads task frames from
// in, runs each task's module in wazero, one at a time, and writes the
// frames of the protocol (described in protocol.go) to out. It must run in a process of its
// own, started by a Pool, with in and out its stdin and stdout: it lowers
// the priority of the whole process to the OS's idle priority
// (PriorityIdle: SCHED_IDLE, nice 19 and the idle I/O class on Linux), or
// to PriorityLow, as PriorityEnv says, and it logs to os.Stderr, which the
// pool copies into its log.
//
// cacheDir is wazero's on-disk compilation cache, shared by every worker on
// the machine so that a module compiles once; "" keeps the cache in memory.
// Compiled modules are also kept in the process, keyed by SHA-256 and memory
// limit.
//
// Serve returns nil when in ends cleanly (the pool closed the worker's
// stdin), ctx.Err() when ctx is done (checked between tasks: a running task
// is not interrupted, the pool kills the process for that), and an error
// for a malformed frame or a failed write.
func Serve(ctx context.Context, in io.Reader, out io.Writer, cacheDir string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if env := os.Getenv(PriorityEnv); env != priorityNormal {
		prio := PriorityIdle
		if Priority(env) == PriorityLow {
			prio = PriorityLow
		}
		if err := lowerPriority(prio); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			log.Warn("Could not lower worker priority", "priority", prio.String(), "err", err)
		}
	}
	h, err := newHost(cacheDir)
	if err != nil {
		return err
	}
	defer h.close(ctx)

	if err := writeFrame(out, &frame{Version: protocolVersion, Type: frameHello, PID: os.Getpid()}); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := readFrame(in)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("worker: read task: %w", err)
		}
		if f.Type != frameRun {
			return fmt.Errorf("worker: %w: got %s frame, want run", ErrBadFrame, f.Type)
		}
		started := func() error {
			return writeFrame(out, &frame{Version: protocolVersion, Type: frameStarted, ID: f.ID})
		}
		res, err := h.run(ctx, f.Run, started)
		if err != nil {
			return err
		}
		if err := writeFrame(out, &frame{Version: protocolVersion, Type: frameResult, ID: f.ID, Result: res}); err != nil {
			return err
		}
		if h.broken != nil {
			return fmt.Errorf("worker: %w", h.broken)
		}
	}
}

// host owns the wazero state of one worker process: the compilation cache,
// one runtime per memory limit and the compiled modules. Not safe for
// concurrent use; Serve runs one task at a time.
type host struct {
	cache    wazero.CompilationCache
	runtimes map[uint32]*hostRuntime
	modules  map[moduleKey]*hostModule
	clock    uint64 // use counter for least-recently-used eviction
	cuda     cudaHost
	mem      memoryReuse // the tasks' linear memory (memory.go)
	// broken is set when a task's CUDA context could not be destroyed:
	// the worker exits after sending that task's result, so that the
	// driver reclaims the context with the process.
	broken error
	// unmetered compiles modules as they are, without the work counter
	// (meter.go): for tests and benchmarks that compare the two. A
	// worker process always meters.
	unmetered bool
	// interpreter compiles with wazero's interpreter: for tests under the
	// race detector, where the optimizing compiler takes ten times
	// longer. A worker process compiles where it can.
	interpreter bool
	// freshReactors runs a reactor's _initialize in every task's own
	// instance instead of copying in its snapshot (reactor.go): for the
	// tests that compare the two.
	freshReactors bool
}

type hostRuntime struct {
	rt       wazero.Runtime
	lastUsed uint64
}

type moduleKey struct {
	sha   string
	pages uint32
}

type hostModule struct {
	compiled wazero.CompiledModule
	lastUsed uint64
	// reactor names the exports of a reactor's mutable globals
	// (reactor.go); nil for a command.
	reactor []string
	// snapshots are a reactor's state after _initialize, for tasks
	// without and with an input directory; nil until the first such task.
	snapshots [2]*reactorSnapshot
}

func newHost(cacheDir string) (*host, error) {
	h := &host{runtimes: map[uint32]*hostRuntime{}, modules: map[moduleKey]*hostModule{}}
	if cacheDir == "" {
		h.cache = wazero.NewCompilationCache()
	} else {
		c, err := wazero.NewCompilationCacheWithDir(cacheDir)
		if err != nil {
			return nil, fmt.Errorf("worker: compilation cache: %w", err)
		}
		h.cache = c
	}
	return h, nil
}

func (h *host) close(ctx context.Context) {
	for _, r := range h.runtimes {
		_ = r.rt.Close(ctx) // also closes its compiled modules
	}
	_ = h.cache.Close(ctx)
	h.mem.close()
}

// runtime returns the runtime for a memory limit, creating it (and evicting
// the least recently used one) as needed. The memory limit is part of the
// runtime's configuration in wazero and applies when a module is compiled.
func (h *host) runtime(ctx context.Context, pages uint32) (wazero.Runtime, error) {
	h.clock++
	if r, ok := h.runtimes[pages]; ok {
		r.lastUsed = h.clock
		return r.rt, nil
	}
	if len(h.runtimes) >= maxCachedRuntimes {
		var oldest uint32
		var oldestUse uint64 = ^uint64(0)
		for p, r := range h.runtimes {
			if r.lastUsed < oldestUse {
				oldest, oldestUse = p, r.lastUsed
			}
		}
		_ = h.runtimes[oldest].rt.Close(ctx)
		delete(h.runtimes, oldest)
		for k := range h.modules {
			if k.pages == oldest {
				delete(h.modules, k)
			}
		}
	}
	// NewRuntimeConfig picks the optimizing compiler where wazero supports
	// one (amd64, arm64) and the interpreter elsewhere. Its defaults are the
	// sandbox's: fake clocks, no file system, no network, and no
	// CloseOnContextDone, whose checks slow loops down (see doc.go).
	cfg := wazero.NewRuntimeConfig()
	if h.interpreter {
		cfg = wazero.NewRuntimeConfigInterpreter()
	}
	cfg = cfg.WithCompilationCache(h.cache).
		WithMemoryLimitPages(pages)
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	if err := instantiateWASI(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, err
	}
	if err := instantiateCUDA(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, err
	}
	h.runtimes[pages] = &hostRuntime{rt: rt, lastUsed: h.clock}
	return rt, nil
}

// module returns the compiled module for a task. A non-nil Failure means the
// module is unusable (bad-module, or out-of-memory when its minimum memory
// exceeds the limit); an error means the task could not be set up (it is
// sent to the pool, which wraps it in ErrSetup).
func (h *host) module(ctx context.Context, b *runBody) (*hostModule, *Failure, error) {
	key := moduleKey{sha: b.ModuleSHA256, pages: b.MemoryLimitPages}
	h.clock++
	if m, ok := h.modules[key]; ok {
		m.lastUsed = h.clock
		return m, nil, nil
	}
	bin, err := readModule(b.ModulePath)
	if err != nil {
		return nil, nil, err
	}
	if len(bin) > MaxModuleBytes {
		return nil, &Failure{Kind: FailureBadModule, Message: fmt.Sprintf("module file is larger than %d bytes", MaxModuleBytes)}, nil
	}
	sum := sha256.Sum256(bin)
	if got := hex.EncodeToString(sum[:]); got != b.ModuleSHA256 {
		return nil, &Failure{Kind: FailureBadModule, Message: fmt.Sprintf("module SHA-256 is %s, want %s", got, b.ModuleSHA256)}, nil
	}
	if !h.unmetered {
		// Metering a module is deterministic, so a module it refuses is
		// refused on every device: the task's outcome, like a module
		// wazero refuses.
		if bin, err = meterModule(bin); err != nil {
			return nil, &Failure{Kind: FailureBadModule, Message: clip(err.Error())}, nil
		}
	}
	// A reactor's mutable globals are exported, so that the worker can
	// save and restore them (reactor.go).
	bin, reactor, err := reactorGlobals(bin)
	if err != nil {
		return nil, &Failure{Kind: FailureBadModule, Message: clip(err.Error())}, nil
	}
	rt, err := h.runtime(ctx, b.MemoryLimitPages)
	if err != nil {
		return nil, nil, err
	}
	// Few data segments instantiate faster than a Go-built module's tens
	// of thousands; the memory they give is the same (datapack.go).
	bin = packData(bin)
	// Compile on as many goroutines as the process may run at once; at
	// SCHED_IDLE they only take CPUs nobody else wants.
	compiled, err := rt.CompileModule(experimental.WithCompilationWorkers(ctx, runtime.GOMAXPROCS(0)), bin)
	if err != nil {
		// wazero reports a memory minimum above WithMemoryLimitPages only
		// as text ("min N pages (X) over limit of M pages (Y)").
		if strings.Contains(err.Error(), "over limit of") {
			return nil, &Failure{Kind: FailureOutOfMemory, Message: "module memory " + clip(err.Error())}, nil
		}
		return nil, &Failure{Kind: FailureBadModule, Message: "compile: " + clip(err.Error())}, nil
	}
	if f := checkProgram(compiled, reactor != nil); f != nil {
		_ = compiled.Close(ctx)
		return nil, f, nil
	}
	if len(h.modules) >= maxCachedModules {
		var oldest moduleKey
		var oldestUse uint64 = ^uint64(0)
		for k, m := range h.modules {
			if m.lastUsed < oldestUse {
				oldest, oldestUse = k, m.lastUsed
			}
		}
		_ = h.modules[oldest].compiled.Close(ctx)
		delete(h.modules, oldest)
	}
	m := &hostModule{compiled: compiled, lastUsed: h.clock, reactor: reactor}
	h.modules[key] = m
	return m, nil, nil
}

// readModule reads at most MaxModuleBytes+1 bytes of a module file.
func readModule(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open module: %w", err)
	}
	defer f.Close()
	bin, err := io.ReadAll(io.LimitReader(f, MaxModuleBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read module: %w", err)
	}
	return bin, nil
}

// checkProgram refuses modules that are neither WASI preview 1 commands
// nor reactors (reactor.go): a command needs an exported _start of type
// [] -> [], a reactor _initialize and ReactorTaskExport of that type; both
// may import WASI functions and idlepool_cuda functions only (no imported
// memory, table or global from elsewhere).
func checkProgram(m wazero.CompiledModule, reactor bool) *Failure {
	if goJS(m) {
		return &Failure{Kind: FailureBadModule, Message: "not a WASI command: a Go program built for GOOS=js (browsers, by wasm_exec.js); build it with GOOS=wasip1 GOARCH=wasm go build"}
	}
	entries := []string{"_start"}
	if reactor {
		entries = []string{ReactorInitExport, ReactorTaskExport}
	}
	for _, name := range entries {
		fn, ok := m.ExportedFunctions()[name]
		if !ok || len(fn.ParamTypes()) != 0 || len(fn.ResultTypes()) != 0 {
			if !reactor {
				return &Failure{Kind: FailureBadModule, Message: "not a WASI command: no exported function _start() without parameters and results (or a reactor: _initialize() and " + ReactorTaskExport + "())"}
			}
			return &Failure{Kind: FailureBadModule, Message: "not a reactor: no exported function " + name + "() without parameters and results"}
		}
	}
	for _, fn := range m.ImportedFunctions() {
		mod, name, _ := fn.Import()
		switch {
		case mod == CUDAModuleName && !cudaFuncNames[name]:
			return &Failure{Kind: FailureBadModule, Message: fmt.Sprintf("imports %s.%s: %s has no such function", mod, name, CUDAModuleName)}
		case mod != wasi_snapshot_preview1.ModuleName && mod != CUDAModuleName:
			return &Failure{Kind: FailureBadModule, Message: fmt.Sprintf("imports %s.%s: only %s and %s are available", mod, name, wasi_snapshot_preview1.ModuleName, CUDAModuleName)}
		}
	}
	for _, mem := range m.ImportedMemories() {
		mod, name, _ := mem.Import()
		return &Failure{Kind: FailureBadModule, Message: fmt.Sprintf("imports memory %s.%s: modules must define their own", mod, name)}
	}
	return nil
}

// goJS reports whether m is a Go program built with GOOS=js GOARCH=wasm:
// it imports from Go's "gojs" module, or exports run and resume (how
// wasm_exec.js starts and wakes it) and no _start.
func goJS(m wazero.CompiledModule) bool {
	for _, fn := range m.ImportedFunctions() {
		if mod, _, _ := fn.Import(); mod == "gojs" {
			return true
		}
	}
	ex := m.ExportedFunctions()
	_, start := ex["_start"]
	_, run := ex["run"]
	_, resume := ex["resume"]
	return !start && run && resume
}

// run runs one task. It calls started once the module is ready to run. Task
// failures are in the result; the returned error is only a failed write of
// the started frame, after which the worker cannot go on.
func (h *host) run(ctx context.Context, b *runBody, started func() error) (*resultBody, error) {
	var root *os.Root
	if b.InputDir != "" {
		r, err := os.OpenRoot(b.InputDir)
		if err != nil {
			return &resultBody{Error: fmt.Sprintf("input directory: %v", err)}, nil
		}
		defer r.Close()
		root = r
	}
	hm, failure, err := h.module(ctx, b)
	if err != nil {
		return &resultBody{Error: err.Error()}, nil
	}
	if failure != nil {
		return &resultBody{Failure: failure}, nil
	}
	rt, err := h.runtime(ctx, b.MemoryLimitPages)
	if err != nil {
		return &resultBody{Error: err.Error()}, nil
	}
	if len(b.GPUs) > 0 {
		// The pool starts a GPU task's worker with CUDA_VISIBLE_DEVICES
		// naming exactly the task's GPUs, so that CUDA sees no other.
		if got, want := os.Getenv(CUDAVisibleDevicesEnv), strings.Join(b.GPUs, ","); got != want {
			return &resultBody{Error: fmt.Sprintf("worker process has %s=%q, the task's GPUs are %q", CUDAVisibleDevicesEnv, got, want)}, nil
		}
	}
	gpu := newCUDATask(&h.cuda, len(b.GPUs), b.GPUMemoryLimitMiB)

	seed, _ := hex.DecodeString(b.Seed) // checked by the decoder
	stdout := &stdoutBuffer{max: b.MaxStdoutBytes}
	stderr := newStderrBuffer(b.MaxStderrBytes)
	// The random source, clocks, sleep and yield are the determinism
	// profile's (profile.go); there are no environment variables and no
	// preopened sockets.
	cfg := withProfile(wazero.NewModuleConfig().
		WithName("").
		WithArgs(ProgramName).
		WithStdin(bytes.NewReader(b.Stdin)).
		WithStdout(stdout).
		WithStderr(stderr).
		WithStartFunctions(), [32]byte(seed))
	if root != nil {
		cfg = withInputMount(cfg, root.FS())
	}
	entry := "_start"
	var phase *reactorPhase
	var snap *reactorSnapshot
	var in *reactorInit
	if hm.reactor != nil {
		// A reactor's task starts from the state its _initialize left
		// (reactor.go).
		entry, phase, in = ReactorTaskExport, &reactorPhase{}, newReactorInit()
		if !h.freshReactors {
			input := 0
			if root != nil {
				input = 1
			}
			if hm.snapshots[input] == nil {
				// _initialize runs on the task's clock: one that never
				// returns times out like a command's endless start.
				if err := started(); err != nil {
					return nil, err
				}
				started = func() error { return nil }
				hm.snapshots[input] = h.snapshot(ctx, rt, hm, root != nil)
			}
			snap = hm.snapshots[input]
			if snap.failure != nil {
				return &resultBody{Stderr: snap.stderr, Failure: snap.failure, Work: snap.work}, nil
			}
			*phase = snap.phase
			phase.task = true
		}
		cfg = reactorConfig(cfg, phase, in, bytes.NewReader(b.Stdin), stdout, stderr, profileRand([32]byte(seed)))
	}
	// The task's linear memory is the worker's reserved one, zeroed again
	// when the task is over (memory.go).
	memCtx, memDone := h.mem.forTask(ctx)
	defer memDone()
	mod, err := rt.InstantiateModule(memCtx, hm.compiled, cfg)
	if err != nil {
		return &resultBody{Failure: &Failure{Kind: FailureBadModule, Message: "instantiate: " + clip(err.Error())}}, nil
	}
	if err := started(); err != nil {
		_ = mod.Close(ctx)
		return nil, err
	}
	switch {
	case snap != nil:
		if err := snap.restore(mod, hm.reactor); err != nil {
			_ = mod.Close(ctx)
			return &resultBody{Error: fmt.Sprintf("restore the state of %s: %v", ReactorInitExport, err)}, nil
		}
	case phase != nil: // a fresh reactor, for the tests
		if f, work := initReactor(withCUDATask(ctx, newCUDATask(&h.cuda, 0, 0)), mod, in); f != nil {
			_ = mod.Close(ctx)
			return &resultBody{Stderr: in.stderr.bytes(), Failure: f, Work: work}, nil
		}
		phase.task = true
		if g, ok := mod.ExportedGlobal(MeterExport).(api.MutableGlobal); ok {
			g.Set(0)
		}
	}
	_, callErr := mod.ExportedFunction(entry).Call(withCUDATask(ctx, gpu))
	// The counter is read whatever the end: a trap, an exit status and
	// an exceeded stdout count what ran up to them. (proc_exit closes the
	// module but keeps its globals.)
	var work uint64
	if g := mod.ExportedGlobal(MeterExport); g != nil && !h.unmetered {
		work = g.Get()
	}
	_ = mod.Close(ctx)
	// The task's CUDA context goes with the task, whatever its end, so
	// that nothing of it is left for the next task.
	stats, destroyErr := gpu.end()
	if destroyErr != nil {
		h.broken = fmt.Errorf("destroy the task's CUDA context: %w", destroyErr)
	}
	stderr.finish()
	res := &resultBody{Stderr: stderr.bytes(), Failure: classify(callErr, stdout, stderr), GPU: stats, Work: addSat(work, gpu.threads)}
	if res.Failure == nil {
		res.Stdout = stdout.buf
	}
	return res, nil
}

// classify turns the outcome of a guest's _start into a Failure, nil for
// success.
func classify(callErr error, stdout *stdoutBuffer, stderr *stderrBuffer) *Failure {
	if stdout.exceeded || errors.Is(callErr, errOutputTooLarge) {
		return &Failure{Kind: FailureOutputTooLarge, Message: fmt.Sprintf("stdout exceeded %d bytes", stdout.max)}
	}
	if callErr == nil {
		return nil
	}
	var exit *sys.ExitError
	if errors.As(callErr, &exit) {
		code := exit.ExitCode()
		switch {
		case code == 0:
			return nil
		case stderr.outOfMem:
			return &Failure{Kind: FailureOutOfMemory, Message: "the Go runtime ran out of memory: " + clip(stderr.panicLine)}
		case code == 2 && stderr.panicLine != "":
			// The Go runtime reports a panic or a fatal error on stderr
			// and exits with status 2.
			return &Failure{Kind: FailureTrap, Message: clip(stderr.panicLine)}
		default:
			return &Failure{Kind: FailureExitStatus, Message: fmt.Sprintf("exit status %d", code)}
		}
	}
	if stderr.outOfMem {
		return &Failure{Kind: FailureOutOfMemory, Message: clip(callErr.Error())}
	}
	return trapFailure(callErr)
}

// withInputMount mounts dir read-only at InputMountPath.
func withInputMount(cfg wazero.ModuleConfig, dir fs.FS) wazero.ModuleConfig {
	// wazero's own WithReadOnlyDirMount lets "../" in a raw path_open
	// leave the directory (its documentation says so); an os.Root
	// confines every lookup, symbolic links included, and ReadFS refuses
	// every write.
	mount := &sysfs.ReadFS{FS: &sysfs.AdaptFS{FS: dir}}
	return cfg.WithFSConfig(wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(mount, InputMountPath))
}

// clip bounds a message for people to maxMessageBytes.
func clip(s string) string {
	if len(s) <= maxMessageBytes {
		return s
	}
	return s[:maxMessageBytes] + " [...]"
}
