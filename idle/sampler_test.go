package idle

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testTimeout is the probe timeout of the Sampler tests.
const testTimeout = 200 * time.Millisecond

// fakeIdle is an InputIdleSource that answers d or err, or hangs until
// release is closed, ignoring its context like a stuck system call.
type fakeIdle struct {
	d       time.Duration
	src     string
	err     error
	release chan struct{} // non-nil: hang until closed
	calls   atomic.Int32
}

func (f *fakeIdle) IdleTime(ctx context.Context) (time.Duration, string, error) {
	f.calls.Add(1)
	if f.release != nil {
		<-f.release
	}
	return f.d, f.src, f.err
}

// slowIdle blocks until its context ends, like a well-behaved source whose
// server does not answer.
type slowIdle struct{}

func (slowIdle) IdleTime(ctx context.Context) (time.Duration, string, error) {
	<-ctx.Done()
	return 0, "", ctx.Err()
}

// fakeLoad returns its counters in turn, then the last one forever.
type fakeLoad struct {
	mu     sync.Mutex
	seq    []CPUCounters
	gotOwn [][]int
}

func (f *fakeLoad) CPUCounters(_ context.Context, own []int) (CPUCounters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gotOwn = append(f.gotOwn, own)
	c := f.seq[0]
	if len(f.seq) > 1 {
		f.seq = f.seq[1:]
	}
	return c, nil
}

type fakePower struct {
	p   Power
	err error
}

func (f fakePower) Power(context.Context) (Power, error) { return f.p, f.err }

type fakeThermal struct{ c float64 }

func (f fakeThermal) MaxTemperatureC(context.Context) (float64, string, error) {
	return f.c, "coretemp_package_id_0", nil
}

type fakeProcs struct {
	names []string
	calls atomic.Int32
}

func (f *fakeProcs) ProgramNames(context.Context) ([]string, error) {
	f.calls.Add(1)
	return f.names, nil
}

type fakeGPUs struct {
	gpus []GPU
	err  error
}

func (f fakeGPUs) GPUs(context.Context) ([]GPU, error) { return f.gpus, f.err }

func newTestSampler(t *testing.T, cfg SamplerConfig) *Sampler {
	t.Helper()
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = testTimeout
	}
	s := NewSampler(cfg)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestSampleAllSources(t *testing.T) {
	procs := &fakeProcs{names: []string{"/usr/bin/bash", "Game.exe", "steam"}}
	steam := &fakeGame{}
	steam.what.Store("a Steam game (app 10)")
	s := newTestSampler(t, SamplerConfig{
		Sources: Sources{
			InputIdle: []InputIdleSource{&fakeIdle{d: 5 * time.Minute, src: "logind"}, &fakeIdle{d: 3 * time.Minute, src: "x11-screensaver"}},
			Load: &fakeLoad{seq: []CPUCounters{
				{Total: 0, Busy: 0, Own: 0},
				{Total: 2 * time.Second, Busy: time.Second, Own: 600 * time.Millisecond},
			}},
			Power:     fakePower{p: Power{OnBattery: true, HasBattery: true, Percent: 43}},
			Thermal:   fakeThermal{c: 71},
			Processes: procs,
			GPU:       fakeGPUs{gpus: []GPU{{Index: 0, UUID: "GPU-1"}}},
			Games:     map[GameSign]GameSource{GameSteam: steam},
		},
		Programs:  []string{"game.exe", "notepad.exe"},
		GameSigns: []GameSign{GameSteam},
		OwnPIDs:   func() []int { return []int{1234} },
	})
	got := s.Sample(context.Background())
	got.At = time.Time{}
	got.OtherCPUShare.Source = ""
	want := Signals{
		InputIdle:       Reading[time.Duration]{Value: 3 * time.Minute, Known: true, Source: "x11-screensaver"},
		OtherCPUShare:   Reading[float64]{Value: 0.2, Known: true},
		Power:           Reading[Power]{Value: Power{OnBattery: true, HasBattery: true, Percent: 43}, Known: true},
		MaxTemperatureC: Reading[float64]{Value: 71, Known: true, Source: "coretemp_package_id_0"},
		Running:         Reading[[]string]{Value: []string{"game.exe"}, Known: true, Source: "process list"},
		Games:           Reading[[]Game]{Value: []Game{{Sign: GameSteam, What: "a Steam game (app 10)"}}, Known: true},
		GPUs:            Reading[[]GPU]{Value: []GPU{{Index: 0, UUID: "GPU-1"}}, Known: true, Source: "nvml"},
		CPUs:            got.CPUs,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Sample (-want +got):\n%s", diff)
	}
}

