//go:build linux

package agent_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/worker"
)

// startXvfbDisplay starts Xvfb on a display it picks (-displayfd) and
// returns it; it skips without Xvfb (Debian package xvfb).
func startXvfbDisplay(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("Xvfb")
	if err != nil {
		t.Skip("Xvfb not installed (apt-get install xvfb): the full-screen game sign not tested")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(bin, "-displayfd", "3", "-nolisten", "tcp", "-noreset", "-screen", "0", "640x480x24")
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		w.Close()
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		got <- strings.TrimSpace(line)
	}()
	select {
	case n := <-got:
		if n == "" {
			t.Fatal("Xvfb exited without a display")
		}
		return ":" + n
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("Xvfb did not start in 2 minutes")
	}
	return ""
}

// buildXGame builds idle/testdata/xgame (a minimal window manager and a
// game window) and returns its path.
func buildXGame(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "xgame")
	if b, err := exec.Command("go", "build", "-o", bin, "../idle/testdata/xgame").CombinedOutput(); err != nil {
		t.Fatalf("build xgame: %v\n%s", err, b)
	}
	return bin
}

// xgame starts the xgame at bin with args on display until it prints
// "ready"; closing the writer returned ends a game.
func xgame(t *testing.T, bin, display string, args ...string) io.WriteCloser {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+display)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "ready" {
		t.Fatalf("xgame %v: %q instead of ready", args, line)
	}
	return in
}

// awayOwner is an input source whose owner has been away an hour: the
// test's decisions then turn on the game alone.
type awayOwner struct{}

func (awayOwner) IdleTime(context.Context) (time.Duration, string, error) {
	return time.Hour, "test: owner away", nil
}

// TestFullScreenGamePausesAgent: an agent computing a real task in a real
// worker, with the platform's game signs and the real policy, on an X
// server with a window manager: a game window asking for full screen
// stops the worker (the time it took is logged: the target is 1 s), with
// the reason in words, and hands the task back (a game lasts); once the
// game closes, the task is leased again and computed after the idle time.
// No program list is set.
func TestFullScreenGamePausesAgent(t *testing.T) {
	display := startXvfbDisplay(t)
	// Built before HOME moves, so that the go tool uses its usual cache.
	bin := buildXGame(t)
	j := spinJob(t, time.Hour)
	t.Setenv("DISPLAY", display)
	t.Setenv("HOME", t.TempDir()) // no Steam
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir()) // no session bus: no GameMode
	xgame(t, bin, display, "wm")

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wp, err := worker.NewPool(worker.Config{
		Command: []string{exe}, Env: append(os.Environ(), workerEnv+"=1", worker.PriorityEnv+"=normal"),
		Slots: 1, CacheDir: filepath.Join(t.TempDir(), "wazero"), Logger: quietLogger(t).With("side", "worker"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wp.Close() })
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	if err := newSubmitter(t, co.url, nil).c.Submit(context.Background(), j); err != nil {
		t.Fatal(err)
	}

	settings := idle.Defaults()
	settings.IdleFor = 3 * time.Second
	settings.MaxOtherCPUShare, settings.MaxTemperatureC, settings.PauseOnBattery = 1, 0, false
	sources := idle.DefaultSources(idle.SourceOptions{})
	sampler := idle.NewSampler(idle.SamplerConfig{
		Sources:   idle.Sources{InputIdle: []idle.InputIdleSource{awayOwner{}}, Games: sources.Games},
		GameSigns: settings.Signs(),
	})
	t.Cleanup(func() { _ = sampler.Close() })
	policy := idle.NewPolicy(settings)
	dev := newDevice(t, nil)
	a, err := agent.New(agent.Config{
		PoolURL: co.url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 1,
		Executor: wp, Store: dev.local, HTTP: httpClient(t),
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Signals: sampler, Decide: policy.Decide, // the default sample periods, as a donor has them
		Logger: quietLogger(t).With("side", "agent"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	var pid int
	eventually(t, 3*time.Minute, "a worker process", func() bool {
		if pids := wp.PIDs(); len(pids) == 1 {
			pid = pids[0]
		}
		return pid != 0
	})
	_, t0 := workerCPU(t, pid)
	eventually(t, 3*time.Minute, "the task computing", func() bool {
		_, ticks := workerCPU(t, pid)
		return ticks > t0+20
	})

	// The game goes full screen: the worker stops, and since a game
	// holds the machine for long, the task is handed back at once (its
	// worker killed).
	game := xgame(t, bin, display, "-title", "Test Game", "game")
	asked := time.Now()
	eventually(t, 2*time.Minute, "the worker stopped (state T) or gone", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		return len(f) > 0 && (f[0] == "T" || f[0] == "Z")
	})
	t.Logf("worker stopped %s after the game window asked for full screen (target: within 1 s)", time.Since(asked))
	if got, want := a.Status().Decision.Reason, `paused: a full-screen game ("Test Game") is running`; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	eventually(t, 2*time.Minute, "the task handed back", func() bool { return len(a.Running()) == 0 })
	if hb := a.Status().HandedBack; len(hb) != 1 || hb[0].Why != "a game started" {
		t.Errorf("handed back %+v, want the task, for a game", hb)
	}

	// The game closes: computing waits the idle time, then resumes.
	game.Close()
	closed := time.Now()
	eventually(t, 2*time.Minute, "the wait after the game", func() bool {
		return strings.HasPrefix(a.Status().Decision.Reason, "waiting: a game ran ")
	})
	eventually(t, 2*time.Minute, "the task leased again", func() bool { return len(a.Running()) == 1 })
	eventually(t, 2*time.Minute, "a worker computing again", func() bool {
		pids := wp.PIDs()
		if len(pids) != 1 {
			return false
		}
		if pids[0] != pid {
			pid = pids[0]
			_, t0 = workerCPU(t, pid)
		}
		state, ticks := workerCPU(t, pid)
		return state != "T" && ticks > t0
	})
	t.Logf("worker computing again %s after the game closed (idle time %s, rest sample period %s)",
		time.Since(closed), settings.IdleFor, agent.DefaultRestSamplePeriod)
	if n := len(a.Running()); n != 1 {
		t.Errorf("%d tasks running after the game, want the 1 leased again", n)
	}
}
