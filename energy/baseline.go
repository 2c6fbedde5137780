package energy

import (
	"context"
	"maps"
	"time"
)

// Baseline is a Meter's idle baseline: what the machine draws while
// nothing of ours runs. CPUW is the CPU packages' draw in watts (valid
// when CPUKnown), GPUW each GPU's idle draw in watts by NVML UUID, and
// At when they were last lowered.
type Baseline struct {
	CPUW     float64
	CPUKnown bool
	GPUW     map[string]float64
	At       time.Time
}

// BaselineMaxAge is how long a stored baseline is trusted: a machine's
// draw at rest changes with its hardware, firmware and kernel, and a
// baseline is only ever lowered, so an old one is measured afresh.
const BaselineMaxAge = 30 * 24 * time.Hour

// BaselineStore keeps a Meter's baseline across restarts (*store.Local
// implements it), so that a device computing from its start still
// subtracts what it draws at rest. LoadBaseline returns the stored one
// (zero when none); SaveBaseline replaces it. They are called from one
// goroutine at a time; an error is the store's, and the Meter goes on
// with what it has in memory.
type BaselineStore interface {
	LoadBaseline(ctx context.Context) (Baseline, error)
	SaveBaseline(ctx context.Context, b Baseline) error
}

// loadBaseline seeds m's baseline from cfg.Baselines, unless it is older
// than BaselineMaxAge.
func (m *Meter) loadBaseline() {
	if m.cfg.Baselines == nil {
		return
	}
	b, err := m.cfg.Baselines.LoadBaseline(context.Background())
	if err != nil || b.At.IsZero() || m.cfg.Now().Sub(b.At) > BaselineMaxAge {
		return
	}
	if b.CPUKnown && b.CPUW >= 0 {
		m.idleW, m.idleKnown = b.CPUW, true
	}
	for uuid, w := range b.GPUW {
		if w >= 0 {
			m.gpuIdleW[uuid] = w
		}
	}
	m.baselineAt = b.At
}

// saveBaseline stores m's baseline when it changed since the last save.
// m.mu is not held: the store's I/O happens outside the lock.
func (m *Meter) saveBaseline(ctx context.Context) {
	if m.cfg.Baselines == nil {
		return
	}
	m.mu.Lock()
	if !m.baselineDirty {
		m.mu.Unlock()
		return
	}
	b := Baseline{CPUW: m.idleW, CPUKnown: m.idleKnown, GPUW: maps.Clone(m.gpuIdleW), At: m.baselineAt}
	m.baselineDirty = false
	m.mu.Unlock()
	if err := m.cfg.Baselines.SaveBaseline(ctx, b); err != nil {
		m.mu.Lock()
		m.baselineDirty = true // tried again at the next sample
		m.mu.Unlock()
	}
}

// Baseline returns the idle baseline in use now.
func (m *Meter) Baseline() Baseline {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Baseline{CPUW: m.idleW, CPUKnown: m.idleKnown, GPUW: maps.Clone(m.gpuIdleW), At: m.baselineAt}
}
