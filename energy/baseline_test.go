package energy_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"idlepool/energy"
	"idlepool/store"
)

// TestBaselineSurvivesARestart, with the real local store in a SQLite
// file: a meter measures the machine at rest (10 W) and stores it; the
// program restarts (the file closed and opened again) and its first
// task, started at once with no rest to measure, is charged only what it
// added above 10 W. Without the stored baseline, the same task is
// charged the machine's whole draw.
func TestBaselineSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "local.db")
	h := energy.NewFakeHost(t, 1<<40)
	h.AddProcess(11)

	l, err := store.OpenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	m := h.MeterWith(t, l)
	h.Step(time.Minute, 600, 0, nil) // 10 W, nothing of ours
	m.Sample(ctx)
	if b := m.Baseline(); !b.CPUKnown || math.Abs(b.CPUW-10) > 1e-9 {
		t.Fatalf("baseline measured = %+v, want 10 W", b)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	run := func(b energy.BaselineStore) float64 {
		m := h.MeterWith(t, b)
		task := m.Start(nil)
		h.Step(10*time.Second, 400, 10, map[int]float64{11: 10}) // 40 W while the task runs alone
		return task.Stop(11).CPU.Joules
	}
	l, err = store.OpenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := run(l); math.Abs(got-300) > 1e-6 {
		t.Errorf("after a restart the first task is charged %g J, want 300 (400 J less 10 s at the stored 10 W)", got)
	}
	if got := run(nil); math.Abs(got-400) > 1e-6 {
		t.Errorf("without a stored baseline the task is charged %g J, want all 400 (this test tells the two apart)", got)
	}
}

// TestStoreBaselineRoundTrip: the local store keeps the CPU's and each
// GPU's baseline and replaces them as a whole; a negative draw is
// refused.
func TestStoreBaselineRoundTrip(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "local.db")
	l, err := store.OpenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := l.LoadBaseline(ctx); err != nil || b.CPUKnown || len(b.GPUW) != 0 || !b.At.IsZero() {
		t.Fatalf("a new store's baseline = %+v, %v; want none", b, err)
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	want := energy.Baseline{CPUW: 7.5, CPUKnown: true, GPUW: map[string]float64{"GPU-a": 21, "GPU-b": 9}, At: at}
	if err := l.SaveBaseline(ctx, want); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, err = store.OpenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, err := l.LoadBaseline(ctx)
	if err != nil || got.CPUW != 7.5 || !got.CPUKnown || len(got.GPUW) != 2 || got.GPUW["GPU-a"] != 21 || got.GPUW["GPU-b"] != 9 || !got.At.Equal(at) {
		t.Errorf("baseline after reopening = %+v, %v; want %+v", got, err, want)
	}
	if err := l.SaveBaseline(ctx, energy.Baseline{GPUW: map[string]float64{"GPU-a": 20}, At: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got, err := l.LoadBaseline(ctx); err != nil || got.CPUKnown || len(got.GPUW) != 1 || got.GPUW["GPU-a"] != 20 {
		t.Errorf("baseline after replacing = %+v, %v; want GPU-a 20 W alone", got, err)
	}
	if err := l.SaveBaseline(ctx, energy.Baseline{CPUW: -1, CPUKnown: true, At: at}); err == nil {
		t.Error("a negative draw was saved")
	}
}
