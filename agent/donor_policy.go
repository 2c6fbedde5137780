package agent

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"idlepool/energy"
	"idlepool/idle"
	"idlepool/offers"
	"idlepool/store"
)

// settingsReload is how often a donor reads the owner's settings again,
// so that `idlepool settings set` and the tray's settings window take
// effect in a running donor.
const settingsReload = 10 * time.Second

// policyShare is how old a sample or decision may be and still be shared
// by the agents of several pools: less than DefaultSamplePeriod.
const policyShare = 100 * time.Millisecond

// donorPolicy is what a donor's agents obey: the owner's settings from
// the local store (read again every settingsReload, or at once after
// reloadSettings), the machine's signals from an idle.Sampler over the
// platform's probes and the GPU source, and an idle.Policy (idle.Decide
// with its state, on the monotonic clock). It is the Signaller and Decide
// of the agents of every pool: calls are serialised by mu, and a sample
// or decision younger than policyShare is shared by the agents instead of
// being made again, so they all obey one decision.
type donorPolicy struct {
	mu sync.Mutex

	lastSample   time.Time // monotonic
	lastSig      idle.Signals
	lastDecided  time.Time // monotonic
	decidedWall  time.Time
	lastDecision idle.Decision

	local  *store.Local
	gpus   idle.GPUSource
	log    *slog.Logger
	policy *idle.Policy

	settings idle.Settings
	loaded   time.Time
	sampler  *idle.Sampler
	programs []string           // the PauseFor list sampler was made for
	signs    []idle.GameSign    // the game signs sampler was made for
	sources  idle.SourceOptions // the source options sampler was made for

	reloadEvery time.Duration // settingsReload unless DonorConfig.SettingsReload
	events      *EventLog     // DonorConfig.Events; nil: none
	// held counts the tasks the donor's agents hold (running, suspended
	// or with a result not yet recorded); nil: none. Called with mu held,
	// so it must not call back into the policy.
	held    func() int
	changed func() // called when the decision's state changes; nil: none

	// The energy the caps count, read from the store at most every
	// energyReread while a cap is set (never otherwise).
	energyMu   sync.Mutex
	energyRead time.Time // monotonic; zero: read again
	energyUsed idle.EnergyUsed
	energyErr  string

	// pattern is the owner's pattern of pauses at the machine, read from
	// the store at the first sample (patternRead) and learnt from the
	// decisions (learn); activeFrom is when the current pause for the
	// owner at the machine began (wall clock), zero when none.
	pattern     *OwnerPattern
	patternRead bool
	activeFrom  time.Time
}

// energyReread is how long the energy used today and this month is taken
// from the last read of the store: a task's record reads it again at
// once (energyAdded).
const energyReread = time.Minute

func newDonorPolicy(local *store.Local, gpus idle.GPUSource, log *slog.Logger) *donorPolicy {
	return &donorPolicy{local: local, gpus: gpus, log: log, reloadEvery: settingsReload,
		policy: idle.NewPolicy(idle.Defaults()), settings: idle.Defaults(), pattern: NewOwnerPattern(nil)}
}

// shareFor is how old a sample or decision the agents may share: while
// computing policyShare, so that each agent's governor sees the owner come
// back at once; at rest almost a rest period, so that the agents of
// several pools, whose governors sample every rest period each, share one
// sample instead of each paying for its own. p.mu is held.
func (p *donorPolicy) shareFor() time.Duration {
	if p.lastDecided.IsZero() || p.lastDecision.Run() {
		return policyShare
	}
	return DefaultRestSamplePeriod * 9 / 10
}

// reloadSettings makes the next sample read the settings and decide
// afresh.
func (p *donorPolicy) reloadSettings() {
	p.mu.Lock()
	p.loaded, p.lastSample, p.lastDecided = time.Time{}, time.Time{}, time.Time{}
	p.mu.Unlock()
}

