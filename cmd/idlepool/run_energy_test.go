package main

import (
	"encoding/json"
	"testing"
	"time"

	"idlepool/energy"
	"idlepool/pool"
)

// A run where a counter was read says its energy and the work per joule
// (samples per joule for pi); an estimate says nothing.
func TestEnergyLine(t *testing.T) {
	var result any
	if err := json.Unmarshal([]byte(`{"inside": {"count": 20, "sum": 1571043}, "samples": {"count": 20, "sum": 2000000}}`), &result); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	u := energy.Usage{Start: start, End: start.Add(2 * time.Second),
		CPU:  energy.Figure{Joules: 150, How: energy.Measured},
		GPUs: []energy.GPUFigure{{UUID: "GPU-x", Figure: energy.Figure{Joules: 50, How: energy.Sampled}}}}
	out := &pool.Outcome{Total: 20, OK: 20, Result: result}
	want := "energy   200 J sampled in 2s (CPU 150 J measured, GPU 50 J sampled): 1e+04 samples per joule, 0.1 tasks per joule"
	if got := energyLine(u, out); got != want {
		t.Errorf("energyLine =\n%q, want\n%q", got, want)
	}
	out.Resumed = 5
	if got := energyLine(u, out); got != "energy   200 J sampled in 2s (CPU 150 J measured, GPU 50 J sampled)" {
		t.Errorf("resumed run: %q, want no rates", got)
	}
	u.GPUs, u.CPU.How = nil, energy.Estimated
	if got := energyLine(u, &pool.Outcome{OK: 1}); got != "" {
		t.Errorf("estimated run: %q, want nothing", got)
	}
}
