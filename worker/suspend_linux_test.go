//go:build linux

package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
)

// cpuTicks returns a process's state letter and its user plus system CPU
// time in clock ticks (proc(5) fields 3, 14 and 15).
func cpuTicks(pid int) (state string, ticks int64, err error) {
	f, err := procStat(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, err
	}
	if len(f) < 13 {
		return "", 0, fmt.Errorf("short stat of %d", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return "", 0, err
	}
	return f[0], ut + st, nil
}

// waitCPU polls pid every 20 ms for at most limit until cond holds for
// its state and CPU ticks; it returns how long that took.
func waitCPU(t *testing.T, pid int, limit time.Duration, what string, cond func(state string, ticks int64) bool) time.Duration {
	t.Helper()
	start := time.Now()
	for i := 0; ; i++ {
		state, ticks, err := cpuTicks(pid)
		if err != nil {
			t.Fatalf("worker %d: %v", pid, err)
		}
		if cond(state, ticks) {
			return time.Since(start)
		}
		if time.Since(start) > limit || i > int(limit/(20*time.Millisecond))+10 {
			t.Fatalf("worker %d: not %s within %s (state %s, %d ticks)", pid, what, limit, state, ticks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startLoop runs an endless task on p in the background and returns the
// worker's PID once it runs, and a function that cancels the task and
// returns Run's result.
func startLoop(t *testing.T, p *Pool, timeout time.Duration) (pid int, stop func() (Result, error)) {
	t.Helper()
	pids := make(chan int, 1)
	p.onStarted = func(pid int) { pids <- pid }
	ctx, cancel := context.WithCancel(context.Background())
	type ran struct {
		res Result
		err error
	}
	done := make(chan ran, 1)
	req := task("loop", 0)
	req.Timeout = timeout
	go func() {
		res, err := p.Run(ctx, req)
		done <- ran{res, err}
	}()
	select {
	case pid = <-pids:
	case r := <-done:
		cancel()
		t.Fatalf("loop task ended before it started: %+v, %v", r.res, r.err)
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("loop task did not start")
	}
	var once sync.Once
	var r ran
	stop = func() (Result, error) {
		once.Do(func() { cancel(); r = <-done })
		return r.res, r.err
	}
	t.Cleanup(func() { stop() })
	return pid, stop
}

// TestSuspendStopsCPU: Suspend stops a busy worker within a second (its
// CPU time stops growing), Resume lets it go on, and both are idempotent.
func TestSuspendStopsCPU(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	pid, stop := startLoop(t, p, time.Hour)
	_, before, _ := cpuTicks(pid)
	waitCPU(t, pid, 10*time.Second, "busy", func(_ string, ticks int64) bool { return ticks > before+5 })

	start := time.Now()
	for range 2 {
		if err := p.Suspend(); err != nil {
			t.Fatalf("Suspend: %v", err)
		}
	}
	waitCPU(t, pid, time.Second, "stopped", func(state string, _ int64) bool { return state == "T" })
	t.Logf("worker stopped (state T) %s after Suspend", time.Since(start))
	_, t0, _ := cpuTicks(pid)
	time.Sleep(300 * time.Millisecond)
	_, t1, _ := cpuTicks(pid)
	if t1 != t0 {
		t.Errorf("suspended worker used %d ticks of CPU in 300 ms", t1-t0)
	}
	if !p.Suspended() || len(p.PIDs()) != 1 || p.PIDs()[0] != pid {
		t.Errorf("Suspended %v, PIDs %v; want true, [%d]", p.Suspended(), p.PIDs(), pid)
	}

	for range 2 {
		if err := p.Resume(); err != nil {
			t.Fatalf("Resume: %v", err)
		}
	}
	waitCPU(t, pid, 10*time.Second, "running again", func(state string, ticks int64) bool { return state != "T" && ticks > t1+5 })

	// Cancelling a suspended task still kills its worker at once.
	if err := p.Suspend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Run of a cancelled suspended task: %v", err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
}

// TestSuspendPausesTimeout: time spent suspended does not count towards a
// task's Timeout.
func TestSuspendPausesTimeout(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	const timeout, pause = time.Second, 1500 * time.Millisecond
	pids := make(chan int, 1)
	p.onStarted = func(pid int) { pids <- pid }
	type ran struct {
		res Result
		err error
	}
	done := make(chan ran, 1)
	req := task("loop", 0)
	req.Timeout = timeout
	go func() {
		res, err := p.Run(context.Background(), req)
		done <- ran{res, err}
	}()
	select {
	case <-pids:
	case <-time.After(2 * time.Minute):
		t.Fatal("loop task did not start")
	}
	started := time.Now()
	if err := p.Suspend(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	var r ran
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("loop task did not time out")
	}
	elapsed := time.Since(started)
	if r.err != nil || r.res.Failure == nil || r.res.Failure.Kind != FailureTimeout {
		t.Fatalf("Run = %+v, %v; want a timeout failure", r.res, r.err)
	}
	if elapsed < timeout+pause {
		t.Errorf("task timed out %s after it started, less than its limit %s plus %s suspended", elapsed, timeout, pause)
	}
	t.Logf("timed out %s after start (limit %s, suspended %s)", elapsed, timeout, pause)
}

// TestRunWaitsWhileSuspended: a task submitted while the pool is
// suspended starts only after Resume; cancelling it while it waits works.
func TestRunWaitsWhileSuspended(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 2)
	if err := p.Suspend(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		res, err := p.Run(context.Background(), task("busy", 1000))
		if err == nil && res.Failure != nil {
			err = fmt.Errorf("task failed: %v", res.Failure)
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Run returned while suspended: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if n := len(p.PIDs()); n != 0 {
		t.Errorf("%d workers started while suspended", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := p.Run(ctx, task("busy", 10)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run with a short ctx while suspended: %v", err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Run did not finish after Resume")
	}
}

// TestSuspendConcurrent runs Suspend and Resume concurrently with tasks
// (for the race detector), then checks every task still succeeds.
func TestSuspendConcurrent(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil && i < 1000; i++ {
			_ = p.Suspend()
			time.Sleep(2 * time.Millisecond)
			_ = p.Resume()
			time.Sleep(5 * time.Millisecond)
		}
	})
	var runs sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		runs.Go(func() {
			res, err := p.Run(context.Background(), task("busy", 100000*(i+1)))
			if err == nil && res.Failure != nil {
				err = fmt.Errorf("task %d: %v", i, res.Failure)
			}
			errs <- err
		})
	}
	runs.Wait()
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Suspend(); !errors.Is(err, ErrClosed) {
		t.Errorf("Suspend after Close: %v", err)
	}
}

// TestMeterSameOnSlowDevice: two honest devices of different speeds count
// the same work for the same task. One worker runs the task straight; the
// other is suspended part way through (as when its owner comes back) and
// resumed: the outputs and the counts are the same.
func TestMeterSameOnSlowDevice(t *testing.T) {
	needHostile(t)
	checkClean(t) // after both pools are closed
	var pools [2]*Pool
	for i := range pools {
		p, err := NewPool(childConfig(t, 1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		pools[i] = p
	}
	fast, slow := pools[0], pools[1]
	req := task("busy", 500_000_000) // about 10^10 instructions
	want := mustSucceed(t, fast, req)

	pids := make(chan int, 1)
	slow.onStarted = func(pid int) { pids <- pid }
	type ran struct {
		res Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := slow.Run(context.Background(), req)
		done <- ran{res, err}
	}()
	var pid int
	select {
	case pid = <-pids:
	case <-time.After(2 * time.Minute):
		t.Fatal("the task did not start")
	}
	_, before, _ := cpuTicks(pid)
	waitCPU(t, pid, time.Minute, "computing", func(_ string, ticks int64) bool { return ticks > before+2 })
	if err := slow.Suspend(); err != nil {
		t.Fatal(err)
	}
	waitCPU(t, pid, 10*time.Second, "stopped", func(state string, _ int64) bool { return state == "T" })
	select {
	case r := <-done:
		t.Fatalf("the task ended before its worker was suspended (%+v, %v): give it more work", r.res.Failure, r.err)
	default:
	}
	time.Sleep(200 * time.Millisecond) // stays slow a while; what is measured does not depend on it
	if err := slow.Resume(); err != nil {
		t.Fatal(err)
	}
	var r ran
	select {
	case r = <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("the resumed task did not finish")
	}
	if r.err != nil || r.res.Failure != nil {
		t.Fatalf("resumed task: %v, %v", r.res.Failure, r.err)
	}
	if !bytes.Equal(r.res.Stdout, want.Stdout) || r.res.Work != want.Work || want.Work == 0 {
		t.Errorf("suspended and resumed: stdout %q, %d counted; straight: stdout %q, %d counted", r.res.Stdout, r.res.Work, want.Stdout, want.Work)
	}
	t.Logf("both counted %d", want.Work)
}
