package idle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

// DefaultProbeTimeout is how long Sample waits for its probes when
// SamplerConfig.ProbeTimeout is zero.
const DefaultProbeTimeout = 500 * time.Millisecond

// maxBaselineAge is how old the previous CPU counters may be and still serve
// as the start of the load window; older ones describe a different moment.
const maxBaselineAge = 10 * time.Second

// SamplerConfig says what a Sampler asks and what it looks for. The zero
// value has no sources: every reading is unknown.
type SamplerConfig struct {
	Sources

	// Programs are the "pause while running" programs, as the owner named
	// them. A program matches a running process by executable base name,
	// case-insensitively, with or without ".exe", and with or without a
	// directory ("C:\Games\game.exe" matches a process named "game").
	Programs []string

	// GameSigns are the signs of a game running to ask (Settings.Signs);
	// nil asks none, and Signals.Games is known and empty.
	GameSigns []GameSign

	// OwnPIDs returns the PIDs of idlepool's own processes; they and all
	// their descendants (the worker subprocesses) are left out of
	// OtherCPUShare. Nil means this process alone (os.Getpid), which with
	// its descendants covers an agent and its workers. Called from probe
	// goroutines: it must be safe for concurrent use and quick.
	OwnPIDs func() []int

	// ProbeTimeout bounds each Sample; DefaultProbeTimeout when zero.
	ProbeTimeout time.Duration
}

// Sampler samples the Signals. Each source runs in its own goroutine,
// owned by the Sampler, under a timeout: Sample returns within
// ProbeTimeout (plus scheduling) whatever a source does, and a source still
// running from an earlier call is not started twice but reported as
// "probe still running since ...", until it has run for 20 probe timeouts
// (at least 10 s): then it is given up and the source is asked again (at
// growing intervals while it keeps hanging, see probe).
//
// A Sampler keeps the previous CPU counters to compute OtherCPUShare over
// the time between two samples. Its methods are safe for concurrent use.
// Close it to stop its goroutines.
type Sampler struct {
	cfg     SamplerConfig
	timeout time.Duration
	now     func() time.Time // time.Now; a fake clock in tests (probes' give-up times)

	life   context.Context // ends at Close; parent of every probe's context
	cancel context.CancelFunc
	mu     sync.Mutex // guards closed and wg.Add
	closed bool
	wg     sync.WaitGroup

	closeOnce sync.Once // of the sources

	idle     []*probe[time.Duration]
	load     *probe[float64]
	power    *probe[Power]
	thermal  *probe[float64]
	programs *probe[[]string]
	gpus     *probe[[]GPU]
	games    []*probe[string] // one per cfg.GameSigns

	loadMu     sync.Mutex
	prevLoad   CPUCounters
	prevLoadAt time.Time // zero: no baseline yet
}