// latest returns the latest decision, when it was made (wall clock) and
// the signals it was made from.
func (p *donorPolicy) latest() (idle.Decision, time.Time, idle.Signals) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.lastDecision
	d.GPUs, d.GPUsAllowed = slices.Clone(d.GPUs), slices.Clone(d.GPUsAllowed)
	return d, p.decidedWall, p.lastSig
}

// Sample reads the settings again when due, (re)makes the sampler when
// the programs or the game signs to pause for or the source options
// changed, and samples the signals (or returns
// a sample younger than policyShare).
func (p *donorPolicy) Sample(ctx context.Context) idle.Signals {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.lastSample.IsZero() && time.Since(p.lastSample) < p.shareFor() {
		return p.lastSig
	}
	p.lastSig = p.sample(ctx)
	p.lastSample = time.Now()
	return p.lastSig
}

func (p *donorPolicy) sample(ctx context.Context) idle.Signals {
	if !p.patternRead {
		p.readPattern(ctx)
	}
	if p.loaded.IsZero() || time.Since(p.loaded) >= p.reloadEvery {
		p.loaded = time.Now()
		if s, err := p.local.Settings(ctx); err != nil {
			p.log.Warn("Cannot read the owner's settings, keeping the last ones", "err", err)
		} else {
			p.settings = s
			p.policy.SetSettings(s)
		}
	}
	if p.sampler == nil || !slices.Equal(p.programs, p.settings.PauseFor) || !slices.Equal(p.signs, p.settings.Signs()) ||
		p.sources != p.settings.SourceOptions() {
		if p.sampler != nil {
			_ = p.sampler.Close()
		}
		sources := idle.DefaultSources(p.settings.SourceOptions())
		sources.GPU = p.gpus
		p.programs, p.signs, p.sources = slices.Clone(p.settings.PauseFor), p.settings.Signs(), p.settings.SourceOptions()
		p.sampler = idle.NewSampler(idle.SamplerConfig{Sources: sources, Programs: p.programs, GameSigns: p.signs})
	}
	sig := p.sampler.Sample(ctx)
	if p.settings.EnergyDayKWh > 0 || p.settings.EnergyMonthKWh > 0 {
		sig.EnergyUsed = p.readEnergyUsed(ctx, time.Now())
	}
	return sig
}

// energyAdded makes the next sample read the energy used again.
func (p *donorPolicy) energyAdded() {
	p.energyMu.Lock()
	p.energyRead = time.Time{}
	p.energyMu.Unlock()
}

// readEnergyUsed is the energy this device's tasks added since the start
// of now's day and month in the settings' zone. p.mu is held.
func (p *donorPolicy) readEnergyUsed(ctx context.Context, now time.Time) idle.Reading[idle.EnergyUsed] {
	p.energyMu.Lock()
	defer p.energyMu.Unlock()
	if p.energyRead.IsZero() || time.Since(p.energyRead) >= energyReread {
		p.energyRead = time.Now()
		loc := p.settings.Location()
		n := now.In(loc)
		day := time.Date(n.Year(), n.Month(), n.Day(), 0, 0, 0, 0, loc)
		month := time.Date(n.Year(), n.Month(), 1, 0, 0, 0, 0, loc)
		dj, err1 := p.local.EnergySince(ctx, day)
		mj, err2 := p.local.EnergySince(ctx, month)
		p.energyErr = ""
		if err := errors.Join(err1, err2); err != nil {
			p.energyErr = err.Error()
		}
		p.energyUsed = idle.EnergyUsed{DayKWh: energy.KWh(dj), MonthKWh: energy.KWh(mj)}
	}
	if p.energyErr != "" {
		return idle.Reading[idle.EnergyUsed]{Err: p.energyErr}
	}
	return idle.Reading[idle.EnergyUsed]{Value: p.energyUsed, Known: true, Source: "local store"}
}

