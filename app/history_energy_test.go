package app

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"
	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/energy"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/store"
)

// The history window shows each task's energy, as exact as it was
// measured, in the table, the details (with its money and CO2 and that
// it is no part of the receipt), the totals per pool, day and job, and
// the chart.
func TestHistoryEnergy(t *testing.T) {
	l := openHistoryStore(t)
	seedHistory(t, l)
	ctx := context.Background()
	s := idle.Defaults()
	var err error
	if s.Tariff, err = energy.ParseTariff("0.30 EUR"); err != nil {
		t.Fatal(err)
	}
	if err := l.SaveSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
	byLease := map[string]seeded{}
	for _, sd := range historySeed {
		byLease[sd.lease] = sd
	}
	for lease, u := range map[string]energy.Usage{
		"l1": {CPU: energy.Figure{Joules: 36000, How: energy.Measured}, // 0.01 kWh
			GPUs: []energy.GPUFigure{{UUID: "GPU-aaaabbbbcccc-dd", Figure: energy.Figure{Joules: 72000, How: energy.Sampled}}}},
		"l3": {CPU: energy.Figure{Joules: 18000, How: energy.Measured}},
		"l5": {CPU: energy.Figure{Joules: 360000, How: energy.Estimated}},
	} {
		sd := byLease[lease]
		u.Start, u.End = sd.created.Add(-10*time.Minute), sd.created
		if err := l.AddEnergy(ctx, store.TaskEnergy{Lease: lease, Pool: sd.pool, Job: jobID(sd.job), Task: sd.task, Usage: u}); err != nil {
			t.Fatal(err)
		}
	}
	u := New(testApp(t), &Deps{Store: l, Engine: &countingEngine{}, Now: func() time.Time { return historyNow }})
	v := testHistory{u.newHistoryView(), newUILoop()}
	v.do = v.loop.do
	v.load()
	v.settle()

	if v.headers[colEnergy].Text != "Energy" {
		t.Errorf("energy header %q", v.headers[colEnergy].Text)
	}
	test.Tap(v.headers[colEnergy])
	if diff := cmp.Diff([]string{"~0.1 kWh", "0.03 kWh", "0.005 kWh", "-", "-", "-"}, v.column(colEnergy)); diff != "" {
		t.Errorf("energy column, largest first (-want +got):\n%s", diff)
	}
	v.selectRow(1) // l1: 0.01 kWh measured and 0.02 sampled
	for _, want := range []string{"Energy: 0.03 kWh (sampled), 0.009 EUR, 14 g CO2", "CPU 0.01 kWh measured", "GPU GPU-aaaabbbb 0.02 kWh sampled",
		"never part of the receipt's cost"} {
		if !strings.Contains(v.details.Text, want) {
			t.Errorf("details lack %q:\n%s", want, v.details.Text)
		}
	}
	if !strings.Contains(v.perPool.Text, "alpha: 16.5 cost units confirmed; 3 confirmed, 1 rejected; 0.035 kWh (sampled), 0.01 EUR, 17 g CO2") {
		t.Errorf("totals per pool lack alpha's energy:\n%s", v.perPool.Text)
	}
	if !strings.Contains(v.perDay.Text, historyNow.AddDate(0, 0, -1).Format(time.DateOnly)+": 1 cost unit; 1 confirmed, 1 pending; ~0.1 kWh, ~0.03 EUR, ~50 g CO2") {
		t.Errorf("totals per day lack yesterday's estimate:\n%s", v.perDay.Text)
	}
	if !strings.HasPrefix(v.perJob.Text, jobID("render").String()[:12]+": ~0.1 kWh") || !strings.Contains(v.perJob.Text, jobID("squares").String()[:12]) {
		t.Errorf("energy per job, costliest first:\n%s", v.perJob.Text)
	}
	v.chartOf.SetSelected(chartEnergy)
	bars := v.chart.bars
	if v.chart.title != "Energy your tasks added per day, last 4 weeks" || len(bars) != chartDays || bars[chartDays-2].value != 0.1 {
		t.Errorf("energy chart %q: %v", v.chart.title, bars)
	}
	v.chartOf.SetSelected(chartCost)
	if v.chart.unit != "cost units" {
		t.Errorf("chart back to cost units: %q", v.chart.unit)
	}
}

// jobID is the ID seedHistory gives the job named name.
func jobID(name string) job.ID { return job.ID(sha256.Sum256([]byte(name))) }

// The Now window says what the donation draws now, what today's tasks
// used and that none of it enters a receipt; where the CPU's counters
// are closed, why and how to open them.
func TestNowShowsEnergy(t *testing.T) {
	st := agent.AgentStatus{Energy: &agent.EnergyStatus{PowerW: 42.14, How: energy.Measured, CPU: energy.Measured}}
	v, loop := newTestNow(t, st)
	for _, want := range []string{"The tasks add 42.1 W now; the CPU's energy is measured.", "never enter a receipt's cost"} {
		if !strings.Contains(v.energy.Text, want) {
			t.Errorf("Now lacks %q:\n%s", want, v.energy.Text)
		}
	}
	if strings.Contains(v.energy.Text, "Today's") {
		t.Errorf("Now shows today's energy with none recorded:\n%s", v.energy.Text)
	}
	if err := v.u.deps.Store.AddEnergy(context.Background(), store.TaskEnergy{Lease: "l1", Pool: "http://p", Usage: energy.Usage{
		Start: nowNow.Add(-time.Hour), End: nowNow.Add(-time.Minute), CPU: energy.Figure{Joules: 180000, How: energy.Estimated}}}); err != nil {
		t.Fatal(err)
	}
	v.u.deps.Engine.(*fakeEngine).set(agent.AgentStatus{Energy: &agent.EnergyStatus{CPU: energy.Estimated,
		Problem: "cannot read the CPU's energy counter /sys/class/powercap/intel-rapl:0/energy_uj: permission denied",
		Hint:    "sudo usermod -aG idlepool $USER"}})
	v.load()
	loop.settle(&v.loading)
	for _, want := range []string{"No task runs; the CPU's energy is estimated from CPU time: cannot read", "usermod -aG idlepool",
		"Today's finished tasks: ~0.05 kWh, ~20 g CO2."} {
		if !strings.Contains(v.energy.Text, want) {
			t.Errorf("Now lacks %q:\n%s", want, v.energy.Text)
		}
	}
}