// NewSampler returns a Sampler for cfg. It starts nothing until the first
// Sample.
func NewSampler(cfg SamplerConfig) *Sampler {
	s := &Sampler{cfg: cfg, timeout: cfg.ProbeTimeout, now: time.Now}
	if s.timeout <= 0 {
		s.timeout = DefaultProbeTimeout
	}
	s.life, s.cancel = context.WithCancel(context.Background())
	for i, src := range cfg.InputIdle {
		s.idle = append(s.idle, &probe[time.Duration]{
			name: fmt.Sprintf("input idle source %d (%T)", i, src),
			run:  func(ctx context.Context) (time.Duration, string, error) { return src.IdleTime(ctx) },
		})
	}
	s.load = &probe[float64]{name: "cpu load", run: s.otherCPUShare}
	s.power = &probe[Power]{name: "power", run: func(ctx context.Context) (Power, string, error) {
		if cfg.Power == nil {
			return Power{}, "", ErrNoSource
		}
		p, err := cfg.Power.Power(ctx)
		return p, "", err
	}}
	s.thermal = &probe[float64]{name: "temperature", run: func(ctx context.Context) (float64, string, error) {
		if cfg.Thermal == nil {
			return 0, "", ErrNoSource
		}
		return cfg.Thermal.MaxTemperatureC(ctx)
	}}
	s.programs = &probe[[]string]{name: "programs", run: func(ctx context.Context) ([]string, string, error) {
		if cfg.Processes == nil {
			return nil, "", ErrNoSource
		}
		names, err := cfg.Processes.ProgramNames(ctx)
		if err != nil {
			return nil, "", err
		}
		return MatchPrograms(cfg.Programs, names), "process list", nil
	}}
	s.gpus = &probe[[]GPU]{name: "gpus", run: func(ctx context.Context) ([]GPU, string, error) {
		if cfg.GPU == nil {
			return nil, "", fmt.Errorf("no GPU source: %w", ErrNoSource)
		}
		g, err := cfg.GPU.GPUs(ctx)
		return g, "nvml", err
	}}
	for _, sign := range cfg.GameSigns {
		src := cfg.Games[sign]
		run := func(context.Context) (string, string, error) { return "", "no source on this platform", nil }
		if src != nil {
			run = gameProbe(src)
		}
		s.games = append(s.games, &probe[string]{name: fmt.Sprintf("game sign %s", sign), run: run})
	}
	return s
}

// Sample asks every source at once and returns what they said within
// ProbeTimeout: a source that fails, hangs or is still running from an
// earlier call gives an unknown reading with the reason. It returns sooner,
// with the readings not yet in unknown, when ctx ends. Cancelling ctx does
// not stop the probes: they end at their own timeout or at Close.
//
// InputIdle is the smallest idle time among the input sources that
// answered; unknown only when none did. OtherCPUShare covers the time since
// the previous Sample when that was less than 10 s ago; otherwise (first
// call) Sample measures over a short window of min(ProbeTimeout/2, 250 ms),
// which is also the shortest window: a Sample soon after another waits
// until the previous counters are that old.
// Running is known and empty, without looking at processes, when no
// programs are listed; Games likewise when no game signs are asked.
func (s *Sampler) Sample(ctx context.Context) Signals {
	begun := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()

	idleFlights := make([]*flight[time.Duration], len(s.idle))
	for i, p := range s.idle {
		idleFlights[i] = p.start(s)
	}
	loadF := s.load.start(s)
	powerF := s.power.start(s)
	thermalF := s.thermal.start(s)
	var programsF *flight[[]string]
	if len(s.cfg.Programs) > 0 {
		programsF = s.programs.start(s)
	}
	gpusF := s.gpus.start(s)
	gameFlights := make([]*flight[string], len(s.games))
	for i, p := range s.games {
		gameFlights[i] = p.start(s)
	}

	sig := Signals{At: begun, CPUs: runtime.NumCPU()}
	idleReadings := make([]Reading[time.Duration], len(s.idle))
	for i, p := range s.idle {
		idleReadings[i] = p.await(ctx, idleFlights[i], begun, s.timeout)
	}
	sig.InputIdle = combineIdle(idleReadings)
	sig.OtherCPUShare = s.load.await(ctx, loadF, begun, s.timeout)
	sig.Power = s.power.await(ctx, powerF, begun, s.timeout)
	sig.MaxTemperatureC = s.thermal.await(ctx, thermalF, begun, s.timeout)
	if programsF != nil {
		sig.Running = s.programs.await(ctx, programsF, begun, s.timeout)
	} else {
		sig.Running = Reading[[]string]{Value: []string{}, Known: true, Source: "no programs listed"}
	}
	sig.GPUs = s.gpus.await(ctx, gpusF, begun, s.timeout)
	gameReadings := make([]Reading[string], len(s.games))
	for i, p := range s.games {
		gameReadings[i] = p.await(ctx, gameFlights[i], begun, s.timeout)
	}
	sig.Games = combineGames(s.cfg.GameSigns, gameReadings)
	return sig
}

