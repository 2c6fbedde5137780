package worker

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// compileTimeout bounds the time from sending a task to its "started"
// frame: reading, hashing and compiling a module the worker has not seen.
// It is not part of Request.Timeout.
const compileTimeout = 5 * time.Minute

// Config configures a Pool.
type Config struct {
	// Command is the argv that starts one worker process, which must call
	// Serve on its stdin and stdout, e.g. {os.Executable(), "worker"}.
	// Required.
	Command []string
	// Env is the environment of worker processes; nil means the calling
	// process's environment. The pool adds CacheDirEnv. Tasks never see it:
	// a guest has no environment variables.
	Env []string
	// Slots is how many tasks may run at once, each in its own worker
	// process; 0 means 1. Further calls to Run wait for a free slot.
	Slots int
	// CacheDir is wazero's on-disk compilation cache directory, passed to
	// workers in CacheDirEnv; "" keeps each worker's cache in its memory.
	CacheDir string
	// Logger receives the pool's log, including every line a worker
	// process writes to its own stderr; nil discards it.
	Logger *slog.Logger
	// Priority is the priority workers run at (SetPriority changes it);
	// PriorityIdle, the default, is the OS's idle priority.
	Priority Priority
	// CPUShare (0..1] bounds the share of time each worker may compute
	// (SetCPUShare changes it); 0 means 1, no bound.
	CPUShare float64
}

// Pool runs tasks in worker processes: at most Config.Slots at once, each
// worker running one task at a time. Workers start lazily, are reused while
// healthy, and are killed and replaced when a task times out, the caller's
// context ends or the worker dies. All methods are safe for concurrent use.
type Pool struct {
	cfg       Config
	env       []string
	log       *slog.Logger
	slots     chan struct{} // a token per running Run
	spawner   *spawner
	done      chan struct{} // closed when Close begins
	closeDone chan struct{} // closed when Close has finished
	nextID    atomic.Uint64

	mu      sync.Mutex
	closed  bool
	idle    []*proc        // workers waiting for a task, most recently used last
	count   int            // workers alive or starting, idle or not
	running sync.WaitGroup // calls of Run in progress

	// Suspension (suspend.go): every worker process started and not yet
	// killed, whether the pool is suspended, whether the duty cycle of
	// SetCPUShare has its workers stopped (throttle.go), and a channel
	// closed and replaced whenever either changes.
	procs          map[*proc]struct{}
	suspended      bool
	resting        bool
	suspendChanged chan struct{}

	// The duty cycle (throttle.go): the share of time workers may
	// compute, a token that wakes the throttle goroutine, and a channel
	// closed when it has ended (after Close).
	cpuShare     float64
	throttleWake chan struct{}
	throttleDone chan struct{}

	// priority is what workers started now run at (SetPriority).
	priority Priority

	// onStarted, if set before the first Run, is called with the worker's
	// PID when a task's module starts to run. For tests.
	onStarted func(pid int)
}

// NewPool checks cfg and returns a pool. It starts no process yet; the
// goroutine of its duty cycle (SetCPUShare) runs until Close.
func NewPool(cfg Config) (*Pool, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("worker: config: empty Command")
	}
	if cfg.Slots < 0 {
		return nil, fmt.Errorf("worker: config: Slots %d is negative", cfg.Slots)
	}
	if cfg.Slots == 0 {
		cfg.Slots = 1
	}
	if err := cfg.Priority.Valid(); err != nil {
		return nil, fmt.Errorf("worker: config: %w", err)
	}
	if cfg.CPUShare == 0 {
		cfg.CPUShare = 1
	}
	if err := checkCPUShare(cfg.CPUShare); err != nil {
		return nil, fmt.Errorf("worker: config: %w", err)
	}
	cfg.Command = slices.Clone(cfg.Command)
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	env = append(slices.Clone(env), CacheDirEnv+"="+cfg.CacheDir)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pool{
		cfg:       cfg,
		env:       env,
		log:       log,
		slots:     make(chan struct{}, cfg.Slots),
		spawner:   newSpawner(),
		done:      make(chan struct{}),
		closeDone: make(chan struct{}),

		procs:          map[*proc]struct{}{},
		suspendChanged: make(chan struct{}),

		cpuShare:     cfg.CPUShare,
		throttleWake: make(chan struct{}, 1),
		throttleDone: make(chan struct{}),
		priority:     cfg.Priority,
	}
	go p.throttle()
	return p, nil
}

