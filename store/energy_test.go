package store_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"idlepool/energy"
	"idlepool/job"
	"idlepool/store"
)

func TestTaskEnergy(t *testing.T) {
	ctx := context.Background()
	l, path := openLocal(t)
	tariff, err := energy.ParseTariff("EUR 0.40 22-6=0.10")
	if err != nil {
		t.Fatal(err)
	}
	jobID := job.ID(sha256.Sum256([]byte("job")))
	at := func(day, hour int) time.Time { return time.Date(2026, 3, day, hour, 0, 0, 0, time.Local) }
	tasks := []store.TaskEnergy{
		// 1 kWh from 21:00 to 23:00: half at 0.40, half at 0.10.
		{Lease: "l1", Pool: "http://a", Job: jobID, Task: 1, Usage: energy.Usage{Start: at(1, 21), End: at(1, 23),
			CPU: energy.Figure{Joules: 3.6e6, How: energy.Measured}}},
		{Lease: "l2", Pool: "http://a", Job: jobID, Task: 2, Usage: energy.Usage{Start: at(1, 23), End: at(1, 23).Add(30 * time.Minute),
			CPU:  energy.Figure{Joules: 1.8e6, How: energy.Measured},
			GPUs: []energy.GPUFigure{{UUID: "GPU-x", Figure: energy.Figure{Joules: 1.8e6, How: energy.Sampled}}}}},
		{Lease: "l3", Pool: "http://b", Job: jobID, Task: 3, Usage: energy.Usage{Start: at(2, 12), End: at(2, 13),
			CPU: energy.Figure{Joules: 360e3, How: energy.Estimated}}},
	}
	for _, e := range tasks {
		if err := l.AddEnergy(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	again := tasks[0]
	again.CPU.Joules = 1 // a second record of a lease changes nothing
	if err := l.AddEnergy(ctx, again); err != nil {
		t.Fatal(err)
	}
	bad := tasks[0]
	bad.Lease, bad.CPU.How = "l9", "guessed"
	if err := l.AddEnergy(ctx, bad); err == nil || !strings.Contains(err.Error(), `"guessed" is not a figure`) {
		t.Errorf("AddEnergy with an unknown How = %v", err)
	}

	// The records survive a reopen.
	l.Close()
	l, err = store.OpenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, err := l.Energy(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(tasks, got, cmpopts.EquateApproxTime(0)); d != "" {
		t.Errorf("Energy (-want +got):\n%s", d)
	}

	days, err := l.EnergyHistory(ctx, store.EnergyPrices{Tariff: tariff, CO2PerKWh: 100})
	if err != nil {
		t.Fatal(err)
	}
	cost := func(v float64) *float64 { return &v }
	want := []store.EnergyDay{
		{Pool: "http://a", Day: "2026-03-01", Tasks: 2, Joules: 7.2e6, KWh: 2, How: energy.Sampled, Cost: cost(0.2 + 0.05 + 0.1), Currency: "EUR", CO2Grams: 200},
		{Pool: "http://b", Day: "2026-03-02", Tasks: 1, Joules: 360e3, KWh: 0.1, How: energy.Estimated, Cost: cost(0.04), Currency: "EUR", CO2Grams: 10},
	}
	if d := cmp.Diff(want, days, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("EnergyHistory (-want +got):\n%s", d)
	}
	days, _ = l.EnergyHistory(ctx, store.EnergyPrices{})
	if days[0].Cost != nil || days[0].CO2Grams != 2*energy.DefaultCO2GramsPerKWh {
		t.Errorf("with no tariff: cost %v, CO2 %g; want no cost and the default intensity", days[0].Cost, days[0].CO2Grams)
	}

	j, err := l.EnergySince(ctx, at(2, 0))
	if err != nil || j != 360e3 {
		t.Errorf("EnergySince(day 2) = %g, %v; want 360000", j, err)
	}
}