// Decide applies the policy (or returns a decision younger than
// policyShare). When the owner's pause has run out by the monotonic clock
// it clears Settings.PausedUntil in the store.
func (p *donorPolicy) Decide(sig idle.Signals, now time.Time) idle.Decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.lastDecided.IsZero() && time.Since(p.lastDecided) < p.shareFor() {
		return p.lastDecision
	}
	prev := p.lastDecision
	p.lastDecision, p.lastDecided, p.decidedWall = p.decide(sig, now), time.Now(), now
	p.notePause(prev, p.lastDecision)
	p.learn(prev, p.lastDecision, now)
	if p.changed != nil && prev.State != p.lastDecision.State {
		p.changed()
	}
	return p.lastDecision
}

func (p *donorPolicy) decide(sig idle.Signals, now time.Time) idle.Decision {
	d := p.policy.Decide(sig, now)
	if d.Finishing && (p.held == nil || p.held() == 0) {
		// The owner asked to finish the tasks in hand and then pause:
		// they are finished (or there were none).
		d = idle.Decision{State: idle.StatePaused, Reason: FinishedReason, Hold: idle.HoldOwner}
	}
	if st := p.policy.State(); st.ComputeOver && !p.settings.ComputeUntil.IsZero() {
		p.clearOverride(func(s *idle.Settings) {
			if s.ComputeUntil.Equal(st.ComputeFrom) {
				s.ComputeUntil = time.Time{}
			}
		})
	}
	if st := p.policy.State(); st.PauseOver && !p.settings.PausedUntil.IsZero() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		from := st.PauseFrom
		s, err := p.local.UpdateSettings(ctx, func(s *idle.Settings) error {
			if s.PausedUntil.Equal(from) {
				s.PausedUntil = time.Time{}
			}
			return nil
		})
		if err != nil {
			p.log.Warn("Cannot clear the owner's pause that ran out", "err", err)
		} else {
			p.settings = s
			p.policy.SetSettings(s)
		}
	}
	return d
}

// FinishedReason is the decision's reason once the tasks in hand are
// finished after the owner asked to finish them and then pause
// (idle.Settings.FinishThenPause).
const FinishedReason = "paused by you: the tasks in hand are finished; resume to compute again"

// clearOverride changes the owner's settings in the store with change (an
// override that ran out) and decides by what it stored. p.mu is held.
func (p *donorPolicy) clearOverride(change func(*idle.Settings)) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := p.local.UpdateSettings(ctx, func(s *idle.Settings) error {
		change(s)
		return nil
	})
	if err != nil {
		p.log.Warn("Cannot clear the owner's compute now that ran out", "err", err)
		return
	}
	p.settings = s
	p.policy.SetSettings(s)
}

// notePause adds a pause (for a game, by the owner) and its end to the
// event log. Waiting and computing alternate with every touch of the
// mouse, so only the pauses are events. p.mu is held.
func (p *donorPolicy) notePause(prev, d idle.Decision) {
	var err error
	switch {
	case d.State == idle.StatePaused && prev.State != idle.StatePaused:
		err = p.events.Addf("%s", d.Reason)
	case prev.State == idle.StatePaused && d.State != idle.StatePaused:
		err = p.events.Addf("pause over; now %s", d.Reason)
	}
	if err != nil {
		p.log.Warn("Cannot write the event log", "err", err)
	}
}

// readPattern reads the owner's pattern of pauses from the store, once;
// when the store cannot be read, the pattern starts from nothing. p.mu is
// held.
func (p *donorPolicy) readPattern(ctx context.Context) {
	p.patternRead = true
	seen, err := p.local.OwnerPauses(ctx)
	if err != nil {
		p.log.Warn("Cannot read the owner's pauses; learning them anew", "err", err)
		return
	}
	p.pattern.load(seen)
}

