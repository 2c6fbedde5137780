package energy

import (
	"context"
	"os"
	"testing"
	"time"
)

// What the external tests (package energy_test) use of the internal
// ones: the fake host and a way to run one step of Serve's saving.

// FakeHost is the fake powercap and proc tree of the internal tests.
type FakeHost = fakeHost

// NewFakeHost is newFakeHost.
func NewFakeHost(t *testing.T, zones ...uint64) *FakeHost { return newFakeHost(t, zones...) }

// Step is step.
func (h *fakeHost) Step(d time.Duration, joules, busy float64, pids map[int]float64) {
	h.step(d, joules, busy, pids)
}

// AddProcess adds a worker process with no CPU time yet.
func (h *fakeHost) AddProcess(pid int) {
	h.pidTicks[pid] = 0
	h.writeProc()
}

// MeterWith is meter with a BaselineStore.
func (h *fakeHost) MeterWith(t *testing.T, b BaselineStore) *Meter {
	t.Helper()
	r, err := OpenRAPL(os.DirFS(h.powercap))
	if err != nil {
		t.Fatal(err)
	}
	m := NewMeter(Config{RAPL: r, PCIRoot: h.pci, Proc: h.proc, PIDs: h.pids, CPUs: 8, RatedW: 80,
		Now: func() time.Time { return h.now }, Baselines: b})
	m.Sample(context.Background())
	return m
}

// Sample takes one reading and stores the baseline if it changed, as
// each turn of Serve does.
func (m *Meter) Sample(ctx context.Context) {
	m.mu.Lock()
	m.sampleLocked()
	m.mu.Unlock()
	m.saveBaseline(ctx)
}