// Run runs one task and returns its result. Task failures (trap, timeout,
// out-of-memory, ...) are in Result.Failure with a nil error. The error is
// non-nil only when the task could not be run or its outcome is unknown:
// ErrInvalidRequest, ErrStart, ErrSetup, ErrClosed, ErrBadFrame (a worker
// broke the protocol) or ctx.Err(). Cancelling ctx kills the task's worker
// process at once. Run may be called by many goroutines; beyond
// Config.Slots they wait for a slot (or ctx, or Close). While the pool is
// suspended, Run waits for Resume before it starts its task (see Suspend).
func (p *Pool) Run(ctx context.Context, req Request) (Result, error) {
	body, timeout, err := newRunBody(req)
	if err != nil {
		return Result{}, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return Result{}, ErrClosed
	}
	p.running.Add(1)
	p.mu.Unlock()
	defer p.running.Done()

	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-p.done:
		return Result{}, ErrClosed
	}
	defer func() { <-p.slots }()
	if err := p.waitResumed(ctx); err != nil {
		return Result{}, err
	}

	id := p.nextID.Add(1)
	forceFresh := false
	for {
		pr, fresh, err := p.take(ctx, req.AvoidPID, strings.Join(req.GPUs, ","), forceFresh)
		if err != nil {
			return Result{}, err
		}
		res, retry, err := p.exchange(ctx, pr, id, body, timeout)
		if retry && !fresh {
			// A reused worker died before the task started, probably
			// while it sat idle: try once more on a fresh one.
			p.log.Warn("Idle worker died, retrying task on a fresh one", "pid", pr.pid)
			forceFresh = true
			continue
		}
		return res, err
	}
}

// newRunBody checks req and applies defaults.
func newRunBody(req Request) (*runBody, time.Duration, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	if req.ModulePath == "" {
		return nil, 0, invalid("empty ModulePath")
	}
	modulePath, err := filepath.Abs(req.ModulePath)
	if err != nil {
		return nil, 0, invalid("ModulePath: %v", err)
	}
	sha := strings.ToLower(req.ModuleSHA256)
	if !isLowerHex(sha, 32) {
		return nil, 0, invalid("ModuleSHA256 %q is not 64 hex digits", req.ModuleSHA256)
	}
	inputDir := req.InputDir
	if inputDir != "" {
		if inputDir, err = filepath.Abs(inputDir); err != nil {
			return nil, 0, invalid("InputDir: %v", err)
		}
	}
	memMiB := cmpOr(req.MemoryLimitMiB, DefaultMemoryLimitMiB)
	if memMiB < 1 || memMiB > MaxMemoryLimitMiB {
		return nil, 0, invalid("MemoryLimitMiB %d out of range 1..%d", req.MemoryLimitMiB, MaxMemoryLimitMiB)
	}
	timeout := cmpOr(req.Timeout, DefaultTimeout)
	if timeout < 0 {
		return nil, 0, invalid("negative Timeout %s", req.Timeout)
	}
	maxStdout := cmpOr(req.MaxStdoutBytes, DefaultMaxStdoutBytes)
	if maxStdout < 1 || maxStdout > MaxStdoutLimitBytes {
		return nil, 0, invalid("MaxStdoutBytes %d out of range 1..%d", req.MaxStdoutBytes, MaxStdoutLimitBytes)
	}
	maxStderr := cmpOr(req.MaxStderrBytes, DefaultMaxStderrBytes)
	if maxStderr < 1 || maxStderr > MaxStderrLimitBytes {
		return nil, 0, invalid("MaxStderrBytes %d out of range 1..%d", req.MaxStderrBytes, MaxStderrLimitBytes)
	}
	if err := checkGPUs(req.GPUs); err != nil {
		return nil, 0, invalid("GPUs: %v", err)
	}
	if req.GPUMemoryLimitMiB < 0 {
		return nil, 0, invalid("negative GPUMemoryLimitMiB %d", req.GPUMemoryLimitMiB)
	}
	if len(req.Stdin) > MaxStdinBytes {
		return nil, 0, invalid("Stdin of %d bytes exceeds maximum %d", len(req.Stdin), MaxStdinBytes)
	}
	return &runBody{
		ModulePath:       modulePath,
		ModuleSHA256:     sha,
		InputDir:         inputDir,
		Stdin:            req.Stdin,
		Seed:             hex.EncodeToString(req.Seed[:]),
		MemoryLimitPages: uint32(memMiB * pagesPerMiB),
		MaxStdoutBytes:   maxStdout,
		MaxStderrBytes:   maxStderr,

		GPUs:              slices.Clone(req.GPUs),
		GPUMemoryLimitMiB: req.GPUMemoryLimitMiB,
	}, timeout, nil
}