// learn follows the pauses for the owner at the machine
// (idle.CauseActive) from decision prev to d at wall-clock now: one that
// begins after another decision (not at start, where its beginning is
// unknown) is timed, and once the device computes again its length is
// added to the owner's pattern, by the hour it began, and saved in the
// store. One that turns into another reason (the hours, the battery) is
// dropped: its end says nothing of the owner. p.mu is held.
func (p *donorPolicy) learn(prev, d idle.Decision, now time.Time) {
	switch {
	case d.Cause == idle.CauseActive && prev.Cause != idle.CauseActive && prev.State != "":
		p.activeFrom = now
	case d.Cause == idle.CauseActive:
	case !p.activeFrom.IsZero() && d.Run():
		h, ok := p.pattern.Note(p.activeFrom.Local(), now.Sub(p.activeFrom))
		p.activeFrom = time.Time{}
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := p.local.SaveOwnerPauses(ctx, h); err != nil {
			p.log.Warn("Cannot save the owner's pauses", "err", err)
		}
	default:
		p.activeFrom = time.Time{}
	}
}

// Close stops the sampler's probes. The GPU source is closed by whoever
// made it.
func (p *donorPolicy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sampler != nil {
		err := p.sampler.Close()
		p.sampler = nil
		return err
	}
	return nil
}

// donorOffer is the OfferSource of a donor's agents: this machine
// (idle.ReadMachine, read once), the owner's settings and preferences
// from the local store (read at every refresh, so that changes reach the
// pools with the next offer), and the GPUs: the governor's latest
// reading, or, with no policy (Always), a reading of its own. Agents of
// several pools call it concurrently, so mu serialises it.
type donorOffer struct {
	local  *store.Local
	gpus   idle.GPUSource
	log    *slog.Logger
	always bool // DonorConfig.Always: the settings' hours and cores do not apply
	// workers is DonorConfig.Workers: with always, every worker leases
	// (the agents' decision is to compute on all their slots), so the
	// cores offered are these, at most the logical CPUs; 0: unknown, the
	// settings' cores are offered.
	workers int

	mu       sync.Mutex
	machine  *idle.Machine
	settings idle.Settings
	loaded   bool // settings were read once
}

// Capacity is idle.NewCapacity of the machine, the settings and the GPUs;
// with always, any hour and the workers' cores.
func (o *donorOffer) Capacity(ctx context.Context, sig idle.Signals) idle.Capacity {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.machine == nil {
		m, err := idle.ReadMachine(ctx)
		if err != nil {
			o.log.Info("Part of the machine is unknown to its offer", "err", err)
		}
		o.machine = &m
	}
	if s, err := o.local.Settings(ctx); err == nil {
		o.settings, o.loaded = s, true
	} else {
		if !o.loaded {
			o.settings, o.loaded = idle.Defaults(), true
		}
		o.log.Warn("Cannot read the owner's settings for the offer, keeping the last ones", "err", err)
	}
	gpus := sig.GPUs
	if !gpus.Known && gpus.Err == "" { // not sampled: no policy (Always)
		gs, err := o.gpus.GPUs(ctx)
		gpus = idle.Reading[[]idle.GPU]{Value: gs, Known: err == nil, Source: "nvml"}
		if err != nil {
			gpus.Err = err.Error()
		}
	}
	c := idle.NewCapacity(*o.machine, o.settings, gpus)
	if o.always || o.settings.ComputingNow(time.Now()) {
		// Computes at any hour (always, or the owner's compute now,
		// which overrides the hours): offer any hour, or the pool would
		// lease nothing outside them.
		c.Schedule = idle.Schedule{}
	}
	if o.always && o.workers > 0 {
		// The settings' cores do not limit it: it computes on every
		// worker, and offering fewer would understate it to the pools.
		c.Cores = max(1, min(o.workers, c.LogicalCPUs))
	}
	return c
}

// Preferences reads the donor's preferences; on failure the defaults.
func (o *donorOffer) Preferences(ctx context.Context) offers.Preferences {
	p, err := o.local.Preferences(ctx)
	if err != nil {
		o.log.Warn("Cannot read the donor's preferences for the offer, offering with the defaults", "err", err)
		return offersDefault
	}
	return p
}
