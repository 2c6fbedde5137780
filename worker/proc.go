package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// startTimeout bounds how long a fresh worker may take to say hello.
const startTimeout = time.Minute

// proc is one worker process, owned by at most one Run at a time (or by the
// pool's idle list).
type proc struct {
	cmd        *exec.Cmd
	pid        int
	stdin      io.WriteCloser
	stdout     *bufio.Reader
	stderrDone chan struct{} // closed when the stderr logger has finished
	reaped     bool
	gpus       string // its CUDA_VISIBLE_DEVICES, comma-joined UUIDs; "" for none
	priority   Priority
}

// kill sends SIGKILL to the process (and its group where there is one).
// Safe to call more than once and concurrently with reads and writes.
func (p *proc) kill() { killProcess(p.cmd) }

// reap kills the process, waits for it and its stderr logger, and returns
// how it ended ("signal: killed", "exit status 1"). Call it once, after
// every reader and writer of the process's pipes has returned.
func (p *proc) reap() string {
	if p.reaped {
		return "already reaped"
	}
	p.reaped = true
	p.kill()
	_ = p.stdin.Close()
	<-p.stderrDone
	err := p.cmd.Wait()
	if p.cmd.ProcessState != nil {
		return p.cmd.ProcessState.String()
	}
	return fmt.Sprint(err)
}

// spawner starts processes from one goroutine locked to its OS thread for
// the pool's lifetime. On Linux, Pdeathsig is tied to the thread that
// forked the child: were that thread to exit (the Go runtime ends threads
// whose locked goroutine returns), the kernel would kill the worker.
type spawner struct {
	reqs chan func()
	done chan struct{}
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan func()), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *spawner) loop() {
	defer close(s.done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for f := range s.reqs {
		f()
	}
}

// start starts cmd on the spawner's thread.
func (s *spawner) start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	s.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}

// stop ends the spawner; no start may follow or run concurrently.
func (s *spawner) stop() {
	close(s.reqs)
	<-s.done
}

// startProc starts a worker process and waits for its hello. It gives up
// when ctx is done or the pool closes (closing is p.done), killing and
// reaping the process. A worker for GPU tasks (gpus, comma-joined UUIDs,
// not "") has CUDA_VISIBLE_DEVICES set to them; others have the pool's
// environment as it is. It runs at the pool's priority now: PriorityLow
// adds PriorityEnv=low to its environment.
func (p *Pool) startProc(ctx context.Context, gpus string) (*proc, error) {
	p.mu.Lock()
	prio := p.priority
	p.mu.Unlock()
	cmd := exec.Command(p.cfg.Command[0], p.cfg.Command[1:]...)
	cmd.Env = p.env
	if gpus != "" {
		cmd.Env = append(GPUEnv(p.env, strings.Split(gpus, ",")), cudaCacheEnv(p.cfg.CacheDir)...)
	}
	if prio != PriorityIdle {
		cmd.Env = append(slices.Clip(cmd.Env), PriorityEnv+"="+string(prio))
	}
	cmd.SysProcAttr = sysProcAttr(prio)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		_ = stdin.Close()
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		_ = stdin.Close()
		_ = stdout.Close()
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	if err := p.spawner.start(cmd); err != nil {
		_ = stdin.Close()
		_ = stdout.Close()
		_ = stderr.Close()
		return nil, fmt.Errorf("%w: %s: %w", ErrStart, p.cfg.Command[0], err)
	}
	pr := &proc{
		cmd:        cmd,
		pid:        cmd.Process.Pid,
		stdin:      stdin,
		stdout:     bufio.NewReaderSize(stdout, 64<<10),
		stderrDone: make(chan struct{}),
		gpus:       gpus,
		priority:   prio,
	}
	go logStderr(p.log.With("pid", pr.pid), stderr, pr.stderrDone)
	p.track(pr)
	// On Windows the worker joins a kill-on-close Job Object; a worker that
	// cannot is still usable (only a crash of this process would leave it
	// behind), so this is a warning, not a failed start.
	if err := adoptProcess(cmd); err != nil {
		p.log.Warn("Worker may outlive this process", "pid", pr.pid, "err", err)
	}

	var helloErr error
	helloDone := make(chan struct{})
	go func() {
		defer close(helloDone)
		f, err := readFrame(pr.stdout)
		switch {
		case err != nil:
			helloErr = err
		case f.Type != frameHello:
			helloErr = fmt.Errorf("%w: got %s frame, want hello", ErrBadFrame, f.Type)
		case f.PID != pr.pid:
			helloErr = fmt.Errorf("%w: hello from pid %d, started %d", ErrBadFrame, f.PID, pr.pid)
		}
	}()
	// The limit does not run while the pool is suspended (Suspend) or
	// its workers rest in the duty cycle (SetCPUShare).
	stopped, stopChanged := p.stoppage()
	timer := newPauseTimer(startTimeout, stopped)
	defer timer.stop()
	for waiting := true; waiting; {
		waiting = false
		select {
		case <-helloDone:
			err = helloErr
		case <-timer.C():
			err = fmt.Errorf("no hello within %s", startTimeout)
		case <-ctx.Done():
			err = ctx.Err()
		case <-p.done:
			err = ErrClosed
		case <-stopChanged:
			stopped, stopChanged = p.stoppage()
			timer.setPaused(stopped)
			waiting = true
		}
	}
	if err != nil {
		p.untrack(pr)
		pr.kill()
		<-helloDone
		state := pr.reap()
		if errors.Is(err, ErrClosed) || (ctx.Err() != nil && errors.Is(err, ctx.Err())) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: worker %d (%s): %w", ErrStart, pr.pid, state, err)
	}
	p.log.Debug("Worker started", "pid", pr.pid)
	return pr, nil
}

// logStderr copies a worker's own stderr into the pool's log, one record a
// line (long lines are cut at 4 KiB), and closes done at end of input.
func logStderr(log *slog.Logger, r io.Reader, done chan<- struct{}) {
	defer close(done)
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			log.Info("Worker stderr", "line", string(trimNewline(line)))
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return
		}
	}
}

func trimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		return b[:n-1]
	}
	return b
}
