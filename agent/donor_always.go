package agent

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"idlepool/idle"
	"idlepool/store"
)

// alwaysPolicy decides for a donor that computes at any time
// (DonorConfig.Always): every agent computes on all its slots, and on
// the GPUs the owner enabled, under the per-GPU rules of
// idle.DecideAlways. It reads the owner's settings (for the GPUs) every
// settingsReload and samples only the GPUs, and those only while one is
// enabled. Its methods are safe for concurrent use: the donor's agents
// share it.
type alwaysPolicy struct {
	local *store.Local
	gpus  idle.GPUSource
	log   *slog.Logger

	mu       sync.Mutex
	settings idle.Settings
	loaded   time.Time // monotonic; zero: read the settings at the next sample
	sampled  time.Time // monotonic, of lastSig
	lastSig  idle.Signals
	state    idle.PolicyState
}

func newAlwaysPolicy(local *store.Local, gpus idle.GPUSource, log *slog.Logger) *alwaysPolicy {
	return &alwaysPolicy{local: local, gpus: gpus, log: log, settings: idle.Defaults()}
}

// Sample reads the settings when due and the GPUs when the owner enabled
// one; the other signals are left unknown, since nothing reads them. A
// sample younger than policyShare is shared by the agents.
func (p *alwaysPolicy) Sample(ctx context.Context) idle.Signals {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.sampled.IsZero() && !p.loaded.IsZero() && time.Since(p.sampled) < policyShare {
		return p.lastSig
	}
	if p.loaded.IsZero() || time.Since(p.loaded) >= settingsReload {
		p.loaded = time.Now()
		if s, err := p.local.Settings(ctx); err != nil {
			p.log.Warn("Cannot read the owner's settings (for the GPUs), keeping the last ones", "err", err)
		} else {
			p.settings = s
		}
	}
	sig := idle.Signals{At: time.Now(), CPUs: runtime.NumCPU()}
	for _, g := range p.settings.GPUs {
		if !g.Use {
			continue
		}
		if gs, err := p.gpus.GPUs(ctx); err != nil {
			sig.GPUs = idle.Reading[[]idle.GPU]{Err: err.Error()}
		} else {
			sig.GPUs = idle.Reading[[]idle.GPU]{Value: gs, Known: true, Source: "nvml"}
		}
		break
	}
	p.lastSig, p.sampled = sig, time.Now()
	return sig
}

// decider returns the decision function of an agent of slots workers.
func (p *alwaysPolicy) decider(slots int) func(idle.Signals, time.Time) idle.Decision {
	return func(sig idle.Signals, _ time.Time) idle.Decision {
		p.mu.Lock()
		defer p.mu.Unlock()
		var d idle.Decision
		d, p.state = idle.DecideAlways(p.settings, sig, slots, p.state)
		return d
	}
}

// gpuMemoryMiB is idle.GPUMemoryMiB with the owner's settings and the
// GPUs of the latest sample.
func (p *alwaysPolicy) gpuMemoryMiB(uuids []string) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return idle.GPUMemoryMiB(p.settings, p.lastSig.GPUs, uuids)
}

// reloadSettings makes the next sample read the settings.
func (p *alwaysPolicy) reloadSettings() {
	p.mu.Lock()
	p.loaded = time.Time{}
	p.mu.Unlock()
}