// cmpOr returns v, or def when v is zero.
func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// take returns an idle worker whose PID is not avoid and whose GPUs
// (CUDA_VISIBLE_DEVICES, comma-joined UUIDs; "" for none) are gpus, or
// starts a fresh one (always, if forceFresh). To keep at most Config.Slots workers it first
// kills an idle one when the pool is full; the caller holds a slot, so a
// full pool always has one idle. fresh reports whether the worker is new.
func (p *Pool) take(ctx context.Context, avoid int, gpus string, forceFresh bool) (pr *proc, fresh bool, err error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, false, ErrClosed
	}
	if !forceFresh {
		for i := len(p.idle) - 1; i >= 0; i-- {
			if pr := p.idle[i]; pr.pid != avoid && pr.gpus == gpus && pr.priority == p.priority {
				p.idle = slices.Delete(p.idle, i, i+1)
				p.wakeThrottle() // a worker with a task: the duty cycle may start
				p.mu.Unlock()
				return pr, false, nil
			}
		}
	}
	var evict *proc
	if p.count >= p.cfg.Slots && len(p.idle) > 0 {
		evict = p.idle[0]
		p.idle = slices.Delete(p.idle, 0, 1)
		p.count--
	}
	p.count++
	p.mu.Unlock()

	if evict != nil {
		p.untrack(evict)
		p.log.Debug("Worker stopped to make room", "pid", evict.pid, "state", evict.reap())
	}
	pr, err = p.startProc(ctx, gpus)
	if err != nil {
		p.mu.Lock()
		p.count--
		p.mu.Unlock()
		return nil, false, err
	}
	return pr, true, nil
}