// TestSampleHungProbe: a probe that never answers costs each Sample its
// timeout, no more (on a fake clock: a busy machine's delays are no
// verdict), and hides no other reading.
func TestSampleHungProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := &fakeIdle{release: make(chan struct{})}
		s := NewSampler(SamplerConfig{ProbeTimeout: testTimeout, Sources: Sources{
			InputIdle: []InputIdleSource{hung},
			Power:     fakePower{p: Power{}},
		}})
		for i := range 3 {
			start := time.Now()
			sig := s.Sample(context.Background())
			if d := time.Since(start); d > testTimeout {
				t.Errorf("Sample %d took %v, want at most the probe's timeout %v", i, d, testTimeout)
			}
			if sig.InputIdle.Known || !strings.Contains(sig.InputIdle.Err, ErrProbeTimeout.Error()) {
				t.Errorf("Sample %d: InputIdle = %+v, want unknown with %q", i, sig.InputIdle, ErrProbeTimeout)
			}
			if i > 0 && !strings.Contains(sig.InputIdle.Err, "still running since") {
				t.Errorf("Sample %d: InputIdle.Err = %q, want it still running", i, sig.InputIdle.Err)
			}
			if !sig.Power.Known {
				t.Errorf("Sample %d: Power = %+v; a hung idle probe must not hide it", i, sig.Power)
			}
		}
		if n := hung.calls.Load(); n != 1 {
			t.Errorf("hung source called %d times, want 1: a still-running probe is not started again", n)
		}
		close(hung.release) // before Close, so that Close finds it ended
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

func TestSampleHungProbeRecovers(t *testing.T) {
	src := &fakeIdle{d: time.Minute, src: "x", release: make(chan struct{})}
	s := newTestSampler(t, SamplerConfig{Sources: Sources{InputIdle: []InputIdleSource{src}}})
	if sig := s.Sample(context.Background()); sig.InputIdle.Known {
		t.Fatalf("InputIdle = %+v, want unknown while hung", sig.InputIdle)
	}
	close(src.release)
	// The old run ends on its own; a later Sample starts a new one.
	deadline := time.Now().Add(5 * time.Second)
	for {
		sig := s.Sample(context.Background())
		if sig.InputIdle.Known {
			if sig.InputIdle.Value != time.Minute {
				t.Errorf("InputIdle = %v, want 1m", sig.InputIdle.Value)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("InputIdle still unknown after release: %+v", sig.InputIdle)
		}
	}
}

// hangFirst is an InputIdleSource whose first call hangs until release is
// closed, ignoring its context (a stuck X server or D-Bus call); later
// calls answer d.
type hangFirst struct {
	d       time.Duration
	release chan struct{}
	calls   atomic.Int32
}

func (h *hangFirst) IdleTime(context.Context) (time.Duration, string, error) {
	if h.calls.Add(1) == 1 {
		<-h.release
	}
	return h.d, "x", nil
}

// TestSampleHungProbeRetried: a source whose call hung and never returns
// is not given up on for good: once the run has lasted its give-up time
// it is left to finish on its own and the source is asked again, at
// growing intervals, and the reading is known again as soon as it answers.
func TestSampleHungProbeRetried(t *testing.T) {
	src := &hangFirst{d: time.Minute, release: make(chan struct{})}
	s := newTestSampler(t, SamplerConfig{Sources: Sources{InputIdle: []InputIdleSource{src}}})
	defer close(src.release) // before the Sampler's Close: the hung call ends
	var clock atomic.Int64
	start := time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return start.Add(time.Duration(clock.Load())) }

	for i := range 2 {
		if sig := s.Sample(context.Background()); sig.InputIdle.Known {
			t.Fatalf("Sample %d: InputIdle = %+v, want unknown while hung", i, sig.InputIdle)
		}
	}
	clock.Add(int64(giveUpFirst - time.Second))
	if sig := s.Sample(context.Background()); sig.InputIdle.Known || src.calls.Load() != 1 {
		t.Fatalf("before the give-up time: InputIdle = %+v after %d calls, want unknown after 1", sig.InputIdle, src.calls.Load())
	}
	clock.Add(int64(time.Second))
	sig := s.Sample(context.Background())
	if !sig.InputIdle.Known || sig.InputIdle.Value != time.Minute || src.calls.Load() != 2 {
		t.Fatalf("after the give-up time: InputIdle = %+v after %d calls, want 1m from a second call", sig.InputIdle, src.calls.Load())
	}
}

