package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"idlepool/agent"
	"idlepool/energy"
	"idlepool/pool"
	"idlepool/worker"
)

// meterRun meters the energy of a solo run on wp's workers and the GPUs
// it uses from now until the returned function is called, which returns
// what the run added.
func meterRun(ctx context.Context, wp *worker.Pool, gpus []string) func() energy.Usage {
	lister := worker.NewGPULister()
	m := agent.NewEnergyMeter(lister, wp, 0, nil)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Serve(ctx)
	}()
	run := m.Start(gpus)
	return func() energy.Usage {
		u := run.StopAll()
		cancel()
		<-done
		_ = lister.Close()
		return u
	}
}

// energyLine says what a run's energy was and the work it did per
// joule, "" where no counter was read (an estimate says nothing about
// the work per joule): "energy   1.23 kJ (CPU 1.1 kJ measured, GPU
// 130 J sampled): 8.1e+05 samples per joule, 0.81 tasks per joule".
// The samples are those of the result's summed "samples" field; a run
// that took tasks from an earlier run's journal gives no rates.
func energyLine(u energy.Usage, out *pool.Outcome) string {
	if u.How() == energy.Estimated || u.How() == "" || u.Joules() <= 0 {
		return ""
	}
	parts := []string{"CPU " + joules(u.CPU)}
	for _, g := range u.GPUs {
		parts = append(parts, "GPU "+joules(g.Figure))
	}
	line := fmt.Sprintf("energy   %s in %s (%s)", joules(energy.Figure{Joules: u.Joules(), How: u.How()}),
		u.End.Sub(u.Start).Round(100*time.Millisecond), strings.Join(parts, ", "))
	if out == nil || out.Resumed > 0 {
		return line
	}
	var rates []string
	if n, ok := summed(out.Result, "samples"); ok {
		rates = append(rates, fmt.Sprintf("%.3g samples per joule", n/u.Joules()))
	}
	rates = append(rates, fmt.Sprintf("%.3g tasks per joule", float64(out.OK)/u.Joules()))
	return line + ": " + strings.Join(rates, ", ")
}

// joules writes a figure with its unit and how it was obtained.
func joules(f energy.Figure) string {
	v, unit := f.Joules, "J"
	if v >= 1000 {
		v, unit = v/1000, "kJ"
	}
	return fmt.Sprintf("%.3g %s %s", v, unit, f.How)
}

// summed returns the sum of the merged field name of a result
// ({"name": {"count": N, "sum": S}}).
func summed(result any, name string) (float64, bool) {
	b, err := json.Marshal(result)
	if err != nil {
		return 0, false
	}
	var fields map[string]struct {
		Sum *float64 `json:"sum"`
	}
	if json.Unmarshal(b, &fields) != nil || fields[name].Sum == nil {
		return 0, false
	}
	return *fields[name].Sum, true
}