// release returns a healthy worker to the idle list, or reaps it if the
// pool has closed meanwhile or runs its workers at another priority now
// (SetPriority).
func (p *Pool) release(pr *proc) {
	p.mu.Lock()
	if !p.closed && pr.priority == p.priority {
		p.idle = append(p.idle, pr)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.discard(pr)
}

// discard kills and reaps a worker and forgets it; it returns how the
// process ended.
func (p *Pool) discard(pr *proc) string {
	p.untrack(pr)
	state := pr.reap()
	p.mu.Lock()
	p.count--
	p.mu.Unlock()
	return state
}

// exchange sends one task to pr and waits for its result, the task's
// deadline, ctx or Close. It disposes of pr: back to the idle list after a
// result, killed and reaped otherwise. retry reports that the worker
// failed before the task started (so the task may be tried elsewhere).
func (p *Pool) exchange(ctx context.Context, pr *proc, id uint64, body *runBody, timeout time.Duration) (res Result, retry bool, err error) {
	type event struct {
		started bool
		result  *resultBody
		err     error
	}
	// The goroutine sends at most two events (started, then an end), so it
	// never blocks; it ends when the worker answers or its pipes break.
	events := make(chan event, 2)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		if err := writeFrame(pr.stdin, &frame{Version: protocolVersion, Type: frameRun, ID: id, Run: body}); err != nil {
			events <- event{err: err}
			return
		}
		started := false
		for {
			f, err := readFrame(pr.stdout)
			switch {
			case err != nil:
				events <- event{err: err}
				return
			case f.ID != id:
				events <- event{err: fmt.Errorf("%w: %s frame for task %d, want %d", ErrBadFrame, f.Type, f.ID, id)}
				return
			case f.Type == frameStarted && !started:
				started = true
				events <- event{started: true}
			case f.Type == frameResult:
				events <- event{result: f.Result}
				return
			default:
				events <- event{err: fmt.Errorf("%w: unexpected %s frame", ErrBadFrame, f.Type)}
				return
			}
		}
	}()

	res = Result{PID: pr.pid}
	stop := func() string {
		pr.kill()
		<-finished
		return p.discard(pr)
	}
	started := false
	// The deadline does not run while the pool is suspended (Suspend) or
	// its workers rest in the duty cycle (SetCPUShare).
	stopped, stopChanged := p.stoppage()
	deadline := newPauseTimer(compileTimeout, stopped)
	defer deadline.stop()
	for {
		select {
		case <-stopChanged:
			stopped, stopChanged = p.stoppage()
			deadline.setPaused(stopped)
		case ev := <-events:
			switch {
			case ev.started:
				started = true
				deadline.reset(timeout)
				if p.onStarted != nil {
					p.onStarted(pr.pid)
				}
			case ev.result != nil:
				<-finished
				p.release(pr)
				if ev.result.Error != "" {
					return res, false, fmt.Errorf("%w: worker %d: %s", ErrSetup, pr.pid, ev.result.Error)
				}
				res.Stdout, res.Stderr, res.Failure, res.GPU, res.Work = ev.result.Stdout, ev.result.Stderr, ev.result.Failure, ev.result.GPU, ev.result.Work
				if g := res.GPU; g != nil {
					p.log.Debug("GPU task", "pid", pr.pid, "driverLoadMS", g.DriverLoadMS, "contextCreateMS", g.ContextCreateMS,
						"moduleLoadMS", g.ModuleLoadMS, "modules", g.Modules, "launches", g.Launches, "contextDestroyMS", g.ContextDestroyMS)
				}
				return res, false, nil
			default:
				state := stop()
				if errors.Is(ev.err, ErrBadFrame) {
					return res, false, fmt.Errorf("worker %d: %w", pr.pid, ev.err)
				}
				res.Failure = &Failure{Kind: FailureWorkerDied, Message: fmt.Sprintf("worker process %d ended (%s): %v", pr.pid, state, ev.err)}
				return res, !started, nil
			}
		case <-deadline.C():
			state := stop()
			p.log.Debug("Worker killed at task deadline", "pid", pr.pid, "state", state)
			if !started {
				res.Failure = &Failure{Kind: FailureTimeout, Message: fmt.Sprintf("module not ready to run within %s", compileTimeout)}
			} else {
				res.Failure = &Failure{Kind: FailureTimeout, Message: fmt.Sprintf("task ran longer than its limit of %s", timeout)}
			}
			return res, false, nil
		case <-ctx.Done():
			stop()
			return res, false, ctx.Err()
		case <-p.done:
			stop()
			return res, false, ErrClosed
		}
	}
}

// Close kills and reaps every worker process, waits for calls of Run in
// progress to return (with ErrClosed) and releases the pool's goroutines.
// Later calls of Run return ErrClosed. Close may be called more than once
// and concurrently; every call returns when the pool is fully closed.
// It always returns nil.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.closeDone
		return nil
	}
	p.closed = true
	close(p.done)
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()

	<-p.throttleDone
	for _, pr := range idle {
		p.discard(pr)
	}
	p.running.Wait()
	p.spawner.stop()
	close(p.closeDone)
	return nil
}
