package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/energy"
	"idlepool/home"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/store"
)

// idlepool history shows each day's energy, its money at the owner's
// tariff and its CO2, each as exact as it was measured, also for a day
// whose only task was handed back; --json carries the same figures.
func TestHistoryShowsEnergy(t *testing.T) {
	ctx := context.Background()
	h := t.TempDir()
	dirs, err := home.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := dirs.Create(); err != nil {
		t.Fatal(err)
	}
	local, err := store.OpenLocal(filepath.Join(dirs.Data, "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	s := idle.Defaults()
	if s.Tariff, err = energy.ParseTariff("EUR 0.40 22-6=0.10"); err != nil {
		t.Fatal(err)
	}
	if err := local.SaveSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
	jobID := job.ID(sha256.Sum256([]byte("job")))
	at := func(day, hour int) time.Time { return time.Date(2026, 3, day, hour, 0, 0, 0, time.Local) }
	if err := local.AddPending(ctx, store.Contribution{Pool: "http://pool", Job: jobID, Task: 1, Lease: "l1", Created: at(1, 23)}); err != nil {
		t.Fatal(err)
	}
	// 0.5 kWh measured from 21:00 to 23:00: 0.25 at 0.40 and 0.25 at 0.10.
	if err := local.AddEnergy(ctx, store.TaskEnergy{Lease: "l1", Pool: "http://pool", Job: jobID, Task: 1, Usage: energy.Usage{
		Start: at(1, 21), End: at(1, 23), CPU: energy.Figure{Joules: 1.8e6, How: energy.Measured}}}); err != nil {
		t.Fatal(err)
	}
	// A task handed back the next day, estimated: still paid for.
	if err := local.AddEnergy(ctx, store.TaskEnergy{Lease: "l2", Pool: "http://pool", Job: jobID, Task: 2, Usage: energy.Usage{
		Start: at(2, 12), End: at(2, 13), CPU: energy.Figure{Joules: 360e3, How: energy.Estimated}}}); err != nil {
		t.Fatal(err)
	}
	local.Close()

	out := idlepool(t, h, "history")
	if out.code != 0 {
		t.Fatalf("history: exit %d: %s", out.code, out.stderr)
	}
	for _, want := range []string{"energy", "money", "CO2", "2026-03-01", "0.5 kWh", "0.13 EUR", "240 g",
		"2026-03-02", "~0.1 kWh", "~0.04 EUR", "~50 g", "total", "~0.6 kWh",
		"money at your tariff EUR 0.4 22-6=0.1", "480 g/kWh", "never enter a receipt's cost"} {
		if !strings.Contains(out.stdout, want) {
			t.Errorf("history lacks %q:\n%s", want, out.stdout)
		}
	}

	out = idlepool(t, h, "history", "--json")
	var rows []struct {
		Pool    string
		Day     string
		Pending int64
		Energy  *store.EnergyDay
	}
	if err := json.Unmarshal([]byte(out.stdout), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("history --json: %v\n%s", err, out.stdout)
	}
	if e := rows[0].Energy; rows[0].Pending != 1 || e == nil || e.How != energy.Measured || e.KWh != 0.5 || e.Cost == nil ||
		*e.Cost < 0.1249 || *e.Cost > 0.1251 || e.Currency != "EUR" || e.CO2Grams != 240 {
		t.Errorf("first day: %+v energy %+v", rows[0], rows[0].Energy)
	}
	if e := rows[1].Energy; e == nil || e.How != energy.Estimated || e.Tasks != 1 {
		t.Errorf("second day: %+v energy %+v", rows[1], rows[1].Energy)
	}
}