// combineIdle picks the smallest known idle time: one source that saw input
// makes the user active. It is unknown, with every source's reason, when
// no source answered.
func combineIdle(rs []Reading[time.Duration]) Reading[time.Duration] {
	var best Reading[time.Duration]
	var reasons []string
	for _, r := range rs {
		if !r.Known {
			reasons = append(reasons, r.Err)
			continue
		}
		if !best.Known || r.Value < best.Value {
			best = r
		}
	}
	if best.Known {
		return best
	}
	if len(reasons) == 0 {
		reasons = append(reasons, fmt.Sprintf("input idle: %v", ErrNoSource))
	}
	return Reading[time.Duration]{Err: strings.Join(reasons, "; ")}
}

// otherCPUShare is the load probe: it reads the counters and compares them
// with the previous reading, or with one taken a short window ago.
func (s *Sampler) otherCPUShare(ctx context.Context) (float64, string, error) {
	if s.cfg.Load == nil {
		return 0, "", ErrNoSource
	}
	own := []int{os.Getpid()}
	if s.cfg.OwnPIDs != nil {
		own = s.cfg.OwnPIDs()
	}
	s.loadMu.Lock()
	prev, prevAt := s.prevLoad, s.prevLoadAt
	s.loadMu.Unlock()

	window := min(s.timeout/2, 250*time.Millisecond)
	if prevAt.IsZero() || time.Since(prevAt) > maxBaselineAge {
		base, err := s.cfg.Load.CPUCounters(ctx, own)
		if err != nil {
			return 0, "", err
		}
		prev, prevAt = base, time.Now()
	}
	// Too short a window is all noise (the counters move in 10 ms ticks):
	// wait until the baseline is at least a window old.
	if wait := window - time.Since(prevAt); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, "", ctx.Err()
		case <-t.C:
		}
	}
	now := time.Now()
	cur, err := s.cfg.Load.CPUCounters(ctx, own)
	if err != nil {
		return 0, "", err
	}
	s.loadMu.Lock()
	s.prevLoad, s.prevLoadAt = cur, now
	s.loadMu.Unlock()

	share, err := otherShare(prev, cur)
	if err != nil {
		return 0, "", err
	}
	return share, fmt.Sprintf("cpu times over %v", now.Sub(prevAt).Round(time.Millisecond)), nil
}

// errNoCPUTime means two counter readings are too close to tell a share.
var errNoCPUTime = errors.New("cpu load: no CPU time elapsed between readings")

// otherShare is the share (0..1) of CPU capacity between two readings used
// by processes that are not our own.
func otherShare(prev, cur CPUCounters) (float64, error) {
	total := cur.Total - prev.Total
	if total <= 0 {
		return 0, errNoCPUTime
	}
	other := float64((cur.Busy-prev.Busy)-(cur.Own-prev.Own)) / float64(total)
	return max(0, min(1, other)), nil
}

func (s *Sampler) clock() time.Time { return s.now() }

// Close stops the Sampler: every probe's context ends, later Samples report
// ErrSamplerClosed, and Close waits for the probe goroutines to return. A
// source that ignores its context may not return: Close waits for it at
// most ProbeTimeout and then returns an error, leaving that goroutine to
// finish on its own. Close is safe to call more than once.
func (s *Sampler) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case <-done:
		s.closeSources()
		return nil
	case <-t.C:
		return fmt.Errorf("close sampler: %w: a source ignored its context and still runs", ErrProbeTimeout)
	}
}

// closeSources closes the input and game sources that keep a connection
// (io.Closer), once no probe uses them.
func (s *Sampler) closeSources() {
	s.closeOnce.Do(func() {
		for _, src := range s.cfg.Sources.InputIdle {
			if c, ok := src.(io.Closer); ok {
				_ = c.Close()
			}
		}
		for _, src := range s.cfg.Sources.Games {
			if c, ok := src.(io.Closer); ok {
				_ = c.Close()
			}
		}
	})
}