func TestSampleSlowProbeEndsAtClose(t *testing.T) {
	s := NewSampler(SamplerConfig{ProbeTimeout: time.Hour, Sources: Sources{InputIdle: []InputIdleSource{slowIdle{}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	sig := s.Sample(ctx)
	if sig.InputIdle.Known {
		t.Errorf("InputIdle = %+v, want unknown", sig.InputIdle)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	sig = s.Sample(context.Background())
	if sig.InputIdle.Known || !strings.Contains(sig.InputIdle.Err, ErrSamplerClosed.Error()) {
		t.Errorf("after Close: InputIdle = %+v, want %q", sig.InputIdle, ErrSamplerClosed)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestSampleCancelled: a Sample whose context is already cancelled
// returns at once instead of waiting out its probe's timeout (on a fake
// clock, so that a busy machine's delays are no verdict).
func TestSampleCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSampler(SamplerConfig{ProbeTimeout: 10 * time.Second, Sources: Sources{InputIdle: []InputIdleSource{slowIdle{}}}})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start := time.Now()
		sig := s.Sample(ctx)
		if d := time.Since(start); d != 0 {
			t.Errorf("Sample with a cancelled context took %v, want no time", d)
		}
		if sig.InputIdle.Known || !strings.Contains(sig.InputIdle.Err, "sampling stopped") {
			t.Errorf("InputIdle = %+v, want unknown: sampling stopped", sig.InputIdle)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

func TestCombineIdle(t *testing.T) {
	failing := &fakeIdle{err: errors.New("logind: no system bus")}
	tests := []struct {
		name    string
		sources []InputIdleSource
		want    Reading[time.Duration]
	}{
		{
			name:    "one fails, one works",
			sources: []InputIdleSource{failing, &fakeIdle{d: 10 * time.Minute, src: "/dev/pts/0"}},
			want:    Reading[time.Duration]{Value: 10 * time.Minute, Known: true, Source: "/dev/pts/0"},
		},
		{
			name: "smallest wins",
			sources: []InputIdleSource{
				&fakeIdle{d: 10 * time.Minute, src: "logind"},
				&fakeIdle{d: 2 * time.Second, src: "x11-screensaver"},
				&fakeIdle{d: time.Hour, src: "/dev/input/event3"},
			},
			want: Reading[time.Duration]{Value: 2 * time.Second, Known: true, Source: "x11-screensaver"},
		},
		{
			name:    "all fail: unknown, not idle",
			sources: []InputIdleSource{failing, &fakeIdle{err: errors.New("x11: DISPLAY not set")}},
			want:    Reading[time.Duration]{Err: "logind: no system bus; x11: DISPLAY not set"},
		},
		{
			name: "none configured",
			want: Reading[time.Duration]{Err: "input idle: idle: no source"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSampler(t, SamplerConfig{Sources: Sources{InputIdle: tc.sources}})
			got := s.Sample(context.Background()).InputIdle
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("InputIdle (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSampleLoadBaseline(t *testing.T) {
	load := &fakeLoad{seq: []CPUCounters{
		{Total: 10 * time.Second, Busy: 5 * time.Second, Own: 1 * time.Second},
		{Total: 12 * time.Second, Busy: 6 * time.Second, Own: 1500 * time.Millisecond},  // window: (1-0.5)/2
		{Total: 16 * time.Second, Busy: 10 * time.Second, Own: 1500 * time.Millisecond}, // since previous: 4/4
	}}
	s := newTestSampler(t, SamplerConfig{Sources: Sources{Load: load}})
	for i, want := range []float64{0.25, 1} {
		r := s.Sample(context.Background()).OtherCPUShare
		if !r.Known || r.Value != want {
			t.Errorf("Sample %d: OtherCPUShare = %+v, want %v", i, r, want)
		}
	}
	if len(load.gotOwn) != 3 {
		t.Errorf("CPUCounters called %d times, want 3 (baseline window, then once a sample)", len(load.gotOwn))
	}
	if want := []int{os.Getpid()}; !cmp.Equal(load.gotOwn[0], want) {
		t.Errorf("own = %v, want %v by default", load.gotOwn[0], want)
	}
}

func TestOtherShare(t *testing.T) {
	tests := []struct {
		name      string
		prev, cur CPUCounters
		want      float64
		wantErr   bool
	}{
		{name: "idle machine", cur: CPUCounters{Total: time.Second}, want: 0},
		{name: "only our work", cur: CPUCounters{Total: time.Second, Busy: time.Second, Own: time.Second}, want: 0},
		{name: "half others", cur: CPUCounters{Total: 4 * time.Second, Busy: 3 * time.Second, Own: time.Second}, want: 0.5},
		{name: "own over busy clamps", cur: CPUCounters{Total: time.Second, Busy: 100 * time.Millisecond, Own: 200 * time.Millisecond}, want: 0},
		{name: "no time passed", prev: CPUCounters{Total: time.Second}, cur: CPUCounters{Total: time.Second}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := otherShare(tc.prev, tc.cur)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("otherShare = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestSamplePrograms(t *testing.T) {
	procs := &fakeProcs{names: []string{"game"}}
	s := newTestSampler(t, SamplerConfig{Sources: Sources{Processes: procs}})
	r := s.Sample(context.Background()).Running
	if diff := cmp.Diff(Reading[[]string]{Value: []string{}, Known: true, Source: "no programs listed"}, r); diff != "" {
		t.Errorf("Running without programs (-want +got):\n%s", diff)
	}
	if n := procs.calls.Load(); n != 0 {
		t.Errorf("process list read %d times with no programs listed", n)
	}
}

func TestSampleGPUAndPowerErrors(t *testing.T) {
	s := newTestSampler(t, SamplerConfig{Sources: Sources{
		Power: fakePower{err: errors.ErrUnsupported},
		GPU:   fakeGPUs{err: errors.New("no usable GPU: no NVIDIA driver")},
	}})
	sig := s.Sample(context.Background())
	if sig.Power.Known || sig.Power.Err != errors.ErrUnsupported.Error() {
		t.Errorf("Power = %+v, want unknown: unsupported", sig.Power)
	}
	if sig.GPUs.Known || sig.GPUs.Err != "no usable GPU: no NVIDIA driver" {
		t.Errorf("GPUs = %+v, want the source's reason", sig.GPUs)
	}
	if sig.MaxTemperatureC.Known || !strings.Contains(sig.MaxTemperatureC.Err, ErrNoSource.Error()) {
		t.Errorf("MaxTemperatureC = %+v, want no source", sig.MaxTemperatureC)
	}
}
